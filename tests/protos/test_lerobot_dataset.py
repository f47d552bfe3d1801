"""The LeRobot v3 writer: the documented layout, readable back (parquet + PyAV), and crash-safe."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pytest

from protos.lerobot_dataset import DatasetError, EpisodeFrames, LeRobotWriter

FPS = 10.0


def episode(length: int, seed: int, task: str = "lift the cube") -> EpisodeFrames:
    rng = np.random.default_rng(seed)
    # Each frame is a flat colour that encodes its frame index, so decoding can be checked.
    frames = [
        np.full((32, 48, 3), (10 + 20 * (i % 12), 128, 255 - 20 * (i % 12)), np.uint8) for i in range(length)
    ]
    return EpisodeFrames(
        task=task,
        images={"front": frames, "wrist": [f[:, ::-1].copy() for f in frames]},
        vectors={
            "observation.state": rng.normal(size=(length, 4)).astype(np.float32),
            "action": rng.uniform(-1, 1, (length, 3)).astype(np.float32),
        },
        scalars={
            "next.reward": rng.uniform(0, 1, length).astype(np.float32),
            "next.done": np.arange(length) == length - 1,
        },
    )


def decode(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def test_layout_matches_lerobot_v3_and_reads_back(tmp_path):
    root = tmp_path / "ds"
    writer = LeRobotWriter(root, fps=FPS, robot_type="franka")
    episodes = [episode(12, 0), episode(7, 1, task="push the cube"), episode(9, 2)]
    for e in episodes:
        writer.add_episode(e)
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == FPS
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 28, 2)
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["features"]["observation.images.front"]["dtype"] == "video"
    assert info["features"]["action"]["shape"] == [3]
    # Frames: one row per step, global index continuous across episodes.
    data = pd.concat(pd.read_parquet(p) for p in sorted((root / "data").rglob("*.parquet")))
    assert data["index"].tolist() == list(range(28))
    assert data.groupby("episode_index").size().tolist() == [12, 7, 9]
    np.testing.assert_allclose(
        np.stack(data["action"].to_numpy()[12:19]), episodes[1].vectors["action"], rtol=1e-6
    )
    assert data["next.done"].sum() == 3
    # Episodes and tasks metadata point at the right files.
    meta = pd.read_parquet(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    assert meta["length"].tolist() == [12, 7, 9]
    assert meta["dataset_from_index"].tolist() == [0, 12, 19]
    assert list(meta.loc[1, "tasks"]) == ["push the cube"]
    tasks = pd.read_parquet(root / "meta" / "tasks.parquet")
    assert tasks.loc["push the cube", "task_index"] == 1
    # Videos decode to the recorded frames.
    key = "observation.images.front"
    video = root / info["video_path"].format(video_key=key, chunk_index=0, file_index=1)
    frames = decode(video)
    assert len(frames) == 7
    for decoded, original in zip(frames, episodes[1].images["front"]):
        assert np.abs(decoded.astype(int) - original.astype(int)).mean() < 6
    assert meta.loc[1, f"videos/{key}/to_timestamp"] == pytest.approx(0.7)
    stats = json.loads((root / "meta" / "stats.json").read_text())
    assert stats["observation.state"]["count"] == [28]
    all_states = np.concatenate([e.vectors["observation.state"] for e in episodes])
    np.testing.assert_allclose(stats["observation.state"]["mean"], all_states.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(stats["observation.state"]["std"], all_states.std(axis=0), atol=1e-5)


def test_reopening_appends_and_removes_half_written_files(tmp_path):
    root = tmp_path / "ds"
    LeRobotWriter(root, fps=FPS).add_episode(episode(5, 0))
    # A crash after an episode's files were moved in but before the metadata named them:
    orphan = root / "data" / "chunk-000" / "file-001.parquet"
    orphan.write_bytes(b"half")
    (root / ".staging").mkdir(exist_ok=True)
    writer = LeRobotWriter(root, fps=FPS)
    assert not orphan.exists() and not (root / ".staging").exists()
    assert writer.add_episode(episode(6, 1)) == 1
    data = pd.concat(pd.read_parquet(p) for p in sorted((root / "data").rglob("*.parquet")))
    assert data["index"].tolist() == list(range(11))
    with pytest.raises(DatasetError, match=r"records at 10\.0 fps, not 30"):
        LeRobotWriter(root, fps=30)
    bad = episode(3, 2)
    bad.vectors["action"] = np.zeros((3, 5), np.float32)
    with pytest.raises(DatasetError, match="action has shape"):
        writer.add_episode(bad)


WRITER_SCRIPT = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from tests.protos.test_lerobot_dataset import episode
from protos.lerobot_dataset import LeRobotWriter
writer = LeRobotWriter({path!r}, fps=10.0)
for i in range(1000):
    writer.add_episode(episode(20, i))
    print(i, flush=True)
"""


@pytest.mark.slow
def test_a_killed_writer_leaves_every_completed_episode_readable(tmp_path):
    path = str(tmp_path / "ds")
    code = WRITER_SCRIPT.format(root=str(Path(__file__).resolve().parents[3]), path=path)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    done = []
    deadline = time.monotonic() + 120
    while len(done) < 4 and time.monotonic() < deadline:
        done.append(int(proc.stdout.readline()))
    time.sleep(0.05 + 0.1 * np.random.default_rng().random())  # somewhere inside the next episode
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    assert info["total_episodes"] >= len(done)
    writer = LeRobotWriter(path, fps=10.0)  # reopening cleans up whatever the kill left
    n = len(writer.episodes)
    data = pd.concat(pd.read_parquet(p) for p in sorted((tmp_path / "ds" / "data").rglob("*.parquet")))
    assert data["episode_index"].nunique() == n and len(data) == 20 * n
    videos = sorted((tmp_path / "ds" / "videos" / "observation.images.front").rglob("*.mp4"))
    assert len(videos) == n and all(len(decode(v)) == 20 for v in videos)
