"""Tiny VLAs on the language-conditioned task: SFT on scripted demos, then GRPO and PPO for a fixed
wall-clock budget each, scored on held-out seeds; plus rollout throughput and update time.

For each family, at tiny size and randomly initialised (``openvla``: action tokens one step at a
time; ``openvla-oft``: a chunk of tokens per pass; ``pi0`` / ``pi05`` / ``smolvla``: flow matching
with the Flow-SDE sampler), the same SFT start is trained by GRPO and by PPO (with the
value head at its own learning rate and without the value clip, its first ``CRITIC_WARMUP``
iterations fitting only the critic) for ``--rl-minutes`` each on CPU. RL's reward is the task's
success (``--rl-reward sparse``, as RLinf's and SimpleVLA-RL's VLA recipes use; measured: the
dense shaped reward made GRPO undo the SFT start, 0.27 -> 0.15). Success and return are greedy, in
the dense-reward env, on ``--eval-episodes`` seeds that neither the demos (10000+) nor training (0+)
reset from (greedy: tokens by argmax, flow chains from x0 = 0). The flow families are also scored
under upstream's own sampler (``upstream_sampler``: Euler steps from a seeded x0 ~ N(0, I), as
openpi and LeRobot deploy them).

    python benchmarks/vla.py [--task rlinf/FrankaPickColor-v0] [--demos 40] [--demo-noise 0] [--sft-updates 1500]
                             [--sft-lr 1e-3] [--rl-minutes 8] [--rl-reward sparse|dense]
                             [--heads openvla-oft,pi0,pi05,openvla,smolvla] [--algorithms grpo,ppo] [--seed 0]
                             [--state proprio|objects|privileged] [--critic-warmup 15] [--rl-lr LR]
                             [--temperature 1] [--noise-level A] [--ratio-level chunk|token] [--clip-high 0]
                             [--group-size 4]
                             [--sft-start DIR] [--work runs/bench_vla] [--out FILE]

The SFT start is kept in ``--work`` (``sft_<head>_<demos>_c<chunk>_<updates>x<lr>_seed<N>``) and reused by
runs that differ only in RL (``--temperature``, ``--noise-level``, ``--rl-lr``, ``--ratio-level``,
``--clip-high``, ``--algorithms``). SFT on CPU is not bit-identical across machines, so the starts of
recorded results are kept in ``benchmarks/results/sft_starts/``; ``--sft-start DIR`` runs RL from one
of them (no demos recorded, no SFT trained; the results record the start's demos, SFT updates and
learning rate from its ``sft.json``, and a start made for another head, task, state or chunk is
refused).

What the VLA sees besides the front camera and the instruction (``--state``):

* ``proprio``: proprioception only; the words must be grounded in the image.
* ``objects``: every cube's pose (``object_state``: nothing says which cube is named).
* ``privileged``: the named cube's pose and colour one-hot (what the scripted expert reads), so the
  state names the target and grounding is not needed.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import sim_envs
from policies import PolicyConfig, make_policy
from policies.config import VLAConfig
from policies.factory import with_own_rl_heads
from policies.vla.pi.policy import PiPolicy
from trainer.algorithms.bc import BC, BCConfig
from trainer.algorithms.common import decisions_per_episode, play_greedy
from trainer.algorithms.grpo import GRPO, GRPOConfig
from trainer.algorithms.ppo import PPO, PPOConfig
from trainer.expert_demos import DemoConfig, record_expert_demos

RESULTS = Path(__file__).resolve().parent / "results"
ENV = {"cameras": ["front"], "image_height": 64, "image_width": 64, "privileged_state": False,
       "action_rotation": False}  # fmt: skip
# OpenVLA acts one step at a time (chunk 1); OFT decodes --chunk steps in one pass and reads the
# proprio state; the flow families sample a chunk in flow_steps denoising steps.
HEADS = {
    "openvla": VLAConfig(backbone="tiny:openvla"),
    "openvla-oft": VLAConfig(backbone="tiny:openvla-oft"),
    "pi0": VLAConfig(backbone="tiny:pi0", flow_steps=4),
    "pi05": VLAConfig(backbone="tiny:pi05", flow_steps=4),
    "smolvla": VLAConfig(backbone="tiny:smolvla", flow_steps=4),
}
FIXED_CHUNK = {"openvla": 1}
RL_LEARNING_RATE = {"openvla": 1e-4, "openvla-oft": 1e-4, "pi0": 2e-5, "pi05": 2e-5, "smolvla": 2e-5}
# flow: its chunk log-probs are sums over steps and dimensions, so ratios move faster
EVAL_SEED = 5_000_000
TRAIN_SEED_STRIDE = 1_000_000  # --seed s trains from env seeds s * this + ..., clear of EVAL_SEED for s < 5
# PPO: iterations that fit only the fresh value head before the policy moves. tiny:pi0 from the same
# SFT starts, seeds 0 / 2: 0.53 / 0.65 after 5 of them, 0.76 / 0.96 after 15.
CRITIC_WARMUP = 15
# PPO's critic: its own step size, and no value clip. The success reward comes every step the cube is
# up, so returns are in the tens; at the policy's rate and with the clip (0.2 per iteration) the
# fresh critic never caught up (tokens seed 0: 0.43 -> 0.28 at 1e-4 and clipped, 0.59 at this).
VALUE_LEARNING_RATE = 3e-3


def held_out_score(venv, episodes: int, play_batch) -> dict[str, float]:
    """Success and return over the first ``episodes`` held-out seeds, ``num_envs`` at a time:
    ``play_batch(start)`` plays one episode per env from seed ``EVAL_SEED + start + i``; of the last
    batch, only the envs whose seeds are among the first ``episodes`` count, whatever ``--num-envs`` is."""
    finished = []
    for start in range(0, episodes, venv.num_envs):
        finished += [e for e in play_batch(start) if e.env_index < episodes - start]
    return {
        "success": float(np.mean([e.success for e in finished])),
        "return": float(np.mean([e.episode_return for e in finished])),
    }


def evaluate(policy, venv, episodes: int) -> dict[str, float]:
    """Greedy success and return on the held-out seeds."""

    def play_batch(start: int):
        torch.manual_seed(0)
        return play_greedy(venv, policy, EVAL_SEED + start)[1]

    return held_out_score(venv, episodes, play_batch)


def with_vla_fields(policy, **fields):
    """A policy built from ``policy``'s config with these ``policy.vla`` fields replaced, holding the
    same weights and frozen state statistics (RL heads its config lacks are left out, fresh ones
    kept)."""
    vla = dataclasses.replace(policy.cfg.vla, **fields)
    rebuilt = make_policy(policy.spec, dataclasses.replace(policy.cfg, vla=vla))
    rebuilt.load_weights(with_own_rl_heads(rebuilt, policy.state_dict()))
    rebuilt.freeze_normalizers()
    return rebuilt


def upstream_sampler(policy: PiPolicy) -> PiPolicy:
    """A flow policy as upstream deploys it: Euler steps from x0 ~ N(0, I), no SDE or learned noise."""
    return with_vla_fields(
        policy,
        flow_noise_method="flow_sde",
        flow_noise_level=0.0,
        sampling_temperature=1.0,
        flow_sde_steps="all",
    )


def flow_scores(policy, venv, episodes: int) -> dict:
    """For the flow families, the score under :func:`upstream_sampler` beside the greedy one, on the
    same held-out seeds, x0 drawn from a fixed torch seed per batch."""
    if not isinstance(policy, PiPolicy):
        return {}
    deployed = upstream_sampler(policy)

    def play_batch(start: int):
        torch.manual_seed(start)
        obs, _ = venv.reset(seed=EVAL_SEED + start)
        finished = []
        for _ in range(decisions_per_episode(venv, deployed)):
            result = venv.chunk_step(deployed.act(obs).actions.cpu().numpy())
            finished += result.finished
            obs = result.obs
        return finished

    return {"upstream_sampler": held_out_score(venv, episodes, play_batch)}


def rl(
    name: str,
    policy,
    rl_venv,
    eval_venv,
    head: str,
    minutes: float,
    eval_episodes: int,
    seed: int,
    critic_warmup: int = CRITIC_WARMUP,
    learning_rate: float | None = None,
    surrogate: dict | None = None,
    group_size: int = 4,
    grpo_options: dict | None = None,
    anneal_lr: bool = False,
) -> dict:
    """Train ``policy`` (a copy of the SFT start) with GRPO or PPO for ``minutes`` of wall time in
    ``rl_venv`` (the RL reward), then score it greedily in ``eval_venv``. ``surrogate``: the clipped
    objective's options (``ratio_level``, ``clip_coef_high``) for either algorithm. ``anneal_lr``:
    every step size falls linearly to 0 over the budget (CleanRL's ``anneal_lr``)."""
    lr, surrogate = learning_rate or RL_LEARNING_RATE[head], surrogate or {}
    if name == "grpo":
        algorithm = GRPO(
            policy,
            GRPOConfig(
                group_size=group_size,
                learning_rate=lr,
                update_epochs=2,
                num_minibatches=4,
                **surrogate,
                **(grpo_options or {}),
            ),
        )
    else:
        algorithm = PPO(
            policy,
            PPOConfig(
                learning_rate=lr,
                update_epochs=2,
                num_minibatches=4,
                critic_warmup_updates=critic_warmup,
                value_learning_rate=VALUE_LEARNING_RATE,
                clip_value_loss=False,
                **surrogate,
            ),
        )
    start_lrs = [group["lr"] for group in algorithm.optimizer.param_groups]
    started = time.monotonic()
    deadline, iteration, steps, collect_s, update_s, curve = started + 60 * minutes, 0, 0, [], [], []
    while time.monotonic() < deadline:
        if anneal_lr:
            scale = annealed_fraction(time.monotonic() - started, 60 * minutes)
            for group, start_lr in zip(algorithm.optimizer.param_groups, start_lrs, strict=True):
                group["lr"] = start_lr * scale
        tick = time.perf_counter()
        result = algorithm.iterate(rl_venv, seed=TRAIN_SEED_STRIDE * seed + 1000 * iteration)
        total = time.perf_counter() - tick
        collect_s.append(result.metrics["collect_s"])
        update_s.append(total - result.metrics["collect_s"])
        steps += result.env_steps
        iteration += 1
        curve.append({"iteration": iteration, "env_steps": steps,
                      "sample_success": float(np.mean([e.success for e in result.finished] or [0.0])),
                      **{k: result.metrics[k] for k in ("approx_kl", "clip_frac", "informative_groups") if k in result.metrics}})  # fmt: skip
        print(f"  {head} {name} it {iteration}: {curve[-1]} {time.perf_counter() - tick:.1f}s", flush=True)
    return {
        "iterations": iteration,
        "env_steps": steps,
        "collect_s_median": float(np.median(collect_s)),
        "update_s_median": float(np.median(update_s)),
        "learning_rate": lr,
        "curve": curve,
        **evaluate(policy, eval_venv, eval_episodes),
        **flow_scores(policy, eval_venv, eval_episodes),
    }


def annealed_fraction(elapsed_s: float, budget_s: float) -> float:
    """The share of the starting step size left ``elapsed_s`` into a ``budget_s`` run: 1 -> 0, linear."""
    return min(1.0, max(0.0, 1.0 - elapsed_s / budget_s))


def rollout_throughput(policy, venv, decisions: int = 20) -> dict[str, float]:
    """Sampled chunks from the policy stepped in the vector env: env steps/s and chunks/s."""
    obs, _ = venv.reset(seed=0)
    tick, steps = time.perf_counter(), 0
    for _ in range(decisions):
        result = venv.chunk_step(policy.act(obs).actions.cpu().numpy())
        steps += int(result.valid.sum())
        obs = result.obs
    elapsed = time.perf_counter() - tick
    return {"env_steps_per_s": steps / elapsed, "chunks_per_s": decisions * venv.num_envs / elapsed}


def demo_dataset(work: str, task: str, state: str, demos: int, noise: float, env_kwargs: dict) -> Path:
    """The scripted demos' LeRobot dataset under ``work`` (recorded on first use; DART ``noise``).
    A dataset holding fewer than ``demos`` episodes (its recording was killed) is recorded again."""
    suffix = f"_dart{noise:g}" if noise > 0 else ""
    path = Path(work) / f"demos_{task.split('/')[-1]}_{state}_{demos}{suffix}"
    info = path / "meta" / "info.json"
    if info.is_file():
        held = int(json.loads(info.read_text())["total_episodes"])
        if held >= demos:
            return path
        print(
            f"{path}: {held} of {demos} episodes (an interrupted recording); recording it again", flush=True
        )
        shutil.rmtree(path)
    record_expert_demos(DemoConfig(task, demos, str(path), env_kwargs=env_kwargs, action_noise=noise))
    return path


def sft(
    head: str,
    spec,
    demos: Path | None,
    updates: int,
    learning_rate: float,
    chunk: int,
    seed: int,
    sampling: dict | None = None,
    cache: Path | None = None,
    made_by: dict | None = None,
):
    """A fresh tiny ``head`` cloned on ``demos`` for ``updates`` steps (batch 64, normalizers frozen after,
    as ``policy.init_from`` does for an RL run started from SFT): (policy, its regression on the
    demos' frames, loss per 100 updates, seconds). ``sampling``: VLAConfig fields of how RL samples
    (no part of SFT). ``cache``: a folder where the SFT weights and losses are kept and, when there,
    read instead of training again (the same start for runs that differ only in RL; the demos are
    then not loaded, and the regression is None). ``made_by``: how the start was made (head, task,
    state, demos, updates, ...), written beside it so that a run from a kept start records it."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    cfg = PolicyConfig(
        kind="vla",
        cameras=["front"],
        chunk_size=FIXED_CHUNK.get(head, chunk),
        vla=dataclasses.replace(HEADS[head], **(sampling or {})),
    )
    policy = make_policy(spec, cfg)
    if cache is not None and (cache / "sft.json").is_file():
        from safetensors.torch import load_file

        policy.load_weights(with_own_rl_heads(policy, load_file(str(cache / "model.safetensors"))))
        policy.freeze_normalizers()
        saved = json.loads((cache / "sft.json").read_text())
        return policy, None, saved["losses"], saved["seconds"]
    regression = BC(
        policy, BCConfig(str(demos), learning_rate=learning_rate, batch_size=64, image_shift=0)
    ).regression
    tick = time.perf_counter()
    losses = []
    with tqdm(total=updates, desc=f"SFT {head}", unit="update") as bar:
        for done in range(0, updates, 100):
            losses.append(regression.fit(min(100, updates - done)))
            bar.update(min(100, updates - done))
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    seconds = time.perf_counter() - tick
    policy.freeze_normalizers()
    if cache is not None:
        from safetensors.torch import save_file

        cache.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.detach().contiguous() for k, v in policy.state_dict().items()},
            str(cache / "model.safetensors"),
        )
        kept = {"losses": losses, "seconds": seconds, "made_by": made_by}
        (cache / "sft.json").write_text(json.dumps(kept))
    return policy, regression, losses, seconds


def kept_start_made_by(folder: Path, head: str, task: str, state: str, chunk: int) -> dict:
    """How the kept SFT start in ``folder`` was made (its ``sft.json``'s ``made_by``); ValueError with
    one line where there is no record, or the start was made for another head, task, state or chunk."""
    record = folder / "sft.json"
    if not record.is_file():
        raise ValueError("no sft.json there (a folder --work keeps as sft_<head>_...)")
    made_by = json.loads(record.read_text()).get("made_by")
    if not made_by:
        raise ValueError("its sft.json does not say how it was made (no made_by); make it again with --work")
    for key, wanted in {"head": head, "task": task, "state": state, "chunk": chunk}.items():
        if made_by.get(key) != wanted:
            raise ValueError(f"made for {key} {made_by.get(key)!r}, this run asks for {wanted!r}")
    return made_by


STATES = {
    "proprio": {},  # proprioception and the camera
    "objects": {"object_state": True},  # + every cube's pose
    "privileged": {"privileged_state": True},  # + the named cube's pose and colour one-hot
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="rlinf/FrankaPickColor-v0")
    parser.add_argument("--demos", type=int, default=40)
    parser.add_argument(
        "--demo-noise",
        type=float,
        default=0.0,
        help="DART: the env carries out the expert's action plus this noise",
    )
    parser.add_argument("--sft-updates", type=int, default=1500)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--state", choices=sorted(STATES), default="proprio")
    parser.add_argument("--rl-minutes", type=float, default=8.0)
    parser.add_argument("--rl-reward", choices=["sparse", "dense"], default="sparse")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=48)
    parser.add_argument("--heads", default="openvla-oft,pi0")
    parser.add_argument("--algorithms", default="grpo,ppo")
    parser.add_argument(
        "--critic-warmup", type=int, default=CRITIC_WARMUP, help="PPO: iterations fitting only the critic"
    )
    parser.add_argument(
        "--rl-lr", type=float, default=None, help="RL's step size (default: the family's RL_LEARNING_RATE)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="SFT batches, RL env seeds and the value head's init (tiny π backbones start from one fixed init)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="RL's rollouts: softmax(logits / T) (tokens), chains from N(0, T^2 I) (flow)",
    )
    parser.add_argument(
        "--noise-level", type=float, default=None, help="flow families: the Flow-SDE noise level of RL"
    )
    parser.add_argument(
        "--flow-noise-method",
        choices=["flow_sde", "flow_noise"],
        default="flow_sde",
        help="flow families: RL explores with the SDE (--noise-level) or a learned std (πRL's Flow-Noise)",
    )
    parser.add_argument(
        "--flow-sde-steps",
        choices=["all", "one"],
        default="all",
        help="flow families: every denoising step the SDE's, or one random step per chunk (RLinf's joint_logprob: false)",
    )
    parser.add_argument(
        "--ratio-level",
        choices=["chunk", "token"],
        default="chunk",
        help="one PPO ratio per decision, or one per action token / chunk step and dim (RLinf's token_level)",
    )
    parser.add_argument(
        "--clip-high",
        type=float,
        default=0.0,
        help="the ratio's upper clip (clip-higher); 0: the lower one, 0.2",
    )
    parser.add_argument("--group-size", type=int, default=4, help="GRPO: envs per group (of --num-envs)")
    parser.add_argument(
        "--anneal-lr",
        action="store_true",
        help="RL's step sizes fall linearly to 0 over --rl-minutes (CleanRL's anneal_lr)",
    )
    parser.add_argument(
        "--no-group-std",
        action="store_true",
        help="GRPO: advantages R - mean, not divided by the group's std",
    )
    parser.add_argument(
        "--drop-uniform-groups", action="store_true", help="GRPO: leave groups with equal returns out"
    )
    parser.add_argument(
        "--rl-train-expert-only",
        action="store_true",
        help="RL trains the flow families' action expert only, the VLM frozen (SFT trains all of it)",
    )
    parser.add_argument(
        "--sft-start",
        default=None,
        help="a kept SFT start (a folder with model.safetensors and sft.json, as --work keeps them) to run RL "
        "from instead of training one; one head only (e.g. benchmarks/results/sft_starts/...)",
    )
    parser.add_argument("--work", default="runs/bench_vla")
    parser.add_argument("--out", default=str(RESULTS / "vla.json"))
    args = parser.parse_args()
    unknown = sorted(set(args.algorithms.split(",")) - {"grpo", "ppo"})
    if unknown:
        parser.error(f"--algorithms: unknown {unknown[0]!r}; known: grpo, ppo")
    if args.rl_train_expert_only and not set(args.heads.split(",")) <= {"pi0", "pi05", "smolvla"}:
        parser.error("--rl-train-expert-only: only the flow heads (pi0, pi05, smolvla) have an action expert")
    if args.sft_updates < 1:
        parser.error("--sft-updates must be at least 1")
    if not 0 <= args.seed < EVAL_SEED // TRAIN_SEED_STRIDE:
        parser.error(
            f"--seed must be in [0, {EVAL_SEED // TRAIN_SEED_STRIDE}): training seeds stay clear of evaluation's"
        )
    if args.sft_start is not None:
        if "," in args.heads:
            parser.error("--sft-start: one head only (the start is one family's weights)")
        try:
            start_made_by = kept_start_made_by(
                Path(args.sft_start),
                args.heads,
                args.task,
                args.state,
                FIXED_CHUNK.get(args.heads, args.chunk),
            )
        except ValueError as exc:
            parser.error(f"--sft-start {args.sft_start}: {exc}")
    torch.set_num_threads(1)

    env_extra = STATES[args.state]
    env_kwargs = {**ENV, **env_extra}
    demos = (  # a kept SFT start needs no demos
        None
        if args.sft_start
        else demo_dataset(args.work, args.task, args.state, args.demos, args.demo_noise, env_kwargs)
    )
    venv = sim_envs.make_vector(args.task, args.num_envs, backend="inline", **env_kwargs)
    rl_venv = sim_envs.make_vector(
        args.task, args.num_envs, backend="inline", **env_kwargs, reward_type=args.rl_reward
    )
    results: dict = {"task": args.task, "chunk": args.chunk, "num_envs": args.num_envs, "demos": args.demos,
                     "demo_noise": args.demo_noise,
                     "sft_updates": args.sft_updates, "sft_lr": args.sft_lr, "state": args.state,
                     "rl_minutes": args.rl_minutes, "rl_reward": args.rl_reward,
                     "eval_episodes": args.eval_episodes, "critic_warmup": args.critic_warmup, "seed": args.seed,
                     "temperature": args.temperature, "noise_level": args.noise_level,
                     "ratio_level": args.ratio_level, "clip_high": args.clip_high, "group_size": args.group_size,
                     "group_std": not args.no_group_std, "flow_sde_steps": args.flow_sde_steps,
                     "flow_noise_method": args.flow_noise_method, "drop_uniform_groups": args.drop_uniform_groups,
                     "rl_train_expert_only": args.rl_train_expert_only, "sft_start": args.sft_start, "anneal_lr": args.anneal_lr, "heads": {}}  # fmt: skip
    if args.sft_start:  # what the start was made from, not what the command line says
        results.update({key: start_made_by[key] for key in ("demos", "demo_noise", "sft_updates", "sft_lr")})
        results["sft_seed"] = start_made_by["seed"]
    for head in args.heads.split(","):
        sampling = {"sampling_temperature": args.temperature}
        if args.noise_level is not None:  # read by the flow families only
            sampling["flow_noise_level"] = args.noise_level
        if (
            args.flow_sde_steps != "all"
        ):  # flow families only; not in the SFT cache's name (SFT never samples)
            sampling["flow_sde_steps"] = args.flow_sde_steps
        if args.flow_noise_method != "flow_sde":  # as flow_sde_steps; the noise head starts fresh in RL
            sampling["flow_noise_method"] = args.flow_noise_method
        # the SFT start depends on nothing RL changes: kept in --work for the next run to reuse
        chunk = FIXED_CHUNK.get(head, args.chunk)
        cache = (
            Path(args.sft_start)
            if args.sft_start
            else Path(args.work)
            / f"sft_{head}_{demos.name}_c{chunk}_{args.sft_updates}x{args.sft_lr:g}_seed{args.seed}"
        )
        made_by = {"head": head, "task": args.task, "state": args.state, "demos": args.demos,
                   "demo_noise": args.demo_noise, "chunk": chunk, "sft_updates": args.sft_updates,
                   "sft_lr": args.sft_lr, "seed": args.seed}  # fmt: skip
        policy, _, losses, sft_s = sft(
            head,
            venv.spec,
            demos,
            args.sft_updates,
            args.sft_lr,
            args.chunk,
            args.seed,
            sampling,
            cache,
            made_by,
        )
        record = {
            "parameters": sum(p.numel() for p in policy.parameters()),
            "sft": {
                "loss_first": losses[0],
                "loss_last": losses[-1],
                "seconds": sft_s,
                **evaluate(policy, venv, args.eval_episodes),
                **flow_scores(policy, venv, args.eval_episodes),
            },
            "rollout": rollout_throughput(policy, venv),
        }
        print(f"{head}: SFT {record['sft']}, rollout {record['rollout']}", flush=True)
        for name in args.algorithms.split(","):
            learner = (
                with_vla_fields(policy, train_expert_only=True)  # SFT trained all of it
                if args.rl_train_expert_only
                else copy.deepcopy(policy)
            )
            record[name] = rl(
                name,
                learner,
                rl_venv,
                venv,
                head,
                args.rl_minutes,
                args.eval_episodes,
                args.seed,
                args.critic_warmup,
                args.rl_lr,
                {"ratio_level": args.ratio_level, "clip_coef_high": args.clip_high},
                args.group_size,
                {
                    "scale_by_group_std": not args.no_group_std,
                    "drop_uniform_groups": args.drop_uniform_groups,
                },
                args.anneal_lr,
            )
            record[name]["gain_points"] = 100 * (record[name]["success"] - record["sft"]["success"])
            print(f"{head} {name}: success {record[name]['success']:.3f} (SFT {record['sft']['success']:.3f})",
                  flush=True)  # fmt: skip
        results["heads"][head] = record
    venv.close()
    rl_venv.close()
    results["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print("\nhead    SFT    GRPO   PPO    (greedy success on held-out seeds)")
    for head, r in results["heads"].items():
        arms = "  ".join(f"{r[a]['success']:.3f}" if a in r else "  -  " for a in ("grpo", "ppo"))
        print(f"{head:7} {r['sft']['success']:.3f}  {arms}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
