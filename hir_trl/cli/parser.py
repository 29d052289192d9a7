"""The one parser style of the ``hir-trl`` commands (`command_parser`: TRL's `TrlParser` over dataclasses, as
``trl grpo`` parses; ``--config FILE`` or ``--config=FILE``; a bad flag as one `UsageError` line instead of argparse's
usage block and exit). ``train``, ``plan``, ``eval`` and ``synth`` parse with it."""

from __future__ import annotations

import os
from collections.abc import Sequence


class UsageError(ValueError):
    """A bad command line: an unknown flag, a missing or malformed value (one line, instead of argparse's usage
    block and exit)."""


def split_config_flag(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--config=FILE`` spelled ``--config FILE``, the only spelling TRL's `TrlParser` reads.

    Raises:
        UsageError: ``--config`` with no file after it, a file that does not exist, or ``--config`` given twice.
    """
    out: list[str] = []
    for arg in argv:
        out.extend(["--config", arg.split("=", 1)[1]] if arg.startswith("--config=") else [arg])
    count = out.count("--config")
    if count > 1:
        raise UsageError("--config is given twice: give one recipe file (flags after it override its values)")
    if count:
        at = out.index("--config") + 1
        if at == len(out) or not out[at] or out[at].startswith("--"):
            raise UsageError("--config needs a file: --config recipe.yaml")
        if not os.path.isfile(out[at]):
            raise UsageError(f"--config {out[at]}: no such file (give the path of a YAML file of the command's options)")
    return out


def command_parser(dataclass_types: Sequence[type], prog: str, description: str | None = None):
    """The parser of one ``hir-trl`` command: TRL's `TrlParser` over ``dataclass_types``, as ``trl grpo`` parses
    (each field a ``--snake_case`` flag, its ``--kebab-case`` spelling too; a YAML file by ``--config``), whose
    errors raise `UsageError` (one line naming the flag and ``<prog> --help``) instead of exiting."""
    from trl import TrlParser

    class CommandParser(TrlParser):
        def error(self, message):  # argparse's error(): usage + message + exit 2
            raise UsageError(f"{message} ({prog} --help lists the options)")

    return CommandParser(tuple(dataclass_types), prog=prog, description=description, allow_abbrev=False)


def parse_command(parser, argv: Sequence[str]) -> tuple:
    """Parse ``argv`` with a `command_parser` (``--config FILE`` or ``--config=FILE`` sets defaults, flags override
    it): the dataclass instances, then a namespace of any arguments added to the parser by hand.

    Raises:
        UsageError: an unknown flag or a bad value (`split_config_flag`).
        ValueError: a key of the ``--config`` file that is no option.
    """
    argv = split_config_flag(argv)
    *parsed, from_file, from_command_line = parser.parse_args_and_config(
        argv, return_remaining_strings=True, separate_remaining_strings=True)
    if from_file:
        raise ValueError(f"unknown key(s) in {argv[argv.index('--config') + 1]}: "
                         f"{', '.join(k.lstrip('-') for k in from_file[::2])} ({parser.prog} --help lists the options)")
    if from_command_line:
        raise UsageError(f"unrecognized arguments: {' '.join(from_command_line)} ({parser.prog} --help lists the "
                         "options)")
    return tuple(parsed)


__all__ = ["UsageError", "command_parser", "parse_command", "split_config_flag"]
