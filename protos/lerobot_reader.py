"""Reading a LeRobot v3 dataset back: its frames, its episode rows, and camera frames from the mp4s.

The counterpart of :mod:`protos.lerobot_dataset`'s writer. ``info.json`` is the commit point: only
the episodes it counts are read, so a dataset that a killed writer left half-updated reads as it was
at its last complete episode. Needs pandas (frames) and PyAV (videos), from the ``record`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from protos.lerobot_dataset import EPISODES_PATH, VIDEO_PATH, DatasetError


def read_info(root: str | Path) -> dict:
    """``meta/info.json``; a folder without one is not a dataset."""
    path = Path(root) / "meta" / "info.json"
    if not path.is_file():
        raise DatasetError(f"{root} is not a LeRobot v3 dataset (no meta/info.json)")
    return json.loads(path.read_text())


def read_frames(root: str | Path):
    """Every frame of the dataset's committed episodes (its ``data/`` parquet files), in index order."""
    import pandas as pd

    files = sorted((Path(root) / "data").rglob("*.parquet"))
    if not files:
        raise DatasetError(f"dataset {str(root)!r} holds no LeRobot v3 frames (data/chunk-*/file-*.parquet)")
    frames = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    if (Path(root) / "meta" / "info.json").is_file():  # an episode the metadata never committed is not read
        frames = frames[frames["episode_index"] < int(read_info(root)["total_episodes"])]
    return frames.sort_values("index", kind="stable").reset_index(drop=True)


def read_tasks(root: str | Path) -> dict[int, str]:
    """``task_index -> task text`` (the instruction each frame was recorded under)."""
    import pandas as pd

    path = Path(root) / "meta" / "tasks.parquet"
    if not path.is_file():
        return {}
    tasks = pd.read_parquet(path)
    return {int(index): str(text) for text, index in zip(tasks.index, tasks["task_index"])}


def read_episodes(root: str | Path):
    """One row per committed episode (``meta/episodes``), as a pandas DataFrame."""
    import pandas as pd

    total = int(read_info(root)["total_episodes"])
    rows = pd.read_parquet(Path(root) / EPISODES_PATH) if total else pd.DataFrame()
    return rows.iloc[:total].reset_index(drop=True)


def decode_video(path: str | Path) -> np.ndarray:
    """Every frame of an mp4 as uint8 ``[T, H, W, 3]`` RGB."""
    import av

    try:
        with av.open(str(path)) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    except av.error.FFmpegError as exc:
        raise DatasetError(f"{path} is not a readable video ({exc})") from None
    if not frames:
        raise DatasetError(f"{path} holds no video frames")
    return np.stack(frames)


def read_camera(root: str | Path, camera: str, episode_indices) -> dict[int, np.ndarray]:
    """Camera ``camera``'s frames for each listed episode: ``{episode_index: uint8 [length, H, W, 3]}``.

    Each episode's span of its video file comes from its row's from/to timestamps, so files that hold
    several episodes (as LeRobot's own writer makes) are read correctly too.
    """
    info = read_info(root)
    key = f"observation.images.{camera}"
    if info["features"].get(key, {}).get("dtype") != "video":
        videos = sorted(k.removeprefix("observation.images.") for k, f in info["features"].items()
                        if f.get("dtype") == "video")  # fmt: skip
        raise DatasetError(f"dataset {str(root)!r} has no camera {camera!r}; it has {videos}")
    fps = float(info["fps"])
    rows = read_episodes(root).set_index("episode_index")
    open_path, open_frames = None, np.zeros(0)  # one file decoded at a time: episodes come in file order
    out = {}
    for index in episode_indices:
        row = rows.loc[int(index)]
        path = Path(root) / VIDEO_PATH.format(
            video_key=key,
            chunk_index=int(row[f"videos/{key}/chunk_index"]),
            file_index=int(row[f"videos/{key}/file_index"]),
        )
        if path != open_path:
            open_path, open_frames = path, decode_video(path)
        first = round(float(row[f"videos/{key}/from_timestamp"]) * fps)
        frames = open_frames[first : first + int(row["length"])]
        if len(frames) != int(row["length"]):
            raise DatasetError(
                f"{path} has {len(frames)} frames for episode {index}, whose length is {int(row['length'])}"
            )
        out[int(index)] = frames
    return out
