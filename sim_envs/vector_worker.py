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
from protos.user_error import UserError
from sim_envs.core_claims import pin_to_a_free_core

_NO_STEP = (0.0, False, False, False)  # a chunk's rows after its episode ended (valid=False)


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
        """Play ``actions`` until the chunk or the episode ends; returns (obs, final obs or None,
        summary or None, one ``(reward, terminated, truncated, success)`` per step played)."""
        final_obs, summary, played = None, None, []
        for action in actions:
            obs, reward, term, trunc, info = self.env.step(action)
            won = bool(info["success"])
            played.append((reward, term, trunc, won))
            self.episode_return += reward
            self.episode_length += 1
            self.episode_success = self.episode_success or won
            if term or trunc:
                summary = (self.episode_return, self.episode_length, self.episode_success)
                final_obs = obs
                obs = self.reset(seed=None)
                break
        return obs, final_obs, summary, played


def reset_slots(slots: list[EnvSlot], seeds: list[int | None]) -> dict[str, Any]:
    """The slots' first observations, batched."""
    return stack_obs([slot.reset(seed) for slot, seed in zip(slots, seeds)])


def play_chunks(slots: list[EnvSlot], actions: np.ndarray) -> ChunkResult:
    """Each slot plays its ``actions[i]`` chunk; the group's results batched, env indices local (a
    worker sends one result with a few arrays, not a tuple of arrays per env). The envs' steps are
    gathered as Python tuples and made into arrays once per group, not written row by row. One-step
    chunks take ``play_single_steps``."""
    if actions.shape[1] == 1:
        return play_single_steps(slots, actions)
    n, chunk = len(slots), actions.shape[1]
    observations, final_obs, finished, played = [], [], [], []
    for i, (slot, chunk_actions) in enumerate(zip(slots, actions)):
        obs, final, summary, steps = slot.run_chunk(chunk_actions)
        observations.append(obs)
        final_obs.append(final)
        played.append(steps)
        if summary is not None:
            finished.append(EpisodeSummary(i, float(summary[0]), int(summary[1]), bool(summary[2])))
    # Padded to whole chunks (an env whose episode ended early), transposed into columns in C.
    padded = [step for steps in played for step in steps + [_NO_STEP] * (chunk - len(steps))]
    rewards, terminated, truncated, success = zip(*padded)
    column = lambda values, dtype: np.array(values, dtype).reshape(n, chunk)  # noqa: E731
    return ChunkResult(
        obs=stack_obs(observations),
        final_obs=final_obs,
        finished=finished,
        rewards=column(rewards, np.float32),
        terminated=column(terminated, bool),
        truncated=column(truncated, bool),
        success=column(success, bool),
        valid=column([t < len(steps) for steps in played for t in range(chunk)], bool),
    )


def play_single_steps(slots: list[EnvSlot], actions: np.ndarray) -> ChunkResult:
    """``play_chunks`` for chunks of one step (a state policy's PPO), written flat: no per-env chunk
    loop, no padding, every step valid. Envs whose observations are bare state rows (``state_rows``:
    a gymnasium env with a 1-D Box) are stepped through ``step_state`` and their rows batched in one
    array, with no observation dict per env. Stepping 8 Pendulums (about 11 us a step), the overhead
    over gymnasium's own loop fell from 4.1 us per env step (the chunk path, per-env dicts) to about
    1.6 (``benchmarks/sim_suites.py``)."""
    n = len(slots)
    rows = getattr(slots[0].env, "state_rows", False)
    observations, final_obs, finished, rewards, flags = [], [None] * n, [], [], []
    for i, (slot, action) in enumerate(zip(slots, actions[:, 0])):
        if rows:
            obs, reward, term, trunc, won = slot.env.step_state(action)
        else:
            obs, reward, term, trunc, info = slot.env.step(action)
            won = bool(info["success"])
        rewards.append(reward)
        flags.append((term, trunc, won, True))  # the last: valid (every env plays its one step)
        slot.episode_return += reward
        slot.episode_length += 1
        if won:
            slot.episode_success = True
        if term or trunc:
            finished.append(
                EpisodeSummary(i, float(slot.episode_return), slot.episode_length, slot.episode_success)
            )
            final_obs[i] = slot.env.observation(obs) if rows else obs  # the adapter's own copy
            obs = slot.reset(seed=None)
            if rows:
                obs = obs["state"]
        observations.append(obs)
    flags = np.array(flags, bool)  # [n, 4]: one array, its columns views
    if rows:
        instruction = slots[0].env.instruction
        batched = {
            "images": {},
            "state": np.array(observations, np.float32),
            "instruction": [instruction] * n,
        }
    else:
        batched = stack_obs(observations)
    return ChunkResult(
        obs=batched,
        final_obs=final_obs,
        finished=finished,
        rewards=np.array(rewards, np.float32)[:, None],
        terminated=flags[:, 0:1],
        truncated=flags[:, 1:2],
        success=flags[:, 2:3],
        valid=flags[:, 3:4],
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


def error_payload(exc: BaseException) -> tuple[str, str, bool]:
    """What the parent needs to raise the error again: its name, message, and whether the user can fix it."""
    return type(exc).__name__, str(exc), isinstance(exc, UserError)


def _worker(
    conn: Connection, env_id: str, config: dict[str, Any], count: int, spin_s: float, pin: bool
) -> None:
    core = pin_to_a_free_core() if pin else None
    try:
        slots = [EnvSlot(env_id, config) for _ in range(count)]
    except Exception as exc:
        conn.send(("error", error_payload(exc)))
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
            conn.send(("error", error_payload(exc)))


def main() -> None:
    # Ctrl-C is for the parent: it saves a checkpoint and then closes us in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(sys.argv[1]))
    with contextlib.suppress(EOFError, ConnectionResetError, BrokenPipeError):  # the parent went away
        _worker(conn, *conn.recv())


if __name__ == "__main__":
    main()
