"""``rlinf-robot``: the agent on the robot PC.

    rlinf-robot connect --server HOST:PORT --robot KIND [--robot-config FILE]
                        [--token-file F] [--tls-ca F] [--tls-cert F --tls-key F] [--insecure]

The robot config file (JSON or TOML) may hold the sections ``driver`` (the driver's own config),
``safety``, ``link``, ``agent`` (robot_id, spool_dir, chunk_merge, ...) and ``teleop`` (``kind``:
spacemouse, keyboard or replay, plus that device's keys): a human who can take over from the policy.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from robot_agent.config import AgentConfig, AgentConfigError, dataclass_from_dict, load_config_file

EXIT_REFUSED = 3
CONFIG_SECTIONS = ("driver", "safety", "link", "agent", "teleop")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlinf-robot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    connect = sub.add_parser("connect", help="dial into a trainer and serve this robot")
    connect.add_argument("--server", required=True, help="HOST:PORT of the trainer")
    connect.add_argument("--robot", required=True, help="driver kind: sim-twin, franka or dual-franka")
    connect.add_argument(
        "--robot-config", help="JSON or TOML file with driver / safety / link / agent sections"
    )
    connect.add_argument("--robot-id", help="this robot's id on the trainer (default: agent.robot_id)")
    connect.add_argument("--token-file", help="file holding the trainer's shared token")
    connect.add_argument("--tls-ca", help="CA certificate that signed the trainer's certificate")
    connect.add_argument("--tls-cert", help="client certificate (mutual TLS)")
    connect.add_argument("--tls-key", help="client private key (mutual TLS)")
    connect.add_argument("--insecure", action="store_true", help="no TLS and no token: trusted networks only")
    connect.add_argument("--spool-dir", help="where episodes wait for the trainer's acknowledgement")
    connect.add_argument("--teleop", help="a human device that can take over: spacemouse, keyboard or replay")
    connect.add_argument("-v", "--verbose", action="store_true")
    sub.add_parser("teleop", help="human teleoperation and data collection (not yet)")
    return parser


def agent_config_from_args(args: argparse.Namespace, file_data: dict[str, Any]) -> AgentConfig:
    """Merge the config file's sections with the command-line flags (flags win)."""
    unknown = sorted(set(file_data) - set(CONFIG_SECTIONS))
    if unknown:
        raise AgentConfigError(
            f"unknown section {unknown[0]!r} in the robot config; known: {list(CONFIG_SECTIONS)}"
        )
    agent = dict(file_data.get("agent", {}))
    link = dict(file_data.get("link", {}))
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
    if args.robot_id:
        agent["robot_id"] = args.robot_id
    if args.spool_dir:
        agent["spool_dir"] = args.spool_dir
    agent["link"] = link
    agent["safety"] = dict(file_data.get("safety", {}))
    return dataclass_from_dict(AgentConfig, agent, where="agent config")


def connect(args: argparse.Namespace) -> int:
    from robot_agent.agent import Agent
    from robot_agent.drivers import UnknownDriverError, make_driver
    from robot_agent.link import LinkRefused
    from robot_agent.teleop import TeleopError, make_teleop

    try:
        file_data = load_config_file(args.robot_config) if args.robot_config else {}
        config = agent_config_from_args(args, file_data)
        driver = make_driver(args.robot, file_data.get("driver", {}))
        teleop_section = dict(file_data.get("teleop", {}))
        teleop_kind = args.teleop or teleop_section.pop("kind", None)
        teleop_section.pop("kind", None)
        teleop = make_teleop(teleop_kind, teleop_section) if teleop_kind else None
    except (AgentConfigError, UnknownDriverError, TeleopError, ImportError) as exc:
        print(f"rlinf-robot: {exc}", file=sys.stderr)
        return 2
    if config.link.insecure:
        print("rlinf-robot: WARNING: --insecure: no TLS and no token on the robot link", file=sys.stderr)
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "connect":
        return connect(args)
    print("rlinf-robot teleop: not yet implemented (tracked in the teleop issue)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
