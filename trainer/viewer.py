"""Episodes in rerun: a recorded one (``rlinf-trainer view``, as LeRobot's ``lerobot-dataset-viz``
shows one) and the live robots during ``rlinf-trainer serve`` (``server.view=rerun``).

Per frame (timelines ``frame_index`` and ``timestamp``): every camera (``cameras/<name>``), every
vector feature as one plot with a named series per dimension (``observation.state``, ``action``,
``complementary_info.policy_action`` ...), the reward, done / success and intervention flags. The
episode's labels (task, source, success, aborted, why it ended) are a static text document.
Needs the ``view`` extra (``rerun-sdk``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.lerobot_dataset import DatasetError
from protos.lerobot_reader import read_camera, read_episodes, read_frames, read_info
from protos.user_error import UserError

INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
PENDING_OBSERVATIONS = 4096  # a bound if the viewer falls behind: the oldest are dropped
LABELS = ("episode_id", "source", "success", "aborted", "end_reason")


@dataclass(frozen=True)
class ViewConfig:
    """What to show: one episode of ``dataset``; saved to an ``.rrd`` file, or shown in a spawned viewer."""

    dataset: str
    episode: int = 0
    save: str = ""  # a path: write the recording there instead of opening the viewer


def _rerun():
    try:
        import rerun as rr
    except ImportError:
        raise DatasetError("showing episodes in rerun needs rerun-sdk: pip install '.[view]'") from None
    return rr


def log_episode(recording, root: str | Path, index: int, info: dict, frames, episodes) -> int:
    """Log episode ``index`` of the dataset at ``root`` to ``recording``; returns its frame count."""
    rr = _rerun()
    rows = frames[frames["episode_index"] == index]
    if rows.empty:
        raise DatasetError(f"dataset {str(root)!r} has no episode {index}; it has 0..{len(episodes) - 1}")
    features = info["features"]
    cameras = [k.removeprefix("observation.images.") for k, f in features.items() if f["dtype"] == "video"]
    images = {camera: read_camera(root, camera, [index])[index] for camera in cameras}
    vectors = [
        k
        for k, f in features.items()
        if k not in INDEX_COLUMNS and f["dtype"] == "float32" and f["shape"] != [1]
    ]
    scalars = [k for k, f in features.items() if k not in INDEX_COLUMNS and f["dtype"] in ("float32", "bool", "int64") and f["shape"] == [1]]  # fmt: skip
    for key in vectors:
        names = features[key].get("names") or [f"{key}.{i}" for i in range(features[key]["shape"][0])]
        recording.log(key, rr.SeriesLines(names=[str(n) for n in names]), static=True)
    row = episodes[episodes["episode_index"] == index].iloc[0]
    labels = [f"**task**: {', '.join(map(str, row['tasks']))}"] if "tasks" in row else []
    labels += [f"**{k}**: {row[k]}" for k in LABELS if k in row]
    recording.log(
        "episode", rr.TextDocument("\n\n".join(labels), media_type=rr.MediaType.MARKDOWN), static=True
    )
    for t, values in enumerate(rows.to_dict("records")):
        recording.set_time("frame_index", sequence=int(values["frame_index"]))
        recording.set_time("timestamp", duration=float(values["timestamp"]))
        for camera, stack in images.items():
            recording.log(f"cameras/{camera}", rr.Image(stack[t]))
        for key in vectors:
            recording.log(key, rr.Scalars(np.asarray(values[key], np.float64)))
        for key in scalars:
            recording.log(key, rr.Scalars(float(values[key])))
    return len(rows)


class NoDisplay(UserError):
    """The rerun viewer needs a screen, and this machine has none."""


def spawn_viewer(recording) -> None:
    """Start the rerun viewer for ``recording``: found beside this interpreter (an unactivated venv
    has it in ``.venv/bin``), refused with a hint where there is no screen to show it on."""
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        raise NoDisplay(
            "no display here (DISPLAY and WAYLAND_DISPLAY are unset): pass --save FILE.rrd, then open it "
            "with `rerun FILE.rrd` on a machine with a screen"
        )
    beside = Path(sys.executable).parent
    if (beside / "rerun").exists() and str(beside) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{beside}{os.pathsep}{os.environ.get('PATH', '')}"
    recording.spawn()


def view(config: ViewConfig) -> int:
    """Log the chosen episode; returns the number of frames logged."""
    rr = _rerun()
    root = Path(config.dataset)
    info, frames, episodes = read_info(root), read_frames(root), read_episodes(root)
    recording = rr.RecordingStream("rlinf-view", recording_id=f"{root.name}-episode-{config.episode}")
    if config.save:
        recording.save(config.save)
    else:
        spawn_viewer(recording)
    count = log_episode(recording, root, config.episode, info, frames, episodes)
    recording.flush()
    return count


class LiveView:
    """Logs what each connected robot streams (cameras, state, executed action, reward, intervention)
    under ``robots/<id>/``, a few times a second, to a spawned viewer or an ``.rrd`` file."""

    PERIOD_S = 0.2

    def __init__(self, server, save: str = "") -> None:
        rr = _rerun()
        self.rr, self.server = rr, server
        self.recording = rr.RecordingStream("rlinf-serve", recording_id=f"serve-{int(time.time())}")
        if save:
            self.recording.save(save)
        else:
            spawn_viewer(self.recording)
        self.announced: set[str] = set()
        self.observations = 0
        # Filled by the server as observations arrive, drained by the periodic log: nothing is missed
        # between two polls, even when a robot's session closes (and frees its buffers) in between.
        self._pending: deque[tuple[Any, pb.Observation]] = deque(maxlen=PENDING_OBSERVATIONS)
        server.observation_listeners.append(lambda session, obs: self._pending.append((session, obs)))

    def log_new(self) -> None:
        """Log every observation that arrived since the last call, in arrival order."""
        rr, recording = self.rr, self.recording
        while self._pending:
            session, obs = self._pending.popleft()
            robot_id = session.robot_id
            if robot_id not in self.announced:
                self.announced.add(robot_id)
                names = [
                    f.name if f.size == 1 else f"{f.name}.{i}"
                    for f in session.spec.state_fields
                    for i in range(f.size)
                ]
                recording.log(
                    f"robots/{robot_id}/observation.state", rr.SeriesLines(names=names), static=True
                )
                recording.log(f"robots/{robot_id}/action", rr.SeriesLines(names=list(session.spec.action.names)), static=True)  # fmt: skip
            recording.set_time("seq", sequence=int(obs.seq))
            for frame in obs.frames:
                image = link_codec.decode_frame(frame, session.spec.camera(frame.camera))
                recording.log(f"robots/{robot_id}/cameras/{frame.camera}", rr.Image(image))
            recording.log(
                f"robots/{robot_id}/observation.state", rr.Scalars(np.asarray(obs.state, np.float64))
            )
            if obs.HasField("transition") and len(obs.transition.executed_action):
                t = obs.transition
                recording.log(
                    f"robots/{robot_id}/action", rr.Scalars(np.asarray(t.executed_action, np.float64))
                )
                recording.log(f"robots/{robot_id}/next.reward", rr.Scalars(float(t.reward)))
                recording.log(f"robots/{robot_id}/intervention", rr.Scalars(float(t.intervened)))
            self.observations += 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.log_new()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.PERIOD_S)
        self.log_new()
        self.recording.flush()


__all__ = ["LiveView", "ViewConfig", "log_episode", "view"]
