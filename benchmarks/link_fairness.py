"""One honest robot beside hostile ones: does the trainer still answer it in time?

A real ``rlinf-trainer serve`` (collect mode, random actions, recording LeRobot episodes, with the
twin's spec as ``data.features``, as a lab fixes its run's schema) runs in its own process; an honest sim-twin agent (two 64x64 JPEG cameras at 20 Hz) streams to it from this
process; the attackers run in a third process (niced, so that on a small machine the figures measure
the trainer's fairness, not the kernel's), each attack as 4 sessions at once, every one of them
holding the honest robot's own kind of credential:
  * ``malformed``: register, send a frame of the wrong size (refused), reconnect, again;
  * ``oversized``: register, send an observation with an 8 MB instruction (refused), again;
  * ``many``: open 100 sessions each (400 in all, idle once admitted), retry the refused ones.
Reported per phase: the honest robot's observation -> action round trip (median, p99, on the
agent's clock, late answers included), its holds, and the target: p99 within 2x the quiet p99 + 10 ms, and no holds.

    python benchmarks/link_fairness.py [--seconds 10] [--out FILE]   (benchmarks/link_hardening.py runs it too)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.link_hardening import free_port, rss_mb, start_trainer  # noqa: E402
from protos import link_codec  # noqa: E402
from protos import robot_link_pb2 as pb  # noqa: E402
from tests.integration.link_harness import TWIN, RawClient, start_agent  # noqa: E402

ATTACKS = ("malformed", "oversized", "many")
SESSIONS = 4


def twin_env_spec():
    """The honest twin's spec, as it registers it: the run's schema, which the attackers fit."""
    from robot_agent.config import AgentConfig
    from robot_agent.control_loop import spec_sent
    from robot_agent.drivers import make_driver

    driver = make_driver("sim-twin", dict(TWIN))
    try:
        return spec_sent(driver.spec, AgentConfig())
    finally:
        driver.close()


def twin_spec() -> pb.EnvSpec:
    return link_codec.spec_to_proto(twin_env_spec())


def register(robot_id: str, spec: pb.EnvSpec) -> pb.AgentMessage:
    return pb.AgentMessage(
        register=pb.Register(robot_id=robot_id, protocol_version=link_codec.PROTOCOL_VERSION, spec=spec)
    )


def bad_observation(kind: str, spec: pb.EnvSpec) -> pb.AgentMessage:
    frames = [pb.Frame(camera=c.name, codec=pb.CODEC_RAW_RGB8, height=c.height, width=c.width,
                       data=bytes(c.height * c.width * 3)) for c in spec.cameras]  # fmt: skip
    state = [0.0] * sum(f.size for f in spec.state_fields)
    observation = pb.Observation(seq=1, step=0, state=state, frames=frames)
    if kind == "malformed":
        observation.frames[0].data = b"\0" * 10
    else:
        observation.instruction = "x" * (8 << 20)
    return pb.AgentMessage(observation=observation)


def attack(kind: str, port: int, seconds: float) -> None:
    """Run one attack with SESSIONS threads for ``seconds`` (in the attackers' process)."""
    os.nice(10)
    spec = twin_spec()
    stop = time.monotonic() + seconds
    counts = [0] * SESSIONS

    def refused_again(worker: int) -> None:
        message = bad_observation(kind, spec)
        while time.monotonic() < stop:
            client = RawClient(port).send(register(f"{kind}-{worker}-{counts[worker]}", spec), message)
            client.ended(30)
            client.close()
            counts[worker] += 1

    def many(worker: int) -> None:
        held: dict[int, RawClient] = {}
        while time.monotonic() < stop:
            for i in range(100):
                client = held.get(i)
                if client is not None and client.status is None:
                    continue
                if client is not None:
                    client.close()
                held[i] = RawClient(port, own_connection=True).send(register(f"many-{worker}-{i}", spec))
                counts[worker] += 1
            time.sleep(0.5)
        for client in held.values():
            client.close()

    target = many if kind == "many" else refused_again
    threads = [threading.Thread(target=target, args=(w,)) for w in range(SESSIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"attack": kind, "sessions_opened": sum(counts)}), flush=True)


def measure(agent, seconds: float) -> dict:
    stats = agent.agent.control.stats
    first, holds = len(stats.round_trip_ms), stats.holds
    time.sleep(seconds)
    samples = np.asarray(list(stats.round_trip_ms)[first:])
    return {
        "round_trips": len(samples),
        "round_trip_ms_median": round(float(np.median(samples)), 2) if len(samples) else None,
        "round_trip_ms_p99": round(float(np.percentile(samples, 99)), 2) if len(samples) else None,
        "holds": stats.holds - holds,
    }


def run(seconds: float) -> dict:
    """Quiet, then each attack for ``seconds``: the honest robot's figures per phase."""
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="rlinf-fairness-"))
    schema = workdir / "twin_spec.json"  # data.features: the run's schema, as a lab would set it
    schema.write_text(json.dumps(twin_env_spec().to_dict()))
    trainer = start_trainer(port, workdir / "dataset", f"data.features={schema}")
    agent = start_agent(port, workdir / "spool", driver={"max_episode_steps": 2000})
    results: dict = {"honest": "sim-twin, 2 x 64x64 JPEG, 20 Hz", "attack_sessions": SESSIONS,
                     "seconds_per_phase": seconds, "phases": {}}  # fmt: skip
    try:
        time.sleep(3.0)  # connected, first episode under way
        quiet = measure(agent, seconds)
        results["phases"]["quiet"] = quiet
        print(f"{'quiet':>10}: {quiet}", flush=True)
        bound = 2 * quiet["round_trip_ms_p99"] + 10
        for kind in ATTACKS:
            attackers = subprocess.Popen(
                [sys.executable, __file__, "--attack", kind, "--port", str(port), "--seconds", str(seconds + 2)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
            time.sleep(1.0)
            phase = measure(agent, seconds)
            attackers.wait(180)
            phase.update(json.loads(attackers.stdout.read().strip().splitlines()[-1]))
            phase["target_p99_ms"] = round(bound, 2)
            phase["met"] = bool(phase["round_trip_ms_p99"] <= bound and phase["holds"] == 0)
            phase["trainer_rss_mb"] = round(rss_mb(trainer.pid), 1)
            results["phases"][kind] = phase
            print(f"{kind:>10}: {phase}", flush=True)
            time.sleep(2.0)
        results["trainer_alive"] = trainer.poll() is None
    finally:
        agent.stop()
        trainer.terminate()
        try:
            trainer.wait(30)
        except subprocess.TimeoutExpired:
            trainer.kill()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per phase")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "link_fairness.json")
    parser.add_argument("--attack", choices=ATTACKS, help=argparse.SUPPRESS)  # the attackers' process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        attack(args.attack, args.port, args.seconds)
        return
    results = {"benchmark": "link_fairness", **run(args.seconds)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
