"""The checker interface shared by every rule family (IFEval, IFBench, MulDimIF), and kwargs validation.

Modelled on the IFEval instruction registry (google-research/instruction_following_eval): one class
per constraint type, with a description builder and a checker, and a registry dict from instruction id
to class. Each family module (`ifeval.py`, `ifbench.py`, `muldimif.py`) defines

- ``FAMILY``: the family name used in constraint records (``"ifeval"``, ``"ifbench"``, ``"muldimif"``);
- ``REGISTRY``: ``dict[str, type[Checker]]`` from instruction id to checker class;
- ``VERIFIER``: its `hir_trl.verifiers.family.VerifierFamily` record, and that record's
  ``build_checker``, ``check`` (strict) and ``check_loose`` under the same names. They raise on unknown
  ids or bad kwargs; `hir_trl.verifiers.verify_constraint` turns any exception into a recorded failed
  `Verdict`.
"""

from __future__ import annotations

import abc
import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one constraint against one response: I(q, y, c) in the paper.

    Attributes:
        passed: ``True`` when the response meets the constraint. ``False`` when it does not, or when
            the check could not run (then ``error`` says why).
        error: ``None`` for a normal verdict; otherwise the exception text (``"TypeName: message"``) of
            a checker or judge that failed. Such a verdict counts as not satisfied.
        source: ``"rule"`` for a rule verifier, ``"judge"`` for the LLM judge.
    """

    passed: bool
    error: str | None = None
    source: str = "rule"


class Checker(abc.ABC):
    """One constraint type: builds its description from kwargs and checks a response.

    Subclasses set ``instruction_id`` and implement `build_description` and `check_following`.
    Constructor kwargs are the constraint's ``kwargs`` (IFEval convention); a subclass raises
    ``ValueError`` (or ``TypeError``) naming the bad argument.
    """

    instruction_id: ClassVar[str]
    #: True when the checker needs the prompt text (IFEval ``combination:repeat_prompt``).
    needs_prompt: ClassVar[bool] = False
    #: The reading `VerifierFamily.build_checker` selected (``"official"`` unless asked otherwise); only checkers
    #: with more than one reading (IFBench's) consult it.
    reading: str = "official"

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    @abc.abstractmethod
    def build_description(self) -> str:
        """Return the natural-language constraint text for these kwargs."""

    @abc.abstractmethod
    def check_following(self, response: str, prompt: str | None = None) -> bool:
        """Return True when ``response`` meets the constraint."""

    def achieved_kwargs(self, response: str) -> dict[str, Any] | None:
        """Kwargs of this constraint type that ``response`` meets, for achieved-goal relabelling (HER; used by
        ``HiRConfig.hindsight_relabel="achieved"``): ``None`` when the type has no such relabelling (the default),
        as for a constraint that is not about a count. See `CountedConstraint`."""
        return None


class ArgsChecker(Checker):
    """A `Checker` that names the kwargs it takes and rejects any other (IFEval's ``get_instruction_args_keys``).

    Raises:
        TypeError: an unexpected keyword argument.
    """

    #: The kwargs this instruction takes.
    arg_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        unexpected = sorted(set(kwargs) - set(self.arg_names))
        if unexpected:
            raise TypeError(
                f"{self.instruction_id}: unexpected argument(s) {unexpected}; it takes {list(self.arg_names)}"
            )
        super().__init__(**kwargs)


# -- kwargs validation shared by the rule families: each raises ValueError naming the instruction and argument.

#: IFEval's comparison relations.
RELATIONS = ("less than", "at least")


class CountedConstraint:
    """Mixin for a checker whose constraint bounds one count of the response (words, sentences, bullets...).

    The class names the kwarg that holds the bound (``count_arg``) and the kwarg that holds the relation
    (``relation_arg``, one of `RELATIONS`), or, with ``relation_arg = None``, its fixed relation
    (``fixed_relation``: ``"at least"`` or ``"exactly"``); the instance implements ``count(response)``.
    `achieved_kwargs` then gives the bound the response achieved: ``less than count + 1``, ``at least count``,
    ``exactly count``. A bound below 1 (``at least 0``, ``exactly 0``) would be met by anything, or say nothing the
    instruction asked for, so it gives ``None``.
    """

    count_arg: ClassVar[str]
    relation_arg: ClassVar[str | None] = None
    fixed_relation: ClassVar[str] = "at least"
    kwargs: dict[str, Any]

    def count(self, response: str) -> int:
        raise NotImplementedError

    def achieved_kwargs(self, response: str) -> dict[str, Any] | None:
        relation = self.kwargs[self.relation_arg] if self.relation_arg else self.fixed_relation
        count = self.count(response)
        bound = count + 1 if relation == "less than" else count
        return None if bound < 1 else {**self.kwargs, self.count_arg: bound}


def compare(count: int, relation: str, threshold: int) -> bool:
    """IFEval's comparison: ``count < threshold`` for ``"less than"``, else (``"at least"``) ``count >= threshold``."""
    return count < threshold if relation == "less than" else count >= threshold


def required_arg(checker: Checker, kwargs: dict[str, Any], name: str) -> Any:
    """The value of a required kwarg. Raises ValueError when it is missing or None."""
    value = kwargs.get(name)
    if value is None:
        raise ValueError(f"{checker.instruction_id}: missing required argument {name!r}")
    return value


def count_arg(checker: Checker, kwargs: dict[str, Any], name: str, minimum: int = 0) -> int:
    """An integer kwarg >= ``minimum``. Integral floats (``5.0``, as parquet/Arrow round trips and IFBench's test
    file store counts) are accepted; booleans, fractions and non-finite numbers raise ValueError."""
    value = required_arg(checker, kwargs, name)
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise ValueError(f"{checker.instruction_id}: argument {name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{checker.instruction_id}: argument {name!r} must be >= {minimum}, got {value!r}")
    return int(value)


def relation_arg(checker: Checker, kwargs: dict[str, Any], name: str) -> str:
    """One of `RELATIONS`. Raises ValueError otherwise."""
    value = required_arg(checker, kwargs, name)
    if value not in RELATIONS:
        raise ValueError(f"{checker.instruction_id}: argument {name!r} must be one of {RELATIONS}, got {value!r}")
    return value


def text_arg(checker: Checker, kwargs: dict[str, Any], name: str, strip: bool = True) -> str:
    """A non-empty string kwarg (stripped unless ``strip=False``). Raises ValueError otherwise."""
    value = required_arg(checker, kwargs, name)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{checker.instruction_id}: argument {name!r} must be a non-empty string, got {value!r}")
    return value.strip() if strip else value
