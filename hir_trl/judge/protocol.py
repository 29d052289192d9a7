"""The judge protocol: `Judge`, the callable every soft-constraint judge is, and `judge_batch`, its one call.

Training (`hir_trl.rewards.ConstraintReward`, re-judged replays) and evaluation (`hir_trl.evaluation.score`) call a
judge only through `judge_batch`, so a judge failure becomes the same recorded verdict in both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from ..verifiers import Verdict
from .client import JudgeError

logger = logging.getLogger(__name__)

#: A judge for soft constraints: given (instruction, response, constraint text) triples, one Verdict each.
Judge = Callable[[Sequence[tuple[str, str, str]]], Sequence[Verdict]]


def judge_batch(judge: Judge | None, triples: Sequence[tuple[str, str, str]]) -> list[Verdict]:
    """One `Verdict` per (instruction, response, constraint) triple, in order, from a single call of ``judge``.

    Used by training (`hir_trl.rewards.ConstraintReward`) and evaluation (`hir_trl.evaluation.score`). A judge that
    cannot give the verdicts never crashes the batch: with no judge (None), when it raises, or when it returns a
    different number of verdicts, every triple gets ``Verdict(False, error=..., source="judge")`` naming the cause,
    and a warning is logged; a returned verdict that is not a `Verdict` with a bool ``passed`` (None, NaN, a string)
    becomes such a failure too, never a silent NO.

    Raises:
        hir_trl.judge.JudgeError: the judge's ``failure_policy`` is ``"raise"`` (the user asked to stop), or a subclass:
            every request failed with an error no retry can fix (`hir_trl.judge.JudgeUnavailableError`), or the
            verdict cache cannot be used (`hir_trl.judge.JudgeCacheError`).
    """
    if judge is None:
        return [Verdict(False, error="RuntimeError: soft constraint but no judge is configured", source="judge")
                for _ in triples]
    try:
        verdicts = list(judge(triples))
    except JudgeError:  # failure_policy="raise", or a judge that cannot work at all: stop
        raise
    except Exception as exc:  # noqa: BLE001 - a judge failure is a recorded verdict, and said
        error = f"{type(exc).__name__}: {exc}"
        logger.warning("the judge raised on a batch of %d soft constraints, which count as not satisfied: %s",
                       len(triples), error)
        return [Verdict(False, error=error, source="judge") for _ in triples]
    if len(verdicts) != len(triples):
        error = f"RuntimeError: judge returned {len(verdicts)} verdicts for {len(triples)} constraints"
        logger.warning("%s; every one counts as not satisfied", error)
        return [Verdict(False, error=error, source="judge") for _ in triples]
    unusable = [i for i, v in enumerate(verdicts) if not isinstance(getattr(v, "passed", None), (bool, np.bool_))]
    if unusable:
        first = verdicts[unusable[0]]
        error = (f"RuntimeError: judge returned {first!r} for a soft constraint, not a Verdict whose passed is True or "
                 "False")
        logger.warning("%s; %d such verdict(s) count as not satisfied (judge failures)", error, len(unusable))
        for i in unusable:
            verdicts[i] = Verdict(False, error=error, source="judge")
    return verdicts


__all__ = ["Judge", "judge_batch"]
