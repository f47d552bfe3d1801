"""``cluster.schedule=dynamic``: between iterations, re-plan how many env stages run and which
cores each role gets, from the CPU seconds each role spent working in the last iterations.

The rule, in one line: every role gets a share of the cores in proportion to its measured demand
(at least a quarter core each), laid side by side over the cores as :func:`placement.cpu_sets`
lays bundles (the actor runs a thread on each core it touches); the env runs one stage more than the cores it holds (one steps while another waits
for inference), as far as ``num_envs`` divides. A re-plan only moves cores, threads and stage
sizes between iterations, when no trajectory is in flight; weights and their versions are not
touched, so the on-policy guarantee (``train/policy_lag`` at most ``cluster.policy_lag``) holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from trainer.distributed.config import ROLES
from trainer.distributed.placement import cpu_sets

log = logging.getLogger(__name__)
MIN_SHARE = 0.25  # cores: no role is starved to nothing by one noisy window


@dataclass(frozen=True)
class Schedule:
    """What a re-plan sets: active env stages, each role's cores (``None``: not pinned) and threads."""

    stages: int
    cores: dict[str, tuple[int, ...]] | None
    threads: dict[str, int]

    def describe(self) -> str:
        where = (
            ", ".join(f"{role} cores {list(self.cores[role])}" for role in ROLES)
            if self.cores
            else "unpinned"
        )
        return f"{self.stages} env stages, {where}, threads {self.threads}"


def replan(
    demand: dict[str, float], num_envs: int, pool: int, cores: list[int] | None, total: int
) -> Schedule:
    """The schedule for ``demand`` (per role, CPU seconds per iteration; env summed over its stages).

    ``pool``: env workers available as stages; ``cores``: this node's cores when pinning, else None;
    ``total``: the cores to share (``len(cores)`` when pinned).
    """
    floor = {role: max(demand.get(role, 0.0), 1e-6) for role in ROLES}
    whole = sum(floor.values())
    shares = {role: max(MIN_SHARE, total * floor[role] / whole) for role in ROLES}
    scale = total / sum(shares.values())
    shares = {role: share * scale for role, share in shares.items()}
    wanted = min(pool, round(shares["env"]) + 1)
    stages = max(d for d in range(1, wanted + 1) if num_envs % d == 0)
    threads = {"env": 1, "rollout": max(1, round(shares["rollout"])), "actor": max(1, round(shares["actor"]))}
    placed = None
    if cores:
        sets = cpu_sets(tuple({"CPU": shares[role]} for role in ROLES), cores)
        placed = dict(zip(ROLES, sets))
        threads["actor"] = len(placed["actor"])  # the update uses every core it touches
    return Schedule(stages, placed, threads)


class DynamicScheduler:
    """Collects each role's CPU seconds over ``every`` iterations, then proposes a schedule."""

    def __init__(self, every: int, num_envs: int, pool: int, cores: list[int] | None, total: int) -> None:
        self.every, self.num_envs, self.pool, self.cores, self.total = every, num_envs, pool, cores, total
        self.changes = 0
        self.demand: dict[str, float] = {}
        self._window: list[dict[str, float]] = []
        self._last: dict[str, float] | None = None

    def observe(self, busy_cpu: dict[str, float], actor_cpu_s: float | None) -> None:
        """One iteration: cumulative env and rollout CPU seconds, and the update's CPU seconds
        (from its metrics: the actor may still be updating, so it is not asked)."""
        if self._last is not None:
            sample = {role: busy_cpu[role] - self._last[role] for role in ("env", "rollout")}
            if actor_cpu_s is not None:
                sample["actor"] = actor_cpu_s
                self._window.append(sample)
        self._last = dict(busy_cpu)

    def propose(self, current: Schedule) -> Schedule | None:
        """A new schedule when the window is full and it differs from ``current``, else None."""
        if len(self._window) < self.every:
            return None
        demand = {role: sum(s[role] for s in self._window) / len(self._window) for role in ROLES}
        self._window.clear()
        self.demand = demand  # the last window's, for the log and benchmarks
        proposal = replan(demand, self.num_envs, self.pool, self.cores, self.total)
        if proposal == current:
            return None
        self.changes += 1
        log.info(
            "dynamic schedule: demand %s CPU s/iteration -> %s",
            {role: round(value, 3) for role, value in demand.items()},
            proposal.describe(),
        )
        return proposal
