"""Robot-agent footprint: what a robot PC pays for ``rlinf-robot``.

In fresh virtual environments (built here, from this checkout):
  * ``.[robot]`` alone: installed MB (site-packages, less pip's own), and the RSS of a process that
    has imported the whole agent stack (agent, link, grpc, protobuf, numpy, simplejpeg);
  * ``.[robot,sim]``: ``rlinf-robot connect --robot sim-twin`` against a trainer link server on
    loopback: seconds from process start to registration, and RSS once it streams (this one carries
    MuJoCo and a GL renderer, which a real robot PC does not).
  * with ``--franka-host`` (a franka-sim or a real arm) and pylibfranka installable: the same for
    ``--robot franka``.
Targets (issue 3): <= 150 MB installed, <= 150 MB RSS, <= 2 s start-up.

    python benchmarks/agent_footprint.py [--workdir DIR] [--franka-host 127.0.0.1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread  # noqa: E402

IMPORT_AGENT = (
    "import robot_agent.agent, robot_agent.cli, robot_agent.link, protos.link_codec, grpc, simplejpeg"
)


def make_venv(path: Path, extras: str) -> Path:
    """A venv with the given extras (``.[<extras>]``) from this checkout (kept between runs; this package is refreshed)."""
    pip = str(path / "bin" / "pip")
    if not (path / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([pip, "install", "-q", f"{ROOT}[{extras}]"], check=True)
    else:
        subprocess.run([pip, "install", "-q", "--no-deps", "--force-reinstall", str(ROOT)], check=True)
    return path / "bin" / "python"


def site_packages_mb(python: Path) -> float:
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    total = 0
    for folder, _, files in os.walk(site):
        if any(
            part.startswith(("pip", "setuptools", "_distutils_hack"))
            for part in Path(folder).relative_to(site).parts[:1]
        ):
            continue
        total += sum((Path(folder) / f).stat().st_size for f in files if not (Path(folder) / f).is_symlink())
    return total / 2**20


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *children(int(child))]
    return found


def import_rss(python: Path) -> dict:
    code = f"{IMPORT_AGENT}; import os; print(open('/proc/self/status').read())"
    start = time.monotonic()
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout
    seconds = time.monotonic() - start
    rss = next(int(line.split()[1]) for line in out.splitlines() if line.startswith("VmRSS:")) / 1024
    return {"import_seconds": seconds, "rss_mb": rss}


def connect_run(python: Path, robot: str, config: dict, server: LinkServerThread, spool: Path) -> dict:
    config_file = spool / f"{robot}.json"
    config_file.write_text(json.dumps(config))
    exe = python.with_name("rlinf-robot")
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(exe), "connect", "--server", f"127.0.0.1:{server.server.port}", "--robot", robot, "--insecure",
         "--robot-config", str(config_file), "--spool-dir", str(spool / "spool")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        session = server.call(
            server.server.wait_for_robot(config["agent"]["robot_id"], timeout=120), timeout=130
        )
        registered_s = time.monotonic() - start
        first = server.call(session.next_observation(timeout=60), timeout=70)
        streaming_s = time.monotonic() - start
        time.sleep(3.0)  # let it settle into streaming
        rss = rss_mb(proc.pid)
        helpers = sum(rss_mb(child) for child in children(proc.pid))
        observations = session.stats.observations
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    del first
    return {
        "robot": robot,
        "registered_s": registered_s,
        "first_observation_s": streaming_s,
        "rss_mb_streaming": rss,
        "helper_processes_rss_mb": helpers,  # franka: the arm and gripper processes
        "observations": observations,
        "exit_code": proc.returncode,
        "stderr_tail": stderr[-300:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "rlinf-footprint")
    parser.add_argument("--franka-host", default=None, help="also measure --robot franka against this host")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "agent_footprint.json"
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)

    result: dict = {
        "benchmark": "agent_footprint",
        "targets": {"installed_mb": 150, "rss_mb": 150, "startup_s": 2},
    }
    robot_python = make_venv(args.workdir / "robot", "robot")
    result["robot_only"] = {"installed_mb": site_packages_mb(robot_python), **import_rss(robot_python)}
    print(
        f".[robot]: installed {result['robot_only']['installed_mb']:.0f} MB; agent stack imported: "
        f"RSS {result['robot_only']['rss_mb']:.0f} MB in {result['robot_only']['import_seconds']:.2f} s"
    )
    server = LinkServerThread(LinkServer(LinkServerConfig(host="127.0.0.1", port=0))).start()
    try:
        sim_python = make_venv(args.workdir / "robot-sim", "robot,sim")
        result["robot_sim_installed_mb"] = site_packages_mb(sim_python)
        twin = {
            "driver": {"task": "reach", "control_hz": 20.0, "image_size": 128},
            "agent": {"robot_id": "fp-twin"},
        }
        result["sim_twin"] = connect_run(sim_python, "sim-twin", twin, server, args.workdir)
        run = result["sim_twin"]
        print(
            f".[robot,sim] ({result['robot_sim_installed_mb']:.0f} MB): sim-twin registered in {run['registered_s']:.2f} s, "
            f"streaming RSS {run['rss_mb_streaming']:.0f} MB"
        )
        if args.franka_host:
            franka_python = make_venv(args.workdir / "robot-franka", "robot,franka")
            result["robot_franka_installed_mb"] = site_packages_mb(franka_python)
            franka = {
                "driver": {"host": args.franka_host, "control_hz": 20.0},
                "agent": {"robot_id": "fp-franka"},
            }
            result["franka"] = connect_run(franka_python, "franka", franka, server, args.workdir)
            run = result["franka"]
            print(
                f".[robot,franka] ({result['robot_franka_installed_mb']:.0f} MB): franka registered in "
                f"{run['registered_s']:.2f} s, streaming RSS {run['rss_mb_streaming']:.0f} MB "
                f"(+ {run['helper_processes_rss_mb']:.0f} MB in its arm and gripper processes)"
            )
    finally:
        server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
