"""Reading a LeRobot v3 dataset back: committed frames only, each episode's own camera frames."""

import json

import numpy as np
import pytest

from protos.lerobot_dataset import DatasetError, EpisodeFrames, LeRobotWriter, VideoFormat
from protos.lerobot_reader import decode_video, read_camera, read_episodes, read_frames


def noisy_episode(length: int, seed: int) -> EpisodeFrames:
    """Random textured frames with a one-pixel green dot that moves: decoding must keep it."""
    rng = np.random.default_rng(seed)
    frames = []
    for t in range(length):
        image = rng.integers(60, 120, (24, 32, 3), dtype=np.uint8)
        image[3 + t % 18, 5 + (2 * t + seed) % 25] = (40, 230, 40)
        frames.append(image)
    return EpisodeFrames(
        task="reach",
        images={"front": frames},
        vectors={"observation.state": rng.normal(size=(length, 3)), "action": rng.normal(size=(length, 2))},
    )


def test_each_episode_reads_back_its_own_frames_and_keeps_a_one_pixel_target(tmp_path):
    episodes = [noisy_episode(7, seed=1), noisy_episode(12, seed=2), noisy_episode(5, seed=3)]
    writer = LeRobotWriter(tmp_path / "ds", fps=10, video=VideoFormat.lossless())
    for episode in episodes:
        writer.add_episode(episode)
    frames = read_frames(tmp_path / "ds")
    assert list(frames["episode_index"]) == [0] * 7 + [1] * 12 + [2] * 5
    np.testing.assert_allclose(
        np.stack(frames["action"].to_numpy()),
        np.concatenate([e.vectors["action"] for e in episodes]),
        atol=1e-6,
    )
    decoded = read_camera(tmp_path / "ds", "front", [2, 0])  # any order, any subset
    assert sorted(decoded) == [0, 2]
    for index in (0, 2):
        recorded = np.stack(episodes[index].images["front"]).astype(int)
        assert decoded[index].shape == recorded.shape
        assert (
            np.abs(decoded[index].astype(int) - recorded).max() <= 2
        )  # yuv444p at crf 0: colour conversion only
        dots = [
            np.unravel_index(np.argmax(f[..., 1].astype(int) - f[..., 0]), f.shape[:2])
            for f in decoded[index]
        ]
        assert dots == [(3 + t % 18, 5 + (2 * t + index + 1) % 25) for t in range(len(recorded))]


def test_the_default_yuv420_loses_a_one_pixel_colour_target(tmp_path):
    """Why small sim images are recorded as yuv444p: LeRobot's default halves the colour resolution."""
    writer = LeRobotWriter(tmp_path / "ds", fps=10)
    writer.add_episode(noisy_episode(6, seed=1))
    decoded = read_camera(tmp_path / "ds", "front", [0])[0].astype(int)
    greenness = decoded[0, 3, 6, 1] - decoded[0, 3, 6, 0]  # the dot of frame 0: (40, 230, 40) when recorded
    assert greenness < 150


def test_only_committed_episodes_are_read_and_bad_input_is_one_line(tmp_path):
    writer = LeRobotWriter(tmp_path / "ds", fps=10)
    writer.add_episode(noisy_episode(4, seed=1))
    writer.add_episode(noisy_episode(6, seed=2))
    info_path = tmp_path / "ds" / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["total_episodes"] = 1  # as if the writer died before committing episode 1
    info_path.write_text(json.dumps(info))
    assert len(read_frames(tmp_path / "ds")) == 4
    assert list(read_episodes(tmp_path / "ds")["episode_index"]) == [0]
    with pytest.raises(DatasetError, match=r"no camera 'wrist'; it has \['front'\]"):
        read_camera(tmp_path / "ds", "wrist", [0])
    with pytest.raises(DatasetError, match="not a LeRobot v3 dataset"):
        read_episodes(tmp_path / "nothing")
    with pytest.raises(DatasetError, match="holds no LeRobot v3 frames"):
        read_frames(tmp_path / "nothing")
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(DatasetError, match=r"empty\.mp4 is not a readable video"):
        decode_video(tmp_path / "empty.mp4")
