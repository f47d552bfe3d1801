"""World-model RL on the "real robot": does post-training inside a learned model lift a BC start?

The real robot is the FrankaPickLift sim twin under the ``REALITY_GAP`` dynamics (``--gap
PROFILE.json`` for another), stepped directly (the env behind ``rlinf-robot connect --robot
sim-twin``; the link is measured in ``link_latency.py``). State policy, 3-D end-effector actions.

1. **BC start**: behaviour cloning from ``--demos`` scripted twin episodes (a human's teleop stands
   in), deliberately few: the start that RL has to improve. BC fits the mean action; the policy's
   exploration std is set, not learned (``--start-log-std``: what RL starts exploring with).
2. **Robot data**: ``--data-episodes`` twin episodes of the BC policy sampling with a wider std
   (``--data-log-std``), half of them with random actions mixed in (the real-robot time is spent
   here, on data, not on trial and error), recorded as a LeRobot v3 dataset.
3. **World model** (``rlinf-trainer train --config world_model``) fitted to the demos + that data;
   its held-out 1/5/20-step open-loop errors against copying the last state.
4. **Post-training**: ``--candidates`` PPO runs (seeds differ) from the BC policy inside
   ``rlinf/WorldModel-v0``, ``--steps`` imagined steps each; the model scores each candidate and the
   BC start by greedy imagined success from recorded starts (halted = failed) and the best is
   deployed, the BC start if none beats it: choosing costs no robot time. The comparison arm
   spends ``--steps`` env steps on PPO from the BC policy in the *nominal* sim (what one would do
   without a model of the robot).
5. Each policy, greedy, on ``--eval-episodes`` twin episodes (fixed seeds, the same for all).

Reported per seed: twin success of BC, WM post-trained and sim post-trained; imagined env steps/s
against sim env steps/s (PPO's own rate, update included, and the env alone); model error per
horizon. Target: the world-model arm lifts twin success by >= 20 points over the BC start.

    python benchmarks/world_model.py [--seeds 3] [--steps 100000] [--eval-episodes 50]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from sim_to_real import BenchmarkError, load_gap, write_result  # shared with the sim-to-real benchmark

RESULTS = Path(__file__).with_name("results")
ENV_ID = "rlinf/FrankaPickLift-v0"
POLICY_KWARGS = {"cameras": [], "privileged_state": True, "action_rotation": False}
EVAL_SEED = 30_000_000  # twin evaluation episodes start here (away from demo and training seeds)
IMAGINED_EVAL_SEED = 40_000_000  # the world model's own scoring of candidate policies


def flow(kwargs: dict) -> str:
    """A dict as a one-line YAML flow mapping for a config override."""
    return json.dumps(kwargs)


def run_training(preset: str, work: Path, overrides: list[str]) -> Path:
    """``rlinf-trainer train --config preset overrides``; the final policy's folder."""
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.configs import load_config
    from trainer.runner import Runner

    Runner(load_config(preset, [*overrides, f"run.output_dir={work}", "run.eval_every=0"])).run()
    return latest_checkpoint(work) / POLICY_DIR


# -- the steps -----------------------------------------------------------------------------------
def behaviour_clone(
    work: Path, demos: int, updates: int, seed: int, twin: dict, log_std: float
) -> tuple[Path, Path]:
    from trainer.expert_demos import DEMO_SEED, DemoConfig, record_expert_demos

    dataset = record_expert_demos(
        DemoConfig(ENV_ID, demos, str(work / "demos"), seed=DEMO_SEED + 1000 * seed, env_kwargs=twin),
        progress=False,
    ).root
    iterations = max(1, updates // 200)
    policy = run_training("bc", work / "bc", [
        f"env.id={ENV_ID}", f"env.kwargs={flow(POLICY_KWARGS)}", f"algo.dataset={dataset}",
        f"run.total_env_steps={iterations * 8 * 80}", "policy.value_head=true", f"run.seed={seed}",
        "run.final_eval_episodes=0", f"policy.init_log_std={log_std}",
    ])  # fmt: skip
    return dataset, policy


def record_policy_episodes(
    policy_dir: Path, dataset: Path, episodes: int, seed: int, twin: dict, random_fraction: float,
    log_std: float,
) -> dict:  # fmt: skip
    """``episodes`` twin episodes of the policy, sampling with exploration std ``exp(log_std)``,
    appended to ``dataset``; in every other env a ``random_fraction`` of the steps take a uniformly
    random action instead (play data: what the arm does where the policy never goes, e.g. closing
    in the air)."""
    import torch
    from tqdm import tqdm

    import sim_envs
    from policies import load_policy
    from protos.episode_frames import vector_names
    from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter

    torch.manual_seed(seed)
    policy = load_policy(policy_dir)
    with torch.no_grad():
        policy.log_std.fill_(log_std)  # wider than RL's start: the model should see around the policy
    venv = sim_envs.make_vector(ENV_ID, 8, backend="inline", **twin)
    spec = venv.spec
    writer = LeRobotWriter(dataset, fps=spec.control_hz)
    names = {k: v for k, v in vector_names(spec).items() if k in ("observation.state", "action")}
    buffers = [{"state": [], "action": [], "reward": [], "success": []} for _ in range(venv.num_envs)]
    obs, _ = venv.reset(seed=1_000_000 * (seed + 1))
    rng = np.random.default_rng(seed)
    low, high = spec.action.low_array(), spec.action.high_array()
    playful = (np.arange(venv.num_envs) % 2 == 1)[:, None]
    written, successes, steps = 0, 0, 0
    tick = time.monotonic()
    with tqdm(total=episodes, desc="twin episodes of the BC policy", unit="episode") as bar:
        while written < episodes:
            with torch.no_grad():
                actions = policy.act(obs, mode="sample").actions.cpu().numpy()
            random = rng.uniform(low, high, actions.shape).astype(np.float32)
            swap = playful & (rng.random((venv.num_envs, 1)) < random_fraction)
            actions = np.where(swap[:, :, None], random, actions)
            result = venv.chunk_step(actions)
            steps += int(result.valid.sum())
            for i, buffer in enumerate(buffers):
                buffer["state"].append(obs["state"][i])
                buffer["action"].append(actions[i, 0])
                buffer["reward"].append(result.rewards[i, 0])
                buffer["success"].append(result.success[i, 0])
            for summary in result.finished:
                buffer = buffers[summary.env_index]
                if written < episodes:
                    n = len(buffer["state"])
                    writer.add_episode(EpisodeFrames(
                        task=spec.instruction, images={},
                        vectors={"observation.state": np.stack(buffer["state"]), "action": np.stack(buffer["action"])},
                        scalars={"next.reward": np.asarray(buffer["reward"], np.float32),
                                 "next.done": np.arange(n) == n - 1, "next.success": np.asarray(buffer["success"])},
                        extra={"success": bool(summary.success)}, names=names,
                    ))  # fmt: skip
                    written += 1
                    successes += summary.success
                    bar.update(1)
                buffers[summary.env_index] = {k: [] for k in buffer}
            obs = result.obs
    venv.close()
    return {"episodes": written, "success_rate": successes / written, "env_steps": steps,
            "wall_s": round(time.monotonic() - tick, 1)}  # fmt: skip


def twin_success(policy_dir: Path, episodes: int, twin: dict) -> float:
    import sim_envs
    from policies import load_policy
    from trainer.algorithms.common import play_greedy

    policy = load_policy(policy_dir)
    venv = sim_envs.make_vector(ENV_ID, min(episodes, 25), backend="inline", **twin)
    finished = []
    while len(finished) < episodes:
        _, done = play_greedy(venv, policy, EVAL_SEED + len(finished))
        finished += done
    venv.close()
    return float(np.mean([e.success for e in finished[:episodes]]))


def imagined_success(policy_dir: Path, checkpoint: Path, episodes: int, halt_multiple: float) -> float:
    """Greedy success inside the world model from ``episodes`` recorded starts (an episode halted
    off the data counts as a failure): the model's estimate, which needs no robot."""
    from policies import load_policy
    from policies.world_model.env import WorldModelVectorEnv
    from trainer.algorithms.common import play_greedy

    venv = WorldModelVectorEnv(str(checkpoint), episodes, max_episode_steps=80, halt_multiple=halt_multiple)
    _, finished = play_greedy(venv, load_policy(policy_dir), IMAGINED_EVAL_SEED)
    first = {e.env_index: e for e in reversed(finished)}  # each env's first episode
    return float(np.mean([e.success for e in first.values()]))


def env_rate(make, steps: int = 4000) -> float:
    """Env steps/s of a vector env under random actions (no policy, no learning)."""
    venv = make()
    venv.reset(seed=0)
    n, rng = venv.num_envs, np.random.default_rng(0)
    low, high = venv.spec.action.low_array(), venv.spec.action.high_array()
    tick, done = time.perf_counter(), 0
    while done < steps:
        result = venv.chunk_step(rng.uniform(low, high, (n, 1, len(low))).astype(np.float32))
        done += int(result.valid.sum())
    rate = done / (time.perf_counter() - tick)
    venv.close()
    return rate


def run_seed(seed: int, args, twin: dict, work: Path) -> dict:
    import sim_envs
    from policies.world_model.env import WorldModelVectorEnv
    from sim_envs import make_vector
    from trainer.world_model_training import WorldModelTrainConfig, train_world_model

    row: dict = {"seed": seed}
    dataset, bc = behaviour_clone(work, args.demos, args.bc_updates, seed, twin, args.start_log_std)
    row["bc_twin_success"] = twin_success(bc, args.eval_episodes, twin)
    print(f"seed {seed}: BC start, twin success {row['bc_twin_success']:.2f}", flush=True)
    row["robot_data"] = record_policy_episodes(
        bc, dataset, args.data_episodes, seed, twin, args.random_fraction, args.data_log_std
    )
    row["robot_episodes"] = args.demos + args.data_episodes

    tick = time.monotonic()
    env = sim_envs.make(ENV_ID, **POLICY_KWARGS)
    spec = env.env_spec
    env.close()
    wm_cfg = WorldModelTrainConfig(dataset=str(dataset), updates=args.wm_updates, horizon=args.wm_horizon,
                                   hidden=args.wm_hidden, batch_size=256)  # fmt: skip
    row["world_model"] = {**train_world_model(wm_cfg, spec, work / "wm", seed=seed),
                          "train_wall_s": round(time.monotonic() - tick, 1)}  # fmt: skip
    checkpoint = work / "wm" / "world_model"

    ppo = [f"policy.init_from={bc}", f"run.total_env_steps={args.steps}",
           "run.final_eval_episodes=0", "env.num_envs=32", f"algo.critic_warmup_updates={args.critic_warmup}",
           f"algo.learning_rate={args.ppo_lr}"]  # fmt: skip
    # Post-training: --candidates PPO runs in the model (PPO seeds differ); the model scores each and
    # the BC start, greedy from recorded starts, and the best is deployed (the BC start if no run
    # beats it in imagination). Picking needs no robot episode; the twin scores every candidate
    # only for this report.
    tick, candidates = time.monotonic(), []
    for k in range(args.candidates):
        candidates.append(run_training("ppo_world_model", work / f"ppo_wm_{k}", [
            *ppo, f"run.seed={1000 * seed + k}", f"env.kwargs.checkpoint={checkpoint}",
            f"env.kwargs.halt_multiple={args.halt_multiple}", f"env.kwargs.start_from={args.start_from}",
            f"env.kwargs.max_episode_steps={args.imagined_steps}", f"env.kwargs.reward_type={args.wm_reward}",
            f"env.kwargs.halt_penalty={args.halt_penalty}"]))  # fmt: skip
    row["wm_ppo_wall_s"] = round((time.monotonic() - tick) / args.candidates, 1)
    imagined = [
        imagined_success(p, checkpoint, args.imagined_episodes, args.halt_multiple) for p in [bc, *candidates]
    ]
    pick = int(np.argmax(imagined))  # ties keep the earlier one: the BC start first
    row["wm_candidates"] = [
        {"policy": "bc" if i == 0 else f"ppo_{i - 1}", "imagined_success": imagined[i],
         "twin_success": row["bc_twin_success"] if i == 0 else twin_success(p, args.eval_episodes, twin)}
        for i, p in enumerate([bc, *candidates])
    ]  # fmt: skip
    row["wm_picked"] = row["wm_candidates"][pick]["policy"]
    tick = time.monotonic()
    sim_policy = run_training("ppo_pick_lift", work / "ppo_sim", [
        *ppo, f"run.seed={seed}", f"env.kwargs={flow(POLICY_KWARGS)}"])  # fmt: skip
    row["sim_ppo_wall_s"] = round(time.monotonic() - tick, 1)
    row["imagined_steps_per_s_ppo"] = round(args.steps / row["wm_ppo_wall_s"], 1)
    row["sim_steps_per_s_ppo"] = round(args.steps / row["sim_ppo_wall_s"], 1)
    row["imagined_env_steps_per_s"] = round(
        env_rate(lambda: WorldModelVectorEnv(str(checkpoint), 32, max_episode_steps=80)), 1
    )
    row["sim_env_steps_per_s"] = round(
        env_rate(lambda: make_vector(ENV_ID, 32, backend="subprocess", num_workers=2, **POLICY_KWARGS)), 1
    )
    row["wm_twin_success"] = row["wm_candidates"][pick]["twin_success"]
    row["sim_twin_success"] = twin_success(sim_policy, args.eval_episodes, twin)
    row["wm_points_over_bc"] = round(100 * (row["wm_twin_success"] - row["bc_twin_success"]), 1)
    print(f"seed {seed}: twin success BC {row['bc_twin_success']:.2f} -> world model "
          f"{row['wm_twin_success']:.2f}, nominal sim {row['sim_twin_success']:.2f}", flush=True)  # fmt: skip
    return row


def summarise(rows: list[dict]) -> dict:
    def median(key: str) -> float:
        return float(np.median([r[key] for r in rows]))

    return {
        "bc_twin_success_median": median("bc_twin_success"),
        "wm_twin_success_median": median("wm_twin_success"),
        "sim_twin_success_median": median("sim_twin_success"),
        "wm_points_over_bc_median": median("wm_points_over_bc"),
        # Without the model's pick: the first PPO run, as one run would have deployed it.
        "wm_single_run_points_over_bc_median": float(
            np.median([100 * (r["wm_candidates"][1]["twin_success"] - r["bc_twin_success"]) for r in rows])
        ),
        "target_points": 20,
        "imagined_over_sim_env_rate": round(
            median("imagined_env_steps_per_s") / median("sim_env_steps_per_s"), 2
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--demos", type=int, default=3, help="scripted twin demonstrations for BC")
    parser.add_argument("--bc-updates", type=int, default=200)
    parser.add_argument(
        "--start-log-std",
        type=float,
        default=-1.5,
        help="the BC policy's log std: the exploration RL starts from (BC fits the mean only)",
    )
    parser.add_argument(
        "--data-log-std", type=float, default=-1.0, help="the log std the data episodes sample with"
    )
    parser.add_argument("--data-episodes", type=int, default=400, help="twin episodes of the BC policy")
    parser.add_argument(
        "--random-fraction",
        type=float,
        default=0.3,
        help="random actions' share of the steps in half the data episodes",
    )
    parser.add_argument("--wm-updates", type=int, default=5000)
    parser.add_argument("--wm-horizon", type=int, default=10)
    parser.add_argument("--wm-hidden", type=int, default=256)
    parser.add_argument(
        "--halt-multiple",
        type=float,
        default=1.0,
        help="imagined episodes halt above this x the held-out disagreement p99",
    )
    parser.add_argument(
        "--halt-penalty",
        type=float,
        default=10.0,
        help="the reward of an imagined episode halted off the data",
    )
    parser.add_argument(
        "--wm-reward",
        default="dense",
        choices=("dense", "sparse"),
        help="PPO's reward in the model: its reward head, or 1 on predicted success",
    )
    parser.add_argument(
        "--start-from",
        default="first",
        choices=("first", "any"),
        help="imagined episodes start from recorded first frames or any recorded frame",
    )
    parser.add_argument(
        "--imagined-steps", type=int, default=80, help="imagined episode length (max; the task's is 80)"
    )
    parser.add_argument("--steps", type=int, default=100_000, help="PPO env steps, each arm (each candidate)")
    parser.add_argument(
        "--candidates", type=int, default=4, help="PPO runs in the world model; the model picks one"
    )
    parser.add_argument(
        "--imagined-episodes", type=int, default=64, help="imagined greedy episodes scoring each candidate"
    )
    parser.add_argument(
        "--ppo-lr",
        type=float,
        default=1e-4,
        help="PPO's learning rate, both arms (3e-4 clipped 31-45%% of the ratios of a BC start at log std -1.5)",
    )
    parser.add_argument("--critic-warmup", type=int, default=5, help="PPO updates that fit the critic only")
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--gap", type=Path, help="the twin's reality gap: a JSON of randomisation keys")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-world-model"))
    parser.add_argument("--out", type=Path, default=RESULTS / "world_model.json")
    args = parser.parse_args()
    try:
        gap = load_gap(args.gap)
    except BenchmarkError as exc:
        print(f"world_model: {exc}", file=sys.stderr)
        return 2
    twin = {**POLICY_KWARGS, "randomization": gap}
    shutil.rmtree(args.work, ignore_errors=True)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        rows.append(run_seed(seed, args, twin, args.work / f"seed-{seed}"))
        write(args, gap, rows)
    print(json.dumps(write(args, gap, rows), indent=2))
    return 0


def write(args, gap: dict, rows: list[dict]) -> dict:
    summary = summarise(rows)
    task = "FrankaPickLift state policy; the twin (REALITY_GAP) as the real robot"
    write_result(args, "world_model", task, gap, rows, summary)
    return summary


if __name__ == "__main__":
    sys.exit(main())
