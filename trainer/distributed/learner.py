"""The off-policy learner: SAC or RLPD training in a background thread on a replay buffer that the
rollout keeps filling (a threaded Ray actor; :mod:`trainer.distributed.off_policy` drives it).

- ``add`` stores one stage's vector step. Once learning has started, each env step owes
  ``utd_ratio`` gradient updates, exactly as in-process.
- A training thread pays that debt as fast as it can while collection goes on.
- ``drain`` (end of an iteration) waits until the debt is paid, so the update-to-data ratio is the
  configured one; the wait is the time the learner lagged behind the envs.
- Weights are versioned by updates made. A transition's lag is the learner's version when it
  arrived minus the version of the weights that chose its action.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from trainer.algorithms.sac import mean_stats
from trainer.devices import to_cpu, worker_device
from trainer.distributed.workers import Decision, Stopwatch, Worker, build_algorithm, settle_threads


class OffPolicyLearner(Worker):
    """Owns the algorithm (critics, optimisers, replay and demo buffers) and its training thread."""

    def __init__(
        self,
        spec: dict,
        policy_config: dict,
        algorithm: str,
        algo_config: dict,
        seed: int,
        cpus: float = 1.0,
        cores=None,
    ) -> None:
        settle_threads(cpus, cores)
        self.device = worker_device()
        self.algorithm = build_algorithm(spec, policy_config, algorithm, algo_config, seed, self.device)
        self.version = 0
        self.clock = Stopwatch()
        self._lock = threading.Condition()
        self._episode_rows: dict[tuple, list[list[int]]] = {}  # (iteration seed, stage) -> rows per env
        self._stats: list[dict[str, float]] = []
        self._lags: list[int] = []
        self._failure: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._train, name="learner", daemon=True)
        self._thread.start()

    def prepare(self, env_id: str, num_envs: int, env_kwargs: dict) -> None:
        """Before the first iteration: RLPD plays its scripted demos here, in the learner's process."""
        import sim_envs

        venv = sim_envs.make_vector(env_id, num_envs, backend="inline", **env_kwargs)
        try:
            with self._lock:
                self.algorithm.before_iteration(venv, 0)
        finally:
            venv.close()

    # -- data in -----------------------------------------------------------------------------------
    def add(self, stream: tuple, previous, decision: Decision, result) -> tuple[int, list]:
        """Store the transitions of one stage's step; returns (env steps played, finished episodes).

        ``stream`` names the stage's run of episodes (iteration seed, stage), so that an aborted
        episode's rows can be found again; ``previous`` is the reset observation or the last step.
        """
        obs = previous if isinstance(previous, dict) else previous.obs
        with self._lock:
            algo = self.algorithm
            if algo.env_steps < algo.cfg.learning_starts:
                algo.policy.update_normalizers(obs)  # as in-process: statistics settle during warm-up
            rows = self._episode_rows.setdefault(stream, [[] for _ in range(len(result.rewards))])
            played = algo.observe(obs, decision.unit_actions, result, rows)
            self._lags.append(self.version - decision.version)
            self._lock.notify_all()
        return played, result.finished

    # -- training ----------------------------------------------------------------------------------
    def _train(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._closing or self.algorithm.pending_updates >= 1.0)
                if self._closing:
                    return
                try:
                    with self.clock:
                        self._stats.append(self.algorithm.update())
                except BaseException as exc:  # reported by the next drain, never silently lost
                    self._failure = exc
                    self._lock.notify_all()
                    return
                self.algorithm.pending_updates -= 1.0
                self.version += 1
                self._lock.notify_all()
            time.sleep(0)  # let a waiting ``add`` take the lock between updates

    def settle(self, timeout_s: float = 3600.0) -> None:
        """Wait until every owed update is made."""
        with self._lock:
            self._wait_for_updates(timeout_s)

    def _wait_for_updates(self, timeout_s: float) -> None:
        paid = self._lock.wait_for(
            lambda: self._failure is not None or self.algorithm.pending_updates < 1.0, timeout_s
        )
        if self._failure is not None:
            raise RuntimeError(f"the learner's training thread failed: {self._failure!r}")
        if not paid:
            raise TimeoutError(f"the learner still owed updates after {timeout_s:.0f} s")

    def drain(self, timeout_s: float = 3600.0) -> dict[str, float]:
        """Wait until every owed update is made; the iteration's metrics."""
        with self._lock:
            self._wait_for_updates(timeout_s)
            metrics = {**mean_stats(self._stats), **self.algorithm.buffer_metrics()}
            lags = self._lags or [0]
            metrics["policy_lag"] = float(sum(lags) / len(lags))
            metrics["updates"] = float(self.version)
            metrics["stored_env_steps"] = float(self.algorithm.env_steps)
            self._stats, self._lags, self._episode_rows = [], [], {}
        return metrics

    # -- weights and state -------------------------------------------------------------------------
    def weights(self) -> tuple[dict, int]:
        """A consistent copy of the policy's weights (the training thread keeps changing them)."""
        with self._lock:
            return to_cpu(self.algorithm.policy.state_dict()), self.version

    def state(self) -> dict:
        with self._lock:  # a copy: Ray pickles it after the lock is released
            return to_cpu(
                {
                    "policy": self.algorithm.policy.state_dict(),
                    "algorithm": self.algorithm.state_dict(),
                    "version": self.version,
                }
            )

    def load_state(self, state: dict) -> None:
        with self._lock:
            self.algorithm.policy.load_state_dict(state["policy"])
            self.algorithm.load_state_dict(state["algorithm"])
            self.version = state["version"]

    def save_buffers(self, directory: str) -> None:
        with self._lock:
            self.algorithm.save_buffers(Path(directory))

    def load_buffers(self, directory: str) -> None:
        with self._lock:
            self.algorithm.load_buffers(Path(directory))

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._thread.join(timeout=30)
