"""The UR5e's MuJoCo model is its published kinematics: MuJoCo's TCP is UR's DH chain's, and the
servos hold it at home and drive the gripper."""

from __future__ import annotations

import mujoco
import numpy as np

from protos.ur5e import UR5E
from sim_envs.ur5e_model import FINGER_JOINTS, FINGER_TRAVEL, ur5e_model_xml


def model():
    m = mujoco.MjModel.from_xml_string(ur5e_model_xml())
    return m, mujoco.MjData(m)


def test_mujocos_tcp_is_the_dh_chains_at_any_joints():
    m, d = model()
    rng = np.random.default_rng(0)
    tcp = m.site("tcp").id
    for _ in range(20):
        q = rng.uniform(UR5E.joint_lower, UR5E.joint_upper)
        d.qpos[:6] = q
        mujoco.mj_forward(m, d)
        expected = UR5E.forward_kinematics(q)
        np.testing.assert_allclose(d.site_xpos[tcp], expected[:3, 3], atol=1e-9)
        np.testing.assert_allclose(d.site_xmat[tcp].reshape(3, 3), expected[:3, :3], atol=1e-9)
    assert m.njnt == 8 and m.nu == 7  # six arm hinges and two fingers; six servos and the gripper


def test_the_servos_hold_home_and_drive_the_gripper():
    m, d = model()
    d.qpos[:6] = d.ctrl[:6] = UR5E.home_joints
    d.ctrl[6] = FINGER_TRAVEL  # open
    for _ in range(500):  # 1 s
        mujoco.mj_step(m, d)
    np.testing.assert_allclose(d.qpos[:6], UR5E.home_joints, atol=2e-3)
    fingers = [m.joint(name).qposadr[0] for name in FINGER_JOINTS]
    assert d.qpos[fingers].min() > 0.9 * FINGER_TRAVEL
    d.ctrl[6] = 0.0
    for _ in range(500):
        mujoco.mj_step(m, d)
    assert d.qpos[fingers].max() < 0.1 * FINGER_TRAVEL
