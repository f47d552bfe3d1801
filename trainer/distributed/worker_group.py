"""What every Ray training loop here shares: one placement group, the env stages, the rollout worker,
and the learning worker (an on-policy actor or the off-policy learner) in its bundle."""

from __future__ import annotations

import logging
from dataclasses import asdict

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from trainer.distributed.placement import PlacementPlan
from trainer.distributed.workers import EnvWorker, RolloutWorker

log = logging.getLogger(__name__)


def ray_options(plan: PlacementPlan, group, role: str, stage: int = 0) -> dict:
    share = plan.share(role, stage)
    return {
        # Idle OpenMP threads sleep instead of spinning: workers that share cores must not burn them.
        "runtime_env": {"env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}},
        "num_cpus": share.get("CPU", 0.0),
        "num_gpus": share.get("GPU", 0.0),
        "resources": {k: v for k, v in share.items() if k not in ("CPU", "GPU")},
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=plan.bundle_of(role, stage)
        ),
    }


class WorkerGroup:
    """Reserves the plan's bundles and starts the env stages and the rollout worker.

    Subclasses start the learning worker with :meth:`_start_learner` (as ``self.actor``) and write
    the loop. The driver's ``policy`` is kept in step with the learner's weights, for evaluation and
    checkpoints.
    """

    def __init__(self, plan: PlacementPlan, train_config, policy) -> None:
        from ray.util.placement_group import placement_group

        env_cfg = train_config.env
        if env_cfg.num_envs % plan.pipeline_stages:
            raise ValueError(
                f"env.num_envs ({env_cfg.num_envs}) must split evenly into "
                f"cluster.pipeline_stages ({plan.pipeline_stages})"
            )
        self.plan, self.policy = plan, policy
        self.max_retries = train_config.cluster.max_retries
        self.num_envs = env_cfg.num_envs
        self.stages = plan.pipeline_stages  # env stages in use (a dynamic schedule may use fewer)
        self.envs_per_stage = env_cfg.num_envs // plan.pipeline_stages
        self.decisions = -(-policy.spec.max_episode_steps // policy.chunk_size)
        self.group = placement_group([dict(b) for b in plan.bundles], strategy="PACK")
        try:
            ray.get(self.group.ready(), timeout=60)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"Ray could not reserve the bundles {plan.bundles} within 60 s") from None
        self._spec, self._policy_cfg = policy.spec.to_dict(), policy.config_dict()
        self._env_args = (env_cfg.id, self.envs_per_stage, dict(env_cfg.kwargs))
        # Env and rollout workers hold no learned state: Ray restarts a dead one and the loop retries.
        self._env_class = ray.remote(max_restarts=-1, max_task_retries=0)(EnvWorker)
        self.envs = [self._new_env(stage) for stage in range(plan.pipeline_stages)]
        self.rollout = (
            ray.remote(max_restarts=-1, max_task_retries=0)(RolloutWorker)
            .options(**ray_options(plan, self.group, "rollout"))
            .remote(self._spec, self._policy_cfg, self._cpus("rollout"), plan.cores("rollout"))
        )
        self.actor = None
        self._driver_weights = None  # the newest published weights' ref, fetched by sync_policy

    def _cpus(self, role: str) -> float:
        return self.plan.share(role).get("CPU", 1.0)

    def _new_env(self, stage: int):
        return self._env_class.options(**ray_options(self.plan, self.group, "env", stage)).remote(
            *self._env_args, self.plan.cores("env", stage)
        )

    def _start_learner(self, worker_class: type, train_config, algo_config, **options):
        """The learning worker (``actor`` role): not restartable, it holds the run's state."""
        self.actor = (
            ray.remote(worker_class)
            .options(**options, **ray_options(self.plan, self.group, "actor"))
            .remote(
                self._spec,
                self._policy_cfg,
                train_config.algorithm,
                asdict(algo_config),
                train_config.run.seed,
                self._cpus("actor"),
                self.plan.cores("actor"),
            )
        )
        self.started_on = self.worker_nodes()  # the run's ray_workers.json
        log.info(
            "workers on Ray nodes: %s", {role: [n[:8] for n in ids] for role, ids in self.started_on.items()}
        )

    def worker_nodes(self) -> dict[str, list[str]]:
        """Role -> the Ray node id of each of its workers (env: one per stage)."""
        return {
            "env": ray.get([env.node.remote() for env in self.envs]),
            "rollout": [ray.get(self.rollout.node.remote())],
            "actor": [ray.get(self.actor.node.remote())],
        }

    def _sync_rollout(self) -> None:
        """The learner's weights to the rollout worker by reference (one object, never through here)."""
        weights, version = self.actor.weights.options(num_returns=2).remote()
        ray.get(self.rollout.set_weights.remote(weights, version))
        self._driver_weights = weights
        self.sync_policy()

    def sync_policy(self) -> None:
        """Bring the driver's copy of the policy to the newest published weights (for evaluation and
        checkpoints; the loop itself never needs it)."""
        if self._driver_weights is not None:
            self.policy.load_state_dict(ray.get(self._driver_weights))
            self._driver_weights = None

    def reconfigure_envs(self, env_kwargs: dict) -> None:
        """Rebuild every env stage with new env kwargs between iterations (e.g. a curriculum that
        makes the env costlier as the run goes)."""
        self._env_args = (self._env_args[0], self._env_args[1], dict(env_kwargs))
        ray.get(
            [env.resize.remote(self.envs_per_stage, dict(env_kwargs)) for env in self.envs[: self.stages]]
        )
        self._env_sizes = {k: self.envs_per_stage for k in range(self.stages)}

    def apply_schedule(self, schedule, force: bool = False) -> None:
        """A :class:`~trainer.distributed.scheduler.Schedule`, between iterations: resize the env
        stages it uses, and move every role to its cores and thread count. The actor may still be
        updating: its call is queued behind the update and not waited for. ``force``: after a worker
        restarted (from its first plan), rebuild every stage."""
        per_stage = self.num_envs // schedule.stages
        sizes = (
            {} if force else getattr(self, "_env_sizes", {k: self.envs_per_stage for k in range(self.stages)})
        )
        kwargs = self._env_args[2]
        calls = [self.envs[k].resize.remote(per_stage, kwargs) for k in range(schedule.stages)
                 if sizes.get(k) != per_stage]  # fmt: skip
        self._env_sizes = {**sizes, **{k: per_stage for k in range(schedule.stages)}}
        self.stages, self.envs_per_stage = schedule.stages, per_stage
        cores = schedule.cores or {}
        calls += [env.set_cores.remote(cores.get("env"), 1) for env in self.envs[: schedule.stages]]
        calls.append(self.rollout.set_cores.remote(cores.get("rollout"), schedule.threads["rollout"]))
        self.actor.set_cores.remote(cores.get("actor"), schedule.threads["actor"])
        ray.get(calls)
        self.schedule = schedule

    def busy_cpu_seconds(self) -> dict[str, float]:
        """CPU seconds spent working so far by the env stages (summed) and the rollout worker; the
        actor is not asked (it may be updating), its seconds come with each update's metrics."""
        envs = ray.get([env.busy.remote() for env in self.envs])
        return {"env": sum(e["cpu_s"] for e in envs), "rollout": ray.get(self.rollout.busy.remote())["cpu_s"]}

    def busy_seconds(self) -> dict[str, dict[str, float]]:
        """Per role, the wall and CPU seconds spent inside work calls so far (env: summed over stages)."""
        envs = ray.get([env.busy.remote() for env in self.envs])
        return {
            "env": {key: sum(e[key] for e in envs) for key in envs[0]},
            "rollout": ray.get(self.rollout.busy.remote()),
            "actor": ray.get(self.actor.busy.remote()),
        }

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for handle in [*self.envs, self.rollout, self.actor]:
            if handle is not None:
                ray.kill(handle)
        remove_placement_group(self.group)
