"""A tiny VLA through the real training path: SFT (``bc``, 240 updates in one iteration) on scripted demos, then GRPO
started from the SFT checkpoint (``policy.init_from``, which freezes the state statistics); RL must
beat its own SFT start on fixed seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sim_envs
from policies import load_policy
from trainer.algorithms.common import play_greedy
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
VLA = ["policy.kind=vla", "policy.cameras=[front]", "env.id=rlinf/FrankaReach-v0", "env.num_envs=16",
       "env.backend=inline", ENV_YAML, "run.eval_every=0", "run.video=false", "run.final_eval_episodes=0"]  # fmt: skip
EVAL_SEED = 777


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
                                    "algo.group_size=4", "algo.learning_rate=1e-3", "algo.update_epochs=4",
                                    "run.total_env_steps=1920", f"run.output_dir={tmp_path / 'rl'}"])  # fmt: skip
    Runner(rl).run()
    before, after = greedy_return(sft_policy), greedy_return(latest_checkpoint(tmp_path / "rl") / POLICY_DIR)
    print(f"GRPO on the tiny VLA: greedy return {before:.2f} -> {after:.2f}")
    # Measured at lr 1e-4: 11.3 -> 13.7 (with 2 update epochs: 10.4 -> 13.7 on the machine that set the
    # margin, 11.3 -> 12.8 on an AMD EPYC); with MuJoCo 4.0 the SFT start reached 12.1 and lr 1e-4 left it
    # at 13.1 (12.1 with twice the steps), lr 3e-4: 12.1 -> 15.1. On 2026-12-02's install (transformers
    # 5.24, the same code) the SFT start is 10.40 and lr 3e-4 reached only 11.34 (11.41 with 1.5x the
    # steps; lr 1e-4: 10.23, 5e-4: 11.23); lr 1e-3: 10.40 -> 13.43.
    assert after > before + 2.0, (before, after)
