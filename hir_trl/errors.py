"""The one-line form of a user error that every ``hir-trl`` command prints (exit status 2, no traceback), the one
error of a choice that is not in its registry, and where a command may write: never through a
symbolic link (`write_target_problem`: ``recipes copy``, ``eval score|generate`` and ``synth`` check every path they
will write before writing anything; a link, or a folder on the way that leads out of the destination, is one line
naming it and where it leads)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
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


__all__ = ["check_write_targets", "choice_error", "chosen", "one_line", "write_target_problem"]
