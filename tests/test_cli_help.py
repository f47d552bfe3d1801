"""Every tool's --help: plain text, every option explained with its default, the serve modes and port."""

from __future__ import annotations

import argparse

import pytest

import calibration.cli
import robot_agent.cli
import trainer.cli
from protos.cli_help import subcommands

TOOLS = {"rlinf-trainer": trainer.cli, "rlinf-robot": robot_agent.cli, "rlinf-calibrate": calibration.cli}


def helps(tool: str) -> dict[str, str]:
    parser = TOOLS[tool].build_parser()
    return {"": parser.format_help()} | {name: sub.format_help() for name, sub in subcommands(parser).items()}


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_option_of_every_command_has_help_and_no_rst(tool):
    parser = TOOLS[tool].build_parser()
    for name, sub in subcommands(parser).items():
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"{tool} {name} {action.option_strings or action.dest} has no help"
    for name, text in helps(tool).items():
        assert "``" not in text, f"{tool} {name} --help shows RST markup"


def test_defaults_are_shown_and_the_serve_modes_and_port_listed():
    trainer_help, robot_help = helps("rlinf-trainer"), helps("rlinf-robot")
    assert "--episodes EPISODES  episodes to play (default: 3)" in " ".join(
        trainer_help["rollout"].split("\n")
    )
    for mode in ("collect", "eval", "train", "dagger"):
        assert f"\n  {mode} " in trainer_help["serve"], mode
    assert "port 50051" in trainer_help["serve"]
    assert "docs/reference/configuration.md" in trainer_help["train"]
    flat = " ".join(robot_help["connect"].split())
    assert "(default: agent.robot_id, else <host name>-<robot>)" in flat
    assert "(default: 0)" in " ".join(helps("rlinf-calibrate")["sysid"].split())  # --seed
