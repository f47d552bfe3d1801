"""Scripted-expert episodes of a sim task written as a LeRobot v3 dataset: the demos that behaviour
cloning and VLA SFT start from (``rlinf-trainer demos``).

Each episode is played by the task's scripted expert from ``reset(seed)`` (ours for the Franka tasks,
the suite's own where it ships one: MetaWorld); the dataset keeps what
the *policy* would see (the env's configured cameras and state, privileged or not), the expert's
actions, rewards and success, and the episode's own instruction as its task text.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DEMO_SEED = 10_000  # demo seeds start here, away from the seeds training and evaluation reset from


@dataclass(frozen=True)
class DemoConfig:
    env_id: str = "rlinf/FrankaPickColor-v0"
    episodes: int = 20
    root: str = "runs/demos"
    seed: int = DEMO_SEED
    only_successful: bool = True  # keep the expert's failures out of the dataset
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    # DART: the env carries out the expert's action plus this much Gaussian noise; the label stays clean.
    action_noise: float = 0.0
    # A saved state policy that acts instead of the scripted expert (teacher-student distillation:
    # the dataset keeps what the env shows, e.g. cameras, and the teacher's actions as labels).
    teacher: str = ""


@dataclass(frozen=True)
class DemoSummary:
    written: int
    played: int
    frames: int
    root: Path

    def line(self) -> str:
        return f"{self.written} episodes ({self.frames} frames) of {self.played} played -> {self.root}"


def record_expert_demos(config: DemoConfig, progress: bool = True) -> DemoSummary:
    """Play ``episodes`` kept scripted episodes (more are played if failures are dropped) into
    ``root``, appending when a dataset is there already."""
    from tqdm import tqdm

    import sim_envs
    from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter, VideoFormat
    from sim_envs.scripted import play_expert

    env = sim_envs.make(config.env_id, **config.env_kwargs)
    spec = env.env_spec
    teacher = None
    if config.teacher:
        from trainer.policy_teacher import PolicyTeacher

        try:
            teacher = PolicyTeacher(config.teacher, env)
        except ValueError:
            env.close()
            raise
    who = "the teacher" if teacher else "the scripted expert"
    # Lossless video: at 64 px a cube is a few pixels, and 4:2:0 chroma would blur which colour it is.
    writer = LeRobotWriter(Path(config.root), fps=spec.control_hz, video=VideoFormat.lossless())
    written = played = frames = 0
    try:
        with tqdm(
            total=config.episodes, desc=f"demos {config.env_id}", unit="episode", disable=not progress
        ) as bar:
            while written < config.episodes:
                if played >= 3 * config.episodes + 10:
                    raise RuntimeError(
                        f"{who} succeeded in only {written} of {played} episodes of {config.env_id}"
                    )
                episode = play_expert(env, config.seed + played, config.action_noise, teacher)
                played += 1
                if config.only_successful and not episode.success:
                    continue
                n = len(episode.actions)
                writer.add_episode(
                    EpisodeFrames(
                        task=episode.instruction,
                        images=episode.images,
                        vectors={"observation.state": episode.states, "action": episode.actions},
                        scalars={
                            "next.reward": episode.rewards,
                            "next.done": np.arange(n) == n - 1,
                            "next.success": episode.successes,
                        },
                        extra={"success": bool(episode.success)},
                        names={"observation.state": spec.state_names(), "action": list(spec.action.names)},
                    )
                )
                written += 1
                frames += n
                bar.update(1)
    finally:
        env.close()
    return DemoSummary(written, played, frames, Path(config.root))


def record_expert_demos_in(python: str, config: DemoConfig) -> int:
    """:func:`record_expert_demos` in another interpreter, a suite's own venv (MetaWorld pins its
    MuJoCo: ``.venv-metaworld/bin/python``); its progress and summary print here. The exit code."""
    from sim_envs.vector import check_interpreter

    check_interpreter(python, "--python")
    return subprocess.run([python, "-m", "trainer.expert_demos", json.dumps(asdict(config))]).returncode


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer.expert_demos '<DemoConfig as JSON>'``: the recorder that
    ``rlinf-trainer demos --python`` starts (no YAML or CLI parsing in a suite's venv)."""
    try:
        config = DemoConfig(**json.loads((argv or sys.argv[1:])[0]))
        summary = record_expert_demos(config)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
