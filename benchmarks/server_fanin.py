"""Server fan-in: 1, 4 and 8 sim-twin agents at 20 Hz with two 224x224 cameras into one trainer link server.

Each agent is its own ``rlinf-robot connect`` process (MuJoCo twin, JPEG q90). The server, in this
process, answers every observation after decoding both frames in a thread pool, as the remote env
does. Reported per fleet size, over --seconds of steady streaming:
  * per robot: observations/s reaching the server (target 20), reply latency p50 / p99 (receipt ->
    frames decoded -> chunk sent), and the agents' own count of missed ticks is in their logs;
  * frames decoded per second, in total;
  * CPU: the server process's share of the machine, and the whole machine's busy share, which
    says where the limit is on this 2-core box.

    python benchmarks/server_fanin.py [--fleets 1 4 8] [--seconds 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protos import link_codec  # noqa: E402
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread  # noqa: E402
from trainer.server.session import RobotSession, RobotUnavailable  # noqa: E402


def cpu_seconds_self() -> float:
    times = os.times()
    return times.user + times.system


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies from /proc/stat."""
    fields = [float(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


class Responder:
    """Answer each robot's newest observation after decoding its frames off the event loop."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="decode")
        self.frames_decoded = 0

    async def serve(self, session: RobotSession) -> None:
        loop = asyncio.get_running_loop()
        chunk = np.zeros((1, session.spec.action.dim), np.float32)
        chunk[0, -1] = 1.0
        session.send_command(1)  # START_EPISODE: the twin streams its episode
        last = -1
        try:
            while True:
                obs = await session.next_observation(last, timeout=30)
                last = obs.seq
                if not obs.episode_id:
                    continue
                if obs.transition.truncated or obs.transition.terminated:
                    session.send_command(1)
                await asyncio.gather(*(
                    loop.run_in_executor(self.pool, link_codec.decode_frame, f, session.spec.camera(f.camera))
                    for f in obs.frames
                ))  # fmt: skip
                self.frames_decoded += len(obs.frames)
                session.send_actions(chunk, obs.seq)
        except (RobotUnavailable, asyncio.TimeoutError):
            return


def run_fleet(size: int, seconds: float, workdir: Path) -> dict:
    responder = Responder()
    server = LinkServerThread(
        LinkServer(LinkServerConfig(host="127.0.0.1", port=0), on_session=responder.serve)
    ).start()
    config = workdir / "twin.json"
    config.write_text(json.dumps({"driver": {"task": "reach", "control_hz": 20.0, "image_size": 224,
                                             "max_episode_steps": 400}}))  # fmt: skip
    agents = [
        subprocess.Popen(
            [
                str(Path(sys.executable).with_name("rlinf-robot")),
                "connect",
                "--server",
                f"127.0.0.1:{server.server.port}",
                "--robot",
                "sim-twin",
                "--insecure",
                "--robot-config",
                str(config),
                "--robot-id",
                f"twin-{i}",
                "--spool-dir",
                str(workdir / "spool"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(size)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(server.server.sessions) < size and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3.0)  # warm up: renderers, first episodes
        counts = {rid: s.stats.observations for rid, s in server.server.sessions.items()}
        replies = {rid: len(s.stats.reply_ms_all) for rid, s in server.server.sessions.items()}
        frames, cpu, busy = responder.frames_decoded, cpu_seconds_self(), machine_busy()
        start = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - start
        cpu = cpu_seconds_self() - cpu
        busy_after = machine_busy()
        frames = responder.frames_decoded - frames
        per_robot = {}
        for rid, session in server.server.sessions.items():
            samples = list(session.stats.reply_ms_all)[replies.get(rid, 0) :]
            per_robot[rid] = {
                "obs_per_s": (session.stats.observations - counts.get(rid, 0)) / elapsed,
                "reply_p50_ms": float(np.percentile(samples, 50)) if samples else None,
                "reply_p99_ms": float(np.percentile(samples, 99)) if samples else None,
            }
    finally:
        for agent in agents:
            agent.terminate()
        for agent in agents:
            agent.wait(30)
        server.stop()
    rates = [r["obs_per_s"] for r in per_robot.values()]
    p50s = [r["reply_p50_ms"] for r in per_robot.values() if r["reply_p50_ms"] is not None]
    p99s = [r["reply_p99_ms"] for r in per_robot.values() if r["reply_p99_ms"] is not None]
    return {
        "robots": size,
        "obs_per_s_per_robot_median": float(np.median(rates)) if rates else 0.0,
        "obs_per_s_total": float(np.sum(rates)),
        "reply_p50_ms_median": float(np.median(p50s)) if p50s else None,
        "reply_p99_ms_max": float(np.max(p99s)) if p99s else None,
        "frames_decoded_per_s": frames / elapsed,
        "server_cpu_share_of_machine": cpu / elapsed / os.cpu_count(),
        "machine_busy_share": (busy_after[0] - busy[0]) / max(1.0, busy_after[1] - busy[1]),
        "per_robot": per_robot,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fleets", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "server_fanin.json")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.fleets:
            result = run_fleet(size, args.seconds, Path(tmp))
            results.append(result)
            print(
                f"{size} robot(s): {result['obs_per_s_per_robot_median']:.1f} obs/s per robot (target 20), "
                f"reply p50 {result['reply_p50_ms_median'] or 0:.1f} ms / worst p99 {result['reply_p99_ms_max'] or 0:.1f} ms, "
                f"{result['frames_decoded_per_s']:.0f} frames/s decoded, server CPU {100 * result['server_cpu_share_of_machine']:.0f} % "
                f"of the machine, machine busy {100 * result['machine_busy_share']:.0f} %"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"benchmark": "server_fanin", "cpus": os.cpu_count(), "fleets": results}, indent=2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
