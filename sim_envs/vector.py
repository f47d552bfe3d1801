"""A vectorised, auto-resetting form of the sim envs that speaks action chunks.

``SimVectorEnv`` runs N envs either inline (in this process) or spread over subprocess workers.
``chunk_step`` takes ``[N, chunk, action_dim]``: each env plays its chunk until the chunk ends or
its episode ends; a finished env resets at once and its next observation is the new episode's
first one (the finished episode's last observation is kept in ``final_obs``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from protos import ContractError, EnvSpec
from protos.batch import ChunkResult, VectorEnv, concat_obs, stack_obs
from sim_envs.core_claims import allowed_cores
from sim_envs.errors import EnvConfigError
from sim_envs.registry import ENVS, env_entry, load_entry_point, make_suite_env
from sim_envs.vector_worker import EnvSlot, play_chunks, receive, reset_slots

_WORKER_MAIN = "from sim_envs.vector_worker import main; main()"
# Where the workers and the parent have a core each (``vector_worker.receive``): how long a worker
# polls for its next command before blocking, and how long the parent may poll for the workers'
# answers (``answer_spin``).
SPIN_WAIT_S = 0.002
ANSWER_SPIN_S = 0.02


def answer_spin(spin_wait_s: float, last_wait_s: float) -> float:
    """How long the parent polls for its workers' answers before it blocks. Where the workers spin at
    all: through the whole wait, up to ``ANSWER_SPIN_S``, while the last wait was that short (a batch
    step of state-only envs: the wake-up it saves, about 0.1 ms here, is some 4 % of a MetaWorld
    batch step); after a longer wait (cameras), only ``spin_wait_s``, as the workers do: there the
    renderer's threads want the parent's core, and a wake-up is a small share of the wait."""
    if not spin_wait_s:
        return 0.0
    return ANSWER_SPIN_S if last_wait_s <= ANSWER_SPIN_S else spin_wait_s


def check_interpreter(python: str, role: str) -> None:
    """A suite's interpreter must be an executable; else a one-line error naming ``role``."""
    if not os.access(python, os.X_OK):
        raise EnvConfigError(
            f"{role} {python!r} is not an executable (a suite's venv: scripts/sim_venv.sh SUITE)"
        )


class SimVectorEnv:
    """N copies of one sim env behind the batched env contract.

    ``spin_wait_s``: how long each subprocess worker polls for its next command before it blocks;
    ``None`` spins ``SPIN_WAIT_S`` where the workers and the parent have a core each, else 0. Where
    the workers spin, the parent polls for their answers as ``answer_spin`` says.
    ``pin_workers``: pin each subprocess worker to a core no other worker on the machine has claimed
    (``sim_envs.core_claims``); ``None`` pins where there is one worker per core this process may
    use (as ``train`` runs on 2 cores). A worker that finds no free core runs unpinned.
    ``worker_cores`` says where each one went.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        backend: str = "inline",
        num_workers: int | None = None,
        env_config: dict[str, Any] | None = None,
        python: str = "",
        spin_wait_s: float | None = None,
        pin_workers: bool | None = None,
    ) -> None:
        if num_envs < 1:
            raise EnvConfigError(f"num_envs must be >= 1, got {num_envs}")
        if backend not in ("inline", "subprocess"):
            raise EnvConfigError(f"backend must be 'inline' or 'subprocess', got {backend!r}")
        if python and backend != "subprocess":
            raise EnvConfigError(f"a worker interpreter (python={python!r}) needs backend='subprocess'")
        if python:
            check_interpreter(python, "worker interpreter")
        if spin_wait_s is not None and not 0 <= spin_wait_s <= 0.1:
            raise ValueError(f"spin_wait_s must be in [0, 0.1] seconds, got {spin_wait_s}")
        self.spin_wait_s = spin_wait_s  # None: chosen with the workers (_start_workers)
        self.pin_workers = pin_workers  # None: chosen with the workers (_start_workers)
        self.worker_cores: list[int | None] = []  # the core each worker is pinned to; None: unpinned
        self.env_id, self.num_envs, self.backend = env_id, num_envs, backend
        self.python = python or sys.executable
        config = dict(env_config or {})
        self.env_config = dict(config)
        if backend == "inline":
            self._slots = [EnvSlot(env_id, config) for _ in range(num_envs)]
            self.spec: EnvSpec = self._slots[0].env.env_spec
        else:
            self._start_workers(config, num_workers or min(num_envs, len(allowed_cores())))
        self._closed = False

    # -- subprocess plumbing --------------------------------------------------------------------
    def _start_workers(self, config: dict[str, Any], num_workers: int) -> None:
        # Workers are fresh interpreters joined by a socket pair: no fork of a process holding GL
        # contexts, and no re-import of the caller's script. Not ``-m sim_envs.vector_worker``: the
        # package imports that module first, and runpy then warns on stderr in every worker.
        num_workers = max(1, min(num_workers, self.num_envs))
        counts = [len(part) for part in np.array_split(np.arange(self.num_envs), num_workers)]
        self._conns, self._procs, self._counts = [], [], counts
        cores = len(allowed_cores())  # this process's affinity mask: under taskset, fewer than the machine's
        if self.spin_wait_s is None:  # spin only where every process has a core of its own
            self.spin_wait_s = SPIN_WAIT_S if num_workers + 1 <= cores else 0.0
        self._last_wait_s = 0.0  # the parent's last wait for a batch of answers (answer_spin)
        if self.pin_workers is None:  # benchmarks/worker_pinning.py, sim_suites.py: README
            self.pin_workers = num_workers == cores
        for count in counts:
            parent_sock, child_sock = socket.socketpair()
            proc = subprocess.Popen(
                [self.python, "-c", _WORKER_MAIN, str(child_sock.fileno())],
                pass_fds=[child_sock.fileno()],
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            child_sock.close()
            conn = Connection(parent_sock.detach())
            conn.send((self.env_id, config, count, self.spin_wait_s, self.pin_workers))
            self._conns.append(conn)
            self._procs.append(proc)
        ready = [self._receive(conn) for conn in self._conns]
        self.spec = EnvSpec.from_dict(ready[0]["spec"])
        self.worker_cores = [worker["core"] for worker in ready]

    def _receive(self, conn) -> Any:
        try:
            status, payload = receive(conn, answer_spin(self.spin_wait_s, self._last_wait_s))
        except EOFError:
            raise RuntimeError("a sim worker process died; see its stderr above") from None
        if status == "error":
            name, message, user_error = payload
            if name == "ContractError":
                raise ContractError(message)
            if user_error:  # a config the user can fix: one line at the CLI, as in the inline env
                raise EnvConfigError(message)
            raise (ValueError if name == "ValueError" else RuntimeError)(
                f"in a sim worker: {name}: {message}"
            )
        return payload

    def _scatter(self, command: str, items: list | np.ndarray) -> list:
        """Run ``command`` on every group of envs (the inline one, or each worker's) with its share of
        ``items``; one batched result per group."""
        if self.backend == "inline":
            run = reset_slots if command == "reset" else play_chunks
            return [run(self._slots, items)]
        start, sent_at = 0, time.perf_counter()
        for conn, count in zip(self._conns, self._counts):
            conn.send((command, items[start : start + count]))
            start += count
        answers = [self._receive(conn) for conn in self._conns]
        self._last_wait_s = time.perf_counter() - sent_at
        return answers

    # -- the batched contract -------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, seeds: list[int | None] | None = None
    ) -> tuple[dict[str, Any], dict]:
        """Reset every env; env i gets ``seed + i`` (or ``seeds[i]``), so resets are reproducible."""
        if seeds is None:
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        elif len(seeds) != self.num_envs:
            raise ValueError(f"seeds must have one entry per env ({self.num_envs}), got {len(seeds)}")
        return concat_obs(self._scatter("reset", list(seeds))), {}

    def step(self, actions: np.ndarray) -> ChunkResult:
        """One step for every env: ``actions`` is ``[N, action_dim]``."""
        actions = np.asarray(actions)
        if actions.ndim != 2:
            raise ContractError(
                f"actions expected [{self.num_envs}, {self.spec.action.dim}], got {list(actions.shape)}"
            )
        return self.chunk_step(actions[:, None, :])

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        """Play ``[N, chunk, action_dim]`` action chunks, auto-resetting finished envs."""
        actions = np.asarray(actions)
        expected = (self.num_envs, None, self.spec.action.dim)
        if actions.ndim != 3 or actions.shape[0] != self.num_envs or actions.shape[2] != expected[2]:
            raise ContractError(
                f"actions expected [{self.num_envs}, chunk, {self.spec.action.dim}], "
                f"got {list(actions.shape)}"
            )
        parts = self._scatter("chunk", actions)
        return parts[0] if len(parts) == 1 else ChunkResult.concatenate(parts)

    stack_obs = staticmethod(stack_obs)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.backend == "inline":
            for slot in self._slots:
                slot.env.close()
            return
        for conn in self._conns:
            try:
                conn.send(("close", None))
                conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()

    def __enter__(self) -> SimVectorEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def make_vector(
    env_id: str,
    num_envs: int,
    *,
    backend: str = "inline",
    num_workers: int | None = None,
    python: str = "",
    pin_workers: bool | None = None,
    **config: Any,
) -> VectorEnv:
    """Build a :class:`SimVectorEnv` of ``num_envs`` copies of one env. ``python``: the interpreter the
    subprocess workers run (a suite's own venv, e.g. ``.venv-metaworld/bin/python``); ``pin_workers``:
    see :class:`SimVectorEnv`. A batched suite
    (IsaacLab, a world model) is its own vector env: built directly, in this process."""
    entry = None
    if not python:  # another interpreter's workers check the id themselves (its modules may not import here)
        entry = env_entry(env_id, config.get("module", ""))
    elif env_id in ENVS:
        entry = ENVS[env_id]
    if entry is not None and entry.batched:
        if python:
            raise ValueError(
                f"{env_id} steps in this process (batched on its device): env.python does not apply"
            )
        return make_suite_env(env_id, load_entry_point(entry.vector_env), num_envs=num_envs, **config)
    return SimVectorEnv(
        env_id,
        num_envs,
        backend=backend,
        num_workers=num_workers,
        env_config=config,
        python=python,
        pin_workers=pin_workers,
    )
