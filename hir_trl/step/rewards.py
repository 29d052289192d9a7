"""Every row's reward in a HiR step (Algorithm 2, lines 9 and 16): the reward modes, a replay's reward, the weighted sum.

`REWARD_MODES` holds the per-row constraint reward of verdict rows, ILA (the paper's, binary) or CLA (the fraction
of constraints met), which `hir_trl.rewards.VerdictMatrix.rewards` and the re-judged replays (`rejudge_replays`)
share; `extra_rewards` runs a trainer's TRL-style reward functions on a replay's own (q', y), `weighted_rewards`
combines a row's rewards as TRL does and `replay_row_rewards` gives every row of the extended batch its reward.
Plain Python: no torch or TRL import.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..data.chat import completion_text, instruction_text
from ..errors import chosen
from ..judge import judge_batch
from ..verifiers import Verdict


def ila_rewards(verdicts: Sequence[Sequence[Verdict]]) -> list[float]:
    """Instruction-level accuracy per row of ``verdicts`` (one list of `Verdict` per row): 1.0 when every
    constraint passed, else 0.0 (paper ILA)."""
    return [float(all(v.passed for v in row)) for row in verdicts]


def cla_rewards(verdicts: Sequence[Sequence[Verdict]]) -> list[float]:
    """Constraint-level accuracy per row of ``verdicts``: the fraction of constraints passed, 0.0 for a row without
    constraints (paper CLA)."""
    return [sum(v.passed for v in row) / len(row) if row else 0.0 for row in verdicts]


#: ``HiRConfig.reward_mode``'s registry: the per-row reward of verdict rows (a `hir_trl.rewards.VerdictMatrix`'s
#: ``verdicts``) by name (its keys are the field's choices): ILA (binary, all constraints met, the paper's) or CLA
#: (the fraction of constraints met).
REWARD_MODES: dict[str, Callable[[Sequence[Sequence[Verdict]]], list[float]]] = {"ila": ila_rewards, "cla": cla_rewards}


def mode_rewards(verdicts: Sequence[Sequence[Verdict]], reward_mode: str) -> list[float]:
    """Per-row reward of ``verdicts`` under ``reward_mode`` (`REWARD_MODES`): the one place that picks the formula.

    Raises:
        ValueError: ``reward_mode`` is not a key of `REWARD_MODES` (the message names the field and its choices).
    """
    return chosen(REWARD_MODES, "reward_mode", reward_mode)(verdicts)


def rejudge_replays(judge: Any, reward_mode: str, inputs: Sequence[dict[str, Any]], completions: Sequence[Any],
                    new_rows: Sequence[Any]) -> dict[int, float]:
    """``HiRConfig.rejudge_replays``: re-judge each replay's kept soft constraints under its q'.

    Args:
        judge: the soft-constraint judge (its ``rejudge`` method when it has one), or None.
        reward_mode: ``"ila"`` or ``"cla"``.
        inputs, completions: the B sampled rows' dataset rows and completions.
        new_rows: the new rows (`hir_trl.step.batch.NewRow`).

    Returns:
        the reward of each replay, by its offset among the new rows, when some replay keeps a soft constraint:
        `mode_rewards` (ILA or CLA) over its kept constraints, the rule verdicts (met by construction) and
        the new judge verdicts; {} when no replay keeps a soft constraint.
    """
    cells, triples = [], []
    replays = {offset: row for offset, row in enumerate(new_rows) if row.kind == "replay"}
    kept = {offset: [j for j, met in enumerate(row.choice.kept) if met] for offset, row in replays.items()}
    for offset, row in replays.items():
        if judge is None:
            break
        constraints = inputs[row.source]["constraints"]
        for position, j in enumerate(kept[offset]):
            if constraints[j]["kind"] == "soft":
                cells.append((offset, position))
                triples.append((instruction_text(row.q_prime), completion_text(completions[row.source]),
                                constraints[j]["text"]))
    if not triples:
        return {}
    verdicts = {offset: [Verdict(True)] * len(js) for offset, js in kept.items()}
    for (offset, position), verdict in zip(cells, judge_batch(getattr(judge, "rejudge", judge), triples)):
        verdicts[offset][position] = verdict
    return dict(zip(verdicts, mode_rewards(list(verdicts.values()), reward_mode)))


def extra_rewards(functions: Sequence[Callable[..., Any]], prompts: Sequence[Any], completions: Sequence[Any],
                  completion_ids: Sequence[Sequence[int]], reward_kwargs: Mapping[str, Any],
                  run_together: Callable[[list[Awaitable[Any]]], list[Any]] | None = None) -> list[list[float]]:
    """TRL-style reward functions on new rows (a replay's (q', y)), called as TRL calls them.

    Each function is called once with every row: ``fn(prompts=..., completions=..., completion_ids=...,
    **reward_kwargs)``, where ``reward_kwargs`` are the keyword arguments `GRPOTrainer._calculate_rewards` passes
    (built by `hir_trl.trl_adapter.TRLPasses.replay_reward_kwargs`: the rows' dataset columns, ``trainer_state``,
    ``log_extra`` / ``log_metric`` and, when TRL has them, ``environments``). ``None`` becomes NaN (no reward from
    that function), as in TRL. As in TRL, the synchronous functions run one after another, then the ``async def``
    ones (any function whose call returns an awaitable) run together: ``run_together(awaitables)`` awaits them
    concurrently and returns their results in order (`hir_trl.trl_adapter.TRLPasses.run_together`, on TRL's event
    loop); without it, one ``asyncio.run`` of ``asyncio.gather``.

    Args:
        functions: the extra reward functions (the `ConstraintReward` excluded).
        prompts: (N,) the rows' prompts (q'), in the dataset's format (chat messages or text).
        completions: (N,) the completions (y), as TRL passes them.
        completion_ids: (N,) token ids of each completion, without padding.
        reward_kwargs: the other keyword arguments, one value per row for the columns.
        run_together: awaits a list of awaitables together and returns their results, in order; or None.

    Returns:
        (N, len(functions)) rewards, NaN where a function returned None; ``[]`` for no rows.

    Raises:
        hir_trl.guards.RewardFunctionError: a function returned other than N numbers or None;
        hir_trl.guards.NonFiniteTrainingError: a NaN or inf reward (both from `hir_trl.guards.check_rewards`, the
            one check of every reward function's output).
    """
    from ..guards import check_rewards

    if not prompts:
        return []
    table = [[float("nan")] * len(functions) for _ in prompts]

    def keep(i: int, function: Callable[..., Any], output: Any) -> None:
        output = check_rewards(getattr(function, "__name__", type(function).__name__), output, len(prompts))
        for row, value in zip(table, output):
            row[i] = float("nan") if value is None else float(value)

    pending = []  # (index, function, awaitable) of the async functions, run together after the others
    for i, function in enumerate(functions):
        output = function(prompts=list(prompts), completions=list(completions), completion_ids=list(completion_ids),
                          **reward_kwargs)
        if inspect.isawaitable(output):
            pending.append((i, function, output))
        else:
            keep(i, function, output)
    if pending:
        outputs = (run_together or _gathered)([awaitable for _, _, awaitable in pending])
        for (i, function, _), output in zip(pending, outputs, strict=True):
            keep(i, function, output)
    return table


def _gathered(awaitables: list[Awaitable[Any]]) -> list[Any]:
    """The results of ``awaitables``, awaited together in one ``asyncio.run``."""
    async def together() -> list[Any]:
        return list(await asyncio.gather(*awaitables))

    return asyncio.run(together())


def weighted_rewards(per_func: Sequence[Sequence[float]], weights: Sequence[float]) -> list[float]:
    """(N,) sum over reward functions of weight x reward, skipping NaN (no reward), as `GRPOTrainer` combines them
    (``multi_objective_aggregation="sum_then_normalize"``); NaN for a row no function scored.

    Args:
        per_func: (N, F) rewards, the constraint reward first.
        weights: (F,) ``reward_weights`` (all 1 when unset).
    """
    out = []
    for row in per_func:
        terms = [w * r for w, r in zip(weights, row, strict=True) if not math.isnan(r)]
        out.append(math.fsum(terms) if terms else float("nan"))
    return out


def replay_row_rewards(capture: Any, supplement: Any, new_rows: Sequence[Any], inputs: Sequence[Mapping[str, Any]],
                       output: Mapping[str, Any], *, weights: Sequence[float], reward_mode: str, judge: Any = None,
                       extra_rewards: Callable[..., list[list[float]]] | None = None,
                       timer: Any = None) -> list[float]:
    """(B + len(new_rows),) reward of every row of the extended batch (Algorithm 2, lines 9 and 16), each TRL's
    weighted sum over the reward functions (`weighted_rewards`, ``reward_weights``).

    The sampled rows' and supplementary samples' come from TRL's own reward call: their constraint reward from the
    verdicts (exact), the other functions' from TRL (float32). A replay's constraint reward is 1 (it meets every
    constraint q' keeps) or, with a ``judge`` (``rejudge_replays``), its re-judged reward (`rejudge_replays`);
    its extra rewards are computed on its own (q', y) with its kept constraints; a pad's reward is NaN.

    Args:
        capture: the `hir_trl.step.state.HiRCapture` of TRL's call (``verdicts``, ``rewards_per_func``,
            ``completions`` of the B sampled rows).
        supplement: the step's `hir_trl.step.state.SupplementarySamples`, or None.
        new_rows: the new rows (`hir_trl.step.batch.NewRow`).
        inputs: the B sampled rows' dataset rows.
        output: TRL's batch (``completion_ids`` / ``completion_mask`` (B, T), for the replays' completion ids).
        weights: (F,) ``reward_weights``; ``reward_mode``: ``"ila"`` or ``"cla"``.
        judge: the judge to re-judge the replays' soft constraints with, or None (no re-judging).
        extra_rewards: ``extra_rewards(prompts, completions, completion_ids, rows) -> (R, F - 1)`` for the R replays
            (`hir_trl.trl_adapter.TRLPasses.extra_rewards`), or None when there are no extra functions.
        timer: a `hir_trl.step.log.StepTimer`: the re-judging is timed as ``judge``, the replays' extra rewards as
            ``extra_rewards``; or None.
    """
    import contextlib

    from .batch import row_rewards
    from .replay import hindsight_constraints

    def timed(name: str):  # ``hir/seconds_<name>``
        return timer.timed(name) if timer is not None else contextlib.nullcontext()

    def per_func(verdicts, rewards_per_func):  # the constraint reward from the verdicts, the others from TRL's call
        return [[reward, *others[1:]] for reward, others in zip(verdicts.rewards(reward_mode), rewards_per_func,
                                                                 strict=True)]

    sampled = weighted_rewards(per_func(capture.verdicts, capture.rewards_per_func), weights)
    # called on every rank, with or without replays: a reward model's forward pass (and the metric's gather) is a
    # collective under DeepSpeed ZeRO-3 and several processes
    supplementary = (weighted_rewards(per_func(supplement.verdicts, supplement.rewards_per_func), weights)
                     if supplement is not None else [])
    replays = [(offset, row) for offset, row in enumerate(new_rows) if row.kind == "replay"]
    constraint = {offset: 1.0 for offset, _ in replays}
    if judge is not None:
        with timed("judge"):
            constraint.update(rejudge_replays(judge, reward_mode, inputs, capture.completions, new_rows))
    with timed("extra_rewards"):
        extras = extra_rewards(
            [row.q_prime for _, row in replays], [capture.completions[row.source] for _, row in replays],
            [output["completion_ids"][row.source][output["completion_mask"][row.source].bool()].tolist()
             for _, row in replays],
            [{**inputs[row.source], "prompt": row.q_prime,
              "constraints": hindsight_constraints(inputs[row.source]["constraints"], row.choice)}
             for _, row in replays]) if extra_rewards is not None else [[] for _ in replays]
    replay_rewards = weighted_rewards([[constraint[offset], *extra] for (offset, _), extra in zip(replays, extras)],
                                      weights)
    return row_rewards(sampled, new_rows, supplementary, dict(zip(constraint, replay_rewards)))
