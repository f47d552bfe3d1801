"""Generate the Python code for ``protos/robot_link.proto`` (pinned grpcio-tools, so output is reproducible).

    python scripts/build_protos.py            # regenerate protos/robot_link_pb2*.py(i)
    python scripts/build_protos.py --check    # exit 1 if the committed files are stale

The generator version is pinned in pyproject's ``dev`` extra; the generated files require grpcio and
protobuf at least as new as the generator (see the ``robot`` extra).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO = "protos/robot_link.proto"
OUTPUTS = ("robot_link_pb2.py", "robot_link_pb2.pyi", "robot_link_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc

    (out_dir / "protos").mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(ROOT / PROTO),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")


def stale_files() -> list[str]:
    """Names of generated files that differ from what the pinned generator produces now."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            name
            for name in OUTPUTS
            if not (ROOT / "protos" / name).exists()
            or (Path(tmp) / "protos" / name).read_bytes() != (ROOT / "protos" / name).read_bytes()
        ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check", action="store_true", help="only check that the committed files are current"
    )
    args = parser.parse_args()
    if args.check:
        stale = stale_files()
        if stale:
            print(f"stale generated code: {stale}; run `python scripts/build_protos.py`", file=sys.stderr)
            return 1
        print("generated code is current")
        return 0
    generate(ROOT)
    print(f"generated {', '.join(OUTPUTS)} in protos/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
