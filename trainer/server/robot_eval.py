"""``eval`` mode: a fixed policy on every connected robot, with per-robot success statistics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from protos import robot_link_pb2 as pb
from trainer.server.config import ServeConfig
from trainer.server.episode_runner import run_episode
from trainer.server.policy_driver import PolicyDriver, checkpoint_version
from trainer.server.session import RobotSession, RobotUnavailable

log = logging.getLogger(__name__)

# Robot k (in the order robots first reach this evaluation) plays reset seeds k * stride, k * stride + 1,
# ...: no two robots replay one reset, and the set of seeds is the same from run to run.
EVAL_SEED_STRIDE = 100_000


class Evaluation:
    """Runs a fixed policy on each robot and keeps per-robot success statistics in a JSON file."""

    def __init__(
        self,
        policy_path: str,
        episodes_per_robot: int,
        greedy: bool,
        path: Path,
        robots: int = 0,
        on_finished: Callable[[], None] | None = None,
    ) -> None:
        """``on_finished()`` is called once ``robots`` robots have played all their episodes (0: never)."""
        from policies.factory import load_policy

        self.policy_path, self.episodes_per_robot, self.path = policy_path, episodes_per_robot, path
        self.driver = PolicyDriver(load_policy(policy_path), greedy, checkpoint_version(policy_path))
        self.results: dict[str, dict] = {}
        self.robots, self.on_finished = robots, on_finished
        self.finished: list[str] = []  # robots that played all their episodes, in order

    @classmethod
    def from_config(cls, config: ServeConfig, on_finished: Callable[[], None] | None = None) -> Evaluation:
        """``eval`` mode's evaluation: ``eval.*``, results in ``eval.results_file`` or ``<log_dir>/eval.json``."""
        path = Path(config.eval.results_file or Path(config.log_dir) / "eval.json")
        eval_ = config.eval
        return cls(eval_.policy_path, eval_.episodes_per_robot, eval_.greedy, path, eval_.robots, on_finished)

    def episode_seed(self, robot_id: str) -> int:
        """The reset seed of ``robot_id``'s next episode (see ``EVAL_SEED_STRIDE``)."""
        record = self.results[robot_id]
        return list(self.results).index(robot_id) * EVAL_SEED_STRIDE + record["episodes"] + record["aborted"]

    async def run(self, session: RobotSession, stop: asyncio.Event) -> None:
        problem = self.driver.incompatibility(session)
        if problem:
            log.error("eval: %s; not driving it", problem)
            await session.refuse(f"eval: {problem}")  # the agent hears why, instead of holding forever
            return
        record = self.results.setdefault(session.robot_id, {"episodes": 0, "successes": 0, "aborted": 0})
        while not stop.is_set() and record["episodes"] + record["aborted"] < self.episodes_per_robot:
            try:
                end = await run_episode(
                    session,
                    self.driver.remote_policy(session),
                    seed=self.episode_seed(session.robot_id),
                    policy_version=self.driver.version,
                )
            except (RobotUnavailable, asyncio.TimeoutError):
                return
            if end.kind == pb.EpisodeEvent.ABORTED:
                record["aborted"] += 1
                self._write()
                log.warning("eval %s: episode aborted (%s)", session.robot_id, end.reason)
                if end.robot_left:
                    return
                continue
            record["episodes"] += 1
            record["successes"] += int(end.success)
            record["success_rate"] = record["successes"] / record["episodes"]
            self._write()
            log.info("eval %s: %d/%d successes", session.robot_id, record["successes"], record["episodes"])
        if (
            record["episodes"] + record["aborted"] >= self.episodes_per_robot
            and session.robot_id not in self.finished
        ):
            self.finished.append(session.robot_id)
            if self.robots and len(self.finished) == self.robots and self.on_finished is not None:
                self.on_finished()

    def summary(self) -> list[str]:
        """One line per evaluated robot, then where the results are."""
        lines = [
            f"eval {robot}: {r['successes']}/{r['episodes']} successes"
            + (f" ({r['success_rate']:.2f})" if r["episodes"] else "")
            + (f", {r['aborted']} aborted" if r["aborted"] else "")
            for robot, r in self.results.items()
        ]
        return [*(lines or ["eval: no robot was evaluated"]), f"results in {self.path}"]

    def _write(self) -> None:
        import json

        from protos.atomic_files import write_atomic

        write_atomic(self.path, json.dumps({"policy": self.policy_path, "robots": self.results}, indent=2))


def evaluate_on_robots(server, loop: asyncio.AbstractEventLoop, evaluation: Evaluation) -> dict[str, dict]:
    """Run ``evaluation`` on every connected robot at once (from a thread other than ``loop``'s)."""
    from trainer.server.link_hosting import connected_robots

    async def run_all() -> None:
        stop = asyncio.Event()
        sessions = [server.sessions[robot_id] for robot_id in connected_robots(server)]
        await asyncio.gather(*(evaluation.run(session, stop) for session in sessions))

    asyncio.run_coroutine_threadsafe(run_all(), loop).result()
    evaluation.driver.close()
    return evaluation.results
