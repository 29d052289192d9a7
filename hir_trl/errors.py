"""The one-line form of a user error that every ``hir-trl`` command prints (exit status 2, no traceback)."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (its non-blank lines joined by spaces), or its type's name when it has none."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


__all__ = ["one_line"]
