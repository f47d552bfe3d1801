"""Episodes recorded in the LeRobot v3 dataset layout, crash-safe.

    root/meta/info.json                              features, fps, path templates, totals
    root/meta/stats.json                             per-feature min / max / mean / std / count / q01..q99
    root/meta/tasks.parquet                          task text (index) -> task_index
    root/meta/episodes/chunk-000/file-000.parquet    one row per episode: length, data and video locations
    root/data/chunk-000/file-XXX.parquet             one row per frame
    root/videos/<camera key>/chunk-000/file-XXX.mp4  one stream per camera (PyAV)

Each episode gets new data and video files of its own (the next free ``file_index`` of the chunk, so
a dataset that LeRobot's tools edited, where file numbers no longer follow episode numbers, is
appended to without touching another episode's files). Appending keeps the dataset's video codec. Files are written under ``.staging/`` and
renamed into place, then the metadata is replaced atomically, ``info.json`` last: a killed process
leaves every completed episode readable. Files that no episode row refers to (a crash between the
rename and the metadata) are removed when the dataset is opened again.
"""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from protos.atomic_files import replace_durably, write_atomic
from protos.user_error import UserError

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}  # as LeRobot's stats
# info.json's codec name -> the PyAV encoder that writes it
ENCODERS = {"h264": "libx264", "av1": "libsvtav1", "hevc": "libx265"}


class DatasetError(UserError, ValueError):
    """The dataset on disk does not match what is being written to it."""


@dataclass(frozen=True)
class VideoFormat:
    """How camera streams are encoded. The default is LeRobot's (h264, yuv420p, the codec's quality).

    yuv420p halves the colour resolution, so a one-pixel target in a small sim image loses its colour;
    :meth:`lossless` (yuv444p at crf 0) keeps it, at a few kB per episode for 64 px images.
    """

    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    crf: int | None = None  # None: the codec's default

    @classmethod
    def lossless(cls) -> VideoFormat:
        return cls(codec="libx264", pix_fmt="yuv444p", crf=0)


DEFAULT_VIDEO = VideoFormat()


@dataclass
class EpisodeFrames:
    """One episode, frame by frame: images per camera, vectors and scalars per feature, one task."""

    task: str
    # camera name -> frames (uint8 HxWx3); any sequence, so frames can be decoded one at a time
    images: dict[str, Sequence[np.ndarray]]
    vectors: dict[str, np.ndarray]  # e.g. "observation.state" -> float32 [T, D], "action" -> [T, A]
    scalars: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. "next.reward" -> [T]
    extra: dict[str, object] = field(default_factory=dict)  # extra columns of the episode's meta row
    names: dict[str, list[str]] = field(default_factory=dict)  # vector feature -> a name per dimension

    @property
    def length(self) -> int:
        lengths = {len(v) for v in self.vectors.values()} | {len(v) for v in self.images.values()}
        lengths |= {len(v) for v in self.scalars.values()}
        if len(lengths) != 1:
            raise DatasetError(f"episode features have different lengths {sorted(lengths)}")
        return lengths.pop()


class LeRobotWriter:
    """Appends episodes to a LeRobot v3 dataset at ``root`` (created, or reopened to append)."""

    def __init__(
        self, root: str | Path, fps: float, robot_type: str = "", video: VideoFormat = DEFAULT_VIDEO
    ) -> None:
        self.root = Path(root)
        self.fps, self.robot_type, self.video = fps, robot_type, video
        self.info: dict | None = None
        self.episodes: list[dict] = []
        self.tasks: dict[str, int] = {}
        self.stats: dict[str, dict] = {}
        self._commit_lock = threading.Lock()
        if (self.root / "meta" / "info.json").exists():
            self._reopen()

    # -- writing ------------------------------------------------------------------------------------
    def add_episode(self, episode: EpisodeFrames) -> int:
        """Write one episode; returns its ``episode_index``. Durable once this returns."""
        return self.commit(self.stage(episode))

    def stage(self, episode: EpisodeFrames) -> StagedEpisode:
        """Encode the episode's videos into a staging folder of their own (the slow part).

        Threads may stage episodes at once; :meth:`commit` then appends them one at a time. Frames
        are read one at a time, and image statistics are accumulated frame by frame in small dtypes.
        """
        if episode.length == 0:
            raise DatasetError("an episode needs at least one frame")
        if self.info is not None:
            self._check_features(episode)
        folder = self.root / ".staging" / uuid.uuid4().hex
        folder.mkdir(parents=True)
        videos, image_stats = {}, {}
        try:
            for camera, frames in episode.images.items():
                videos[camera] = folder / f"{camera}.mp4"
                image_stats[f"observation.images.{camera}"] = self._write_video(videos[camera], frames)
        except BaseException:  # a frame that does not decode: the episode is refused, nothing is left
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return StagedEpisode(episode, folder, videos, image_stats)

    def commit(self, staged: StagedEpisode) -> int:
        """Append a staged episode to the dataset; returns its ``episode_index``. Durable once this returns."""
        with self._commit_lock:
            episode = staged.episode
            length = episode.length
            if self.info is None:
                self.info = self._new_info(episode)
            self._check_features(episode)
            index = len(self.episodes)
            task_index = self.tasks.setdefault(episode.task, len(self.tasks))
            first_frame = sum(e["length"] for e in self.episodes)
            chunk, file = self._free_file("data", lambda c, f: DATA_PATH.format(chunk_index=c, file_index=f))
            data_path = DATA_PATH.format(chunk_index=chunk, file_index=file)
            self._write_frames(staged.folder / "data.parquet", episode, index, first_frame, task_index)
            moves = [(staged.folder / "data.parquet", self.root / data_path)]
            row = {
                "episode_index": index,
                "tasks": [episode.task],
                "length": length,
                "data/chunk_index": chunk,
                "data/file_index": file,
                "dataset_from_index": first_frame,
                "dataset_to_index": first_frame + length,
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
                **episode.extra,
            }
            for camera, staged_video in staged.videos.items():
                key = f"observation.images.{camera}"
                path_of = lambda c, f, k=key: VIDEO_PATH.format(video_key=k, chunk_index=c, file_index=f)  # noqa: E731
                chunk, file = self._free_file(f"videos/{key}", path_of)
                target = self.root / path_of(chunk, file)
                moves.append((staged_video, target))
                row.update({
                    f"videos/{key}/chunk_index": chunk,
                    f"videos/{key}/file_index": file,
                    f"videos/{key}/from_timestamp": 0.0,
                    f"videos/{key}/to_timestamp": length / self.fps,
                })  # fmt: skip
            episode_stats = {
                **self._vector_stats(episode, index, task_index, first_frame),
                **staged.image_stats,
            }
            for name, values in episode_stats.items():
                for stat, value in values.items():
                    row[f"stats/{name}/{stat}"] = np.asarray(value).tolist()
            for source, target in moves:
                replace_durably(source, target)
            shutil.rmtree(staged.folder, ignore_errors=True)
            self.episodes.append(row)
            self._merge_stats(episode_stats)
            self._commit()
            return index

    # -- files --------------------------------------------------------------------------------------
    def _free_file(self, prefix: str, path_of) -> tuple[int, int]:
        """The chunk and file index after the last one any episode uses for ``prefix`` (``"data"`` or
        ``"videos/<key>"``), skipping any that exists on disk: a new file never replaces one."""
        used = [(int(e[f"{prefix}/chunk_index"]), int(e[f"{prefix}/file_index"])) for e in self.episodes]
        chunk, file = max(used, default=(0, -1))
        while True:
            chunk, file = (chunk + 1, 0) if file + 1 >= CHUNKS_SIZE else (chunk, file + 1)
            if not (self.root / path_of(chunk, file)).exists():
                return chunk, file

    def _write_frames(
        self, path: Path, episode: EpisodeFrames, index: int, first: int, task_index: int
    ) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = episode.length
        columns = {
            name: pa.array(list(np.asarray(v, np.float32)), type=pa.list_(pa.float32()))
            for name, v in episode.vectors.items()
        }
        for name, values in episode.scalars.items():
            values = np.asarray(values)
            columns[name] = pa.array(values.astype(bool if values.dtype == bool else np.float32))
        columns.update({
            "timestamp": pa.array(np.arange(n, dtype=np.float32) / np.float32(self.fps)),
            "frame_index": pa.array(np.arange(n, dtype=np.int64)),
            "episode_index": pa.array(np.full(n, index, np.int64)),
            "index": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "task_index": pa.array(np.full(n, task_index, np.int64)),
        })  # fmt: skip
        write_atomic(path, lambda p: pq.write_table(pa.table(columns), p))

    def _write_video(self, path: Path, frames: Sequence[np.ndarray]) -> dict:
        """Encode ``frames`` (read one at a time) into ``path``; returns their pixel statistics."""
        import av

        height, width = frames[0].shape[:2]
        pixels = PixelStats()
        every = max(1, len(frames) // 20)  # statistics from about 20 frames, as LeRobot samples them

        def write(target: Path) -> None:
            with av.open(str(target), "w", format="mp4") as container:
                stream = container.add_stream(self.video.codec, rate=round(self.fps))
                stream.width, stream.height, stream.pix_fmt = width, height, self.video.pix_fmt
                if self.video.crf is not None:
                    stream.options = {"crf": str(self.video.crf)}
                for i, image in enumerate(frames):
                    if i % every == 0:
                        pixels.add(image)
                    for packet in stream.encode(
                        av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                    ):
                        container.mux(packet)
                for packet in stream.encode():
                    container.mux(packet)

        write_atomic(path, write)
        return pixels.stats()

    def _commit(self) -> None:
        """Replace the metadata atomically; ``info.json`` (the totals) goes last."""
        import pandas as pd

        meta = self.root / "meta"
        episodes_path = self.root / EPISODES_PATH
        episodes_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(episodes_path, lambda p: pd.DataFrame(self.episodes).to_parquet(p, index=False))
        tasks = pd.DataFrame(
            {"task_index": list(self.tasks.values())}, index=pd.Index(list(self.tasks), name="task")
        )
        write_atomic(meta / "tasks.parquet", lambda p: tasks.to_parquet(p))
        write_atomic(meta / "stats.json", json.dumps(self._stats_json(), indent=2))
        assert self.info is not None
        self.info.update(
            total_episodes=len(self.episodes),
            total_frames=sum(e["length"] for e in self.episodes),
            total_tasks=len(self.tasks),
            splits={"train": f"0:{len(self.episodes)}"},
        )
        write_atomic(meta / "info.json", json.dumps(self.info, indent=2))

    # -- features and stats ------------------------------------------------------------------------
    def _new_info(self, episode: EpisodeFrames) -> dict:
        features: dict[str, dict] = {}
        for camera, frames in episode.images.items():
            height, width = frames[0].shape[:2]
            features[f"observation.images.{camera}"] = {
                "dtype": "video",
                "shape": [height, width, 3],
                "names": ["height", "width", "channels"],
                "info": {
                    "video.height": height,
                    "video.width": width,
                    "video.codec": {"libx264": "h264", "libsvtav1": "av1"}.get(
                        self.video.codec, self.video.codec
                    ),
                    "video.pix_fmt": self.video.pix_fmt,
                    "video.is_depth_map": False,
                    "video.fps": _fps_value(self.fps),
                    "video.channels": 3,
                    "has_audio": False,
                },
            }
        for name, values in episode.vectors.items():
            width = int(np.asarray(values).shape[1])
            names = episode.names.get(name)
            if names is not None and len(names) != width:
                raise DatasetError(f"{name} has {width} dims but {len(names)} names")
            features[name] = {"dtype": "float32", "shape": [width], "names": list(names) if names else None}
        for name, values in episode.scalars.items():
            dtype = "bool" if np.asarray(values).dtype == bool else "float32"
            features[name] = {"dtype": dtype, "shape": [1], "names": None}
        for name, dtype in (
            ("timestamp", "float32"),
            ("frame_index", "int64"),
            ("episode_index", "int64"),
            ("index", "int64"),
            ("task_index", "int64"),
        ):
            features[name] = {"dtype": dtype, "shape": [1], "names": None}
        return {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": self.robot_type,
            "total_episodes": 0,
            "total_frames": 0,
            "total_tasks": 0,
            "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 500,
            "fps": _fps_value(self.fps),
            "splits": {},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH,
            "features": features,
        }

    def _check_features(self, episode: EpisodeFrames) -> None:
        assert self.info is not None
        features = self.info["features"]
        given = (
            {f"observation.images.{c}" for c in episode.images} | set(episode.vectors) | set(episode.scalars)
        )
        expected = {
            k
            for k in features
            if k not in ("timestamp", "frame_index", "episode_index", "index", "task_index")
        }
        if given != expected:
            raise DatasetError(
                f"episode features {sorted(given)} differ from the dataset's {sorted(expected)}"
            )
        for name, values in episode.vectors.items():
            if [int(np.asarray(values).shape[1])] != features[name]["shape"]:
                raise DatasetError(
                    f"{name} has shape {np.asarray(values).shape[1:]}, the dataset {features[name]['shape']}"
                )

    def _vector_stats(
        self, episode: EpisodeFrames, index: int, task_index: int, first: int
    ) -> dict[str, dict]:
        stats = {}
        for name, values in {
            **episode.vectors,
            **{k: np.asarray(v, np.float32)[:, None] for k, v in episode.scalars.items()},
        }.items():
            stats[name] = _stats(np.asarray(values, np.float64))
        n = episode.length
        for name, values in (
            ("timestamp", np.arange(n) / self.fps),
            ("frame_index", np.arange(n)),
            ("episode_index", np.full(n, index)),
            ("index", np.arange(first, first + n)),
            ("task_index", np.full(n, task_index)),
        ):
            stats[name] = _stats(np.asarray(values, np.float64)[:, None])
        return stats

    def _merge_stats(self, episode: dict[str, dict]) -> None:
        """Fold one episode's statistics in, weighted by its frames: with every value inside its
        declared bounds (robot steps are refused outside them, ``link_codec.check_observation``), one
        episode moves the means and quantiles by at most its share of the frames times the range."""
        for name, new in episode.items():
            old = self.stats.get(name)
            if old is None:
                self.stats[name] = {k: np.asarray(v, np.float64) for k, v in new.items()}
                continue
            n1, n2 = (
                float(np.asarray(old["count"]).reshape(-1)[0]),
                float(np.asarray(new["count"]).reshape(-1)[0]),
            )
            m1, m2 = old["mean"], np.asarray(new["mean"], np.float64)
            mean = (n1 * m1 + n2 * m2) / (n1 + n2)
            var = (
                n1 * (old["std"] ** 2 + (m1 - mean) ** 2)
                + n2 * (np.asarray(new["std"]) ** 2 + (m2 - mean) ** 2)
            ) / (n1 + n2)
            merged = {
                "min": np.minimum(old["min"], new["min"]),
                "max": np.maximum(old["max"], new["max"]),
                "mean": mean,
                "std": np.sqrt(var),
                "count": np.asarray([n1 + n2]),
            }
            # Quantiles merge as LeRobot aggregates them: weighted by count (an approximation).
            for key in QUANTILES:
                if key in old and key in new:
                    merged[key] = (n1 * np.asarray(old[key]) + n2 * np.asarray(new[key], np.float64)) / (
                        n1 + n2
                    )
            self.stats[name] = merged

    def _stats_json(self) -> dict:
        return {
            name: {k: np.asarray(v).tolist() for k, v in values.items()}
            for name, values in self.stats.items()
        }

    # -- reopening ----------------------------------------------------------------------------------
    def _reopen(self) -> None:
        import pandas as pd

        self.info = json.loads((self.root / "meta" / "info.json").read_text())
        if self.info.get("codebase_version") != CODEBASE_VERSION:
            raise DatasetError(
                f"{self.root} is a LeRobot {self.info.get('codebase_version')} dataset, not {CODEBASE_VERSION}"
            )
        if abs(float(self.info["fps"]) - self.fps) > 1e-6:
            raise DatasetError(f"{self.root} records at {self.info['fps']} fps, not {self.fps}")
        self.video = self._dataset_video_format()
        total = int(self.info["total_episodes"])
        rows = pd.read_parquet(self.root / EPISODES_PATH).to_dict("records") if total else []
        self.episodes = [
            {k: _plain(v) for k, v in row.items()} for row in rows[:total]
        ]  # info.json is the commit point
        tasks = pd.read_parquet(self.root / "meta" / "tasks.parquet") if total else None
        self.tasks = (
            {} if tasks is None else {str(t): int(i) for t, i in zip(tasks.index, tasks["task_index"])}
        )
        stats = json.loads((self.root / "meta" / "stats.json").read_text()) if total else {}
        self.stats = {
            name: {k: np.asarray(v, np.float64) for k, v in values.items()} for name, values in stats.items()
        }
        self._remove_orphans()

    def _dataset_video_format(self) -> VideoFormat:
        """Appended videos are encoded as the dataset's are (its info says one codec per camera)."""
        assert self.info is not None
        videos = [f["info"] for f in self.info["features"].values() if f["dtype"] == "video" and "info" in f]
        if not videos:
            return self.video
        codec, pix_fmt = (
            str(videos[0].get("video.codec", "h264")),
            str(videos[0].get("video.pix_fmt", "yuv420p")),
        )
        encoder = ENCODERS.get(codec, codec)
        if encoder == self.video.codec and pix_fmt == self.video.pix_fmt:
            return self.video
        import av

        try:
            av.codec.Codec(encoder, "w")
        except Exception:
            raise DatasetError(
                f"{self.root} stores {codec} video; this PyAV has no {encoder} encoder to append with"
            ) from None
        return VideoFormat(codec=encoder, pix_fmt=pix_fmt, crf=None)

    def _remove_orphans(self) -> None:
        keep = {
            self.root / DATA_PATH.format(chunk_index=e["data/chunk_index"], file_index=e["data/file_index"])
            for e in self.episodes
        }
        for key in (k for k, f in self.info["features"].items() if f["dtype"] == "video"):
            keep |= {
                self.root
                / VIDEO_PATH.format(
                    video_key=key,
                    chunk_index=e[f"videos/{key}/chunk_index"],
                    file_index=e[f"videos/{key}/file_index"],
                )
                for e in self.episodes
            }
        for folder in ("data", "videos"):
            for path in (self.root / folder).rglob("*") if (self.root / folder).exists() else ():
                if path.is_file() and path not in keep:
                    path.unlink()
        shutil.rmtree(self.root / ".staging", ignore_errors=True)


@dataclass
class StagedEpisode:
    """An episode whose videos are encoded in ``folder``, waiting for :meth:`LeRobotWriter.commit`."""

    episode: EpisodeFrames
    folder: Path
    videos: dict[str, Path]
    image_stats: dict[str, dict]


class PixelStats:
    """Per-channel min / max / mean / std / quantiles of uint8 frames in [0, 1], from exact per-channel
    histograms accumulated one frame (and one block of pixels) at a time: no float copy of a frame."""

    BLOCK = 1 << 18  # pixels per block

    def __init__(self) -> None:
        self.histogram = np.zeros((3, 256), np.uint64)

    def add(self, image: np.ndarray) -> None:
        flat = np.asarray(image, np.uint8).reshape(-1, 3)
        for start in range(0, len(flat), self.BLOCK):
            block = flat[start : start + self.BLOCK]
            for channel in range(3):
                self.histogram[channel] += np.bincount(block[:, channel], minlength=256).astype(np.uint64)

    def stats(self) -> dict:
        counts = self.histogram.astype(np.float64)
        total = counts.sum(axis=1)
        levels = np.arange(256) / 255.0
        mean = counts @ levels / total
        var = np.maximum(counts @ levels**2 / total - mean**2, 0.0)
        present = self.histogram > 0
        cumulative = np.cumsum(counts, axis=1) / total[:, None]
        as_image = lambda v: np.asarray(v, np.float64).reshape(3, 1, 1).tolist()  # noqa: E731
        stats = {
            "min": as_image(levels[present.argmax(axis=1)]),
            "max": as_image(levels[255 - present[:, ::-1].argmax(axis=1)]),
            "mean": as_image(mean),
            "std": as_image(np.sqrt(var)),
            "count": [int(total[0])],
        }
        for key, q in QUANTILES.items():  # the lowest level at or above which a fraction q lies
            stats[key] = as_image(levels[(cumulative >= q - 1e-12).argmax(axis=1)])
        return stats


def _stats(values: np.ndarray) -> dict:
    return {
        "min": values.min(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
        "mean": values.mean(axis=0).tolist(),
        "std": values.std(axis=0).tolist(),
        "count": [int(values.shape[0])],
        **{key: np.quantile(values, q, axis=0).tolist() for key, q in QUANTILES.items()},
    }


def _fps_value(fps: float) -> int | float:
    """LeRobot writes ``fps`` as an integer."""
    return int(fps) if float(fps).is_integer() else float(fps)


def _plain(value):
    return value.tolist() if isinstance(value, np.ndarray) else value
