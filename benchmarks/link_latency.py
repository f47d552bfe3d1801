"""Robot-link latency: observation -> action round trip through the real agent and trainer link server.

Payload (as in shared/PERFORMANCE_ANCHORS.md): two 640x480 RGB frames of the rendered MuJoCo scene,
a float32[16] state and the instruction up; a float32[50, 7] action chunk down. The agent is the real
one (control loop, JPEG in 2 threads, asyncio grpc, spool); the trainer side is the real link server,
decoding both frames in a 2-thread pool before it answers. Loopback, insecure (TLS is measured apart).

Reported, in one run:
  * the codec floor: 2 JPEG encodes + 2 decodes of the same frames, 1 thread and 2 threads;
  * at 30 Hz for --duration s: round trip p50/p99, late (> 33 ms) and missed ticks, dropped frames;
  * at --max-hz: the action rate the link sustains and its round trip.
Target: p99 <= 1.3 x floor(1 thread) + 2 ms, and 30 Hz with 0 drops (the issue asks for 10 min:
--duration 600).

    python benchmarks/link_latency.py [--duration 60] [--max-hz 100] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import sim_envs  # first: picks the headless GL backend
from protos import franka, link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from robot_agent.agent import Agent, AgentThread
from robot_agent.config import AgentConfig, LinkConfig
from robot_agent.drivers.base import DriverCapabilities, DriverObservation, RobotDriver, StepOutcome
from robot_agent.safety import ArmScaling
from trainer.server.episodes import CountingEpisodeSink
from trainer.server.frame_decoder import CpuFrameDecoder
from trainer.server.link_server import LinkServer, LinkServerConfig

HEIGHT, WIDTH, CHUNK = 480, 640, 50


def render_scene_frames(sensor_noise: float) -> dict[str, np.ndarray]:
    """The MuJoCo scene from both cameras, plus Gaussian sensor noise (a flat render compresses far
    better than a real camera image: sigma 6 brings JPEG q90 to the anchors' ~64 KB per frame)."""
    env = sim_envs.make("rlinf/FrankaPickLift-v0", image_height=HEIGHT, image_width=WIDTH)
    obs, _ = env.reset(seed=0)
    env.close()
    rng = np.random.default_rng(0)
    return {
        name: np.clip(image + rng.normal(0.0, sensor_noise, image.shape), 0, 255).astype(np.uint8)
        for name, image in obs["images"].items()
    }


class StaticFramesDriver(RobotDriver):
    """A driver that 'captures' fixed rendered frames: isolates the link from physics and cameras.

    ``wait_for_answer`` (lockstep): called before each capture; blocks until the trainer answered
    the previous observation, so one observation is in flight at a time, as a lockstep client's."""

    kind = "bench"
    embodiment = franka.PANDA

    def __init__(self, frames: dict[str, np.ndarray], control_hz: float, episode_steps: int) -> None:
        self.frames = frames
        self.wait_for_answer: Callable[[], object] | None = None
        self.spec = EnvSpec(
            name="bench/link",
            cameras=tuple(CameraSpec(n, *f.shape[:2], control_hz) for n, f in frames.items()),
            state_fields=(StateField("joint_pos", 7), StateField("tcp_pos", 3), StateField("tcp_quat", 4),
                          StateField("gripper_width", 1), StateField("pad", 1)),
            action=ee_delta_action_space(),
            control_hz=control_hz,
            instruction="pick up the cube",
            max_episode_steps=episode_steps,
        )  # fmt: skip
        self.capabilities = DriverCapabilities(reset=True)
        self.arms = (ArmScaling(0.05, 0.3),)
        self.state = np.zeros(16, np.float32)
        self.state[7:10] = (0.5, 0.0, 0.3)
        self.state[10:14] = (0.0, 1.0, 0.0, 0.0)  # gripper pointing down: a real orientation

    def reset(self, seed=None) -> None:
        pass

    def observe(self) -> DriverObservation:
        if self.wait_for_answer is not None:
            self.wait_for_answer()
        now = time.monotonic_ns()
        return DriverObservation(self.state, self.frames, dict.fromkeys(self.frames, now))

    def apply(self, action) -> StepOutcome:
        return StepOutcome()

    def hold(self) -> None:
        pass


def codec_floor(frames: dict[str, np.ndarray], repeats: int) -> dict[str, dict[str, float]]:
    images = list(frames.values())
    buffers = [np.empty_like(i) for i in images]

    def one(i: int) -> None:
        frame = link_codec.encode_frame("c", images[i], "jpeg", 90)
        link_codec.decode_frame(frame, out=buffers[i])

    results = {}
    pool = ThreadPoolExecutor(2)
    for name, run in (
        ("1_thread", lambda: [one(0), one(1)]),
        ("2_threads", lambda: list(pool.map(one, (0, 1)))),
    ):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            samples.append((time.perf_counter() - start) * 1000)
        results[name] = summarize(samples)
    pool.shutdown()
    results["jpeg_kb_per_frame"] = {
        "mean": float(np.mean([len(link_codec.encode_frame("c", i, "jpeg", 90).data) / 1024 for i in images]))
    }
    return results


def summarize(samples_ms) -> dict[str, float]:
    data = np.asarray(samples_ms)
    return {
        "p50_ms": float(np.percentile(data, 50)),
        "p99_ms": float(np.percentile(data, 99)),
        "mean_ms": float(data.mean()),
        "n": len(data),
    }


async def serve_episodes(server: LinkServer, stop: asyncio.Event, decode: str = "copy") -> None:
    """The trainer side: run episodes back to back, decoding each observation's frames before answering.

    ``decode="copy"``: into reused buffers on a 2-thread pool (what a policy server does with JPEG);
    ``"view"``: as serve's env pool decodes (``CpuFrameDecoder``): raw frames as arrays over the
    received bytes, no copy (what openpi's msgpack server gets), JPEG two frames at once."""
    session = await server.wait_for_robot(timeout=60)
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(2, thread_name_prefix="decode")
    decoder = CpuFrameDecoder(2)
    buffers = {c.name: np.empty(c.shape, np.uint8) for c in session.spec.cameras}
    chunk = np.zeros((CHUNK, 7), np.float32)
    last = -1
    while not stop.is_set():
        session.send_command(pb.Command.START_EPISODE)
        episode_id = ""
        while not stop.is_set():
            obs = await session.next_observation(last, timeout=10)
            last = obs.seq
            if not obs.episode_id or (episode_id and obs.episode_id != episode_id):
                if episode_id:
                    break  # the episode ended: start the next one
                continue
            episode_id = obs.episode_id
            if decode == "view":
                decoder.decode(obs.frames, session.spec)
            else:
                await asyncio.gather(
                    *(
                        loop.run_in_executor(
                            pool, link_codec.decode_frame, f, session.spec.camera(f.camera), buffers[f.camera]
                        )
                        for f in obs.frames
                    )
                )
            session.send_actions(chunk, obs.seq)
    pool.shutdown()
    decoder.close()


def serve_forever(port_file: Path, stats_file: Path, decode: str = "copy") -> None:
    """The trainer process: serve episodes until SIGTERM, then write its reply-time samples."""
    # Episodes are acknowledged and let go, as a serve run's dataset writer does once they are on
    # disk (a MemoryEpisodeSink would keep every raw frame, so every frame would land on fresh pages).
    server = LinkServer(LinkServerConfig(host="127.0.0.1", port=0), sink=CountingEpisodeSink())

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        port_file.write_text(str(await server.start()))
        task = asyncio.create_task(serve_episodes(server, stop, decode))
        await stop.wait()
        task.cancel()
        samples = [list(s.stats.reply_ms_all) for s in server.sessions.values()]
        stats_file.write_text(json.dumps(samples))
        await server.stop(None)

    asyncio.run(main())


def run_link(
    frames, control_hz: float, duration_s: float, episode_steps: int, codec: str = "jpeg",
    frame_ring_slots: int = 16, decode: str = "copy", warmup_s: float = 0.0, lockstep: bool = False,
    keep_cores_awake: bool = True, spin_idle_cores: bool = False,
) -> dict:  # fmt: skip
    """The agent in this process, the trainer in another (as on two machines, no shared GIL).
    ``frame_ring_slots=0`` keeps raw frames in-band even on loopback (as to another host).
    ``warmup_s``: run this long before measuring (see link_compare.py's WARMUP_S).
    ``lockstep``: the next observation leaves as soon as the previous one is answered (the peers'
    back-to-back figure); the control loop then runs at ``control_hz`` or as fast as the answers come,
    whichever is slower, and its late and missed ticks mean nothing.
    ``keep_cores_awake``, ``spin_idle_cores``: the agent's settings of those names (``AgentConfig``)."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file, stats_file = Path(tmp) / "port", Path(tmp) / "stats.json"
        trainer = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port_file), str(stats_file), decode],
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        config = AgentConfig(
            robot_id="bench",
            spool_dir=str(Path(tmp) / "spool"),
            action_wait_fraction=0.9,
            keep_cores_awake=keep_cores_awake,
            spin_idle_cores=spin_idle_cores,
            link=LinkConfig(
                server=f"127.0.0.1:{port_file.read_text()}",
                insecure=True,
                codec=codec,
                jpeg_quality=90,
                frame_ring_slots=frame_ring_slots,
            ),
        )
        driver = StaticFramesDriver(frames, control_hz, episode_steps)
        robot = Agent(driver, config)
        control = robot.control
        if lockstep:  # between episodes nothing is answered: the timeout lets the loop go on

            def wait_for_answer() -> bool:
                return control.queue.wait_answered(control.ledger.lookup(-1).newest_sent, 0.1)

            driver.wait_for_answer = wait_for_answer
        agent = AgentThread(robot).start()
        deadline = time.monotonic() + 60
        while control.stats.actions_executed == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(warmup_s)
        before = _counters(agent)
        time.sleep(duration_s)
        after = _counters(agent)
        new = after["chunks"] - before["chunks"]
        samples = list(control.stats.round_trip_ms)[-new:]
        encode = list(control.stats.encode_ms)[-new:]
        codec_choice = control.codec.choice.labels() + (" (shm ring)" if control.codec.by_ring else "")
        trainer.send_signal(signal.SIGTERM)
        trainer.wait(30)
        agent.stop()
        replies = json.loads(stats_file.read_text())
        trainer_ms = replies[0][-new:] if replies else []
    executed = after["executed"] - before["executed"]
    return {
        "control_hz": control_hz,
        "duration_s": duration_s,
        "round_trip": summarize(samples),
        # Where the time goes: agent JPEG encode (2 threads), trainer receive -> reply (incl. 2-thread
        # decode); the rest of the round trip is grpc + asyncio hand-offs on both sides.
        "agent_encode": summarize(encode),
        "trainer_decode_and_reply": summarize(trainer_ms),
        "actions_per_s": executed / duration_s,
        "answers_per_s": new / duration_s,  # chunks accepted: in lockstep, round trips per second
        "late_over_33ms": int(sum(s > 1000 / 30 for s in samples)),
        "missed_ticks": after["missed"] - before["missed"],
        "late_ticks": after["late"] - before["late"],
        "dropped_observations": after["dropped"] - before["dropped"],
        "episodes": after["episodes"] - before["episodes"],
        "frames": codec_choice,  # what link.codec=auto chose by the end (the codec itself otherwise)
    }


def _counters(agent: AgentThread) -> dict[str, int]:
    s = agent.agent.control.stats
    return {
        "executed": s.actions_executed,
        "chunks": s.chunks_accepted,
        "missed": s.missed_ticks,
        "late": s.late_ticks,
        "dropped": agent.agent.link.dropped_observations,
        "episodes": s.episodes_ended + s.episodes_aborted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds at 30 Hz (the issue asks 600)")
    parser.add_argument("--max-hz", type=float, default=100.0)
    parser.add_argument("--max-duration", type=float, default=15.0)
    parser.add_argument("--floor-repeats", type=int, default=300)
    parser.add_argument(
        "--sensor-noise", type=float, default=6.0, help="pixel noise sigma (see render_scene_frames)"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "link_latency.json")
    parser.add_argument(
        "--serve", nargs=3, metavar=("PORT_FILE", "STATS_FILE", "DECODE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve:
        serve_forever(Path(args.serve[0]), Path(args.serve[1]), args.serve[2])
        return

    frames = render_scene_frames(args.sensor_noise)
    floor = codec_floor(frames, args.floor_repeats)
    print(
        f"codec floor, 1 thread : p50 {floor['1_thread']['p50_ms']:.2f} ms  p99 {floor['1_thread']['p99_ms']:.2f} ms"
    )
    print(
        f"codec floor, 2 threads: p50 {floor['2_threads']['p50_ms']:.2f} ms  p99 {floor['2_threads']['p99_ms']:.2f} ms"
    )
    print(f"JPEG q90 frame: {floor['jpeg_kb_per_frame']['mean']:.0f} KB")
    at_30 = run_link(frames, 30.0, args.duration, episode_steps=300)
    rt = at_30["round_trip"]
    target = 1.3 * floor["1_thread"]["p99_ms"] + 2.0
    tail_target = 1.5 * rt["p50_ms"] + 5.0  # the 30 Hz tail: p99 <= 1.5 x p50 + 5 ms
    print(
        f"30 Hz for {args.duration:.0f} s: round trip p50 {rt['p50_ms']:.2f} ms  p99 {rt['p99_ms']:.2f} ms "
        f"(target p99 <= {target:.2f} ms; tail p99 <= 1.5 x p50 + 5 = {tail_target:.2f} ms)  actions/s {at_30['actions_per_s']:.1f}  late>33ms {at_30['late_over_33ms']}  "
        f"missed ticks {at_30['missed_ticks']}  dropped {at_30['dropped_observations']}"
    )
    print(
        f"  breakdown p50: agent encode {at_30['agent_encode']['p50_ms']:.2f} ms, trainer decode+reply "
        f"{at_30['trainer_decode_and_reply']['p50_ms']:.2f} ms, link + hand-offs the rest"
    )
    # 300-step episodes: a 1000-step one of two raw 640x480 frames is over the server's session budget
    # (max_session_bytes), which refuses the robot at registration.
    at_max = run_link(frames, args.max_hz, args.max_duration, episode_steps=300)
    rt_max = at_max["round_trip"]
    print(
        f"{args.max_hz:.0f} Hz for {args.max_duration:.0f} s: actions/s {at_max['actions_per_s']:.1f}  "
        f"round trip p50 {rt_max['p50_ms']:.2f} ms  p99 {rt_max['p99_ms']:.2f} ms  missed ticks {at_max['missed_ticks']}"
    )
    result = {
        "benchmark": "link_latency",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "payload": {
            "cameras": 2,
            "height": HEIGHT,
            "width": WIDTH,
            "state": 16,
            "chunk": [CHUNK, 7],
            "codec": "jpeg q90 4:2:0",
        },
        "codec_floor": floor,
        "at_30hz": at_30,
        "at_max": at_max,
        "target_p99_ms": target,
        "meets_p99_target": rt["p99_ms"] <= target,
        "tail_target_p99_ms": tail_target,
        "meets_tail_target": rt["p99_ms"] <= tail_target,
        "zero_drops_at_30hz": at_30["missed_ticks"] == 0 and at_30["dropped_observations"] == 0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
