"""The franka driver over the real libfranka protocol: pylibfranka against franka-sim, through the agent.

Follows ``shared/HARDWARE_TESTING.md``: franka-sim (in a venv of its own, with the FR3 model from the
franky-sim wheel) listens on 127.0.0.1:1337; ``rlinf-robot connect --robot franka`` runs from a
venv with ``.[robot,franka]``; a trainer link server runs episodes on it (reset = homing, then a
policy that moves +x, back -x, and closes the gripper). Reports per episode: outcome, steps, TCP
travel, gripper, reflexes, and the arm process's missed 1 kHz cycles. Needs PyPI (first run only).

    python benchmarks/franka_protocol.py [--episodes 3] [--workdir DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protos import robot_link_pb2 as pb  # noqa: E402
from trainer.server.episode_runner import run_episode  # noqa: E402
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread  # noqa: E402


def venv(path: Path, *installs: list[str]) -> Path:
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        for args in installs:
            subprocess.run([str(path / "bin" / "pip"), "install", "-q", *args], check=True)
    return python


def start_franka_sim(workdir: Path) -> subprocess.Popen:
    python = venv(
        workdir / "franka-sim",
        ["franka-sim==1.1.7"],
        ["--no-deps", "franky-sim==1.0.4"],  # only for its FR3 model files
    )
    assets = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('franky_sim').submodule_search_locations[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip() + "/assets"  # fmt: skip
    model = workdir / "fr3.xml"
    model.write_text(
        Path(assets, "fr3.xml").read_text().replace('meshdir="assets"', f'meshdir="{assets}/meshes"')
    )
    log = open(workdir / "franka-sim.log", "w")  # noqa: SIM115 (kept open for the server's life)
    server = subprocess.Popen(
        [str(python.with_name("run-franka-sim-server")), "--enforce-comm-constraints", "--enforce-motion-limits"],
        env={**os.environ, "FR3_MJCF": str(model)}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    subprocess.run(
        [str(python.with_name("franka-sim-check")), "--timeout", "60"], check=True, capture_output=True
    )
    return server


def policy(obs: pb.Observation) -> np.ndarray:
    dx = 0.3 if obs.step < 15 else -0.3
    gripper = 1.0 if obs.step < 20 else -1.0
    return np.array([[dx, 0, 0, 0, 0, 0, gripper]], np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rlinf-franka-protocol"))
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "franka_protocol.json"
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)

    sim = start_franka_sim(args.workdir)
    if importlib.util.find_spec("pylibfranka") is not None:
        agent_bin = Path(sys.executable).with_name("rlinf-robot")
    else:
        agent_bin = venv(args.workdir / "agent", [f"{ROOT}[robot,franka]"]).with_name("rlinf-robot")
    server = LinkServerThread(LinkServer(LinkServerConfig(host="127.0.0.1", port=0))).start()
    config = args.workdir / "franka.json"
    config.write_text(json.dumps({
        "driver": {"host": "127.0.0.1", "control_hz": 10.0, "max_episode_steps": args.steps, "home_duration_s": 3.0},
        "agent": {"robot_id": "franka-sim"},
    }))  # fmt: skip
    agent_log = open(args.workdir / "agent.log", "w")  # noqa: SIM115
    agent = subprocess.Popen(
        [str(agent_bin), "connect", "--server", f"127.0.0.1:{server.server.port}", "--robot", "franka",
         "--insecure", "--robot-config", str(config), "--spool-dir", str(args.workdir / "spool")],
        stdout=agent_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    episodes = []
    try:
        session = server.call(server.server.wait_for_robot("franka-sim", timeout=60), timeout=70)
        for index in range(args.episodes):
            start = time.monotonic()
            end = server.call(run_episode(session, policy, seed=index, step_timeout_s=20), timeout=300)
            episodes.append({
                "outcome": pb.EpisodeEvent.Kind.Name(end.kind),
                "steps": end.num_steps,
                "reason": end.reason,
                "seconds": time.monotonic() - start,
            })  # fmt: skip
            print(f"episode {index}: {episodes[-1]['outcome']} after {end.num_steps} steps ({end.reason})")
        time.sleep(1.0)
        for record, stored in zip(episodes, server.server.sink.episodes[-len(episodes) :]):
            x = [o.state[14] for o in stored.observations]
            record["tcp_x_travel_m"] = float(max(x) - min(x))
            record["gripper_closed"] = bool(stored.observations[-1].state[21] < 0.035)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
        server.stop()
        os.killpg(sim.pid, signal.SIGTERM)
    reflexes = [
        line.strip()
        for line in (args.workdir / "franka-sim.log").read_text().splitlines()
        if "aborting the motion" in line
    ]
    result = {
        "benchmark": "franka_protocol",
        "simulator": "franka-sim 1.1.7 (--enforce-comm-constraints --enforce-motion-limits)",
        "episodes": episodes,
        "completed": sum(e["outcome"] == "ENDED" for e in episodes),
        "reflexes": reflexes,
    }
    print(f"{result['completed']}/{len(episodes)} episodes completed; reflexes: {len(reflexes)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
