"""``server.mode=dagger``: rounds of DAgger / HG-DAgger on connected robots, read top to bottom.

Each round:

1. every connected robot runs ``episodes_per_round`` episodes under the current policy, while its
   agent's teleop device (a person, or the sim twin's scripted expert) takes over when the robot
   strays (HG-DAgger) or labels every state (DAgger). The episodes are recorded as in ``collect``;
2. the aggregated dataset (every round so far, plus ``dagger.datasets``) is read back, and the
   policy is fitted to the human's actions: the intervened frames only (HG-DAgger,
   ``only_interventions``), or every labelled frame (DAgger);
3. the new policy is saved as ``<output_dir>/round_<r>/policy/`` and a row goes to
   ``<output_dir>/metrics.jsonl``: episodes, steps, the intervention rate, success with and
   without help, the fit's loss.

A restarted run continues after the newest saved round; the recorded episodes are on disk already.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from pathlib import Path

from protos.lerobot_dataset import DatasetError
from protos.user_error import UserError
from trainer.server.config import ServeConfig
from trainer.server.episode_runner import EpisodeEnd, run_episode
from trainer.server.link_hosting import HostedLink, wait_for_robots
from trainer.server.session import RobotSession, RobotUnavailable

log = logging.getLogger(__name__)


class DaggerError(UserError, RuntimeError):
    """A DAgger run cannot go on (no robot, no labelled frames, a dataset that does not fit)."""


_ROUND = re.compile(r"^round_(\d{3,})$")


def saved_rounds(output_dir: Path) -> list[Path]:
    """``round_<r>`` folders that hold a policy, oldest first."""
    if not output_dir.is_dir():
        return []
    rounds = [
        p for p in output_dir.iterdir() if _ROUND.match(p.name) and (p / "policy" / "policy.json").is_file()
    ]
    return sorted(rounds, key=lambda p: int(_ROUND.match(p.name).group(1)))


async def collect_round(sessions: list[RobotSession], driver, episodes: int, seed: int) -> list[EpisodeEnd]:
    """``episodes`` episodes on each robot at once; returns every end event."""

    async def on_robot(index: int, session: RobotSession) -> list[EpisodeEnd]:
        problem = driver.incompatibility(session)
        if problem:
            log.error("dagger: %s; not driving it", problem)
            return []
        ends = []
        for episode in range(episodes):
            try:
                end = await run_episode(
                    session,
                    driver.remote_policy(session),
                    seed=seed + 1000 * index + episode,
                    policy_version=driver.version,
                )
            except (RobotUnavailable, asyncio.TimeoutError):
                break
            ends.append(end)
            if end.robot_left:
                break
        return ends

    results = await asyncio.gather(*(on_robot(i, s) for i, s in enumerate(sessions)))
    return [end for ends in results for end in ends]


def round_statistics(frames, episodes, episode_ids: set[str]) -> dict[str, float]:
    """Intervention rate and success of this round's episodes, from the recorded dataset."""
    rows = episodes[episodes["episode_id"].isin(episode_ids)]
    mine = frames[frames["episode_index"].isin(rows["episode_index"])]
    intervened = mine.groupby("episode_index")["intervention"].sum()
    helped = rows["episode_index"].map(intervened).fillna(0) > 0
    steps = len(mine)
    return {
        "episodes": len(rows),
        "steps": steps,
        "intervened_steps": int(mine["intervention"].sum()),
        "intervention_rate": float(mine["intervention"].mean()) if steps else 0.0,
        "episodes_with_help": int(helped.sum()),
        "success_rate": float(rows["success"].mean()) if len(rows) else 0.0,
        # success the policy reached on its own: episodes nobody had to touch
        "autonomous_success_rate": float((rows["success"] & ~helped).mean()) if len(rows) else 0.0,
    }


def read_dataset(root: str):
    """(frames, episode rows) of a LeRobot v3 dataset."""
    from protos.lerobot_reader import read_episodes, read_frames

    return read_frames(root), read_episodes(root)


class DaggerLoop:
    """The round loop on a running link server (see the module docstring)."""

    def __init__(self, config, link, loop: asyncio.AbstractEventLoop, sink) -> None:
        import torch

        from policies.factory import load_policy
        from trainer.algorithms.bc import Regression
        from trainer.server.policy_driver import PolicyDriver

        self.config, self.section = config, config.dagger
        self.link, self.loop, self.sink = link, loop, sink
        self.output_dir = Path(self.section.output_dir or Path(config.log_dir) / "dagger")
        saved = saved_rounds(self.output_dir)
        start = saved[-1] / "policy" if saved else Path(self.section.policy_path)
        self.first_round = int(_ROUND.match(saved[-1].name).group(1)) + 1 if saved else 0
        if saved:
            log.info("dagger: continuing after %s", saved[-1])
        self.policy = load_policy(start)
        self.driver = PolicyDriver(self.policy, greedy=self.section.greedy)
        self.regression = Regression(self.policy, self.section.learning_rate, self.section.batch_size)
        torch.manual_seed(config.dagger.seed)

    def run(self) -> list[dict]:
        rows = []
        for round_index in range(self.first_round, self.section.rounds):
            rows.append(self.run_round(round_index))
        return rows

    def run_round(self, round_index: int) -> dict:
        started = time.monotonic()
        sessions = [s for s in self.link.sessions.values() if s.state != "disconnected"]
        if not sessions:
            raise DaggerError("dagger: no robot is connected")
        seed = self.section.seed + 100_000 * round_index
        self.driver.version = round_index  # the policy of round r drives round r's episodes
        future = asyncio.run_coroutine_threadsafe(
            collect_round(sessions, self.driver, self.section.episodes_per_round, seed), self.loop
        )
        ends = future.result()
        ids = {end.episode_id for end in ends if end.num_steps > 0}
        self._wait_stored(ids)
        frames, episodes = read_dataset(self.config.data.record_dir)
        stats = round_statistics(frames, episodes, ids)
        try:
            demos = self._training_demonstrations()
            self.regression.set_data(demos)
        except DatasetError as exc:
            raise DaggerError(f"dagger: {exc}") from None
        loss = self.regression.fit(self.section.updates_per_round)
        self.policy.eval()
        path = self._save(round_index)
        row = {
            "round": round_index,
            "robots": len(sessions),
            **stats,
            "training_frames": len(demos),
            "bc_loss": loss,
            "policy": str(path),
            "wall_s": time.monotonic() - started,
        }
        with open(self.output_dir / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps(row) + "\n")
        log.info("dagger round %d: %d episodes, intervention rate %.2f, success %.2f (alone %.2f), "
                 "%d training frames", round_index, stats["episodes"], stats["intervention_rate"],
                 stats["success_rate"], stats["autonomous_success_rate"], len(demos))  # fmt: skip
        return row

    def _training_demonstrations(self):
        """Every round's frames so far plus ``dagger.datasets``: the intervened ones, or every labelled one."""
        from trainer.algorithms.bc import policy_demonstrations
        from trainer.algorithms.demonstrations import Demonstrations

        selection = "interventions" if self.section.only_interventions else "labelled"
        roots = [self.config.data.record_dir, *self.section.datasets]
        demos = Demonstrations.concatenate(
            [policy_demonstrations(self.policy, root, self.section.action_key, selection) for root in roots]
        )
        if len(demos) == 0 and self.section.only_interventions:
            raise DaggerError("dagger: nobody has intervened yet, so there is nothing to learn from")
        if len(demos) == 0:
            raise DaggerError(f"dagger: no frame has a {self.section.action_key!r} label yet")
        return demos

    def _wait_stored(self, episode_ids: set[str], timeout_s: float = 60.0) -> None:
        """Until every episode of the round is in the dataset (an incomplete one arrives by upload)."""
        deadline = time.monotonic() + timeout_s
        while True:
            stored = self.link.store_executor.submit(lambda: {i for i in episode_ids if self.sink.has(i)})
            missing = episode_ids - stored.result()
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if missing:
            log.warning("dagger: %d episode(s) of this round never reached the dataset", len(missing))

    def _save(self, round_index: int) -> Path:
        path = self.output_dir / f"round_{round_index:03d}" / "policy"
        self.policy.save(path)  # atomic: a killed run never leaves half a policy
        return path


def dagger(config: ServeConfig, on_started=None) -> list[dict]:
    """``dagger`` mode: :class:`DaggerLoop` rounds on the robots connected to a hosted link."""
    with HostedLink(config, mode=f"dagger, {config.dagger.rounds} rounds") as hosted:
        link = hosted.server
        if on_started is not None:
            on_started(link)
        loop = DaggerLoop(config, link, hosted.loop, link.sink)
        wait_for_robots(link, config.dagger.min_robots, config.dagger.wait_timeout_s, "dagger.min_robots")
        return loop.run()
