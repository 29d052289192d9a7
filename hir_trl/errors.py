"""The one-line form of a user error that every ``hir-trl`` command prints (exit status 2, no traceback), the one
error of a choice that is not in its registry, the one parser style of the commands (`command_parser`: TRL's
`TrlParser` over dataclasses, a bad flag as one `UsageError` line), and where a command may write: never through a
symbolic link (`write_target_problem`: ``recipes copy``, ``eval score|generate`` and ``synth`` check every path they
will write before writing anything; a link, or a folder on the way that leads out of the destination, is one line
naming it and where it leads)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (its non-blank lines joined by spaces), or its type's name when it has none."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


def choice_error(field: str, value: Any, choices: Iterable[str]) -> str:
    """The message of a value outside a field's choices: ``"<field> must be one of (<choices>), got <value!r>"``."""
    return f"{field} must be one of {tuple(choices)}, got {value!r}"


def chosen(registry: Mapping[str, T], field: str, name: Any) -> T:
    """``registry[name]``: the strategy the field ``field`` names (a registry's keys are that field's choices).

    Raises:
        ValueError: ``name`` is not a key of ``registry`` (`choice_error`, naming the field).
    """
    if not isinstance(name, str) or name not in registry:
        raise ValueError(choice_error(field, name, registry))
    return registry[name]


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


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return path.absolute()


def write_target_problem(target: str | os.PathLike[str], destination: str | os.PathLike[str] | None = None
                         ) -> str | None:
    """Why writing ``target`` could write elsewhere than where it says, or None.

    Args:
        target: a file (or folder) the command is about to write.
        destination: the folder the command writes into (``recipes copy``'s DEST, ``eval generate``'s
            ``--output_dir``), or None for a file named by itself.

    Returns:
        One line when ``target`` is a symbolic link (writing would replace what it points to), or when
        ``destination`` is given and ``target`` resolves outside it (a folder on the way is a symbolic link out of
        it); else None.
    """
    target = Path(target)
    if target.is_symlink():
        return (f"{target} is a symbolic link (to {os.readlink(target)}): writing it would write there; remove the "
                "link or choose another destination")
    if destination is not None:
        root = _resolved(Path(destination))
        where = _resolved(target)
        if where != root and not where.is_relative_to(root):
            return (f"{target} leads outside {destination} (to {where}) through a symbolic link on the way: "
                    "remove the link or choose another destination")
    return None


def check_write_targets(targets: Iterable[str | os.PathLike[str]],
                        destination: str | os.PathLike[str] | None = None) -> None:
    """`write_target_problem` of every target, before any is written.

    Raises:
        ValueError: the first target that is a symbolic link or leads outside ``destination``.
    """
    for target in targets:
        problem = write_target_problem(target, destination)
        if problem is not None:
            raise ValueError(problem)


__all__ = ["UsageError", "check_write_targets", "choice_error", "chosen", "command_parser", "one_line", "parse_command",
           "split_config_flag", "write_target_problem"]
