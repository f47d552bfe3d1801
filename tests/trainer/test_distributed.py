"""PPO on a real local Ray cluster in every placement mode: metrics, worker death, bad configs.

The ``local_ray`` fixture (one Ray for the session) is in ``conftest.py``."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import ray

from trainer.configs import ConfigError, load_config
from trainer.runner import Runner

pytestmark = pytest.mark.slow
TINY = [
    "env.id=rlinf/FrankaReach-v0", "env.num_envs=4", "env.backend=inline",
    "env.kwargs={cameras: [], action_rotation: false, max_episode_steps: 10}", "policy.hidden_sizes=[32]",
    "run.eval_every=0", "run.final_eval_episodes=0", "run.checkpoint_every=2", "algo.update_epochs=2", "algo.num_minibatches=2",
]  # fmt: skip


def run(tmp_path: Path, placement: str, *overrides: str) -> list[dict]:
    config = load_config(
        "ppo_reach",
        [*TINY, f"cluster.placement={placement}", "run.total_env_steps=120", f"run.output_dir={tmp_path / placement}",
         *overrides],
    )  # fmt: skip
    Runner(config).run()
    lines = (tmp_path / placement / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_every_placement_trains_ppo_with_the_same_metrics_schema(tmp_path, local_ray):
    sequential = run(tmp_path, "sequential")
    # Collocated runs with offload here (plain collocated runs as an ``auto`` candidate below): on a
    # CPU the moves are no-ops, but the loop's turn-taking around them is the real one.
    for placement, extra in (("collocated", ["cluster.offload=true"]), ("disaggregated", []), ("hybrid", [])):
        rows = run(tmp_path, placement, *extra)
        assert len(rows) == 3 and rows[-1]["env_steps"] == 120
        offloaded = "train/offload_s" in rows[-1]
        assert offloaded == (placement == "collocated")
        ray_only = {"train/offload_s", "train/driver_bytes", "train/trajectory_bytes", "train/update_cpu_s"}
        assert set(rows[-1]) - ray_only == set(sequential[-1]), placement
        # The trajectories go worker to worker: the driver fetches counts and metrics only.
        assert rows[-1]["train/driver_bytes"] < 0.01 * rows[-1]["train/trajectory_bytes"], placement
        assert rows[-1]["train/policy_loss"] == rows[-1]["train/policy_loss"]  # a number, not NaN
        lags = [row["train/policy_lag"] for row in rows if "train/policy_lag" in row]
        # Pipelined modes collect with the previous weights while the actor updates: one version behind.
        assert max(lags) == (0.0 if placement == "collocated" else 1.0) and set(lags) <= {0.0, 1.0}, placement
        assert (tmp_path / placement / "checkpoints").is_dir()
        # Where each role's workers ran: on a one-node cluster, all on this node.
        workers = json.loads((tmp_path / placement / "ray_workers.json").read_text())
        assert set(workers) == {"env", "rollout", "actor"} and all(workers.values()), placement
        assert {node for nodes in workers.values() for node in nodes} == {
            ray.get_runtime_context().get_node_id()
        }
    assert not (tmp_path / "sequential" / "ray_workers.json").exists()  # no Ray, no workers


def test_auto_profiles_the_candidates_and_picks_one(tmp_path, local_ray, capsys):
    rows = run(tmp_path, "auto", "cluster.profile_iterations=1")
    assert rows[-1]["env_steps"] == 120
    chosen = capsys.readouterr().out
    assert "auto placement: env steps/s collocated" in chosen and "hybrid" in chosen and "->" in chosen


def test_a_killed_env_worker_is_restarted_and_the_iteration_retried(tmp_path, local_ray, caplog):
    from policies import make_policy
    from trainer.configs.loader import algorithm_config
    from trainer.distributed.session import build_distributed

    config = load_config("ppo_reach", [*TINY, "cluster.placement=disaggregated"])
    import sim_envs

    policy = make_policy(sim_envs.make(config.env.id, **config.env.kwargs).env_spec, config.policy)
    trainer = build_distributed(config, policy, algorithm_config(config))
    try:
        assert trainer.iterate(None, 0).env_steps == 40
        victim = ray.get(trainer.envs[0].pid.remote())
        os.kill(victim, signal.SIGKILL)
        result = trainer.iterate(None, 1)
        assert result.env_steps == 40  # a whole iteration, on the restarted worker
        assert ray.get(trainer.envs[0].pid.remote()) != victim
        assert "a worker died mid-iteration" in caplog.text
    finally:
        trainer.close()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["cluster.placement=hybrid", "cluster.roles={env: 0, rollout: 1, critic: 1}"], "unknown role 'critic'"),
        (["cluster.placement=hybrid", "cluster.roles={env: 0, rollout: 1}"], r"\['actor'\] has no bundle"),
        (["cluster.placement=hybrid", "cluster.bundles=[{CPU: 2}, {CPU: 2}]"], "needs 4 CPU, the Ray cluster has 2"),
        (["cluster.placement=hybrid", "cluster.bundles=[{CPU: 1}, {CPU: 1}]", "cluster.roles={env: 0, rollout: [0, 1], actor: 1}"],
         r"only env stages may list several"),
        (["cluster.placement=hybrid", "cluster.bundles=[{CPU: 1}, {CPU: 1}]", "cluster.roles={env: [0, 2], rollout: 0, actor: 1}"],
         r"cluster.roles.env=2, but there are 2 bundles"),
        (["cluster.placement=disaggregated", "cluster.bundles=[{CPU: 1}, {GPU: 1}, {CPU: 0.5}]"],
         "needs 1 GPU, the Ray cluster has 0"),
        (["cluster.placement=collocated", "algorithm=bc", "policy.value_head=false"],
         "runs ppo, grpo, sac, rlpd on Ray workers; 'bc' runs with cluster.placement=sequential"),
        (["cluster.placement=disaggregated", "cluster.offload=true"], "cluster.offload needs cluster.placement=collocated"),
        (["cluster.placement=collocated", "cluster.offload=true", "algorithm=sac", "policy.head=tanh_gaussian",
          "policy.value_head=false"], "cluster.offload is for on-policy algorithms"),
        (["cluster.placement=hybrid", "run.device=cuda"], "on Ray each worker's device follows its bundle"),
    ],
)  # fmt: skip
def test_bad_placements_fail_at_start_with_a_clear_message(tmp_path, local_ray, overrides, message):
    base = [o for o in TINY if not o.startswith("algo.")]  # PPO's keys would not fit another algorithm
    config = load_config("ppo_reach", [*base, f"run.output_dir={tmp_path}", *overrides])
    with pytest.raises(ConfigError, match=message):
        Runner(config).run()


def test_an_unknown_placement_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"cluster\.placement must be one of"):
        load_config("ppo_reach", ["cluster.placement=spread"])


def test_the_multinode_deploy_config_loads_and_plans():
    from trainer.distributed.placement import plan_placement

    root = Path(__file__).resolve().parents[2]
    config = load_config(str(root / "deploy" / "placement-multinode.yaml"))
    plan = plan_placement(config.cluster, {"CPU": 32, "GPU": 1})
    assert plan.role_bundle == {"env": 0, "rollout": 2, "actor": 2} and plan.cpu_sets is None
    assert [plan.bundle_of("env", k) for k in range(4)] == [0, 1, 0, 1]  # stages alternate boxes
    assert plan.share("env", 1) == {"CPU": 6.0}  # 12 CPUs per box over its 2 env stages
    assert plan.share("actor") == {"CPU": 2.0, "GPU": 0.5}
    with pytest.raises(ConfigError, match="needs 1 GPU, the Ray cluster has 0"):
        plan_placement(config.cluster, {"CPU": 32})


def test_cpu_sets_lay_bundles_over_the_cores():
    from trainer.distributed.placement import cpu_sets

    assert cpu_sets(({"CPU": 1}, {"CPU": 1}), [0, 1]) == ((0,), (1,))
    assert cpu_sets(({"CPU": 2 / 3},) * 3, [0, 1]) == ((0,), (0, 1), (1,))
    assert cpu_sets(({"CPU": 2},), [4, 5]) == ((4, 5),)


VLA = [
    "env.kwargs={cameras: [front], image_height: 64, image_width: 64, action_rotation: false, max_episode_steps: 10}",
    "policy.kind=vla", "policy.cameras=[front]", "policy.chunk_size=2",
]  # fmt: skip


# Collocated (turn-taking, with offload) and hybrid (pipelined; disaggregated is its special case).
@pytest.mark.parametrize("placement", ["collocated", "hybrid"])
def test_a_tiny_vla_trains_with_ppo_on_ray(tmp_path, local_ray, placement):
    extra = ["cluster.offload=true"] if placement == "collocated" else []
    rows = run(tmp_path, placement, *VLA, *extra)
    assert len(rows) == 3 and rows[-1]["env_steps"] == 120
    assert rows[-1]["train/policy_loss"] == rows[-1]["train/policy_loss"]  # a number, not NaN
    from policies import load_policy
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint

    assert type(load_policy(latest_checkpoint(tmp_path / placement) / POLICY_DIR)).__name__ == "OpenVLAPolicy"


def fetched_by_the_driver(monkeypatch, tmp_path, placement: str, data_plane: str) -> set[str]:
    """Every type the driver's ``ray.get`` returned during a run (containers opened)."""
    seen: set[str] = set()
    real_get = ray.get

    def note(value, depth=0) -> None:
        seen.add(type(value).__name__)
        if isinstance(value, list | tuple) and depth < 3:
            for item in value:
                note(item, depth + 1)

    def spying_get(refs, *args, **kwargs):
        value = real_get(refs, *args, **kwargs)
        note(value)
        return value

    monkeypatch.setattr(ray, "get", spying_get)
    run(tmp_path / data_plane, placement, f"cluster.data_plane={data_plane}",
        "env.kwargs={cameras: [front], image_height: 32, image_width: 32, action_rotation: false, max_episode_steps: 10}",
        "policy.kind=cnn", "policy.cameras=[front]")  # fmt: skip
    monkeypatch.undo()
    return seen


@pytest.mark.parametrize("placement", ["collocated", "disaggregated"])
def test_trajectories_never_reach_the_driver(monkeypatch, tmp_path, local_ray, placement):
    steps_and_decisions = {"ChunkResult", "Decision"}  # what env and rollout workers return
    assert steps_and_decisions <= fetched_by_the_driver(
        monkeypatch, tmp_path, placement, "driver"
    )  # it bites
    fetched = fetched_by_the_driver(monkeypatch, tmp_path, placement, "workers")
    assert not (steps_and_decisions | {"OnPolicyBatch", "ndarray", "Tensor"}) & fetched, fetched
