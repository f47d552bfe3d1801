"""One MuJoCo calibration rig (the Panda scene with a ChArUco board) per test module."""

import pytest

from calibration.board import BoardSpec
from calibration.sim_target import SimCalibrationRig


@pytest.fixture(scope="module")
def rig():
    rig = SimCalibrationRig(BoardSpec(), width=640, height=480)
    yield rig
    rig.close()
