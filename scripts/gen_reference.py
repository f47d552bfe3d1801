"""Generate the docs' configuration and CLI references from the code itself.

    python scripts/gen_reference.py            # rewrite docs/reference/configuration.md and cli.md
    python scripts/gen_reference.py --check    # exit 1 if the committed pages are stale

The configuration reference walks the typed dataclasses (every key, its type, default and the
comment written beside it in the source); the CLI reference is each command's ``--help``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import os
import sys
import textwrap
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG_PAGE = ROOT / "docs" / "reference" / "configuration.md"
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
# (title, intro, [(key prefix, "module:Class")]): each class's fields, nested dataclasses as their own table.
CONFIG_SECTIONS = (
    (
        "rlinf-trainer train",
        "A training run: a preset (`--config`) or YAML file, then `key=value` overrides. "
        "`algo.*` holds the chosen algorithm's keys; `env.kwargs.*` the env's own (the Franka tasks' below).",
        [
            ("", "trainer.configs.schema:TrainConfig"),
            ("algo (algorithm=ppo)", "trainer.algorithms.ppo:PPOConfig"),
            ("algo (algorithm=grpo)", "trainer.algorithms.grpo:GRPOConfig"),
            ("algo (algorithm=sac)", "trainer.algorithms.sac:SACConfig"),
            ("algo (algorithm=rlpd)", "trainer.algorithms.rlpd:RLPDConfig"),
            ("algo (algorithm=bc)", "trainer.algorithms.bc:BCConfig"),
            ("env.kwargs (the Franka tasks, rlinf/Franka*-v0)", "sim_envs.franka_env:FrankaEnvConfig"),
        ],
    ),
    (
        "rlinf-trainer serve",
        "`rlinf-trainer serve [--config PRESET|FILE] key=value ...`; `train.overrides` takes the keys of "
        "`rlinf-trainer train` above.",
        [("", "trainer.server.config:ServeConfig")],
    ),
    (
        "rlinf-robot",
        "The robot config file (`--robot-config`, TOML or JSON): sections `[agent]`, `[safety]`, `[link]`, "
        "`[driver]` (the driver's own keys: one table per driver below) and `[teleop]`.",
        [
            ("agent", "robot_agent.config:AgentConfig"),
            ("driver (--robot sim-twin)", "robot_agent.drivers.sim_twin:SimTwinConfig"),
            ("driver (--robot franka)", "robot_agent.drivers.franka:FrankaConfig"),
            ("driver (--robot dual-franka)", "robot_agent.drivers.dual_franka:DualFrankaConfig"),
            ("driver (--robot ur5e)", "robot_agent.drivers.ur5e:UR5eConfig"),
        ],
    ),
)
CLI_TOOLS = (
    ("rlinf-trainer", "trainer.cli"),
    ("rlinf-robot", "robot_agent.cli"),
    ("rlinf-calibrate", "calibration.cli"),
)
AGENT_SECTIONS = {"safety": "safety", "link": "link"}  # AgentConfig's nested sections, as the file names them


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    type: str
    default: str
    doc: str


def field_docs(cls: type) -> dict[str, str]:
    """Each field's comment: the comment lines right above it plus the one at the end of its line
    (a subclass's own comment wins over its base class's)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update({k: v for k, v in class_field_docs(klass).items() if v or k not in docs})
    return docs


def class_field_docs(cls: type) -> dict[str, str]:
    source_lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(textwrap.dedent("".join(source_lines)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    lines = textwrap.dedent("".join(source_lines)).splitlines()
    docs = {}
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        row = node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            above.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        end = lines[node.end_lineno - 1]
        trailing = end.split("  # ", 1)[1].strip() if "  # " in end else ""
        docs[node.target.id] = " ".join(part for part in (*above, trailing) if part)
    return docs


def default_of(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"`{value}` ({value >> 20} MiB)"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def nested_class(cls: type, name: str) -> type | None:
    hints = typing.get_type_hints(cls)
    hint = hints.get(name)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def tables(
    prefix: str, cls: type, listed: dict[type, str] | None = None
) -> list[tuple[str, type, list[Key]]]:
    """``cls``'s keys under ``prefix``, then each nested dataclass field's table under its key (a class
    listed already, such as each arm of ``dual-franka``, is named instead: ``listed`` maps it to its key)."""
    listed = {} if listed is None else listed
    if cls in listed:
        return [(prefix, cls, [Key(f"{prefix}.*", "section", "", f"the keys of `{listed[cls]}`")])]
    listed[cls] = prefix
    docs = field_docs(cls)
    own, nested = [], []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        inner = nested_class(cls, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if inner is not None:
            nested.append((AGENT_SECTIONS.get(f.name, key) if cls.__name__ == "AgentConfig" else key, inner))
            continue
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        own.append(Key(key, annotation, default_of(f), docs.get(f.name, "")))
    out = [(prefix, cls, own)] if own else []
    for key, inner in nested:
        out += tables(key, inner, listed)
    return out


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def configuration_page() -> str:
    out = [
        "# Configuration reference",
        "",
        "Generated from the typed dataclasses by `python scripts/gen_reference.py` (a test fails when this page",
        "is stale). Every key is checked at start: a misspelt one fails with its name and the known ones.",
        "",
    ]
    for title, intro, roots in CONFIG_SECTIONS:
        out += [f"## {title}", "", intro, ""]
        listed: dict[type, str] = {}
        for prefix, target in roots:
            module, name = target.split(":")
            cls = getattr(importlib.import_module(module), name)
            label = prefix.split(" ")[0]
            for table_prefix, table_cls, keys in tables(label, cls, listed):
                heading = prefix if table_prefix == label and prefix else table_prefix or "top level"
                out += [f"### `{heading}`" if "(" not in heading else f"### {heading}", ""]
                doc = inspect.getdoc(table_cls)
                if doc:
                    out += [" ".join(doc.split("\n\n")[0].split()), ""]
                out += ["| key | type | default | what it does |", "|---|---|---|---|"]
                out += [
                    f"| `{k.name}` | `{cell(k.type)}` | {cell(k.default)} | {cell(k.doc)} |" for k in keys
                ]
                out.append("")
    return "\n".join(out).rstrip() + "\n"


def cli_page() -> str:
    from protos.cli_help import subcommands

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: fix it
    out = [
        "# CLI reference",
        "",
        "Each command's `--help`, generated by `python scripts/gen_reference.py`.",
        "",
    ]
    for tool, module in CLI_TOOLS:
        parser = importlib.import_module(module).build_parser()
        out += [f"## `{tool}`", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, sub in subcommands(parser).items():
            out += [f"### `{tool} {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed pages are stale")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    pages = {CONFIG_PAGE: configuration_page(), CLI_PAGE: cli_page()}
    stale = [path for path, text in pages.items() if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run python scripts/gen_reference.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in pages.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
