"""GRPO, SAC and RLPD on a real local Ray cluster: group seeds across stages, the asynchronous
off-policy learner (its update-to-data ratio, policy lag, checkpoints, worker death)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import ray

import sim_envs
from policies import make_policy
from trainer.configs import load_config
from trainer.configs.loader import algorithm_config
from trainer.distributed.session import build_distributed
from trainer.runner import Runner

pytestmark = pytest.mark.slow
ENV = [
    "env.id=rlinf/FrankaReach-v0", "env.num_envs=4", "env.backend=inline",
    "env.kwargs={cameras: [], action_rotation: false, max_episode_steps: 10}", "policy.hidden_sizes=[32]",
    "run.eval_every=0", "run.checkpoint_every=2", "run.final_eval_episodes=0",
]  # fmt: skip
SAC = [*ENV, "algo.learning_starts=40", "algo.batch_size=32", "algo.critic_hidden=[32]", "algo.utd_ratio=0.5"]


def run(out: Path, preset: str, overrides: list[str], resume: bool = False) -> list[dict]:
    config = load_config(preset, [*overrides, f"run.output_dir={out}"])
    Runner(config, resume_dir=out if resume else None).run()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def distributed(preset: str, overrides: list[str]):
    config = load_config(preset, overrides)
    policy = make_policy(sim_envs.make(config.env.id, **config.env.kwargs).env_spec, config.policy)
    return build_distributed(config, policy, algorithm_config(config))


def test_grpo_on_ray_keeps_the_schema_and_gives_a_group_one_seed_across_stages(tmp_path, local_ray):
    grpo = [*ENV, "algo.group_size=2", "run.total_env_steps=80"]
    sequential = run(tmp_path / "seq", "grpo_reach", grpo)
    # token-level ratios on Ray: each stage's log-prob terms reach the learner beside its decisions
    hybrid = run(
        tmp_path / "hybrid", "grpo_reach", [*grpo, "cluster.placement=hybrid", "algo.ratio_level=token"]
    )
    ray_only = {"train/driver_bytes", "train/trajectory_bytes", "train/update_cpu_s"}  # Ray-only figures
    assert hybrid[-1]["env_steps"] == 80 and set(hybrid[-1]) - ray_only == set(sequential[-1])
    assert hybrid[-1]["train/policy_lag"] in (0.0, 1.0)

    # 4 envs in 2 stages of 2. Groups of 4 span both stages: all four start alike, from the seed.
    trainer = distributed("grpo_reach", [*ENV, "algo.group_size=4", "cluster.placement=disaggregated"])
    try:
        starts = [
            ray.get(env.reset.remote(7, trainer.stage_seeds(7, k))) for k, env in enumerate(trainer.envs)
        ]
        states = np.concatenate([s["state"] for s in starts])
        assert np.allclose(states, states[0])
        other = ray.get(trainer.envs[1].reset.remote(8, trainer.stage_seeds(8, 1)))
        assert not np.allclose(other["state"][0], states[0])
    finally:
        trainer.close()


def test_sac_on_ray_learns_asynchronously_at_the_configured_utd_and_resumes(tmp_path, local_ray):
    sequential = run(tmp_path / "seq", "sac_reach", [*SAC, "run.total_env_steps=80"])
    out = tmp_path / "async"
    rows = run(out, "sac_reach", [*SAC, "run.total_env_steps=160", "cluster.placement=disaggregated"])
    assert [r["env_steps"] for r in rows] == [40, 80, 120, 160]
    assert set(rows[-1]) >= set(sequential[-1])
    assert {"train/learner_wait_s", "train/collect_s", "train/updates"} <= set(rows[-1])
    assert all(r["train/buffer_size"] == r["env_steps"] for r in rows)
    # 2 stages of 2 envs: from the add that reaches learning_starts (40 steps stored) on, every add
    # of 2 env steps owes 2 * utd_ratio = 1 update; all are made by the end of each iteration.
    assert [r["train/updates"] for r in rows] == [1.0, 21.0, 41.0, 61.0]
    # The rollout acted while the learner trained: some transitions came from older weights.
    assert max(r["train/policy_lag"] for r in rows[1:]) > 0
    checkpoint = out / "checkpoints" / "step_160"
    assert (checkpoint / "replay.npz").exists()
    with np.load(checkpoint / "replay.npz") as replay:
        assert int(replay["size"]) == 160
    resumed = run(
        out, "sac_reach", [*SAC, "run.total_env_steps=240", "cluster.placement=disaggregated"], True
    )
    assert resumed[-1]["env_steps"] == 240 and resumed[-1]["train/buffer_size"] == 240
    assert resumed[-1]["train/updates"] == 101.0  # the version (update count) survived the restart


def test_collocated_sac_takes_turns_like_the_in_process_algorithm(tmp_path, local_ray):
    rows = run(tmp_path, "sac_reach", [*SAC, "run.total_env_steps=80", "cluster.placement=collocated"])
    assert all(r["train/policy_lag"] == 0.0 for r in rows)  # every decision used the newest weights
    # One stage of 4 envs, as in-process: each decision from 40 stored steps on owes 2 updates.
    assert [r["train/updates"] for r in rows] == [2.0, 22.0]


def test_rlpd_on_ray_plays_its_demos_in_the_learner(tmp_path, local_ray):
    rlpd = [
        *SAC,
        "algorithm=rlpd",
        "algo.demo_episodes=2",
        "algo.learning_starts=0",
        "run.total_env_steps=40",
    ]
    rows = run(tmp_path, "sac_reach", [*rlpd, "cluster.placement=hybrid"])
    assert 0 < rows[-1]["train/demo_size"] <= 20  # two scripted episodes of at most 10 steps
    assert rows[-1]["train/updates"] == 20.0  # utd 0.5 on 40 steps, from the first step on


def test_a_killed_env_worker_is_retried_without_losing_the_learner(tmp_path, local_ray, caplog):
    trainer = distributed("sac_reach", [*SAC, "cluster.placement=disaggregated"])
    try:
        assert trainer.iterate(None, 0).env_steps == 40
        victim = ray.get(trainer.envs[1].pid.remote())
        os.kill(victim, signal.SIGKILL)
        result = trainer.iterate(None, 1)
        assert result.env_steps == 40 and result.metrics["updates"] > 1
        assert ray.get(trainer.envs[1].pid.remote()) != victim
        assert "a worker died mid-iteration" in caplog.text
    finally:
        trainer.close()


def test_auto_profiles_off_policy_candidates_with_the_learner_running(monkeypatch, capsys):
    """The profile must time learning: each candidate is built with learning_starts=0, while the
    run keeps its own. (Candidates are recorded, not started; the PPO auto test runs real ones.)"""
    from dataclasses import dataclass

    from trainer.distributed import session

    built = []

    @dataclass
    class Candidate:
        mode: str

        def iterate(self, venv, seed):
            time.sleep(0.01)  # the profile divides by wall time; the step counts differ 50-fold
            steps = {"collocated": 10, "disaggregated": 1000, "hybrid": 20}[self.mode]
            return type("Result", (), {"env_steps": steps})

        def flush(self):
            pass

        def close(self):
            pass

    def record(config, policy, algo_config, mode=None):
        built.append((mode, algo_config.learning_starts))
        return Candidate(mode)

    monkeypatch.setattr(session, "build_distributed", record)
    config = load_config("sac_reach", [*SAC, "algo.learning_starts=1000", "cluster.profile_iterations=1"])
    assert session.choose_placement(config, None, algorithm_config(config)) == "disaggregated"
    assert built == [("collocated", 0), ("disaggregated", 0), ("hybrid", 0)]
    assert algorithm_config(config).learning_starts == 1000
    assert "auto placement (learning from the first step)" in capsys.readouterr().out
