"""HG-DAgger on FrankaPickLift: the sim twin behind a real agent, its scripted expert as "the human".

1. ``--demos`` demonstrations: ``rlinf-robot teleop`` with the expert driving (a local LeRobot v3 dataset).
2. BC on them: the BC-only starting point.
3. ``--rounds`` HG-DAgger rounds (``rlinf-trainer serve server.mode=dagger``): the policy drives each of
   ``--episodes`` episodes, the gated expert takes over when the arm strays, BC refits on demos +
   every intervention so far.
4. Every policy (start and each round) is scored greedily, with nobody intervening, on ``--eval-seeds``
   held-out seeds in-process. A BC-only policy fitted on as many expert frames as HG-DAgger used in
   total (more demos) is scored too: the fair comparison.

The twin runs with privileged state (object poses; a stand-in for a perception module) so that a state
MLP can learn the task in a few rounds. The same loop fits CNN policies from the recorded cameras
(``trainer/algorithms/bc.py``; ``benchmarks/bc_image.py`` measures image BC), at many more demos.

    python benchmarks/hg_dagger.py [--demos 3] [--rounds 5] [--episodes 4] [--eval-seeds 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import threading
import time
from pathlib import Path

import torch

import sim_envs
from policies import make_policy
from policies.base import to_tensors
from policies.factory import load_policy
from robot_agent.config import AgentConfig
from robot_agent.drivers import make_driver
from robot_agent.recording import LocalDataset
from robot_agent.spool import EpisodeSpool
from robot_agent.teleop import make_teleop
from robot_agent.teleop_session import TeleopSession
from trainer.algorithms.bc import Regression
from trainer.algorithms.demonstrations import Demonstrations, load_demonstrations
from trainer.server.config import load_serve_config
from trainer.server.dagger import dagger

RESULTS = Path(__file__).with_name("results")
POLICY = {"hidden_sizes": [256, 256], "value_head": False, "activation": "relu"}


def twin_config(hz: float) -> dict:
    return {
        "task": "pick_lift",
        "cameras": [],
        "control_hz": hz,
        "randomization": "none",
        "privileged_state": True,
    }


def record_demos(root: Path, work: Path, episodes: int, twin: dict, seed: int) -> None:
    driver = make_driver("sim-twin", twin)
    config = AgentConfig(robot_id="twin", spool_dir=str(work / "spool"))
    spool = EpisodeSpool(work / "spool" / f"demos-{seed}")
    dataset = LocalDataset(root, spool, driver.spec, "twin")
    TeleopSession(
        driver, config, spool, dataset, make_teleop("expert", {"mode": "always"}), episodes, seed
    ).run()


def fit_bc(spec, datasets: list[Path], updates: int, seed: int):
    torch.manual_seed(seed)
    policy = make_policy(spec, POLICY)
    demos = Demonstrations.concatenate(
        [load_demonstrations(d, "complementary_info.human_action", "interventions") for d in datasets]
    )
    regression = Regression(policy, learning_rate=1e-3, batch_size=256)
    regression.set_data(demos)
    regression.fit(updates)
    return policy.eval(), len(demos)


@torch.no_grad()
def success_rate(policy, twin: dict, seeds: list[int]) -> float:
    env = sim_envs.franka_env.FrankaEnv(
        task="pick_lift", cameras=(), control_hz=twin["control_hz"], privileged_state=True
    )
    successes = 0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        for _ in range(env.max_episode_steps):
            batch = to_tensors(
                {"state": obs["state"][None], "images": {}, "instruction": [obs["instruction"]]}
            )
            obs, _, terminated, truncated, info = env.step(
                policy.act(batch, mode="greedy").actions[0, 0].numpy()
            )
            if info.get("success"):
                successes += 1
                break
            if terminated or truncated:
                break
    env.close()
    return successes / len(seeds)


def run_dagger(work: Path, start: Path, demos: Path, twin: dict, args) -> list[dict]:
    config = load_serve_config(None, [
        "server.mode=dagger", "server.insecure=true", "server.host=127.0.0.1", "server.port=0",
        f"data.record_dir={work / 'interventions'}", f"log_dir={work / 'serve'}",
        f"dagger.policy_path={start}", f"dagger.datasets=[{demos}]", f"dagger.rounds={args.rounds}",
        f"dagger.episodes_per_round={args.episodes}", f"dagger.updates_per_round={args.updates}",
        f"dagger.seed={args.seed + 10_000}",
    ])  # fmt: skip
    from robot_agent.agent import Agent, AgentThread
    from robot_agent.config import LinkConfig

    agents = []

    def on_started(link) -> None:
        expert = make_teleop(
            "expert", {"mode": "gated", "patience": args.patience, "takeover_ticks": args.takeover}
        )
        agent_config = AgentConfig(robot_id="twin", spool_dir=str(work / "agent-spool"),
                                   link=LinkConfig(server=f"127.0.0.1:{link.port}", insecure=True))  # fmt: skip
        agents.append(AgentThread(Agent(make_driver("sim-twin", twin), agent_config, teleop=expert)).start())

    try:
        return dagger(config, on_started=on_started)
    finally:
        for agent in agents:
            agent.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--demos", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=4, help="HG-DAgger episodes per round")
    parser.add_argument("--updates", type=int, default=1500, help="BC updates per fit")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--takeover", type=int, default=10)
    parser.add_argument("--eval-seeds", type=int, default=20)
    parser.add_argument("--hz", type=float, default=25.0, help="the twin's control rate (real time)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("runs/bench-hg-dagger"))
    parser.add_argument("--out", type=Path, default=RESULTS / "hg_dagger.json")
    args = parser.parse_args()
    import shutil

    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    torch.set_num_threads(1)
    twin = twin_config(args.hz)
    seeds = list(range(1_000_000, 1_000_000 + args.eval_seeds))
    started = time.monotonic()

    demos = args.work / "demos"
    record_demos(demos, args.work, args.demos, twin, args.seed)
    spec = make_driver("sim-twin", twin).spec
    policy, demo_frames = fit_bc(spec, [demos], args.updates, args.seed)
    start = args.work / "bc_start.pt"
    policy.save(start)
    start_success = success_rate(policy, twin, seeds)
    print(f"BC-only start: {args.demos} demos ({demo_frames} frames), success {start_success:.2f}")

    rows = run_dagger(args.work, start, demos, twin, args)
    curve = []
    for row in rows:
        row["eval_success_rate"] = success_rate(load_policy(row["policy"]), twin, seeds)
        curve.append(row)
        print(f"round {row['round']}: intervention rate {row['intervention_rate']:.2f} "
              f"({row['intervened_steps']} of {row['steps']} steps), training frames {row['training_frames']}, "
              f"held-out success {row['eval_success_rate']:.2f}")  # fmt: skip
    expert_frames = demo_frames + sum(r["intervened_steps"] for r in rows)

    # Fair comparison: BC on demos alone, with as many expert frames as HG-DAgger had in total.
    extra = args.work / "more-demos"
    while True:
        have = demo_frames + (
            len(load_demonstrations(extra, "complementary_info.human_action", "interventions"))
            if extra.exists()
            else 0
        )
        if have >= expert_frames:
            break
        record_demos(extra, args.work, 1, twin, args.seed + 500 + have)
    matched, matched_frames = fit_bc(spec, [demos, extra], args.updates, args.seed)
    matched_success = success_rate(matched, twin, seeds)
    print(f"BC-only on {matched_frames} demo frames (matched): success {matched_success:.2f}")

    result = {
        "benchmark": "hg_dagger",
        "task": "FrankaPickLift (sim twin behind a real agent, privileged state, no randomisation)",
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "settings": vars(args) | {"work": str(args.work), "out": str(args.out)},
        "eval_seeds": len(seeds),
        "bc_start": {"demos": args.demos, "frames": demo_frames, "success_rate": start_success},
        "rounds": curve,
        "expert_frames_total": expert_frames,
        "bc_matched": {"frames": matched_frames, "success_rate": matched_success},
        "wall_s": time.monotonic() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


def plot(result: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rounds = [r["round"] + 1 for r in result["rounds"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([0, *rounds], [result["bc_start"]["success_rate"], *[r["eval_success_rate"] for r in result["rounds"]]],
            "o-", label="held-out success (no help)")  # fmt: skip
    # Round r's episodes were driven by the policy before round r's fit: policy r on this axis.
    ax.plot([r - 1 for r in rounds], [r["intervention_rate"] for r in result["rounds"]], "s--",
            label="intervention rate while it drove")  # fmt: skip
    ax.axhline(result["bc_matched"]["success_rate"], color="grey", ls=":", label="BC, matched expert frames")
    ax.set_xlabel("policy after N HG-DAgger rounds (0 = BC-only start)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend()
    ax.set_title("HG-DAgger on FrankaPickLift (sim twin)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    threading.current_thread().name = "main"
    main()
