import mujoco
import numpy as np
import pytest

from sim_envs import panda_model
from sim_envs.scene import SceneConfig, build_scene_xml


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(build_scene_xml(SceneConfig(arm_control="joint_position")))


def test_home_pose_tcp_matches_franka_reference(model):
    # Franka's "ready" pose puts the hand TCP at about (0.307, 0, 0.487) m in the base frame.
    tcp = panda_model.forward_kinematics(panda_model.HOME_QPOS)[:3, 3]
    np.testing.assert_allclose(tcp, [0.3069, 0.0, 0.4869], atol=1e-3)


def test_mujoco_model_matches_dh_table(model):
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    tcp = model.site("tcp").id
    for _ in range(20):
        q = rng.uniform(panda_model.JOINT_LOWER, panda_model.JOINT_UPPER)
        data.qpos[:7] = q
        mujoco.mj_kinematics(model, data)
        expected = panda_model.forward_kinematics(q)
        np.testing.assert_allclose(data.site_xpos[tcp], expected[:3, 3], atol=1e-9)
        # The hand is mounted at -45 deg about the flange z axis; the approach axis is shared.
        np.testing.assert_allclose(data.site_xmat[tcp].reshape(3, 3)[:, 2], expected[:3, 2], atol=1e-9)


def test_joint_limits_match_datasheet(model):
    for i, name in enumerate(panda_model.ARM_JOINTS):
        np.testing.assert_allclose(
            model.joint(name).range, [panda_model.JOINT_LOWER[i], panda_model.JOINT_UPPER[i]]
        )
    assert model.joint("finger_joint1").range[1] == pytest.approx(0.04)


def test_arm_holds_pose_under_gravity(model):
    data = mujoco.MjData(model)
    data.qpos[:7] = panda_model.HOME_QPOS
    data.ctrl[:7] = panda_model.HOME_QPOS
    mujoco.mj_step(model, data, nstep=1000)
    np.testing.assert_allclose(data.qpos[:7], panda_model.HOME_QPOS, atol=2e-3)
