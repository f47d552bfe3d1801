"""Every optional extra the project names (in errors, docs, deploy files) exists in pyproject.toml."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"(?:\.|rlinf)\[([a-z0-9_,\- ]+)\]")
SKIP = {".venv", ".venv-lerobot", ".git", "runs", "node_modules"}


def test_every_extra_named_in_the_repository_is_declared():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    missing = []
    for path in ROOT.rglob("*"):
        if (
            path.suffix not in {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".service"}
            or not path.is_file()
        ):
            continue
        parts = path.relative_to(ROOT).parts
        if SKIP & set(parts) or any(part.startswith(".venv") for part in parts):  # side venvs too
            continue
        for match in NAMED.finditer(path.read_text(errors="replace")):
            for name in match.group(1).replace(" ", "").split(","):
                if name and name not in declared:
                    missing.append(f"{path.relative_to(ROOT)}: .[{name}]")
    assert not missing, missing
