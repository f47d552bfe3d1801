"""From a ``cluster`` config to Ray resource bundles and the role -> bundle map.

Nothing here schedules: the plan becomes one Ray placement group, and each worker is created with
a ``PlacementGroupSchedulingStrategy`` for its bundle and an even share of that bundle's CPUs (and
GPUs). CPU-only and GPU plans go through the same code; a GPU plan just names GPUs in a bundle.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from trainer.configs.errors import ConfigError
from trainer.distributed.config import PLACEMENTS, ROLES, ClusterConfig


@dataclass(frozen=True)
class PlacementPlan:
    """Resolved placement: bundles, which bundle each role uses, and how the loop overlaps work."""

    mode: str
    bundles: tuple[dict[str, float], ...]
    role_bundle: dict[str, int]
    pipeline_stages: int
    policy_lag: int
    cpu_sets: tuple[tuple[int, ...], ...] | None = None  # cores per bundle, when pinned
    env_bundles: tuple[int, ...] = ()  # env stages spread round robin over these, when several
    offload: bool = False  # collocated: the idle role's model waits in host memory

    def bundle_of(self, role: str, stage: int = 0) -> int:
        if role == "env" and self.env_bundles:
            return self.env_bundles[stage % len(self.env_bundles)]
        return self.role_bundle[role]

    def cores(self, role: str, stage: int = 0) -> tuple[int, ...] | None:
        return None if self.cpu_sets is None else self.cpu_sets[self.bundle_of(role, stage)]

    def workers_in(self, bundle: int) -> int:
        """Ray actors placed in a bundle: each env stage counts once."""
        envs = sum(self.bundle_of("env", k) == bundle for k in range(self.pipeline_stages))
        return envs + sum(b == bundle for role, b in self.role_bundle.items() if role != "env")

    def share(self, role: str, stage: int = 0) -> dict[str, float]:
        """The resources one worker of ``role`` asks for: an even share of its bundle."""
        bundle = self.bundle_of(role, stage)
        count = self.workers_in(bundle)
        return {key: value / count for key, value in self.bundles[bundle].items()}

    def demand(self) -> dict[str, float]:
        total: Counter = Counter()
        for bundle in self.bundles:
            total.update(bundle)
        return dict(total)


def cpu_sets(bundles: tuple[dict[str, float], ...], cores: list[int]) -> tuple[tuple[int, ...], ...]:
    """Lay the bundles' CPU amounts side by side over ``cores``: bundle ``b`` gets the cores its
    interval ``[start, start + CPU)`` touches. Ray only counts CPUs; this makes a CPU bundle real."""
    sets, start = [], 0.0
    for bundle in bundles:
        amount = bundle.get("CPU", 0.0)
        first, last = int(start), max(int(start), int(-(-(start + amount - 1e-9) // 1)) - 1)
        sets.append(tuple(cores[i % len(cores)] for i in range(first, last + 1)))
        start += amount
    return tuple(sets)


def plan_placement(
    config: ClusterConfig,
    available: dict[str, float],
    mode: str | None = None,
    cores: list[int] | None = None,
) -> PlacementPlan:
    """The plan for ``mode`` (default ``config.placement``) on a cluster with ``available`` resources.

    ``cores`` (this machine's, on a one-node cluster) turns on CPU pinning per bundle.
    """
    mode = mode or config.placement
    if mode not in PLACEMENTS or mode in ("sequential", "auto"):
        raise ConfigError(
            f"cluster.placement {mode!r} has no Ray plan; expected collocated, disaggregated or hybrid"
        )
    if config.pipeline_stages < 1:
        raise ConfigError(f"cluster.pipeline_stages must be >= 1, got {config.pipeline_stages}")
    if config.policy_lag not in (0, 1):
        raise ConfigError(f"cluster.policy_lag must be 0 or 1, got {config.policy_lag}")
    if config.sync_every < 1:
        raise ConfigError(f"cluster.sync_every must be >= 1, got {config.sync_every}")
    if config.offload and config.placement != "auto" and mode != "collocated":
        raise ConfigError(
            f"cluster.offload needs cluster.placement=collocated (got {mode}): only collocated roles "
            "take turns on the device, the other modes run them at the same time"
        )
    cpus = float(available.get("CPU", 0))
    if mode == "collocated":
        bundles = tuple(config.bundles[:1]) or ({"CPU": cpus},)
        plan = PlacementPlan(mode, bundles, {role: 0 for role in ROLES}, 1, 0, offload=config.offload)
    elif mode == "disaggregated":
        bundles = tuple(config.bundles) or ({"CPU": cpus / 3},) * 3
        if len(bundles) != 3:
            raise ConfigError(
                f"cluster.placement=disaggregated needs 3 bundles (env, rollout, actor), got {len(bundles)}"
            )
        plan = PlacementPlan(
            mode, bundles, dict(zip(ROLES, range(3))), config.pipeline_stages, config.policy_lag
        )
    else:
        # Default hybrid: every role shares the machine's CPUs as in collocated, but the env stages are
        # pipelined against inference and the update overlaps the next collection.
        bundles = tuple(config.bundles) or ({"CPU": cpus},)
        roles = dict(config.roles) or {role: 0 for role in ROLES}
        unknown = sorted(set(roles) - set(ROLES))
        if unknown:
            raise ConfigError(f"cluster.roles: unknown role {unknown[0]!r}; roles are {ROLES}")
        missing = sorted(set(ROLES) - set(roles))
        if missing:
            raise ConfigError(f"cluster.roles must place every role; {missing} has no bundle")
        env_bundles: tuple[int, ...] = ()
        if isinstance(roles["env"], (list, tuple)):
            env_bundles = tuple(roles["env"])
            if not env_bundles:
                raise ConfigError("cluster.roles.env lists no bundle")
            roles["env"] = env_bundles[0]
        for role, index in [*roles.items(), *(("env", b) for b in env_bundles)]:
            if not isinstance(index, int):
                raise ConfigError(
                    f"cluster.roles.{role}={index!r}: a bundle index (only env stages may list several)"
                )
            if not 0 <= index < len(bundles):
                raise ConfigError(f"cluster.roles.{role}={index}, but there are {len(bundles)} bundles")
        plan = PlacementPlan(
            mode, bundles, roles, config.pipeline_stages, config.policy_lag, env_bundles=env_bundles
        )
    for index, bundle in enumerate(plan.bundles):
        if not bundle or any(value <= 0 for value in bundle.values()):
            raise ConfigError(f"cluster bundle {index} {bundle} must ask for a positive amount of something")
    for resource, amount in plan.demand().items():
        have = float(available.get(resource, 0))
        if amount > have + 1e-9:
            raise ConfigError(
                f"cluster.placement={mode} needs {amount:g} {resource}, the Ray cluster has {have:g}"
            )
    if config.pin_cpus and cores:
        plan = replace(plan, cpu_sets=cpu_sets(plan.bundles, cores))
    return plan
