"""``cluster.schedule=dynamic``: the re-plan rule on its own, and a run on a real local Ray whose
schedule changes mid-run while every trajectory stays as on-policy as the config allows."""

from __future__ import annotations

import json

import pytest

from trainer.configs import ConfigError, load_config
from trainer.distributed.scheduler import DynamicScheduler, Schedule, replan
from trainer.runner import Runner

from .test_distributed import TINY


def test_the_bottleneck_role_gets_the_cores():
    actor_bound = replan(
        {"env": 0.1, "rollout": 0.1, "actor": 1.8}, num_envs=8, pool=4, cores=[0, 1, 2, 3], total=4
    )
    env_bound = replan(
        {"env": 1.8, "rollout": 0.1, "actor": 0.1}, num_envs=8, pool=4, cores=[0, 1, 2, 3], total=4
    )
    assert len(actor_bound.cores["actor"]) > len(env_bound.cores["actor"])
    assert len(env_bound.cores["env"]) > len(actor_bound.cores["env"])
    assert actor_bound.threads["actor"] > env_bound.threads["actor"]
    # a cheap env needs no pipeline; a costly one runs a stage more than the cores it holds
    assert actor_bound.stages == 1 and env_bound.stages == 4


def test_stages_divide_the_envs_and_every_role_keeps_a_core():
    schedule = replan({"env": 5.0, "rollout": 0.0, "actor": 0.0}, num_envs=6, pool=5, cores=[0, 1], total=2)
    assert 6 % schedule.stages == 0 and schedule.stages <= 5
    assert all(schedule.cores[role] for role in ("env", "rollout", "actor"))
    unpinned = replan({"env": 1.0, "rollout": 1.0, "actor": 1.0}, num_envs=4, pool=2, cores=None, total=2)
    assert unpinned.cores is None and unpinned.stages == 2


def test_the_scheduler_waits_for_a_full_window_and_proposes_only_changes():
    scheduler = DynamicScheduler(every=2, num_envs=4, pool=2, cores=[0, 1], total=2)
    start = Schedule(
        2, {"env": (0, 1), "rollout": (0, 1), "actor": (0, 1)}, {"env": 1, "rollout": 1, "actor": 2}
    )
    scheduler.observe({"env": 0.0, "rollout": 0.0}, None)  # the first call only sets the baseline
    scheduler.observe({"env": 1.0, "rollout": 0.1}, 0.1)
    assert scheduler.propose(start) is None  # one sample of two
    scheduler.observe({"env": 2.0, "rollout": 0.2}, 0.1)
    proposal = scheduler.propose(start)
    assert proposal is not None and proposal.cores["env"] == (0, 1) and scheduler.changes == 1
    for total in (3.0, 4.0):  # the same load again: nothing to change
        scheduler.observe({"env": total, "rollout": total / 10}, 0.1)
    assert scheduler.propose(proposal) is None and scheduler.changes == 1


@pytest.mark.slow
@pytest.mark.parametrize("lag", [0, 1])
def test_a_dynamic_run_replans_and_stays_on_policy(tmp_path, local_ray, lag):
    out = tmp_path / f"lag{lag}"
    config = load_config("ppo_reach", [
        *TINY, "cluster.placement=hybrid", "cluster.schedule=dynamic", "cluster.replan_every=1",
        f"cluster.policy_lag={lag}", "run.total_env_steps=240", f"run.output_dir={out}",
    ])  # fmt: skip
    Runner(config).run()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert rows[-1]["train/schedule_changes"] >= 1  # hybrid starts with every role on every core
    lags = [row["train/policy_lag"] for row in rows if "train/policy_lag" in row]
    assert lags and max(lags) <= lag
    assert all(4 % row["train/env_stages"] == 0 for row in rows)


def test_a_dynamic_schedule_needs_pipelined_on_policy_workers(tmp_path, local_ray):
    with pytest.raises(ConfigError, match=r"cluster\.schedule=dynamic re-plans pipelined Ray workers"):
        load_config("ppo_reach", ["cluster.placement=collocated", "cluster.schedule=dynamic"])
    base = [o for o in TINY if not o.startswith("algo.")]
    config = load_config("ppo_reach", [*base, f"run.output_dir={tmp_path}", "cluster.placement=hybrid",
                                       "cluster.schedule=dynamic", "algorithm=sac", "policy.head=tanh_gaussian",
                                       "policy.value_head=false"])  # fmt: skip
    with pytest.raises(ConfigError, match="re-plans on-policy runs"):
        Runner(config).run()
