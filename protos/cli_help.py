"""What every command-line tool's ``--help`` looks like: plain text, each option with its default.

Shared by ``rlinf-trainer``, ``rlinf-robot`` and ``rlinf-calibrate`` (argparse only, nothing heavy).
"""

from __future__ import annotations

import argparse


class PlainHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written (their examples stay aligned); every option's help ends with its
    default, unless the help already names one or there is none worth saying (None, False, '')."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False  # a flag (0 is a default worth saying, and 0 == False)
            or default in ("", argparse.SUPPRESS)
            or action.option_strings == []  # positionals: their help says what they are
            or isinstance(action, argparse._HelpAction)
        ):
            return text
        return f"{text} (default: %(default)s)"


def plain_docstring(doc: str | None) -> str:
    """A module docstring as plain help text: RST's double backquotes become single quotes."""
    return (doc or "").replace("``", "'").strip()


def plain_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` and every subcommand's parser the plain formatter; returns ``parser``."""
    parser.formatter_class = PlainHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                plain_help(sub)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of ``parser``, by name (empty for a parser without subcommands)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


__all__ = ["PlainHelpFormatter", "plain_docstring", "plain_help", "subcommands"]
