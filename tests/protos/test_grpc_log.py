"""gRPC core's INFO lines stay off the terminal wherever the link runs, CLI or in-process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import {package}, grpc, os; print(os.environ.get('GRPC_VERBOSITY'))"


def verbosity_after_import(package: str, preset: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    if preset is not None:
        env["GRPC_VERBOSITY"] = preset
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(package=package)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("package", ["trainer", "robot_agent"])
def test_importing_the_package_quiets_grpc_core_unless_the_user_asked_for_it(package):
    assert verbosity_after_import(package, None) == "ERROR"
    assert verbosity_after_import(package, "INFO") == "INFO"  # the user's choice wins
