"""Worker side of :class:`sim_envs.vector.SimVectorEnv`: a few envs in their own interpreter.

Started as ``python -c 'from sim_envs.vector_worker import main; main()' FD``; FD is a socket to the parent that carries
pickled (command, payload) pairs. The worker exits when the parent says "close" or goes away.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from protos.batch import ChunkResult, EpisodeSummary, stack_obs
from sim_envs.core_claims import pin_to_a_free_core


class EnvSlot:
    """One env plus its episode bookkeeping and auto-reset."""

    def __init__(self, env_id: str, config: dict[str, Any]) -> None:
        from sim_envs.registry import make

        self.env = make(env_id, **config)
        self.episode_return = 0.0
        self.episode_length = 0
        self.episode_success = False

    def reset(self, seed: int | None) -> dict[str, Any]:
        obs, _ = self.env.reset(seed=seed)
        self.episode_return, self.episode_length, self.episode_success = 0.0, 0, False
        return obs

    def run_chunk(self, actions: np.ndarray, out: ChunkRows) -> tuple:
        """Play ``actions`` until the chunk or the episode ends, writing each step into ``out``'s rows
        (this env's rows of the group's arrays); returns (obs, final obs or None, summary or None)."""
        final_obs, summary = None, None
        for t in range(actions.shape[0]):
            obs, reward, term, trunc, info = self.env.step(actions[t])
            won = bool(info["success"])
            out.rewards[t], out.terminated[t], out.truncated[t] = reward, term, trunc
            out.success[t], out.valid[t] = won, True
            self.episode_return += reward
            self.episode_length += 1
            self.episode_success |= won
            if term or trunc:
                summary = (self.episode_return, self.episode_length, self.episode_success)
                final_obs = obs
                obs = self.reset(seed=None)
                break
        return obs, final_obs, summary


class ChunkRows:
    """One env's rows of a group's ``[n, chunk]`` result arrays, written in place."""

    __slots__ = ("rewards", "success", "terminated", "truncated", "valid")

    def __init__(self, arrays: dict[str, np.ndarray], i: int) -> None:
        for name in self.__slots__:
            setattr(self, name, arrays[name][i])


def reset_slots(slots: list[EnvSlot], seeds: list[int | None]) -> dict[str, Any]:
    """The slots' first observations, batched."""
    return stack_obs([slot.reset(seed) for slot, seed in zip(slots, seeds)])


def play_chunks(slots: list[EnvSlot], actions: np.ndarray) -> ChunkResult:
    """Each slot plays its ``actions[i]`` chunk; the group's results batched, env indices local (a
    worker sends one result with a few arrays, not a tuple of arrays per env). The arrays are made
    once per group and each env writes its rows (a one-step chunk of a fast sim is mostly this)."""
    n, chunk = len(slots), actions.shape[1]
    arrays = {"rewards": np.zeros((n, chunk), np.float32)}
    arrays.update({name: np.zeros((n, chunk), bool) for name in ChunkRows.__slots__ if name != "rewards"})
    observations, final_obs, finished = [], [], []
    for i, (slot, chunk_actions) in enumerate(zip(slots, actions)):
        obs, final, summary = slot.run_chunk(chunk_actions, ChunkRows(arrays, i))
        observations.append(obs)
        final_obs.append(final)
        if summary is not None:
            finished.append(EpisodeSummary(i, float(summary[0]), int(summary[1]), bool(summary[2])))
    return ChunkResult(obs=stack_obs(observations), final_obs=final_obs, finished=finished, **arrays)


def receive(conn: Connection, spin_s: float) -> Any:
    """The next message; with ``spin_s`` > 0, poll for up to that long before blocking. A process that
    blocks lets its (virtual) CPU sleep, and waking it costs both sides: on this 2-core VM about a
    tenth of a MetaWorld batch step. Spin only where the spinner has a core of its own."""
    if spin_s > 0:
        deadline = time.perf_counter() + spin_s
        while not conn.poll(0) and time.perf_counter() < deadline:
            pass
    return conn.recv()


def _worker(
    conn: Connection, env_id: str, config: dict[str, Any], count: int, spin_s: float, pin: bool
) -> None:
    core = pin_to_a_free_core() if pin else None
    try:
        slots = [EnvSlot(env_id, config) for _ in range(count)]
    except Exception as exc:
        conn.send(("error", (type(exc).__name__, str(exc))))
        return
    conn.send(("ready", {"spec": slots[0].env.env_spec.to_dict(), "core": core}))
    while True:
        command, payload = receive(conn, spin_s)
        try:
            if command == "reset":
                result = reset_slots(slots, payload)
            elif command == "chunk":
                result = play_chunks(slots, payload)
            elif command == "close":
                for slot in slots:
                    slot.env.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown worker command {command!r}")
            conn.send(("ok", result))
        except Exception as exc:
            conn.send(("error", (type(exc).__name__, str(exc))))


def main() -> None:
    # Ctrl-C is for the parent: it saves a checkpoint and then closes us in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(sys.argv[1]))
    with contextlib.suppress(EOFError, ConnectionResetError, BrokenPipeError):  # the parent went away
        _worker(conn, *conn.recv())


if __name__ == "__main__":
    main()
