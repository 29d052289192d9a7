"""Where a command writes: never through a symbolic link.

Every ``hir-trl`` command that writes files (``recipes copy``, ``eval score|generate|compare``, ``synth``) checks
each path it will write before it writes anything (`check_write_targets`): a path that is a symbolic link, or whose
folder reaches outside the destination folder through one, is refused with one line naming it and where it leads,
so that nothing is written over outside what the user named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


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


__all__ = ["check_write_targets", "write_target_problem"]
