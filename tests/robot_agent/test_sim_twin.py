"""The sim twin's action scale: what a full action moves its TCP by, as a real arm's driver config
says, reaches both the sim it drives and the agent's scaling of safety limits."""

import numpy as np

from robot_agent.drivers.sim_twin import SimTwinConfig, SimTwinDriver


def test_a_twin_with_a_smaller_action_scale_moves_its_target_by_that_much():
    moved = {}
    for scale in (0.05, 0.03):
        twin = SimTwinDriver(SimTwinConfig(cameras=(), max_translation_m=scale, max_rotation_rad=0.2))
        try:
            assert twin.arms[0].max_translation_m == scale and twin.arms[0].max_rotation_rad == 0.2
            twin.reset(seed=0)
            before, _ = twin.env.commanded_tcp_pose()
            action = np.zeros(twin.spec.action.dim, np.float32)
            action[0] = 1.0  # full +x
            twin.apply(action)
            moved[scale] = float(twin.env.commanded_tcp_pose()[0][0] - before[0])
        finally:
            twin.close()
    assert np.isclose(moved[0.05], 0.05) and np.isclose(moved[0.03], 0.03), moved
