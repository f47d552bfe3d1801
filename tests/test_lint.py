import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(command):
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), *command], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
