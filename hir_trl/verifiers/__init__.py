"""Rule verifiers for hard constraints, one registry per family, one protocol for all.

A constraint names its ``family`` (``"ifeval"``, ``"ifbench"``, ``"muldimif"``), its ``instruction_id`` within
the family and its ``kwargs``. Every family module has the same shape (`hir_trl.verifiers.base`): ``FAMILY``,
``REGISTRY`` and ``VERIFIER``, its `VerifierFamily` record, whose ``build_checker`` / ``check`` (strict) /
``check_loose`` are the one shared evaluation of `hir_trl.verifiers.family`. `verify_constraint` runs
the family's strict or loose check and never raises: a checker exception becomes a failed `Verdict` whose
``error`` holds the exception text. `register_verifier` (`hir_trl.verifiers.registry`) adds a checker function of
your own to `FAMILIES`, under a family of your own.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from . import ifbench, ifeval, muldimif
from .base import Checker, Verdict
from .family import VerifierFamily
from .registry import (
    BUILTIN_FAMILIES,
    FAMILIES,
    import_verifier_modules,
    register_verifier,
    registered_families,
)
from .text import (
    count_sentences,
    count_words,
    install_punkt,
    sentence_backend,
    sentence_tokenizer_name,
    set_sentence_splitter,
    split_sentences,
)

FAMILIES.update({module.VERIFIER.name: module for module in (ifeval, ifbench, muldimif)})
if tuple(FAMILIES) != BUILTIN_FAMILIES:  # pragma: no cover - a family module renamed without its registry entry
    raise RuntimeError(f"built-in families {tuple(FAMILIES)} are not registry.BUILTIN_FAMILIES {BUILTIN_FAMILIES}")


def unknown_family_message(family: str) -> str:
    """Why ``family`` cannot be checked: it is no built-in family and nothing registered it; with the fix (import
    the module that calls `register_verifier`, ``verifier_modules`` / ``--verifier_modules``)."""
    return (f"unknown verifier family {family!r} (known: {sorted(FAMILIES)}); a family of your own is known once "
            "the module that calls hir_trl.register_verifier for it is imported: name it in verifier_modules "
            "(--verifier_modules my_pkg.constraints or path/to/constraints.py)")


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
        return f"KeyError: {unknown_family_message(family)}"
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
    loose: bool = False,
) -> Verdict:
    """Check one hard constraint against one response: `VerifierFamily.check` (or ``check_loose``), recorded.

    Args:
        family: verifier family name, a key of `FAMILIES`.
        instruction_id: id in that family's ``REGISTRY``.
        kwargs: the constraint's arguments (IFEval convention); ``None`` means no arguments.
        response: the completion text.
        prompt: the instruction text, for checkers that need it (IFEval ``combination:repeat_prompt``).
        reading: ``"official"`` (default): the official code's semantics, as `hir-trl eval` scores. For the
            ``ifbench`` family, ``"description"`` selects our documented reading of the 58 IFBench ids instead
            (`hir_trl.verifiers.ifbench.READINGS`); the other families have only the official reading.
        loose: False (default) for the family's strict verdict, True for its loose one (IFEval's and IFBench's 8
            loose variants; MulDimIF has no loose mode, so its loose verdict is the strict one).

    Returns:
        A `Verdict`. Never raises: an unknown family, id or reading, bad kwargs or a checker exception give
        ``Verdict(passed=False, error="TypeName: message")``. The checker gets a copy of ``kwargs``: whatever it does
        to them, the caller's are unchanged.
    """
    try:
        verifier: VerifierFamily = FAMILIES[family].VERIFIER
    except KeyError:
        return Verdict(False, error=f"KeyError: {unknown_family_message(family)}")
    check = verifier.check_loose if loose else verifier.check
    try:  # the checker gets its own copy: one that changes its arguments cannot change the row's constraint
        return Verdict(bool(check(instruction_id, copy.deepcopy(kwargs), response, prompt, reading)))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded verdict
        return Verdict(False, error=f"{type(exc).__name__}: {exc}")


def achieved_constraint(constraint: Mapping[str, Any], response: str, prompt: str | None = None
                        ) -> dict[str, Any] | None:
    """Achieved-goal relabelling of one hard constraint (HER, Andrychowicz et al. 2017): the same constraint type
    with the bound ``response`` achieved, e.g. ``Answer with less than 12 words.`` -> ``Answer with less than 31
    words.`` for a 30-word response (`Checker.achieved_kwargs`).

    Args:
        constraint: a row's constraint record (`hir_trl.load_hir_dataset`): ``kind``, ``family``,
            ``instruction_id``, ``kwargs`` (a dict, or the JSON text dataset rows store), ``text``.
        response: the completion text.
        prompt: the instruction text, for checkers that need it.

    Returns:
        The record with the achieved ``kwargs`` (in the form given: dict or sorted-key JSON) and its checker's
        ``build_description()`` as ``text``, or ``None``
        when there is none: a soft constraint, a type without a count, a bound below 1, a relabelled constraint
        the response still fails (re-checked strictly), or any error (never raises).
    """
    if constraint.get("kind", "hard") != "hard":
        return None
    try:
        verifier: VerifierFamily = FAMILIES[constraint["family"]].VERIFIER
        instruction_id, stored = constraint["instruction_id"], constraint.get("kwargs")
        kwargs = json.loads(stored) if isinstance(stored, str) else copy.deepcopy(stored)
        kwargs = verifier.build_checker(instruction_id, kwargs, prompt).achieved_kwargs(response)
        if kwargs is None or not verifier.check(instruction_id, kwargs, response, prompt):
            return None
        text = verifier.build_checker(instruction_id, kwargs, prompt).build_description()
    except Exception:  # noqa: BLE001 - no relabelling is the recorded outcome of any failure
        return None
    return {**constraint, "kwargs": json.dumps(kwargs, sort_keys=True) if isinstance(stored, str) else kwargs,
            "text": text}


__all__ = [
    "BUILTIN_FAMILIES",
    "FAMILIES",
    "Checker",
    "Verdict",
    "VerifierFamily",
    "achieved_constraint",
    "count_sentences",
    "count_words",
    "import_verifier_modules",
    "install_punkt",
    "is_known",
    "register_verifier",
    "registered_families",
    "sentence_backend",
    "sentence_tokenizer_name",
    "set_sentence_splitter",
    "split_sentences",
    "validate_constraint",
    "verify_constraint",
]
