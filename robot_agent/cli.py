"""``rlinf-robot``: the agent on the robot PC."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlinf-robot", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    connect = sub.add_parser("connect", help="dial into a trainer and serve this robot (not yet)")
    connect.add_argument("--server", required=True, help="HOST:PORT of the trainer")
    connect.add_argument("--robot", required=True, help="driver kind, e.g. sim-twin or franka")
    connect.add_argument("--robot-config")
    connect.add_argument("--token-file")
    connect.add_argument("--tls-ca")
    connect.add_argument("--insecure", action="store_true")
    sub.add_parser("teleop", help="human teleoperation and data collection (not yet)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(
        f"rlinf-robot {args.command}: not yet implemented (tracked in the robot-link issue)", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
