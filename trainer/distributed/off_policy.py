"""Off-policy RL (SAC, RLPD) on Ray workers: pipelined env stages and an asynchronous learner.

One iteration, read top to bottom:

1. Every stage resets its envs (env ``i`` of the run from ``seed + i``, as in-process).
2. For each decision ``t`` and stage ``k`` the loop submits ``rollout.explore(previous_k)``,
   ``env_k.step(that decision)`` and ``learner.add(the transition)``. Ray runs each call as soon as
   its inputs exist: the stages step while another stage infers, and the learner stores data.
3. Meanwhile the learner's training thread makes the updates the stored env steps owe
   (``utd_ratio`` per step). Every ``cluster.sync_every`` decisions the rollout worker loads the
   learner's newest weights (a chained call; the driver does not wait for it).
4. At the end the loop waits for the learner to pay its debt (``learner_wait_s``), so the UTD ratio
   is the configured one, and reports the mean policy lag, in updates.

With ``policy_lag=0`` (collocated placement) the phases take turns instead: after each decision the
learner makes its updates and the rollout worker gets its weights before the next decision: the
in-process algorithm's order of acting and learning (lag 0).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import ray
from ray.exceptions import RayActorError, RayTaskError

from protos.batch import EpisodeSummary
from trainer.algorithms.common import IterationResult
from trainer.configs.errors import ConfigError
from trainer.distributed.learner import OffPolicyLearner
from trainer.distributed.placement import PlacementPlan
from trainer.distributed.worker_group import WorkerGroup

log = logging.getLogger(__name__)


class RayOffPolicy(WorkerGroup):
    """Env, rollout and learner workers for one SAC/RLPD run, placed by ``plan`` (learner = actor role).

    Like :class:`~trainer.distributed.on_policy.RayOnPolicy` it plays both the runner's vector env
    and its algorithm; checkpoints include the learner's replay (and demo) buffers.
    """

    def __init__(self, plan: PlacementPlan, train_config, policy, algo_config) -> None:
        if plan.offload:
            raise ConfigError(
                f"cluster.offload is for on-policy algorithms; {train_config.algorithm}'s learner "
                "trains all the time, so its model never leaves the device"
            )
        super().__init__(plan, train_config, policy)
        self.algo_config = algo_config
        self.sync_every = train_config.cluster.sync_every
        self.env_steps = 0  # stored so far: exploration is uniform until algo.learning_starts
        self._prepared = False
        # Threaded: ``add`` and ``weights`` are served while the training thread runs.
        self._start_learner(OffPolicyLearner, train_config, algo_config, max_concurrency=4)
        self._sync_rollout()

    @property
    def learner(self):
        return self.actor

    # -- one iteration --------------------------------------------------------------------------
    def iterate(self, venv, seed: int) -> IterationResult:
        """One episode per env; ``venv`` is ignored (it is this object, as the runner sees it)."""
        if not self._prepared:  # after a resume's load_state_dict: RLPD skips demos it already has
            ray.get(self.learner.prepare.remote(*self._env_args))
            self._prepared = True
        for attempt in range(1 + self.max_retries):
            try:
                return self._iterate(seed)
            except (RayActorError, RayTaskError) as exc:
                if attempt == self.max_retries or not self._learner_alive():
                    raise RuntimeError(
                        f"a Ray worker kept failing ({type(exc).__name__}); gave up after {attempt + 1} tries"
                    ) from exc
                # Transitions stored before the failure stay: each one is a real step.
                log.warning("a worker died mid-iteration (%s); Ray restarts it and the iteration is retried",
                            type(exc).__name__)  # fmt: skip
                self._sync_rollout()  # a restarted rollout worker starts from random weights
        raise AssertionError("unreachable")

    def _iterate(self, seed: int) -> IterationResult:
        tick = time.perf_counter()
        stages = range(self.plan.pipeline_stages)
        previous = [env.reset.remote(seed + k * self.envs_per_stage) for k, env in zip(stages, self.envs)]
        adds, learner_wait = [], 0.0
        for t in range(self.decisions):
            for k in stages:
                steps_before = self.env_steps + (t * self.plan.pipeline_stages + k) * self.envs_per_stage
                decision = self.rollout.explore.remote(previous[k], steps_before < self.learning_starts)
                step = self.envs[k].step.remote(decision)
                adds.append((k, self.learner.add.remote((seed, k), previous[k], decision, step)))
                previous[k] = step
            if self.plan.policy_lag == 0:  # take turns: learn, then act with the new weights
                wait = time.perf_counter()
                ray.get([ref for _, ref in adds[-len(stages) :]])
                ray.get(self.learner.settle.remote())
                learner_wait += time.perf_counter() - wait
                ray.get(self.rollout.load_weights.remote(self.learner.weights.remote()))
            elif (t + 1) % self.sync_every == 0:
                self.rollout.load_weights.remote(self.learner.weights.remote())
        played, finished = 0, []
        for k, (steps, episodes) in zip((k for k, _ in adds), ray.get([ref for _, ref in adds])):
            played += steps
            offset = k * self.envs_per_stage
            finished.extend(
                EpisodeSummary(offset + e.env_index, e.episode_return, e.length, e.success) for e in episodes
            )
        collect_s = time.perf_counter() - tick
        wait = time.perf_counter()
        metrics = ray.get(self.learner.drain.remote())
        learner_wait += time.perf_counter() - wait
        self.env_steps = int(metrics.pop("stored_env_steps"))
        self._sync_rollout()
        metrics.update(collect_s=collect_s, learner_wait_s=learner_wait)
        return IterationResult(played, finished, metrics)

    def _learner_alive(self) -> bool:
        """The learner holds the run's state and is not restarted: once it is gone, retrying cannot help."""
        try:
            ray.get(self.learner.busy.remote(), timeout=30)
            return True
        except Exception:
            return False

    @property
    def learning_starts(self) -> int:
        return self.algo_config.learning_starts

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return ray.get(self.learner.state.remote())

    def load_state_dict(self, state: dict) -> None:
        ray.get(self.learner.load_state.remote({**state, "policy": self.policy.state_dict()}))
        self.env_steps = state["algorithm"]["env_steps"]
        self._sync_rollout()

    def save_buffers(self, directory: Path) -> None:
        ray.get(self.learner.save_buffers.remote(str(directory)))

    def load_buffers(self, directory: Path) -> None:
        ray.get(self.learner.load_buffers.remote(str(directory)))

    def flush(self) -> None:
        """Nothing is in flight between iterations (``drain`` ends each one)."""

    def close(self) -> None:
        try:
            ray.get(self.learner.close.remote(), timeout=30)
        except Exception as exc:  # a dead learner has nothing left to stop
            log.debug("learner close: %s", exc)
        super().close()
