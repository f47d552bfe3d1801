"""A trainer and an agent (``link.codec=auto``) in one process, for the shaped-link test: run it in a
network namespace; it prints, four times a second, how the agent's frames come as a JSON line.

    ip netns exec NS python tests/integration/auto_codec_peer.py SECONDS [HEIGHT WIDTH [MAX_DOWNSCALE]]

Each line: how the newest frames came (``frames``), the agent's reason, the measured link, and the
size the trainer decodes the front camera's newest frame to (``decoded``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from link_latency import StaticFramesDriver  # noqa: E402

from protos import link_codec  # noqa: E402
from protos import robot_link_pb2 as pb  # noqa: E402
from robot_agent.agent import Agent, AgentThread  # noqa: E402
from robot_agent.config import AgentConfig, LinkConfig  # noqa: E402
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread  # noqa: E402


def camera_like_frames(height: int, width: int) -> dict[str, np.ndarray]:
    """Two frames that code like a camera's: a smooth scene plus sensor noise (sigma 6)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    scene = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
    return {
        name: np.clip(scene + rng.normal(0, 6, scene.shape), 0, 255).astype(np.uint8)
        for name in ("front", "wrist")
    }


DECODED: dict[str, list[int]] = {}  # camera -> the shape the newest observation's frame decodes to


async def answer(server: LinkServer) -> None:
    session = await server.wait_for_robot(timeout=30)
    chunk = np.zeros((1, 7), np.float32)
    last, started, in_episode = -1, False, False
    while True:
        if not started:
            session.send_command(pb.Command.START_EPISODE)  # episodes back to back (300 steps each)
            started = True
        obs = await session.next_observation(last, timeout=10)
        last = obs.seq
        if obs.frames and obs.frames[0].codec != pb.CODEC_RING:
            DECODED.update(
                (k, list(v.shape)) for k, v in link_codec.decode_images(obs.frames, session.spec).items()
            )
        if obs.episode_id:
            session.send_actions(chunk, obs.seq)
        elif in_episode:
            started = False  # that episode ended
        in_episode = bool(obs.episode_id)


def main() -> None:
    seconds = float(sys.argv[1])
    height, width = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (240, 320)
    max_downscale = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    server = LinkServerThread(LinkServer(LinkServerConfig(host="127.0.0.1", port=0))).start()
    with tempfile.TemporaryDirectory() as spool:
        link = LinkConfig(server=f"127.0.0.1:{server.server.port}", insecure=True, codec="auto",
                          frame_ring_slots=0, probe_interval_s=0.5, max_downscale=max_downscale)  # no ring: this stands for another host  # fmt: skip
        config = AgentConfig(robot_id="auto", spool_dir=spool, link=link)
        agent = AgentThread(
            Agent(StaticFramesDriver(camera_like_frames(height, width), 30.0, 300), config)
        ).start()
        asyncio.run_coroutine_threadsafe(answer(server.server), server.loop)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            session = server.server.sessions.get("auto")
            if session is not None and session.stats.frames:
                link = agent.agent.control.codec.meter.estimate()
                print(json.dumps({"frames": session.stats.frames, "reason": session.stats.codec_reason,
                                  "mbit_s": link and round(link.mbit_s), "probes": session.stats.probes,
                                  "decoded": DECODED.get("front")}), flush=True)  # fmt: skip
            time.sleep(0.25)
        agent.stop()
        server.stop()


if __name__ == "__main__":
    main()
