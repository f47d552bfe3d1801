"""The live table of connected robots on the console (rich), and the same figures in TensorBoard."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np

from trainer.server.link_server import LinkServer


def safety_summary(events) -> str:
    """The two most frequent safety events of a robot, e.g. ``clipped:workspace 12, held:no_action 3``."""
    return ", ".join(f"{event} {count}" for event, count in events.most_common(2)) or "-"


class Console:
    """A live table of the connected robots (rich), plus the same figures in TensorBoard."""

    def __init__(self, server: LinkServer, log_dir: str) -> None:
        from rich.console import Console as RichConsole
        from rich.live import Live
        from torch.utils.tensorboard import SummaryWriter

        self.server = server
        self.live = Live(self.table(), console=RichConsole(stderr=True), refresh_per_second=2)
        self.writer = SummaryWriter(log_dir)
        self.ticks = 0

    def table(self):
        from rich.table import Table

        table = Table(title="robots")
        columns = (
            "robot",
            "kind",
            "state",
            "rate Hz",
            "reply ms p50",
            "frame age ms",
            "frames",
            "episodes",
            "policy v",
            "safety",
            "errors",
        )
        for column in columns:
            table.add_column(column)
        for session in self.server.sessions.values():
            stats = session.stats
            replies, ages = list(stats.reply_ms), list(stats.frame_age_ms)
            table.add_row(
                session.robot_id,
                session.robot_kind,
                session.state,
                f"{stats.rate_hz():.1f}",
                f"{np.median(replies):.1f}" if replies else "-",
                f"{np.median(ages):.1f}" if ages else "-",
                stats.frames or "-",
                str(stats.episodes_stored),
                str(stats.policy_version),
                safety_summary(stats.safety_events),
                str(stats.errors),
            )
        reasons = [
            f"{s.robot_id}: {s.stats.codec_reason}"
            for s in self.server.sessions.values()
            if s.stats.codec_reason
        ]
        table.caption = "\n".join(reasons) or None  # why each robot's frames come as they do
        return table

    async def run(self, stop: asyncio.Event) -> None:
        with self.live:
            while not stop.is_set():
                self.live.update(self.table())
                self.ticks += 1
                for session in self.server.sessions.values():
                    tag = f"robots/{session.robot_id}"
                    self.writer.add_scalar(f"{tag}/rate_hz", session.stats.rate_hz(), self.ticks)
                    self.writer.add_scalar(f"{tag}/episodes", session.stats.episodes_stored, self.ticks)
                    if session.stats.frame_age_ms:
                        age = float(np.median(session.stats.frame_age_ms))
                        self.writer.add_scalar(f"{tag}/frame_age_ms_p50", age, self.ticks)
                    for event, count in session.stats.safety_events.items():
                        self.writer.add_scalar(f"{tag}/safety/{event}", count, self.ticks)
                    if session.stats.reply_ms:
                        self.writer.add_scalar(
                            f"{tag}/reply_ms_p50", float(np.median(session.stats.reply_ms)), self.ticks
                        )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        self.writer.close()
