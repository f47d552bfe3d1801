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
    with pytest.raises(DatasetError, match=r"records at 10 fps, not 30"):
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


def relabel_as_if_lerobot_deleted_episode_0(root: Path) -> None:
    """What LeRobot's ``delete_episodes`` leaves: episodes renumbered from 0, files keeping their numbers."""
    meta_path = root / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    meta = pd.read_parquet(meta_path).iloc[1:].reset_index(drop=True)
    shift = int(meta.loc[0, "dataset_from_index"])
    meta["episode_index"] = range(len(meta))
    meta["dataset_from_index"] -= shift
    meta["dataset_to_index"] -= shift
    meta.to_parquet(meta_path, index=False)
    for path in sorted((root / "data").rglob("*.parquet")):
        frames = pd.read_parquet(path)
        if (frames["episode_index"] == 0).all():
            path.unlink()
            continue
        frames["episode_index"] -= 1
        frames["index"] -= shift
        frames.to_parquet(path, index=False)
    for path in (root / "videos").rglob("file-000.mp4"):
        path.unlink()
    info = json.loads((root / "meta" / "info.json").read_text())
    info.update(total_episodes=len(meta), total_frames=int(meta["length"].sum()))
    (root / "meta" / "info.json").write_text(json.dumps(info))


def test_appending_after_lerobot_renumbered_the_episodes_overwrites_no_file(tmp_path):
    from protos.lerobot_reader import read_camera

    root = tmp_path / "ds"
    writer = LeRobotWriter(root, fps=FPS)
    for i, length in enumerate((5, 8, 6)):
        writer.add_episode(episode(length, i))
    relabel_as_if_lerobot_deleted_episode_0(root)  # episodes 0, 1 now live in files 001, 002
    before = {p: p.read_bytes() for p in root.rglob("file-00[12].*")}
    appended = LeRobotWriter(root, fps=FPS).add_episode(episode(4, 9))
    assert appended == 2
    assert {p: p.read_bytes() for p in before} == before  # nothing was overwritten
    frames = read_camera(root, "front", [0, 1, 2])
    assert {i: len(f) for i, f in frames.items()} == {0: 8, 1: 6, 2: 4}
    meta = pd.read_parquet(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    assert (
        meta.loc[2, "data/file_index"] == 3 and meta.loc[2, "videos/observation.images.wrist/file_index"] == 3
    )


def test_stats_carry_lerobots_quantiles_and_keep_them_when_appending(tmp_path):
    root = tmp_path / "ds"
    first, second = episode(40, 0), episode(60, 1)
    LeRobotWriter(root, fps=FPS).add_episode(first)
    one = json.loads((root / "meta" / "stats.json").read_text())
    state = first.vectors["observation.state"].astype(np.float64)
    for key, q in (("q01", 0.01), ("q10", 0.1), ("q50", 0.5), ("q90", 0.9), ("q99", 0.99)):
        np.testing.assert_allclose(one["observation.state"][key], np.quantile(state, q, axis=0), atol=1e-6)
        assert np.asarray(one["observation.images.front"][key]).shape == (3, 1, 1)
    # The front frames' green channel is 128 everywhere: every quantile of it is 128 / 255.
    assert np.asarray(one["observation.images.front"]["q50"])[1, 0, 0] == pytest.approx(128 / 255)
    LeRobotWriter(root, fps=FPS).add_episode(second)
    two = json.loads((root / "meta" / "stats.json").read_text())
    second_q50 = np.quantile(second.vectors["observation.state"].astype(np.float64), 0.5, axis=0)
    weighted = (40 * np.asarray(one["observation.state"]["q50"]) + 60 * second_q50) / 100
    np.testing.assert_allclose(two["observation.state"]["q50"], weighted, atol=1e-6)
    assert {"q01", "q10", "q50", "q90", "q99"} <= set(two["observation.images.wrist"])


def test_appending_keeps_the_datasets_video_codec(tmp_path):
    from protos.lerobot_dataset import VideoFormat

    root = tmp_path / "ds"
    LeRobotWriter(root, fps=FPS, video=VideoFormat(codec="libsvtav1")).add_episode(episode(4, 0))
    LeRobotWriter(root, fps=FPS).add_episode(episode(5, 1))  # asks for the default, h264
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["features"]["observation.images.front"]["info"]["video.codec"] == "av1"
    for video in sorted((root / "videos").rglob("*.mp4")):
        with av.open(str(video)) as container:
            assert container.streams.video[0].codec_context.name in ("av1", "libdav1d"), video


def test_renames_are_made_durable_by_syncing_their_folder(tmp_path, monkeypatch):
    import stat

    synced_folders = []
    real_fsync = os.fsync

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced_folders.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "ds"
    LeRobotWriter(root, fps=FPS).add_episode(episode(3, 0))
    assert {str(root / "meta"), str(root / "data" / "chunk-000")} <= set(synced_folders)
    assert str(root / "videos" / "observation.images.front" / "chunk-000") in synced_folders


def test_info_has_an_integer_fps_the_robot_model_and_names_for_each_dimension(tmp_path):
    from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
    from protos.episode_frames import HUMAN_ACTION, POLICY_ACTION, robot_type, vector_names

    spec = EnvSpec("franka/real", (CameraSpec("front", 32, 48, 10.0),), (StateField("tcp_pos", 3), StateField("gripper", 1)),
                   ee_delta_action_space(rotation=False), 10.0, "lift", 5, metadata={"robot": "franka"})  # fmt: skip
    e = episode(3, 0)
    e.images.pop("wrist")
    e.vectors = {
        "observation.state": np.zeros((3, 4), np.float32),
        "action": np.zeros((3, spec.action.dim), np.float32),
    }
    e.names = vector_names(spec)
    del e.names[POLICY_ACTION], e.names[HUMAN_ACTION]
    root = tmp_path / "ds"
    LeRobotWriter(root, fps=10.0, robot_type=robot_type(spec)).add_episode(e)
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["robot_type"] == "franka" and info["fps"] == 10 and isinstance(info["fps"], int)
    assert info["features"]["observation.state"]["names"] == [
        "tcp_pos.0",
        "tcp_pos.1",
        "tcp_pos.2",
        "gripper",
    ]
    assert info["features"]["action"]["names"] == list(spec.action.names)
    assert not any(k.startswith("action.") for k in info["features"])
