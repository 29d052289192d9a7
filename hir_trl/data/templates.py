"""How a task description x and its constraints are joined into an instruction q.

The HIR-16K rows name their joiner in ``extra_info.q_type`` (``type1`` .. ``type6``, as in the authors'
released code, see ``design/hir.md`` §2); our native format may also use ``plain``. The hindsight rewrite
(paper §3.2, Algorithm 1 line "Rewrite instruction q_i as q'_i") calls `join_instruction` with only the
satisfied constraints. Plain Python: no torch or TRL imports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

_SENTENCE_END = (",", ".", "?", "!")


def _with_period(constraint: str) -> str:
    """Append ``.`` unless the text already ends in one of ``, . ? !`` (released code's rule)."""
    text = constraint.strip()
    return text if text.endswith(_SENTENCE_END) else text + "."


def _type1(task: str, constraints: Sequence[str]) -> str:
    return " ".join([task, *(_with_period(c) for c in constraints)])


def _type2(task: str, constraints: Sequence[str]) -> str:
    return "\n".join([task, *(_with_period(c) for c in constraints)])


def _type3(task: str, constraints: Sequence[str]) -> str:
    if not constraints:
        return task
    rules = "\n".join(f"{i}. {c}" for i, c in enumerate(constraints, start=1))
    return f"{task}\n\nThe output must follow the following rules:\n{rules}"


def _type4(task: str, constraints: Sequence[str]) -> str:
    if not constraints:
        return task
    return task + "\n\n" + "\n".join(f"- {c}" for c in constraints)


def _type5(task: str, constraints: Sequence[str]) -> str:
    if not constraints:
        return task
    return "\n".join(constraints) + "\n\n" + task


def _type6(task: str, constraints: Sequence[str]) -> str:
    if not constraints:
        return task
    return task + "\n\n" + "\n".join(constraints)


def _plain(task: str, constraints: Sequence[str]) -> str:
    if not constraints:
        return task
    return task + "\n\n" + " ".join(_with_period(c) for c in constraints)


#: Template name -> joiner ``(task, constraint_texts) -> instruction``.
TEMPLATES: dict[str, Callable[[str, Sequence[str]], str]] = {
    "type1": _type1,
    "type2": _type2,
    "type3": _type3,
    "type4": _type4,
    "type5": _type5,
    "type6": _type6,
    "plain": _plain,
}


def join_instruction(task: str, constraints: Sequence[str], template: str) -> str:
    """Join task description x and constraint texts c_1..c_j into instruction text.

    This is the paper's q' = x ⊙ c_1 ⊙ ... ⊙ c_j (§3.2) with the row's joiner.

    Args:
        task: the task description x.
        constraints: constraint texts, in the order they appear in the instruction.
        template: a key of `TEMPLATES` (``type1`` .. ``type6`` from HIR-16K's ``q_type``, or ``plain``).

    Returns:
        The instruction text.

    Raises:
        KeyError: unknown template name.
    """
    try:
        joiner = TEMPLATES[template]
    except KeyError:
        raise KeyError(f"unknown instruction template {template!r}; expected one of {sorted(TEMPLATES)}") from None
    return joiner(task, list(constraints))
