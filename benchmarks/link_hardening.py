"""One hostile robot against a real trainer: what is refused, and what an admitted session costs.

A real ``rlinf-trainer serve`` (collect mode, recording LeRobot episodes) runs in its own process;
clients written from ``robot_link.proto`` alone talk to it on loopback. Reported, in one run:
  * hostile registrations (issue 23's attacks): each one's status code and how long the refusal
    took, and the trainer's RSS before and after them all;
  * memory per session under the largest hostile spec the default budget admits (a 1024x1024
    camera, 30-step episodes of all-black JPEGs: tiny on the wire, 3 MB each decoded): the budget
    the trainer computed, and the trainer's RSS growth while --sessions such robots each send an
    episode at once, per session;
  * that an honest robot's episode is still stored afterwards, and the trainer still runs;
  * (issue 61) the trainer's RSS around 40 refused 20 MB registrations; how many of 400 sessions
    opened by one client are admitted; and, from ``benchmarks/link_fairness.py``, an honest robot's
    round trip p99 and holds while 4 hostile sessions send malformed frames, oversized fields or
    open many sessions, beside its quiet value.
Before the fix (issue 23): a 4096x4096 camera with 30-step episodes drove the trainer to 23.3 GB and
the kernel killed it; 1.4 M cameras were accepted (430 MB kept per registration, 6-10 s blocked).

    python benchmarks/link_hardening.py [--sessions 4] [--fairness-seconds 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protos import link_codec  # noqa: E402
from protos import robot_link_pb2 as pb  # noqa: E402
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space  # noqa: E402
from tests.integration.link_harness import RawClient  # noqa: E402
from trainer.server.admission import session_budget  # noqa: E402

EPISODE_STEPS = 30


def spec(name: str, size: int = 8, steps: int = EPISODE_STEPS) -> EnvSpec:
    return EnvSpec(name, (CameraSpec("front", size, size, 10.0),), (StateField("tcp_pos", 3),),
                   ee_delta_action_space(), 10.0, "", steps)  # fmt: skip


def hostile_registrations() -> dict[str, pb.EnvSpec]:
    huge = link_codec.spec_to_proto(spec("huge-camera", 4096))
    many = link_codec.spec_to_proto(spec("many-cameras"))
    many.cameras.extend([pb.CameraSpec(name=f"c{i}", height=1, width=1, fps=1) for i in range(1_400_000)])
    wide = link_codec.spec_to_proto(spec("wide-state"))
    wide.state_fields.extend(
        [pb.StateField(name="a", size=2**32 - 1), pb.StateField(name="b", size=2**32 - 1)]
    )
    nan_rate = link_codec.spec_to_proto(spec("nan-rate"))
    nan_rate.control_hz = math.nan
    fast = link_codec.spec_to_proto(spec("absurd-rate"))
    fast.control_hz = 1e9
    endless = link_codec.spec_to_proto(spec("no-horizon"))
    endless.max_episode_steps = 0
    return {"4096x4096 camera": huge, "1.4 M cameras": many, "state of 2 x 2**32": wide,
            "control_hz NaN": nan_rate, "control_hz 1e9": fast, "max_episode_steps 0": endless}  # fmt: skip


def wait_for(client: RawClient, predicate, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and client.status is None and not predicate(client.replies):
        time.sleep(0.05)
    return predicate(client.replies)


def register(robot_id: str, env_spec: pb.EnvSpec) -> pb.AgentMessage:
    return pb.AgentMessage(
        register=pb.Register(robot_id=robot_id, protocol_version=link_codec.PROTOCOL_VERSION, spec=env_spec)
    )


def episode_messages(episode_id: str, frame: pb.Frame) -> list[pb.AgentMessage]:
    def observation(step: int, transition: pb.Transition | None) -> pb.AgentMessage:
        return pb.AgentMessage(observation=pb.Observation(
            seq=step, episode_id=episode_id, step=step, state=[0.5, 0.0, 0.3], frames=[frame],
            transition=transition))  # fmt: skip

    messages = [observation(0, None)]
    for step in range(1, EPISODE_STEPS + 1):
        messages.append(
            observation(step, pb.Transition(executed_action=[0.0] * 7, truncated=step == EPISODE_STEPS))
        )
    end = pb.EpisodeEvent(kind=pb.EpisodeEvent.ENDED, episode_id=episode_id, num_steps=EPISODE_STEPS)
    return [*messages, pb.AgentMessage(episode_event=end)]


def stored(episode_id: str):
    return lambda replies: any(
        r.HasField("ack") and r.ack.episode_id == episode_id and r.ack.status == pb.Ack.STORED
        for r in replies
    )


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_trainer(port: int, record_dir: Path, *overrides: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "trainer.cli", "serve", "--insecure", "server.host=127.0.0.1",
               f"server.port={port}", f"data.record_dir={record_dir}", "collect.policy=hold", *overrides]  # fmt: skip
    # Its log goes to a file: an unread pipe fills up (64 KB) and then blocks the trainer's loop.
    log_file = (record_dir.parent / "trainer.log").open("w")
    trainer = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    log_file.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return trainer
        if trainer.poll() is not None:
            raise SystemExit(f"the trainer exited: {(record_dir.parent / 'trainer.log').read_text()[-2000:]}")
        time.sleep(0.2)
    raise SystemExit("the trainer did not listen within 60 s")


def refusal_memory(port: int, pid: int, count: int = 40) -> dict:
    """The trainer's RSS before and after ``count`` registrations of 20 MB, each refused (its
    instruction is over the limit). Before the fix each one left about 17 MB behind."""
    huge = link_codec.spec_to_proto(spec("huge-instruction"))
    huge.instruction = "x" * (20 << 20)
    before = rss_mb(pid)
    codes = set()
    for i in range(count):
        client = RawClient(port).send(register(f"big-{i}", huge))
        client.ended(60)
        codes.add(client.status.name if client.status else "no answer")
        client.close()
    time.sleep(0.5)
    after = rss_mb(pid)
    return {"refusals": count, "statuses": sorted(codes), "rss_mb_before": round(before, 1),
            "rss_mb_after": round(after, 1), "rss_growth_mb_per_refusal": round((after - before) / count, 2)}  # fmt: skip


def session_cap(port: int, attempts: int = 400) -> dict:
    """One client opens ``attempts`` sessions with as many ids: how many are admitted."""
    clients = [RawClient(port, own_connection=True).send(register(f"many-{i}", link_codec.spec_to_proto(spec("many"))))
               for i in range(attempts)]  # fmt: skip

    def welcomed(client: RawClient) -> bool:
        return any(reply.HasField("welcome") for reply in client.replies)

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(welcomed(c) or c.status is not None for c in clients):
        time.sleep(0.1)
    refused = [c for c in clients if c.status is not None and not welcomed(c)]
    reasons = sorted({c.details[:90] for c in refused})
    admitted = sum(welcomed(c) for c in clients)
    for client in clients:
        client.close()
    return {"attempted": attempts, "admitted": admitted, "refused": len(refused), "reasons": reasons}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=4, help="hostile-but-admitted robots at once")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "link_hardening.json")
    parser.add_argument("--fairness-seconds", type=float, default=10.0, help="per attack (0: skip)")
    args = parser.parse_args()

    import simplejpeg

    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="rlinf-hardening-"))
    # The misbehaviour penalty is lifted here: the rows below send refused messages back to back.
    trainer = start_trainer(
        port, workdir / "dataset", "server.bad_sessions_per_s=1e6", "server.bad_bytes_per_s=1e12"
    )
    results: dict = {"benchmark": "link_hardening", "registrations": {}}
    try:
        time.sleep(1.0)
        results["rss_mb_idle"] = round(rss_mb(trainer.pid), 1)
        refused = 0
        for name, env_spec in hostile_registrations().items():
            started = time.perf_counter()
            client = RawClient(port).send(register(f"hostile-{len(results['registrations'])}", env_spec))
            client.ended(60)
            seconds = time.perf_counter() - started
            client.close()
            code = client.status.name if client.status else "no answer"
            refused += code in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED")
            results["registrations"][name] = {"status": code, "refused_in_ms": round(1000 * seconds, 1),
                                              "details": client.details[:160]}  # fmt: skip
            print(f"{name:>22}: {code} in {1000 * seconds:.0f} ms", flush=True)
        results["registrations_refused"] = f"{refused}/{len(results['registrations'])}"
        results["rss_mb_after_hostile_registrations"] = round(rss_mb(trainer.pid), 1)
        results["refused_20mb_registrations"] = refusal_memory(port, trainer.pid)
        print(f"40 refused 20 MB registrations: {results['refused_20mb_registrations']}", flush=True)
        results["session_cap"] = session_cap(port)
        print(f"sessions: {results['session_cap']}", flush=True)

        big = spec("big-black", 1024)
        budget = session_budget(big)
        black = simplejpeg.encode_jpeg(np.zeros((1024, 1024, 3), np.uint8), quality=90)
        frame = pb.Frame(camera="front", codec=pb.CODEC_JPEG, height=1024, width=1024, data=black)
        before = rss_mb(trainer.pid)
        clients = [
            RawClient(port).send(register(f"big-{i}", link_codec.spec_to_proto(big)))
            for i in range(args.sessions)
        ]
        peak = before
        for i, client in enumerate(clients):
            client.send(*episode_messages(f"big-{i}-ep0", frame))
        done = [False] * len(clients)
        deadline = time.monotonic() + 600
        while not all(done) and time.monotonic() < deadline:
            peak = max(peak, rss_mb(trainer.pid))
            done = [stored(f"big-{i}-ep0")(c.replies) or c.status is not None for i, c in enumerate(clients)]
            time.sleep(0.05)
        results["admitted_hostile_session"] = {
            "spec": "1 camera 1024x1024, 30 steps, all-black JPEG frames",
            "wire_bytes_per_frame": len(black),
            "decoded_bytes_per_frame": 1024 * 1024 * 3,
            "budget_mb_per_session": round(budget.total_bytes / 2**20, 1),
            "sessions_at_once": args.sessions,
            "episodes_stored": sum(stored(f"big-{i}-ep0")(c.replies) for i, c in enumerate(clients)),
            "rss_mb_before": round(before, 1),
            "rss_mb_peak": round(peak, 1),
            "rss_growth_mb_per_session": round((peak - before) / args.sessions, 1),
        }
        print(f"admitted hostile sessions: {results['admitted_hostile_session']}", flush=True)
        for client in clients:
            client.close()

        # An honest robot with the same cameras (the dataset's features were fixed by the first episode).
        honest = RawClient(port).send(register("honest", link_codec.spec_to_proto(spec("honest", 1024))))
        scene = link_codec.encode_frame("front", np.full((1024, 1024, 3), 90, np.uint8))
        honest.send(*episode_messages("honest-ep0", scene))
        results["honest_episode_stored_after"] = wait_for(honest, stored("honest-ep0"), 120)
        if not results["honest_episode_stored_after"]:
            print(f"honest robot: {honest.status} {honest.details!r}; replies {honest.replies[-3:]}")
        honest.close()
        results["trainer_alive"] = trainer.poll() is None
        results["rss_mb_end"] = round(rss_mb(trainer.pid), 1)
    finally:
        trainer.terminate()
        trainer.wait(30)
    if args.fairness_seconds > 0:
        from benchmarks.link_fairness import run as fairness

        results["fairness"] = fairness(args.fairness_seconds)
    print(f"refused {results['registrations_refused']}; honest episode stored afterwards: "
          f"{results['honest_episode_stored_after']}; trainer alive: {results['trainer_alive']}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
