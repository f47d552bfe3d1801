"""Run by ``tests/protos/test_lerobot_roundtrip.py`` inside the side venv that has LeRobot's own
dataset library (``scripts/lerobot_venv.sh``): LeRobot loads a dataset this project recorded, edits it
with its own tools, this project's writer appends to the result, and both read it back.

    .venv-lerobot/bin/python tests/lerobot_roundtrip/roundtrip.py DATASET WORKDIR > report.json

Prints one JSON report of what each side saw; the test asserts on it. Offline: no hub access.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: our writer and reader

import numpy as np
from ledataset.datasets.aggregate import aggregate_datasets
from ledataset.datasets.dataset_tools import delete_episodes, split_dataset
from ledataset.datasets.lerobot_dataset import LeRobotDataset

from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter
from protos.lerobot_reader import read_camera, read_episodes, read_frames, read_info


def load(root: Path, repo_id: str) -> LeRobotDataset:
    return LeRobotDataset(repo_id, root=root, video_backend="pyav")


def describe(dataset: LeRobotDataset, ours_root: Path) -> dict:
    """What LeRobot and our reader each see in one dataset, frame by frame."""
    meta = dataset.meta
    cameras = list(meta.video_keys)
    frames = read_frames(ours_root)
    episodes = read_episodes(ours_root)
    ours_cameras = {
        key: read_camera(
            ours_root, key.removeprefix("observation.images."), episodes["episode_index"].tolist()
        )
        for key in cameras
    }
    worst_pixel, worst_action, lengths = 0.0, 0.0, []
    for e in range(meta.total_episodes):
        start = int(meta.episodes[e]["dataset_from_index"])
        end = int(meta.episodes[e]["dataset_to_index"])
        lengths.append(end - start)
        for i in range(start, end):
            item = dataset[i]
            row = frames.iloc[i]
            worst_action = max(
                worst_action, float(np.abs(item["action"].numpy() - np.asarray(row["action"])).max())
            )
            for key in cameras:  # LeRobot's decode (CHW float in [0, 1]) against ours (HWC uint8)
                theirs = (item[key].numpy().transpose(1, 2, 0) * 255.0).round()
                mine = ours_cameras[key][e][i - start].astype(np.float64)
                worst_pixel = max(worst_pixel, float(np.abs(theirs - mine).max()))
    stats = {key: sorted(values) for key, values in meta.stats.items()}
    return {
        "episodes": meta.total_episodes,
        "frames": len(dataset),
        "lengths": lengths,
        "ours_lengths": [int(n) for n in episodes["length"]],
        "cameras": cameras,
        "action_keys": sorted(k for k in meta.features if k == "action" or k.startswith("action.")),
        "worst_action_diff": worst_action,
        "worst_pixel_diff": worst_pixel,
        "stats_keys": stats.get("action", []),
        "image_stats_keys": stats.get(cameras[0], []) if cameras else [],
        "robot_type": meta.robot_type,
        "fps": meta.fps,
    }


def appended_episode(template: dict, length: int) -> EpisodeFrames:
    """A new episode of the dataset's features, with a recognisable action ramp."""
    features = template["features"]
    rng = np.random.default_rng(7)
    vectors = {
        key: rng.normal(size=(length, f["shape"][0])).astype(np.float32)
        for key, f in features.items()
        if f["dtype"] == "float32" and f["shape"] != [1] and key != "action"
    }
    vectors["action"] = np.tile(
        np.linspace(-1, 1, length, dtype=np.float32)[:, None], (1, features["action"]["shape"][0])
    )
    scalars = {
        key: (np.arange(length) == length - 1) if f["dtype"] == "bool" else np.zeros(length, np.float32)
        for key, f in features.items()
        if f["shape"] == [1]
        and key not in ("timestamp", "frame_index", "episode_index", "index", "task_index")
    }
    images = {
        key.removeprefix("observation.images."): [
            np.full(f["shape"], 40 + 10 * t, np.uint8) for t in range(length)
        ]
        for key, f in features.items()
        if f["dtype"] == "video"
    }
    return EpisodeFrames(task="appended", images=images, vectors=vectors, scalars=scalars,
                         extra={"episode_id": "appended-0", "source": "robot:roundtrip"})  # fmt: skip


def lerobot_made(root: Path) -> LeRobotDataset:
    """Two episodes recorded by LeRobot's own writer (AV1 video, quantile stats), as its users make them."""
    features = {
        "observation.state": {"dtype": "float32", "shape": (3,), "names": ["x", "y", "z"]},
        "action": {"dtype": "float32", "shape": (3,), "names": ["dx", "dy", "dz"]},
        "observation.images.front": {
            "dtype": "video",
            "shape": (24, 32, 3),
            "names": ["height", "width", "channels"],
        },
    }
    dataset = LeRobotDataset.create(
        "rlinf/lerobot_made", fps=10, features=features, root=root, robot_type="franka"
    )
    rng = np.random.default_rng(3)
    for _ in range(2):
        for t in range(8):
            dataset.add_frame({
                "observation.state": rng.normal(size=3).astype(np.float32),
                "action": rng.uniform(-1, 1, 3).astype(np.float32),
                "observation.images.front": np.full((24, 32, 3), 30 * t, np.uint8),
                "task": "reach",
            })  # fmt: skip
        dataset.save_episode()
    dataset.finalize()
    return dataset


def codec_of(path: Path) -> str:
    import av

    with av.open(str(path)) as container:
        return container.streams.video[0].codec_context.name


def main() -> None:
    recorded, work = Path(sys.argv[1]), Path(sys.argv[2])
    report: dict = {"recorded": describe(load(recorded, "rlinf/recorded"), recorded)}

    original = load(recorded, "rlinf/recorded")
    deleted = delete_episodes(original, [1], output_dir=work / "deleted", repo_id="rlinf/deleted")
    report["deleted"] = describe(load(work / "deleted", "rlinf/deleted"), work / "deleted")
    parts = split_dataset(
        load(work / "deleted", "rlinf/deleted"), {"a": [0, 1], "b": [2]}, output_dir=work / "split"
    )
    report["split"] = {name: part.meta.total_episodes for name, part in parts.items()}
    aggregate_datasets(
        ["rlinf/split_a", "rlinf/split_b"], "rlinf/aggregated",
        roots=[Path(parts["a"].root), Path(parts["b"].root)], aggr_root=work / "aggregated",
    )  # fmt: skip
    report["aggregated"] = describe(load(work / "aggregated", "rlinf/aggregated"), work / "aggregated")
    del deleted

    # Our writer appends to what LeRobot wrote: after the delete, file numbers no longer follow episodes.
    for name in ("deleted", "aggregated"):
        root = work / name
        before = {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file() and "meta" not in p.parts}
        info = read_info(root)
        writer = LeRobotWriter(root, fps=float(info["fps"]))
        index = writer.add_episode(appended_episode(info, 6))
        after = {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file() and "meta" not in p.parts}
        dataset = load(root, f"rlinf/{name}")
        last = [dataset[i]["action"].numpy()[0] for i in range(len(dataset) - 6, len(dataset))]
        info_after = read_info(root)
        first_video = next(f for f in info_after["features"].values() if f["dtype"] == "video")["info"]
        report[f"appended_to_{name}"] = {
            "index": index,
            **describe(dataset, root),
            "files_changed": sorted(p for p in before if after.get(p) != before[p]),
            "last_actions": [float(v) for v in last],
            "video_codec": first_video["video.codec"],
            "original_codec": info["features"][
                next(k for k, f in info["features"].items() if f["dtype"] == "video")
            ]["info"]["video.codec"],
        }

    # Appending to a dataset LeRobot recorded: its codec (AV1) and its quantile stats are kept.
    made = work / "lerobot_made"
    lerobot_made(made)
    info = read_info(made)
    stats_before = json.loads((made / "meta" / "stats.json").read_text())
    index = LeRobotWriter(made, fps=float(info["fps"])).add_episode(appended_episode(info, 6))
    stats_after = json.loads((made / "meta" / "stats.json").read_text())
    episodes = read_episodes(made)
    key = "observation.images.front"
    row = episodes.iloc[index]
    appended_video = made / info["video_path"].format(
        video_key=key,
        chunk_index=int(row[f"videos/{key}/chunk_index"]),
        file_index=int(row[f"videos/{key}/file_index"]),
    )
    report["appended_to_lerobot_made"] = {
        "index": index,
        **describe(load(made, "rlinf/lerobot_made"), made),
        "info_codec": read_info(made)["features"][key]["info"]["video.codec"],
        "appended_file_codec": codec_of(appended_video),
        "stats_keys_before": sorted(stats_before["action"]),
        "stats_keys_after": sorted(stats_after["action"]),
        "image_stats_keys_after": sorted(stats_after[key]),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
