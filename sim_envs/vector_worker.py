"""Worker side of :class:`sim_envs.vector.SimVectorEnv`: a few envs in their own interpreter.

Started as ``python -c 'from sim_envs.vector_worker import main; main()' FD``; FD is a socket to the parent that carries
pickled (command, payload) pairs. The worker exits when the parent says "close" or goes away.
"""

from __future__ import annotations

import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from protos.batch import ChunkResult, EpisodeSummary, stack_obs


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

    def run_chunk(self, actions: np.ndarray) -> tuple:
        chunk = actions.shape[0]
        rewards = np.zeros(chunk, np.float32)
        terminated = np.zeros(chunk, bool)
        truncated = np.zeros(chunk, bool)
        success = np.zeros(chunk, bool)
        valid = np.zeros(chunk, bool)
        final_obs, summary = None, None
        for t in range(chunk):
            obs, reward, term, trunc, info = self.env.step(actions[t])
            rewards[t], terminated[t], truncated[t] = reward, term, trunc
            success[t] = info["success"]
            valid[t] = True
            self.episode_return += reward
            self.episode_length += 1
            self.episode_success |= bool(info["success"])
            if term or trunc:
                summary = (self.episode_return, self.episode_length, self.episode_success)
                final_obs = obs
                obs = self.reset(seed=None)
                break
        return obs, rewards, terminated, truncated, success, valid, final_obs, summary


def reset_slots(slots: list[EnvSlot], seeds: list[int | None]) -> dict[str, Any]:
    """The slots' first observations, batched."""
    return stack_obs([slot.reset(seed) for slot, seed in zip(slots, seeds)])


def play_chunks(slots: list[EnvSlot], actions: np.ndarray) -> ChunkResult:
    """Each slot plays its ``actions[i]`` chunk; the group's results batched, env indices local (a
    worker sends one result with a few arrays, not a tuple of arrays per env)."""
    results = [slot.run_chunk(a) for slot, a in zip(slots, actions)]
    obs, rewards, terminated, truncated, success, valid, final_obs, summaries = zip(*results)
    return ChunkResult(
        obs=stack_obs(list(obs)),
        rewards=np.stack(rewards),
        terminated=np.stack(terminated),
        truncated=np.stack(truncated),
        success=np.stack(success),
        valid=np.stack(valid),
        final_obs=list(final_obs),
        finished=[
            EpisodeSummary(i, float(s[0]), int(s[1]), bool(s[2]))
            for i, s in enumerate(summaries)
            if s is not None
        ],
    )


def receive(conn: Connection, spin_s: float) -> Any:
    """The next message; with ``spin_s`` > 0, poll for up to that long before blocking. A process that
    blocks lets its (virtual) CPU sleep, and waking it costs both sides: on this 2-core VM about a
    tenth of a MetaWorld batch step. Spin only where the spinner has a core of its own."""
    if spin_s > 0:
        deadline = time.perf_counter() + spin_s
        while not conn.poll(0) and time.perf_counter() < deadline:
            pass
    return conn.recv()


def _worker(conn: Connection, env_id: str, config: dict[str, Any], count: int, spin_s: float) -> None:
    try:
        slots = [EnvSlot(env_id, config) for _ in range(count)]
    except Exception as exc:
        conn.send(("error", (type(exc).__name__, str(exc))))
        return
    conn.send(("ready", slots[0].env.env_spec.to_dict()))
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
    try:
        env_id, config, count, spin_s = conn.recv()
        _worker(conn, env_id, config, count, spin_s)
    except (EOFError, ConnectionResetError, BrokenPipeError):
        pass  # the parent went away


if __name__ == "__main__":
    main()
