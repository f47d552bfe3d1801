"""On-policy RL (PPO, GRPO) on Ray workers: K env stages pipelined against one rollout worker,
an actor that updates.

One iteration, read top to bottom:

1. Every stage resets its envs (env ``i`` of the run from ``seed + i``, as in-process; GRPO gives
   a group of envs one shared seed, and a group may span stages).
2. For each decision ``t`` and stage ``k`` the loop submits ``rollout.act(previous_k)`` and
   ``env_k.step(that act)``. Ray runs each call as soon as its input exists, so while the rollout
   worker infers for stage ``k`` the envs of the other stages step: the pipeline.
3. The actor gathers the decisions into one :class:`~trainer.algorithms.common.OnPolicyBatch`
   (``ActorWorker.ingest``): the calls' results go to it by reference, worker to worker through
   Ray's object store, and the driver receives only the iteration's counts and episode summaries.
   (``cluster.data_plane=driver``: the driver fetches every result and builds the batch itself.)
4. The actor updates on it; its new weights go to the rollout worker by reference too, and reach
   the driver's copy of the policy only when it is needed (evaluation, checkpoints:
   :meth:`RayOnPolicy.sync_policy`). With ``policy_lag=1`` the update runs while the next iteration collects
   with the previous weights; the new weights reach the rollout worker after that collection's
   calls, so the lag is exactly one version and is reported as ``train/policy_lag``.

Collocated with ``cluster.offload``: the roles take turns on one device, and the one whose turn it
is not waits in host memory: the rollout's model during the update, the actor's model and
optimiser state during collection (``train/offload_s`` is the time spent moving them).
"""

from __future__ import annotations

import logging
import time

import ray
from ray.exceptions import RayActorError, RayTaskError

from trainer.algorithms.common import IterationResult
from trainer.distributed.payload import DriverLedger
from trainer.distributed.placement import PlacementPlan
from trainer.distributed.worker_group import WorkerGroup
from trainer.distributed.workers import ActorWorker, build_batch

log = logging.getLogger(__name__)


class RayOnPolicy(WorkerGroup):
    """Env, rollout and actor workers for one PPO/GRPO run, placed by ``plan``.

    It is both the run's "vector env" (the envs live in its workers; ``close`` releases them) and
    its algorithm (``iterate``, ``state_dict``): the runner drives it like in-process PPO.
    """

    def __init__(self, plan: PlacementPlan, train_config, policy, algo_config) -> None:
        from trainer.algorithms.registry import algorithm_class

        # GRPO's shared group seeds (checked here, at start); PPO: env i from seed + i
        self._reset_seeds = getattr(algorithm_class(train_config.algorithm), "reset_seeds", None)
        self.algo_config = algo_config
        if self._reset_seeds is not None:
            self._reset_seeds(algo_config, 0, train_config.env.num_envs)
        super().__init__(plan, train_config, policy)
        self.cameras = policy.cameras
        self.data_plane = train_config.cluster.data_plane
        self.ledger = DriverLedger()  # bytes the driver fetched: train/driver_bytes
        self._start_learner(ActorWorker, train_config, algo_config)
        if plan.offload:
            ray.get(self.actor.offload.remote())  # collection goes first
        self._pending = None  # the update in flight: (ref of (metrics, weights, version))
        self._flushed: dict = {}  # metrics of an update landed by flush(), not yet reported
        self._sync_rollout()
        self.scheduler = self.schedule = None
        if train_config.cluster.schedule == "dynamic":
            self._start_scheduler(train_config.cluster)

    def _start_scheduler(self, cluster) -> None:
        from trainer.distributed.scheduler import DynamicScheduler, Schedule

        if self.plan.mode == "collocated":  # auto may choose it: its roles take turns, nothing to move
            log.info("cluster.schedule=dynamic: collocated roles take turns on every core; schedule kept")
            return
        cores = sorted({c for k in range(self.stages) for c in self.plan.cores("env", k) or ()}
                       | set(self.plan.cores("rollout") or ()) | set(self.plan.cores("actor") or ())) or None  # fmt: skip
        total = len(cores) if cores else max(1, round(sum(b.get("CPU", 0.0) for b in self.plan.bundles)))
        self.scheduler = DynamicScheduler(cluster.replan_every, self.num_envs, self.stages, cores, total)
        placed = {role: self.plan.cores(role) for role in ("env", "rollout", "actor")} if cores else None
        threads = {
            "env": 1,
            "rollout": 1,
            "actor": max(1, len(self.plan.cores("actor") or ()) or round(self._cpus("actor"))),
        }
        self.schedule = Schedule(self.stages, placed, threads)

    def _replan(self, result: IterationResult) -> None:
        """``cluster.schedule=dynamic``: measure this iteration, and apply a new schedule if one is due."""
        busy = self.busy_cpu_seconds()
        self.scheduler.observe(busy, result.metrics.get("update_cpu_s"))
        proposal = self.scheduler.propose(self.schedule)
        if self.scheduler.demand:
            log.debug("dynamic schedule demand %s", self.scheduler.demand)
        if proposal is not None:
            print(f"dynamic schedule: {proposal.describe()}", flush=True)
            self.apply_schedule(proposal)
        result.metrics["env_stages"] = float(self.stages)
        result.metrics["schedule_changes"] = float(self.scheduler.changes)

    # -- one iteration --------------------------------------------------------------------------
    def iterate(self, venv, seed: int) -> IterationResult:
        """One iteration; ``venv`` is ignored (it is this object, as the runner sees it)."""
        for attempt in range(1 + self.max_retries):
            try:
                result = self._iterate(seed)
                if self.scheduler is not None:
                    self._replan(result)
                return result
            except (RayActorError, RayTaskError) as exc:
                if attempt == self.max_retries:
                    raise RuntimeError(
                        f"a Ray worker kept failing ({type(exc).__name__}); gave up after {attempt + 1} tries"
                    ) from exc
                log.warning("a worker died mid-iteration (%s); Ray restarts it and the iteration is retried",
                            type(exc).__name__)  # fmt: skip
                self._pending = None  # an update lost with its worker is not waited for
                self._sync_rollout()  # a restarted rollout worker starts from random weights
                if self.schedule is not None:  # and a restarted stage from its first plan
                    self.apply_schedule(self.schedule, force=True)
        raise AssertionError("unreachable")

    def _iterate(self, seed: int) -> IterationResult:
        tick = time.perf_counter()
        stages = range(self.stages)
        previous = [
            env.reset.remote(seed + k * self.envs_per_stage, self.stage_seeds(seed, k))
            for k, env in zip(stages, self.envs)
        ]
        first = list(previous)
        moves = [self.rollout.onload.remote()] if self.plan.offload else []  # runs before the acts
        acts: list[list] = [[] for _ in stages]
        steps: list[list] = [[] for _ in stages]
        for _ in range(self.decisions):
            for k in stages:
                act = self.rollout.act.remote(previous[k])
                previous[k] = self.envs[k].step.remote(act)
                acts[k].append(act)
                steps[k].append(previous[k])
        finals = [self.rollout.finish.remote(previous[k]) for k in stages]
        update_metrics, self._flushed = self._flushed, {}
        if self._pending is not None:  # publish the previous update after this collection's calls
            update_metrics = self._publish(self._pending)
            self._pending = None
        refs = [ref for k in stages for ref in (first[k], *acts[k], *steps[k], finals[k])]
        layout = (self.envs_per_stage, self.cameras, self.decisions)
        if self.data_plane == "workers":  # the results go to the actor, which builds the batch
            ingested = self.actor.ingest.remote(*layout, *refs)
        else:  # the old path: every result through here, and the batch out again
            batch, summary = build_batch(*layout, *self.ledger.get(refs))
            collect_s = time.perf_counter() - tick
        if self.plan.offload:  # the rollout's model leaves the device before the actor's arrives
            moves.append(self.rollout.offload.remote())
            ray.get(moves[-1])
            moves.append(self.actor.onload.remote())
        if self.data_plane == "workers":
            # The actor runs its calls in order: the update is queued behind the ingest at once, and
            # the driver reads the ingest's summary while it runs (no round trip between the two).
            update = self.actor.update_ingested.options(num_returns=2).remote()
            summary = self.ledger.get(ingested)
            collect_s = time.perf_counter() - tick
        else:
            update = self.actor.update.remote(batch, summary["min_version"])
        if self.plan.offload:
            moves.append(self.actor.offload.remote())
        if self.plan.policy_lag == 0:
            update_metrics = self._publish(update)
        else:
            self._pending = update
        update_metrics["collect_s"] = collect_s
        if moves:
            update_metrics["offload_s"] = float(sum(ray.get(moves)))
        update_metrics["trajectory_bytes"] = float(summary["trajectory_bytes"])
        update_metrics["driver_bytes"] = float(self.ledger.take())
        return IterationResult(summary["env_steps"], summary["finished"], update_metrics)

    def stage_seeds(self, seed: int, stage: int) -> list[int] | None:
        if self._reset_seeds is None:
            return None
        seeds = self._reset_seeds(self.algo_config, seed, self.num_envs)
        return seeds[stage * self.envs_per_stage : (stage + 1) * self.envs_per_stage]

    def _publish(self, update) -> dict:
        """The update's weights to the rollout worker: by reference (``workers``), or through here."""
        if isinstance(update, list):  # update_ingested's two returns: (metrics, version), weights
            info, weights = update
            metrics, version = self.ledger.get(info)
            ray.get(self.rollout.set_weights.remote(weights, version))
            self._driver_weights = weights
            return metrics
        metrics, weights, version = self.ledger.get(update)
        ray.get(self.rollout.set_weights.remote(weights, version))
        self.policy.load_state_dict(weights)
        return metrics

    def state_dict(self) -> dict:
        self.flush()
        self.sync_policy()
        return ray.get(self.actor.state.remote())

    def load_state_dict(self, state: dict) -> None:
        ray.get(self.actor.load_state.remote({**state, "policy": self.policy.state_dict()}))
        self._sync_rollout()

    def flush(self) -> None:
        """Land the update in flight (before a checkpoint or the end)."""
        if self._pending is not None:
            self._flushed = self._publish(self._pending)  # reported with the next iteration
            self._pending = None
