"""``rlinf-robot``: the agent on the robot PC.

    rlinf-robot connect --server HOST:PORT --robot KIND [--robot-config FILE]
                        [--token-file F] [--tls-ca F] [--tls-cert F --tls-key F] [--insecure]
    rlinf-robot teleop  --robot KIND --teleop DEVICE [--robot-config FILE]
                        [--record-dir DIR] [--episodes N] [--seed S] [--back-to-back]

``connect`` serves the robot to a trainer. ``teleop`` needs no trainer: a human drives the robot
with a spacemouse, keyboard (or a replayed trace, or the sim twin's scripted expert) and every
episode is recorded on this PC as a LeRobot v3 dataset.

The robot config file (JSON or TOML) may hold the sections ``driver`` (the driver's own config),
``safety``, ``link``, ``agent`` (robot_id, spool_dir, chunk_merge, ...) and ``teleop`` (``kind``:
spacemouse, keyboard, replay or expert, plus that device's keys).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from protos.cli_help import plain_docstring, plain_help
from protos.field_limits import MAX_ROBOT_ID_CHARS
from robot_agent.config import AgentConfig, AgentConfigError, dataclass_from_dict, load_config_file

EXIT_REFUSED = 3
CONFIG_SECTIONS = ("driver", "safety", "link", "agent", "teleop")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlinf-robot", description=plain_docstring(__doc__))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    connect = sub.add_parser(
        "connect",
        help="dial into a trainer and serve this robot",
        description="Dial into a trainer (rlinf-trainer serve) and serve this robot; local safety always\n"
        "applies. The robot config's keys: docs/reference/configuration.md (the 'rlinf-robot' section).",
    )
    connect.add_argument("--server", required=True, help="HOST:PORT of the trainer")
    connect.add_argument("--robot", required=True, help="driver kind: sim-twin, franka or dual-franka")
    connect.add_argument(
        "--robot-config", help="JSON or TOML file with driver / safety / link / agent sections"
    )
    connect.add_argument(
        "--robot-id",
        help="this robot's id on the trainer (default: agent.robot_id, else <host name>-<robot>)",
    )
    connect.add_argument("--token-file", help="file holding the trainer's shared token")
    connect.add_argument("--tls-ca", help="CA certificate that signed the trainer's certificate")
    connect.add_argument("--tls-cert", help="client certificate (mutual TLS)")
    connect.add_argument("--tls-key", help="client private key (mutual TLS)")
    connect.add_argument("--insecure", action="store_true", help="no TLS and no token: trusted networks only")
    connect.add_argument(
        "--spool-dir",
        help="where episodes wait for the trainer's acknowledgement, a folder per trainer address "
        "(default: agent.spool_dir, ~/.rlinf/spool)",
    )
    connect.add_argument(
        "--teleop",
        help="a device that can take over: spacemouse, keyboard, replay, or expert (the sim twin's scripted "
        "controller standing in for a person)",
    )
    connect.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    teleop = sub.add_parser(
        "teleop",
        help="a human drives the robot; episodes are recorded locally",
        description="A human drives the robot through the agent's own control loop and safety; every\n"
        "episode lands in a local LeRobot v3 dataset (no trainer needed).",
    )
    teleop.add_argument("--robot", required=True, help="driver kind: sim-twin, franka or dual-franka")
    teleop.add_argument(
        "--robot-config", help="JSON or TOML file with driver / safety / agent / teleop sections"
    )
    teleop.add_argument(
        "--teleop", help="the device: spacemouse, keyboard, replay or expert (or the file's teleop.kind)"
    )
    teleop.add_argument("--record-dir", default="teleop_dataset", help="the LeRobot v3 dataset to append to")
    teleop.add_argument("--episodes", type=int, default=0, help="episodes to record (0: until Ctrl-C)")
    teleop.add_argument("--seed", type=int, default=0, help="reset seed of the first episode (sim twin)")
    teleop.add_argument(
        "--robot-id",
        help="this robot's name in the dataset (default: agent.robot_id, else <host name>-<robot>)",
    )
    teleop.add_argument(
        "--spool-dir", help="where episodes wait until they are in the dataset (default: agent.spool_dir)"
    )
    teleop.add_argument("--video-codec", default="libx264", help="PyAV codec of the camera streams")
    teleop.add_argument(
        "--back-to-back",
        action="store_true",
        help="start each episode at once (keyboard and spacemouse otherwise wait for the operator's start)",
    )
    teleop.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    return plain_help(parser)


def agent_config_from_args(args: argparse.Namespace, file_data: dict[str, Any]) -> AgentConfig:
    """Merge the config file's sections with the command-line flags (flags win)."""
    unknown = sorted(set(file_data) - set(CONFIG_SECTIONS))
    if unknown:
        raise AgentConfigError(
            f"unknown section {unknown[0]!r} in the robot config; known: {list(CONFIG_SECTIONS)}"
        )
    agent = dict(file_data.get("agent", {}))
    if args.robot_id:
        agent["robot_id"] = args.robot_id
    elif "robot_id" not in agent:  # one id per machine and driver, the same at every start
        agent["robot_id"] = default_robot_id(args.robot)
    if args.spool_dir:
        agent["spool_dir"] = args.spool_dir
    agent["safety"] = dict(file_data.get("safety", {}))
    if args.command == "connect":
        agent["link"] = link_section_from_args(args, dict(file_data.get("link", {})))
    return dataclass_from_dict(AgentConfig, agent, where="agent config")


def default_robot_id(robot_kind: str) -> str:
    """This host's name and the driver (``labpc-3-franka``), in the robot id's character set: no
    two machines share an id by default, and a restart finds its own spool again."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname().split(".")[0]).strip("-._") or "robot"
    return f"{host}-{robot_kind}"[:MAX_ROBOT_ID_CHARS]


def link_section_from_args(args: argparse.Namespace, link: dict[str, Any]) -> dict[str, Any]:
    link["server"] = args.server
    if args.insecure:
        link["insecure"] = True
    for flag, key in (("tls_ca", "tls_ca"), ("tls_cert", "tls_cert"), ("tls_key", "tls_key")):
        if getattr(args, flag):
            link[key] = getattr(args, flag)
    if args.token_file:
        path = Path(args.token_file).expanduser()
        if not path.is_file():
            raise AgentConfigError(f"--token-file {path} does not exist")
        link["token"] = path.read_text().strip()
    for key in ("tls_ca", "tls_cert", "tls_key"):
        if link.get(key) and not Path(link[key]).expanduser().is_file():
            raise AgentConfigError(f"--{key.replace('_', '-')} {link[key]} does not exist")
    return link


def teleop_from(args: argparse.Namespace, file_data: dict[str, Any]):
    """The teleop device named by ``--teleop`` or the file's ``teleop.kind`` (None if neither)."""
    from robot_agent.teleop import make_teleop

    section = dict(file_data.get("teleop", {}))
    kind = args.teleop or section.get("kind")
    section.pop("kind", None)
    return make_teleop(kind, section) if kind else None


def connect(args: argparse.Namespace) -> int:
    from robot_agent.agent import Agent
    from robot_agent.drivers import UnknownDriverError, make_driver
    from robot_agent.link import LinkRefused
    from robot_agent.teleop import TeleopError

    try:
        file_data = load_config_file(args.robot_config) if args.robot_config else {}
        config = agent_config_from_args(args, file_data)
        driver = make_driver(args.robot, file_data.get("driver", {}))
        teleop = teleop_from(args, file_data)
    except (AgentConfigError, UnknownDriverError, TeleopError, ImportError) as exc:
        print(f"rlinf-robot: {exc}", file=sys.stderr)
        return 2
    if config.link.insecure:
        print("rlinf-robot: WARNING: --insecure: no TLS and no token on the robot link", file=sys.stderr)
    print(f"rlinf-robot: robot id {config.robot_id!r}", file=sys.stderr)
    try:
        agent = Agent(driver, config, robot_kind=args.robot, teleop=teleop)
    except OSError as exc:
        print(f"rlinf-robot: cannot use the spool directory {config.spool_dir}: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await agent.run(stop)

    try:
        asyncio.run(main())
    except LinkRefused as exc:
        print(f"rlinf-robot: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print(
        f"rlinf-robot: stopped; {len(agent.spool.pending())} episode(s) wait in {agent.spool.root}",
        file=sys.stderr,
    )
    return 0


def teleop(args: argparse.Namespace) -> int:
    import threading

    from protos.lerobot_dataset import VideoFormat
    from robot_agent.control_loop import spec_sent
    from robot_agent.drivers import UnknownDriverError, make_driver
    from robot_agent.recording import LocalDataset
    from robot_agent.spool import EpisodeSpool
    from robot_agent.teleop import TeleopError
    from robot_agent.teleop_session import TeleopEpisode, TeleopSession

    if args.episodes < 0:
        print("rlinf-robot: --episodes must be >= 0", file=sys.stderr)
        return 2
    device = driver = None
    try:
        file_data = load_config_file(args.robot_config) if args.robot_config else {}
        config = agent_config_from_args(args, file_data)
        if not (args.teleop or file_data.get("teleop", {}).get("kind")):
            raise AgentConfigError("teleop needs a device: --teleop spacemouse|keyboard|replay|expert")
        driver = make_driver(args.robot, file_data.get("driver", {}))
        device = teleop_from(
            args, file_data
        )  # after the driver: a failed start leaves no terminal in raw mode
        spool = EpisodeSpool(Path(config.spool_dir).expanduser() / f"{config.robot_id}-teleop")
        dataset = LocalDataset(
            args.record_dir,
            spool,
            spec_sent(driver.spec, config),
            config.robot_id,
            VideoFormat(args.video_codec),
        )
        stop = threading.Event()

        def report(episode: TeleopEpisode) -> None:
            total = f"/{args.episodes}" if args.episodes else ""
            verdict = "aborted" if episode.aborted else ("success" if episode.success else "no success")
            print(f"episode {episode.number}{total}: {episode.steps} steps, {verdict} ({episode.reason}); "
                  f"{dataset.num_episodes} in {args.record_dir}", file=sys.stderr)  # fmt: skip

        def waiting(number: int) -> None:
            how = {"keyboard": "press Enter", "spacemouse": "press button 1"}.get(device.kind, "start it")
            print(f"episode {number}: reset the scene, then {how}", file=sys.stderr)

        session = TeleopSession(
            driver, config, spool, dataset, device, args.episodes, args.seed, on_episode=report,
            wait_for_start=False if args.back_to_back else None, on_waiting=waiting,
        )  # fmt: skip
    except (AgentConfigError, UnknownDriverError, TeleopError, ImportError, ValueError, OSError) as exc:
        for opened in (device, driver):
            if opened is not None:
                opened.close()
        print(f"rlinf-robot: {exc}", file=sys.stderr)
        return 2
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        session.run(stop)
    except RuntimeError as exc:  # the control loop died; what was recorded stays recorded
        print(f"rlinf-robot: {exc}", file=sys.stderr)
        return 1
    finally:
        device.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"rlinf-robot: {dataset.num_episodes} episode(s) in {args.record_dir}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("OpenGL").setLevel(logging.WARNING)  # PyOpenGL's import notes are not news
    if args.command == "connect":
        return connect(args)
    return teleop(args)


if __name__ == "__main__":
    sys.exit(main())
