"""A small dataset recorded with this project's writer, in the layout its recorders produce."""

import numpy as np

from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from protos.episode_frames import HUMAN_ACTION, POLICY_ACTION, vector_names
from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter, VideoFormat

SPEC = EnvSpec("franka/real", (CameraSpec("front", 24, 32, 10.0),), (StateField("tcp_pos", 3),),
               ee_delta_action_space(rotation=False), 10.0, "lift", 8, metadata={"robot": "franka"})  # fmt: skip


def recorded(root, lengths=(5, 7)) -> list[EpisodeFrames]:
    writer = LeRobotWriter(root, fps=10.0, robot_type="franka", video=VideoFormat.lossless())
    episodes = []
    for e, length in enumerate(lengths):
        rng = np.random.default_rng(e)
        actions = rng.uniform(-1, 1, (length, SPEC.action.dim)).astype(np.float32)
        episode = EpisodeFrames(
            task="lift",
            images={"front": [np.full((24, 32, 3), 20 * t, np.uint8) for t in range(length)]},
            vectors={"observation.state": rng.normal(size=(length, 3)).astype(np.float32), "action": actions,
                     POLICY_ACTION: actions, HUMAN_ACTION: np.zeros_like(actions)},
            scalars={"next.reward": np.arange(length, dtype=np.float32), "intervention": np.arange(length) % 2 == 1},
            extra={"episode_id": f"ep-{e}", "source": "robot:r0", "aborted": False, "success": e == 1,
                   "end_reason": "labelled success"},
            names=vector_names(SPEC),
        )  # fmt: skip
        writer.add_episode(episode)
        episodes.append(episode)
    return episodes
