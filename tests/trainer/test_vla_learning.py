"""A tiny π0 (``tiny:pi0``: transformers' PI0ForConditionalGeneration at tiny size) through the real
training path: SFT (``bc``, 240 updates in one iteration) on scripted demos, then GRPO with the
Flow-SDE sampler, started from the SFT checkpoint (``policy.init_from``, which freezes the state
statistics); RL must beat its own SFT start on fixed seeds, measured on the policy GRPO optimises
(chunks sampled through the SDE)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sim_envs
from policies import load_policy
from trainer.algorithms.common import decisions_per_episode, play_greedy
from trainer.checkpoint import POLICY_DIR, latest_checkpoint
from trainer.configs import load_config
from trainer.expert_demos import DemoConfig, record_expert_demos
from trainer.runner import Runner

ENV = {
    "cameras": ["front"],
    "image_height": 64,
    "image_width": 64,
    "action_rotation": False,
    "max_episode_steps": 30,
}
ENV_YAML = "env.kwargs={cameras: [front], image_height: 64, image_width: 64, action_rotation: false, max_episode_steps: 30}"
VLA = ["policy.kind=vla", "policy.vla.backbone=tiny:pi0", "policy.cameras=[front]", "env.id=rlinf/FrankaReach-v0", "env.num_envs=16",
       "env.backend=inline", ENV_YAML, "run.eval_every=0", "run.video=false", "run.final_eval_episodes=0"]  # fmt: skip
EVAL_SEED = 777


def sampled_return(policy_dir) -> float:
    """The mean return of sampled chunks over 48 episodes from fixed seeds and a fixed torch seed."""
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 16, backend="inline", **ENV)
    policy, returns = load_policy(policy_dir), []
    try:
        torch.manual_seed(0)
        for seed in (EVAL_SEED, EVAL_SEED + 100, EVAL_SEED + 200):
            obs, _ = venv.reset(seed=seed)
            for _ in range(decisions_per_episode(venv, policy)):
                result = venv.chunk_step(policy.act(obs).actions.cpu().numpy())
                returns += [e.episode_return for e in result.finished]
                obs = result.obs
    finally:
        venv.close()
    return float(np.mean(returns))


def greedy_return(policy_dir) -> float:
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 16, backend="inline", **ENV)
    try:
        torch.manual_seed(0)
        _, finished = play_greedy(venv, load_policy(policy_dir), EVAL_SEED)
    finally:
        venv.close()
    return float(np.mean([e.episode_return for e in finished]))


@pytest.mark.slow
def test_grpo_on_a_tiny_vla_beats_its_sft_start(tmp_path):
    demos = record_expert_demos(
        DemoConfig("rlinf/FrankaReach-v0", 8, str(tmp_path / "demos"), env_kwargs=ENV), False
    )
    sft = load_config("bc", [*VLA, f"algo.dataset={demos.root}", "policy.value_head=false", "algo.batch_size=32",
                             "algo.updates_per_iteration=240", "algo.image_shift=0", "run.total_env_steps=480",
                             f"run.output_dir={tmp_path / 'sft'}"])  # fmt: skip
    Runner(sft).run()
    sft_policy = latest_checkpoint(tmp_path / "sft") / POLICY_DIR
    rl = load_config("grpo_reach", [*VLA, f"policy.init_from={sft_policy}", "policy.value_head=false",
                                    "algo.group_size=4", "algo.learning_rate=1e-4", "algo.update_epochs=4",
                                    "run.total_env_steps=7680", f"run.output_dir={tmp_path / 'rl'}"])  # fmt: skip
    Runner(rl).run()
    rl_policy = latest_checkpoint(tmp_path / "rl") / POLICY_DIR
    before, after = sampled_return(sft_policy), sampled_return(rl_policy)
    greedy = greedy_return(sft_policy), greedy_return(rl_policy)
    print(
        f"GRPO on tiny:pi0: sampled return {before:.2f} -> {after:.2f}, greedy {greedy[0]:.2f} -> {greedy[1]:.2f}"
    )
    # Measured (2026-12-03): sampled 13.05 -> 13.92 over these 48 episodes (13.31 -> 14.58 under torch seed 1;
    # a standard error of the mean is ~0.65); greedy 16.54 -> 14.82: GRPO improves the SDE policy it samples,
    # not the ODE's chunk from zero noise. At 1920 steps: 13.44 -> 14.16 (lr 1e-4); lr 3e-4 and 1e-3 lost return.
    # tiny:openvla-oft under the same GRPO lost sampled return at every lr tried (3e-5 to 1e-3).
    # On another machine's CPU (2026-12-07) the same 3840 steps gave 12.21 -> 12.54 (SFT is not bit-identical
    # across CPUs); 7680 steps there: 12.21 -> 13.48, greedy 15.50 -> 13.91.
    assert after > before + 0.5, (before, after)
