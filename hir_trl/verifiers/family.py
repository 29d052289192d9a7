"""The one verifier protocol: a family record, and the strict and loose evaluation every rule family shares.

Modelled on IFEval (google-research/instruction_following_eval, Apache-2.0): ``instructions_registry.py`` maps
instruction ids to checker classes, and ``evaluation_lib.py`` builds a checker from a row's ``kwargs`` and gives
the *strict* verdict (``test_instruction_following_strict``: an all-whitespace response fails, otherwise the
checker decides) and the *loose* one (``test_instruction_following_loose``: the first of the response's loose
variants that passes decides). Here a family (``"ifeval"``, ``"ifbench"``, ``"muldimif"``) is one
`VerifierFamily` record: its name, its registry (instruction id -> `Checker` class) and the few points where
its semantics differ (readings, kwargs conventions, loose variants). `VerifierFamily.build_checker`,
`VerifierFamily.check` (strict) and `VerifierFamily.check_loose` are the single implementation of those steps;
each family module exposes its record as ``VERIFIER`` and the record's three methods under the same names
(``ifeval.check``, ``muldimif.check_loose``, ...). `hir_trl.verifiers.verify_constraint` is the entry point that
turns any failure into a recorded `Verdict`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .base import Checker

#: The reading every family has: the official code's semantics (what `hir-trl eval` scores).
OFFICIAL = "official"

#: A constraint's ``kwargs`` as rows store them (``None`` means no kwargs).
Kwargs = Mapping[str, Any] | None


def drop_none_kwargs(instruction_id: str, kwargs: Kwargs) -> dict[str, Any]:
    """IFEval's convention for a row's ``kwargs``: ``None`` means no kwargs, and a kwarg whose value is ``None`` is
    dropped (HF datasets store every instruction's kwargs in one struct, so absent ones come back as ``None``)."""
    return {name: value for name, value in (kwargs or {}).items() if value is not None}


def new_checker(cls: type[Checker], kwargs: dict[str, Any]) -> Checker:
    """A fresh ``cls(**kwargs)``: the default way a family constructs a checker."""
    return cls(**kwargs)


def loose_variants(response: str) -> list[str]:
    """The 8 official loose-mode variants of ``response`` (IFEval's ``test_instruction_following_loose``).

    In order: as is, all ``*`` removed, first line removed, last line removed, first and last lines
    removed, and the last three with all ``*`` removed. Line-removed variants are stripped.
    """
    lines = response.split("\n")
    remove_first = "\n".join(lines[1:]).strip()
    remove_last = "\n".join(lines[:-1]).strip()
    remove_both = "\n".join(lines[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        remove_first,
        remove_last,
        remove_both,
        remove_first.replace("*", ""),
        remove_last.replace("*", ""),
        remove_both.replace("*", ""),
    ]


def strict_only(response: str) -> list[str]:
    """The loose variants of a family without a loose mode: the response alone, so loose equals strict."""
    return [response]


def _require_text(response: Any) -> None:
    if not isinstance(response, str):
        raise TypeError(f"response must be a string, got {type(response).__name__}")


def _passes(checker: Checker, response: str, prompt: str | None) -> bool:
    """IFEval's strict test of one response: an all-whitespace response fails, otherwise the checker decides."""
    return bool(response.strip()) and bool(checker.check_following(response, prompt))


@dataclass(frozen=True)
class VerifierFamily:
    """One rule-verifier family: its name, its registry and its strict and loose semantics.

    Attributes:
        name: the family name used in constraint records (``"ifeval"``, ``"ifbench"``, ``"muldimif"``).
        label: the family's name in error messages (``"IFEval"``).
        registry: instruction id -> `Checker` class (IFEval's ``INSTRUCTION_DICT``).
        loose_variants: response -> the variants the loose check tries in order (`loose_variants` for IFEval and
            IFBench; `strict_only` for a family whose official evaluation has no loose mode).
        readings: the readings `build_checker` accepts; the first is the default (``"official"``).
        prepare_kwargs: ``(instruction_id, kwargs) -> kwargs`` to construct the checker with; raises ValueError on
            kwargs the family rejects before construction (default: `drop_none_kwargs`).
        construct: ``(checker class, kwargs) -> checker`` (default: `new_checker`; MulDimIF caches parsed
            requirements).
    """

    name: str
    label: str
    registry: Mapping[str, type[Checker]]
    loose_variants: Callable[[str], list[str]]
    readings: tuple[str, ...] = (OFFICIAL,)
    prepare_kwargs: Callable[[str, Kwargs], dict[str, Any]] = drop_none_kwargs
    construct: Callable[[type[Checker], dict[str, Any]], Checker] = new_checker

    @property
    def has_loose_mode(self) -> bool:
        """True when the family's official evaluation has a loose mode (`loose_variants` is not `strict_only`): its
        benchmark reports strict and loose accuracies, prompt-level strict first (IFEval, IFBench)."""
        return self.loose_variants is not strict_only

    def build_checker(
        self, instruction_id: str, kwargs: Kwargs = None, prompt: str | None = None, reading: str = OFFICIAL
    ) -> Checker:
        """Construct the checker for one constraint of this family, as the official evaluation does.

        ``kwargs`` go through `prepare_kwargs` (``None`` values dropped by default). A checker that needs the
        prompt (IFEval's ``combination:repeat_prompt``) gets ``prompt`` as its ``prompt_to_repeat`` when that kwarg
        is absent. ``reading`` (one of `readings`) is stored on the checker (`Checker.reading`).

        Raises:
            ValueError: an unknown ``reading``; a missing or invalid kwarg (for ``repeat_prompt``: neither
                ``prompt_to_repeat`` nor ``prompt`` given).
            KeyError: ``instruction_id`` is not in `registry`.
            TypeError: a kwarg the instruction does not take.
        """
        if reading not in self.readings:
            raise ValueError(f"{self.label} reading must be one of {self.readings}, got {reading!r}")
        try:
            cls = self.registry[instruction_id]
        except KeyError:
            raise KeyError(f"unknown {self.label} instruction id {instruction_id!r}") from None
        kwargs = self.prepare_kwargs(instruction_id, kwargs)
        if cls.needs_prompt and "prompt_to_repeat" not in kwargs:
            if prompt is None:
                raise ValueError(f"{instruction_id}: needs argument 'prompt_to_repeat' or a prompt")
            kwargs["prompt_to_repeat"] = prompt
        checker = self.construct(cls, kwargs)
        checker.reading = reading
        return checker

    def check(
        self, instruction_id: str, kwargs: Kwargs, response: str, prompt: str | None = None, reading: str = OFFICIAL
    ) -> bool:
        """The *strict* verdict for one constraint (IFEval's ``test_instruction_following_strict``).

        True when ``response`` is not all whitespace and the checker (`build_checker`) accepts it.

        Raises:
            TypeError: ``response`` is not a string; a kwarg the instruction does not take.
            KeyError / ValueError: see `build_checker`.
            Exception: whatever the checker raises on this response (IFBench's official checks raise where
                AllenAI's code raises); `hir_trl.verifiers.verify_constraint` records it as a failed verdict.
        """
        _require_text(response)
        return _passes(self.build_checker(instruction_id, kwargs, prompt, reading), response, prompt)

    def check_loose(
        self, instruction_id: str, kwargs: Kwargs, response: str, prompt: str | None = None, reading: str = OFFICIAL
    ) -> bool:
        """The *loose* verdict (IFEval's ``test_instruction_following_loose``): any of `loose_variants` passes.

        The variants are tried in order and the first passing one decides, as in the official loop (so a variant
        on which the checker raises is only reached when the earlier ones fail). With `strict_only` this is the
        strict verdict. A checker with a loose check of its own (``check_following_loose``: one registered with
        ``register_verifier(..., check_loose=...)``) gives the loose verdict itself, on the response as it is (an
        all-whitespace response still fails). Raises the same errors as `check`.
        """
        _require_text(response)
        checker = self.build_checker(instruction_id, kwargs, prompt, reading)
        own_loose = getattr(checker, "check_following_loose", None)
        if own_loose is not None:
            return bool(response.strip()) and bool(own_loose(response, prompt))
        return any(_passes(checker, variant, prompt) for variant in self.loose_variants(response))


__all__ = ["OFFICIAL", "Kwargs", "VerifierFamily", "drop_none_kwargs", "loose_variants", "new_checker", "strict_only"]
