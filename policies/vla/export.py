"""Hand a policy trained here back in its upstream's own checkpoint format.

    python -m policies.vla.export POLICY_DIR OUT_DIR

``POLICY_DIR`` is a saved policy (``.../step_<N>/policy``). OpenVLA and OpenVLA-OFT policies are
written as upstream's folders (:mod:`policies.vla.openvla.export`); π0, π0.5 and SmolVLA ones in the
layout their checkpoint came in, openpi or LeRobot (:mod:`policies.vla.pi.export`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m policies.vla.export", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("policy", help="a saved policy folder")
    parser.add_argument("out", help="the folder to write")
    args = parser.parse_args(argv)
    from policies import load_policy
    from policies.vla.openvla.export import export_openvla
    from policies.vla.openvla.policy import OpenVLAPolicy
    from policies.vla.pi.export import export_pi
    from policies.vla.pi.policy import PiPolicy
    from policies.vla.weights import CheckpointError

    try:
        policy = load_policy(args.policy)
    except (OSError, ValueError) as exc:
        print(f"error: {args.policy}: {exc}", file=sys.stderr)
        return 2
    if isinstance(policy, PiPolicy):
        try:
            folder = export_pi(policy, args.out)
        except CheckpointError as exc:
            print(f"error: {args.policy}: {exc}", file=sys.stderr)
            return 2
        layout = getattr(policy.checkpoint, "layout", "lerobot")
        print(
            f"wrote {folder}: a {type(policy).__name__.removesuffix('Policy')} folder in the {layout} layout"
        )
        return 0
    if not isinstance(policy, OpenVLAPolicy):
        print(
            f"error: {args.policy}: a {type(policy).__name__}; only the VLA families export", file=sys.stderr
        )
        return 2
    step = next(
        (int(m.group(1)) for part in Path(args.policy).parts if (m := re.fullmatch(r"step_(\d+)", part))), 0
    )
    folder = export_openvla(policy, args.out, step)
    print(f"wrote {folder}: an OpenVLA{'-OFT' if policy.parallel else ''} folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
