"""Rule verifiers for hard constraints, one registry per family.

A constraint names its ``family`` (``"ifeval"``, ``"muldimif"``, ...), its ``instruction_id`` within the
family and its ``kwargs``. `verify_constraint` runs the family's checker and never raises: a checker
exception becomes a failed `Verdict` whose ``error`` holds the exception text.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from . import ifbench, ifeval, muldimif
from .base import Checker, Verdict
from .text import (
    count_sentences,
    count_words,
    install_punkt,
    sentence_backend,
    sentence_tokenizer_name,
    set_sentence_splitter,
    split_sentences,
)

#: Family name -> family module (each has ``FAMILY``, ``REGISTRY`` and ``check``).
FAMILIES: dict[str, ModuleType] = {module.FAMILY: module for module in (ifeval, ifbench, muldimif)}


def is_known(family: str, instruction_id: str) -> bool:
    """Return True when ``family`` exists and its registry has ``instruction_id``."""
    module = FAMILIES.get(family)
    return module is not None and instruction_id in module.REGISTRY


def validate_constraint(family: str, instruction_id: str, kwargs: dict[str, Any] | None) -> str | None:
    """Build the checker once to validate ``kwargs`` (None values dropped) without a response.

    Returns:
        ``None`` when the constraint is usable, else the error text (``"TypeName: message"``).
    """
    module = FAMILIES.get(family)
    if module is None:
        return f"KeyError: unknown verifier family {family!r}; known: {sorted(FAMILIES)}"
    try:
        cls = module.REGISTRY[instruction_id]
        cls(**{k: v for k, v in (kwargs or {}).items() if v is not None})
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


def verify_constraint(
    family: str,
    instruction_id: str,
    kwargs: dict[str, Any] | None,
    response: str,
    prompt: str | None = None,
    *,
    reading: str = "official",
) -> Verdict:
    """Check one hard constraint against one response.

    Args:
        family: verifier family name, a key of `FAMILIES`.
        instruction_id: id in that family's ``REGISTRY``.
        kwargs: the constraint's arguments (IFEval convention); ``None`` means no arguments.
        response: the completion text.
        prompt: the instruction text, for checkers that need it (IFEval ``combination:repeat_prompt``).
        reading: ``"official"`` (default): the official code's semantics, as `hir-trl eval` scores. For the
            ``ifbench`` family, ``"description"`` selects our documented reading of the 58 IFBench ids instead
            (`hir_trl.verifiers.ifbench.READINGS`); the other families have only the official reading.

    Returns:
        A `Verdict`. Never raises: an unknown family, id or reading, bad kwargs or a checker exception give
        ``Verdict(passed=False, error="TypeName: message")``.
    """
    try:
        module = FAMILIES[family]
    except KeyError:
        return Verdict(False, error=f"KeyError: unknown verifier family {family!r}; known: {sorted(FAMILIES)}")
    try:
        if module is ifbench:
            passed = ifbench.check(instruction_id, dict(kwargs or {}), response, prompt, reading=reading)
        elif reading != "official":
            raise ValueError(f"the {family} family has only the 'official' reading, got {reading!r}")
        else:
            passed = module.check(instruction_id, dict(kwargs or {}), response, prompt)
        return Verdict(bool(passed))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded verdict
        return Verdict(False, error=f"{type(exc).__name__}: {exc}")


__all__ = [
    "FAMILIES",
    "Checker",
    "Verdict",
    "count_sentences",
    "count_words",
    "install_punkt",
    "is_known",
    "sentence_backend",
    "sentence_tokenizer_name",
    "set_sentence_splitter",
    "split_sentences",
    "validate_constraint",
    "verify_constraint",
]
