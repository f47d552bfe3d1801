"""The rewards a ``reward.source`` judged, handed from the env pool to the dataset recorder.

In ``serve server.mode=train`` the pool judges every robot step (``env``, ``classifier`` or
``human``); the link server stores the episode when the robot ends it, on a store thread that may
run before the pool has judged the last chunk. :class:`JudgedEpisodes` is the hand-over: the pool
records each judged step and closes the episode when it is over; the recorder takes an episode's
values, waiting while the pool is still on it. Episodes of robots the pool is not playing (a final
evaluation, a robot left out for its spec) are not waited for: they keep the agent's own values.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class _Episode:
    steps: dict[int, tuple[float, bool]] = field(default_factory=dict)  # step -> (reward, success)
    closed: bool = False


class JudgedEpisodes:
    """Judged (reward, success) per robot episode step, from the pool to the recorder. Thread-safe."""

    def __init__(self, source: str, wait_s: float = 10.0) -> None:
        self.source, self.wait_s = source, wait_s
        self._episodes: dict[tuple[str, str], _Episode] = {}
        self._playing: set[str] = set()  # robots the pool plays: their episodes are judged
        self._changed = threading.Condition()

    # -- the pool's side --------------------------------------------------------------------------
    def playing(self, robot_id: str, yes: bool = True) -> None:
        with self._changed:
            (self._playing.add if yes else self._playing.discard)(robot_id)
            self._changed.notify_all()

    def record(self, robot_id: str, episode_id: str, step: int, reward: float, success: bool) -> None:
        with self._changed:
            self._episodes.setdefault((robot_id, episode_id), _Episode()).steps[step] = (reward, success)

    def close(self, robot_id: str, episode_id: str) -> None:
        with self._changed:
            self._episodes.setdefault((robot_id, episode_id), _Episode()).closed = True
            self._changed.notify_all()

    # -- the recorder's side ----------------------------------------------------------------------
    def take(self, robot_id: str, episode_id: str) -> dict[int, tuple[float, bool]] | None:
        """The episode's judged steps once the pool has closed it; None when the pool is not playing
        this robot or did not close the episode within ``wait_s`` (the agent's values then stand)."""
        deadline = time.monotonic() + self.wait_s
        key = (robot_id, episode_id)
        with self._changed:
            while True:
                episode = self._episodes.get(key)
                if episode is not None and episode.closed:
                    return self._episodes.pop(key).steps
                left = deadline - time.monotonic()
                if robot_id not in self._playing or left <= 0:
                    self._episodes.pop(key, None)
                    return None
                self._changed.wait(left)
