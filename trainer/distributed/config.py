"""``cluster``: where the worker roles run. Typed, checked at start, resolved into a placement plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLACEMENTS = ("sequential", "collocated", "disaggregated", "hybrid", "auto")
ROLES = ("env", "rollout", "actor")
DATA_PLANES = ("workers", "driver")
SCHEDULES = ("static", "dynamic")


@dataclass(frozen=True)
class ClusterConfig:
    """Placement of the env, rollout and actor roles.

    - ``sequential``: everything in this process, no Ray (the baseline, and the default).
    - ``collocated``: all roles share one resource bundle and take turns (no overlap); with
      ``offload`` the idle role's model waits in host memory.
    - ``disaggregated``: each role gets its own bundle; env stages are pipelined against inference,
      and the update overlaps the next collection (the rollout runs ``policy_lag`` versions behind).
    - ``hybrid``: any mapping of roles to bundles (``bundles`` + ``roles``), pipelined.
    - ``auto``: profile the three Ray modes for ``profile_iterations`` each and keep the fastest.
    """

    placement: str = "sequential"  # sequential, collocated, disaggregated, hybrid or auto (see above)
    ray_address: str = ""  # "": start a local Ray; "auto" or "host:port": join a running cluster
    num_cpus: int = 0  # a local Ray's CPUs (0: every core)
    pipeline_stages: int = 2  # env groups that step while inference runs on another
    policy_lag: int = 1  # pipelined modes: versions the rollout may trail the actor (0 or 1)
    sync_every: int = 4  # off-policy, pipelined: decisions between weight syncs to the rollout worker
    bundles: list[dict[str, float]] = field(default_factory=list)  # resource sets, e.g. [{CPU: 1}, {GPU: 1}]
    # hybrid: role -> bundle index; env may list several bundles (stage k on the k-th, round robin),
    # which is how env stages spread over several machines (a bundle never spans two nodes)
    roles: dict[str, Any] = field(default_factory=dict)
    profile_iterations: int = 2  # auto: timed iterations per candidate (after one warm-up)
    max_retries: int = 2  # an iteration whose worker died is retried this often
    pin_cpus: bool = True  # one-node clusters: pin each bundle's workers to its own cores
    # collocated on-policy: the phase that is not running keeps its model (and the actor its optimiser
    # state) in host memory, so each phase has the GPU's memory to itself
    offload: bool = False
    # on-policy: where an iteration's trajectories go. workers: env and rollout results reach the
    # actor by reference through Ray's object store, and the weights the rollout worker the same way
    # (the driver sees references and metrics); driver: every result comes back to the driver, which
    # builds the batch and sends it out again (the old path, kept to measure against)
    data_plane: str = "workers"
    # on-policy, pipelined placements: static keeps the plan for the whole run; dynamic re-plans the
    # env stages in use (up to pipeline_stages) and each role's cores and threads between iterations,
    # from the CPU seconds each role spent in the last replan_every iterations (logged at each change)
    schedule: str = "static"
    replan_every: int = 2  # dynamic: iterations measured before each re-plan

    def __post_init__(self) -> None:
        if self.data_plane not in DATA_PLANES:
            raise ValueError(f"cluster.data_plane must be one of {DATA_PLANES}, got {self.data_plane!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"cluster.placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"cluster.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.replan_every < 1:
            raise ValueError(f"cluster.replan_every must be >= 1, got {self.replan_every}")
        if self.schedule == "dynamic" and self.placement in ("sequential", "collocated"):
            raise ValueError(
                f"cluster.schedule=dynamic re-plans pipelined Ray workers; cluster.placement={self.placement} "
                "has none (use disaggregated, hybrid or auto)"
            )
