"""The robot PC installs `.[robot]` only: robot_agent and protos must never pull in heavy parts."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "ray", "trainer", "policies")
# A robot PC has no simulator: robot_agent reaches sim_envs only inside the sim-twin driver, lazily.
# Recording libraries (the .[record] extra) load only when a dataset is written.
RECORDING = ("pyarrow", "pandas", "av")
FORBIDDEN_AT_IMPORT = {
    "robot_agent": (*FORBIDDEN, *RECORDING, "sim_envs", "mujoco", "gymnasium"),
    "protos": (*FORBIDDEN, *RECORDING),
}


def test_import_linter_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("package", ["robot_agent", "protos"])
def test_importing_every_module_loads_nothing_heavy(package):
    modules = [package] + [
        m.name
        for m in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}.")
        if not m.name.rsplit(".", 1)[-1].startswith("_")
    ]
    assert len(modules) > 3 and (package != "robot_agent" or "robot_agent.drivers.franka" in modules)
    forbidden = FORBIDDEN_AT_IMPORT[package]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"{package} imported {result.stdout.strip()}"
