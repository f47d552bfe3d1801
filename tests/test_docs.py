"""The docs: the site builds with warnings as errors, the generated references are current, the README
stays the front door, and every rlinf command the pages show parses with keys that exist."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# What a config loader may say about a path that the page names but this checkout does not hold.
MISSING_FILE = ("does not exist", "a saved policy", "must name the dataset folder")


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    assert mkdocs.exists(), "the docs extra is not installed (scripts/setup.sh installs it)"
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").is_file()


def test_the_generated_reference_pages_are_current():
    checked = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    reference = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    undocumented = [row.split("|")[1].strip() for row in reference.splitlines() if row.endswith("|  |")]
    assert not undocumented, f"config keys without a comment in their dataclass: {undocumented}"


def test_the_readme_is_the_front_door_and_the_license_is_there():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    first = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert first[0].startswith("bash scripts/setup.sh && .venv/bin/rlinf-trainer train")
    assert first[1].startswith("bash scripts/setup.sh && .venv/bin/python -m pytest")
    for link in re.findall(r"\]\(((?:docs/|LICENSE)[^)#]*)", readme):
        assert (ROOT / link).exists(), f"README links to {link}, which is not there"
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every rlinf-* command line of every bash block on every page (continuations joined)."""
    commands = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                argv = shlex.split(line, comments=True)
                if argv and Path(argv[0]).name.startswith("rlinf-") and not any("..." in a for a in argv):
                    commands.append((str(page.relative_to(ROOT)), argv))
    return commands


def test_every_documented_command_parses_and_its_config_keys_exist():
    import calibration.cli
    import robot_agent.cli
    import trainer.cli
    from trainer.configs import load_config
    from trainer.configs.errors import ConfigError
    from trainer.server.config import load_serve_config

    parsers = {
        "rlinf-trainer": trainer.cli,
        "rlinf-robot": robot_agent.cli,
        "rlinf-calibrate": calibration.cli,
    }
    commands = documented_commands()
    assert len(commands) > 40, len(commands)
    for page, argv in commands:
        where = f"{page}: {' '.join(argv)}"
        try:
            args = parsers[Path(argv[0]).name].build_parser().parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"does not parse: {where}")
        if (
            Path(argv[0]).name != "rlinf-trainer"
            or args.command not in ("train", "serve")
            or getattr(args, "resume", None)
        ):
            continue
        try:
            if args.command == "train":
                load_config(args.config, args.overrides)
            else:
                load_serve_config(
                    args.config, [*args.overrides, *(["server.insecure=true"] if args.insecure else [])]
                )
        except ConfigError as exc:
            assert any(m in str(exc) for m in MISSING_FILE), f"{where}\n  -> {exc}"
