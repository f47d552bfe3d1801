"""``rlinf-calibrate``: camera intrinsics, hand-eye and sim alignment."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlinf-calibrate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("intrinsics", "hand-eye", "apply-to-sim"):
        sub.add_parser(name, help=f"{name} (not yet)")
    args = parser.parse_args(argv)
    print(
        f"rlinf-calibrate {args.command}: not yet implemented (tracked in the calibration issue)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
