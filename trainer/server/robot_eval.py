"""``eval`` mode: a fixed policy on every connected robot, with per-robot success statistics."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from protos import robot_link_pb2 as pb
from trainer.server.config import ServeConfig
from trainer.server.episode_runner import run_episode
from trainer.server.policy_driver import PolicyDriver
from trainer.server.session import RobotSession, RobotUnavailable

log = logging.getLogger(__name__)


class Evaluation:
    """Runs a fixed policy on each robot and keeps per-robot success statistics in a JSON file."""

    def __init__(self, config: ServeConfig) -> None:
        from policies.factory import load_policy

        self.config = config
        self.driver = PolicyDriver(load_policy(config.eval.policy_path), greedy=config.eval.greedy)
        self.path = Path(config.eval.results_file or Path(config.log_dir) / "eval.json")
        self.results: dict[str, dict] = {}

    async def run(self, session: RobotSession, stop: asyncio.Event) -> None:
        problem = self.driver.incompatibility(session)
        if problem:
            log.error("eval: %s; not driving it", problem)
            return
        record = self.results.setdefault(session.robot_id, {"episodes": 0, "successes": 0, "aborted": 0})
        while (
            not stop.is_set() and record["episodes"] + record["aborted"] < self.config.eval.episodes_per_robot
        ):
            try:
                end = await run_episode(
                    session, self.driver.remote_policy(session), seed=record["episodes"] + record["aborted"]
                )
            except (RobotUnavailable, asyncio.TimeoutError):
                return
            if end.kind == pb.EpisodeEvent.ABORTED:
                record["aborted"] += 1
                if end.robot_left:
                    return
                continue
            record["episodes"] += 1
            record["successes"] += int(end.success)
            record["success_rate"] = record["successes"] / record["episodes"]
            self._write()
            log.info("eval %s: %d/%d successes", session.robot_id, record["successes"], record["episodes"])

    def _write(self) -> None:
        import json

        from protos.atomic_files import write_atomic

        write_atomic(
            self.path, json.dumps({"policy": self.config.eval.policy_path, "robots": self.results}, indent=2)
        )
