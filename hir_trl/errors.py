"""The one-line form of a user error that every ``hir-trl`` command prints (exit status 2, no traceback), and the one
error of a choice that is not in its registry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


__all__ = ["choice_error", "chosen", "one_line"]
