"""One HiR generation batch, numbered like the paper's Algorithm 2 (Hindsight Instruction Replay).

TRL's `GRPOTrainer._generate_and_score_completions` does Algorithm 2, lines 7-10 for every instruction of the batch
(m samples y_i ~ pi_theta(. | q), their rewards from `ConstraintReward`). `complete_groups` does the rest of one
step's experience buffer on this rank's B sampled rows: lines 12-13 (Select-Rewrite, Algorithm 1, with lambda of
line 22), the paper's §3.2 supplementary samples for a group short of candidates, lines 14-17 (each replay (q', y)
with its reward in the buffer) and line 20 (advantages); line 21 (the policy update) is TRL's loss and optimizer
step. Line numbers count every line of the paper's listing, ``end for`` included (docs/step.md).

The step reaches the trainer only through `StepPasses` (implemented by `hir_trl.trl_adapter.TRLPasses`), so this
module never imports the trainer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from ..data.chat import completion_text, instruction_text
from ..verifiers import achieved_constraint
from .advantages import hir_advantages, kl_in_reward_per_token
from .batch import (
    MULTIMODAL_KEYS,
    ROW_KEYS,
    NewRow,
    batch_inputs,
    extend_batch,
    loss_mask,
    plan_new_rows,
    sequence_advantages,
)
from .log import (
    COUNTS,
    LOG_COLUMNS,
    TIMINGS,
    StepTimer,
    completion_log_rows,
    judge_metrics,
    replay_counts,
    replay_metrics,
)
from .loss_weighting import prepare_loss_batch
from .replay import allocate_shortfall, curriculum_lambda, select_rewrite
from .rewards import replay_row_rewards
from .sampling import completion_ended, diversity_scores, entropies_and_old_logps
from .shortfall import ShortfallPolicy
from .state import HiRCapture, HiRStep, SupplementarySamples


class StepPasses(Protocol):
    """What a HiR step needs from the trainer: its settings, its passes and TRL's logging (all on this rank unless
    said). `hir_trl.trl_adapter.TRLPasses` implements it over a `HiRTrainer`."""

    args: Any  # the `hir_trl.HiRConfig`
    num_generations: int  # m
    kl_coef: float  # beta of ``kl_in_reward``, else 0
    timer: StepTimer
    replay_rng: random.Random
    model: Any  # the policy (what `policy_pass` runs by default)
    global_step: int
    eos_token_ids: Any
    pad_token_id: int
    pad_to_multiple_of: int | None
    scale_rewards: str
    reward_weights: list[float]
    judge: Any  # the `ConstraintReward`'s judge, or None
    device: Any

    def policy_pass(self, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                    completion_ids: torch.Tensor, completion_mask: torch.Tensor, entropy: bool = False,
                    timer: str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """No-grad per-token log-probs (N, T) and entropies (N, T, nats) or None."""
        ...  # pragma: no cover - protocol

    def reference_logps(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                        completion_mask: torch.Tensor) -> torch.Tensor:
        """(N, T) reference-model log-probs."""
        ...  # pragma: no cover - protocol

    def supplementary_samples(self, inputs: Sequence[dict[str, Any]], fill: list[int],
                              need_old_logps: bool) -> SupplementarySamples | None:
        """``fill[g]`` ordinary samples under q per group g, through TRL's generation; None when no rank needs one."""
        ...  # pragma: no cover - protocol

    def extra_rewards(self, capture: HiRCapture, new_rows: Sequence[NewRow], prompts: Sequence[Any],
                      completions: Sequence[Any], completion_ids: Sequence[Sequence[int]],
                      rows: Sequence[dict[str, Any]]) -> list[list[float]]:
        """(N, F - 1) the extra reward functions' rewards of the replays (q', y), called as TRL calls them."""
        ...  # pragma: no cover - protocol

    def tokenize_prompts(self, prompts: Sequence[Any]) -> list[list[int]]:
        ...  # pragma: no cover - protocol

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenate over ranks along dim 0."""
        ...  # pragma: no cover - protocol

    def gather_object(self, values: list[Any]) -> list[Any]:
        ...  # pragma: no cover - protocol

    def log_metric(self, name: str, value: float, training: bool = True) -> None:
        """Append to this step's training (or evaluation) metrics."""
        ...  # pragma: no cover - protocol

    def log_hindsight_rows(self, row_ids: Sequence[str], sampled_advantages: Sequence[float], entries: Sequence[Any],
                           new_advantages: Sequence[float]) -> None:
        ...  # pragma: no cover - protocol

    def has_log_columns(self, columns: Sequence[str]) -> bool:
        ...  # pragma: no cover - protocol

    def extend_log_columns(self, values: dict[str, Sequence[Any]]) -> None:
        """Append values to extra columns of the completion log (rows TRL logged)."""
        ...  # pragma: no cover - protocol

    def pop_judge_metrics(self) -> dict[str, float] | None:
        """The judge's metrics since the last call, or None without a judge that keeps them."""
        ...  # pragma: no cover - protocol


def check_batch(output: dict[str, Any], num_sampled: int, group_size: int) -> None:
    """Refuse what HiR cannot extend.

    Raises:
        NotImplementedError: a multimodal batch, or a batch key outside `hir_trl.step.batch.ROW_KEYS`.
        RuntimeError: B = ``num_sampled`` rows are not whole groups of m = ``group_size``.
    """
    unsupported = MULTIMODAL_KEYS.intersection(output)
    if unsupported:
        raise NotImplementedError(f"HiRTrainer does not support multimodal inputs (got {sorted(unsupported)})")
    for key, value in output.items():
        if key not in ROW_KEYS and key != "num_items_in_batch" and value is not None:
            raise NotImplementedError(f"HiRTrainer cannot extend the batch key {key!r}")
    if num_sampled % group_size:
        raise RuntimeError(f"this rank holds {num_sampled} completions, not whole groups of {group_size}")


def complete_groups(passes: StepPasses, shortfall: ShortfallPolicy, inputs: list[dict[str, Any]],
                    output: dict[str, Any], capture: HiRCapture) -> tuple[dict[str, Any], HiRStep]:
    """Complete every group of this rank's generation batch to m + k rows (Algorithm 2, lines 12-20).

    Args:
        passes: the trainer's passes (`StepPasses`).
        shortfall: the ``replay_shortfall`` policy (`hir_trl.step.shortfall.shortfall_policy`).
        inputs: this rank's B dataset rows, each instruction repeated m times in a row.
        output: TRL's `_generate_and_score_completions` output for them (Algorithm 2, lines 7-10).
        capture: what HiR's hooks recorded during that call (`hir_trl.step.state.HiRCapture`).

    Returns:
        ``(extended, step)``: TRL's dict with every per-row key extended to B' = B + (B / m) x k rows (the sampled
        rows, then supplementary samples, replays and padding; ``advantages`` (B',) for ``grpo`` or (B', T) for the
        Reinforce++ estimators; ``num_items_in_batch`` the loss tokens of all ranks), and the `HiRStep` it added.

    Raises:
        NotImplementedError, RuntimeError: see `check_batch`.
    """
    args, m, k = passes.args, passes.num_generations, passes.args.num_replays
    prompts, completions, verdicts = capture.prompts, capture.completions, capture.verdicts
    B = len(prompts)
    check_batch(output, B, m)

    # Algorithm 1, line 4's F_div (token entropies) and the old log-probs under q of line 21's ratio: recorded while
    # sampling, or TRL's own pass; a no-grad pass only for what neither gives (`entropies_and_old_logps`).
    need_old = "old_per_token_logps" not in output and bool(
        passes.kl_coef or (k > 0 and args.replay_old_logps == "original"))
    entropies, old = entropies_and_old_logps(
        output, capture.recorded, capture.entropies, need_old=need_old,
        diversity_entropy=args.diversity_entropy if k > 0 else None,
        need_f_div=k > 0 and args.replay_selection in ("curriculum", "diversity"),
        policy_pass=lambda exact: passes.policy_pass(passes.model, *batch_inputs(output), entropy=exact,
                                                     timer="extra_pass"))
    if need_old:
        output["old_per_token_logps"] = old

    # Algorithm 2, lines 12-13: H <- Select-Rewrite(G, k) per group (Algorithm 1), with lambda of line 22,
    # lambda_s = (1 + eta)^s lambda_0 at optimizer step s.
    lam = curriculum_lambda(passes.global_step, args.lambda_0, args.eta)
    picked, lacking = [[] for _ in range(B // m)], [0] * (B // m)
    if k > 0:
        with passes.timer.timed("selection"):
            diversity = ([float("nan")] * B if entropies is None  # random / integrity: F_div unused
                         else diversity_scores(entropies, loss_mask(output), args.diversity_aggregation))
            eligible = None if args.replay_truncated_completions else completion_ended(
                output["completion_ids"], output["completion_mask"], passes.eos_token_ids)
            picked = select_rewrite(
                [verdicts.passed(r) for r in range(B)], diversity, m, k, lam, prompts=prompts, inputs=inputs,
                scope=args.replay_scope, selection=args.replay_selection, min_satisfied=args.replay_min_satisfied,
                rng=passes.replay_rng, eligible=eligible, relabel=relabeller(args, inputs, prompts, completions))
            lacking = allocate_shortfall([len(p) for p in picked], k)

    # Algorithm 2, lines 7-10 again for a group with z < k candidates (paper §3.2): k - z supplementary samples
    # under q, or k - z padding rows (``replay_shortfall``, `hir_trl.step.shortfall`).
    filled = shortfall.fill(passes, inputs, lacking, "old_per_token_logps" in output)
    supplement = filled.samples
    passes.log_metric("hir/generate_calls", 1 + (supplement is not None))

    # Algorithm 2, lines 14-17: store each replay (q', y) in the buffer B, after the group's sampled rows (and its
    # supplementary samples), with its passes under q' (old log-probs for ``hindsight``, reference log-probs).
    new_rows = plan_new_rows(picked, filled.supplementary, filled.padding, m)
    with passes.timer.timed("assembly"):
        q_primes = [row.q_prime for row in new_rows if row.kind == "replay"]
        extended = extend_batch(
            output, new_rows, None if supplement is None else supplement.tensors,
            passes.tokenize_prompts(q_primes) if q_primes else [], pad_token_id=passes.pad_token_id,
            pad_to_multiple_of=passes.pad_to_multiple_of, skip=("ref_per_token_logps",) if passes.kl_coef else ())
        replay_passes(passes, extended, new_rows, B)

    # Algorithm 2, line 16: r_k of each replay (1, or re-judged; plus its extra rewards on (q', y)), with every
    # other row's reward (`hir_trl.step.rewards.replay_row_rewards`); line 20: the advantages.
    rewards = replay_row_rewards(
        capture, supplement, new_rows, inputs, output, weights=passes.reward_weights, reward_mode=args.reward_mode,
        judge=passes.judge if args.rejudge_replays else None,
        extra_rewards=lambda *rows: passes.extra_rewards(capture, new_rows, *rows), timer=passes.timer)
    extended["advantages"] = hir_advantages(
        torch.tensor(rewards, dtype=torch.float32, device=passes.device), new_rows, B, m, loss_mask(extended),
        replay_advantage=args.replay_advantage, replay_weight=args.replay_weight, estimator=args.advantage_estimator,
        scale_rewards=passes.scale_rewards,
        kl=kl_in_reward_per_token(extended, passes.reference_logps(*batch_inputs(extended)), new_rows, B)
        if passes.kl_coef else None, kl_coef=passes.kl_coef,
        aggregation=args.multi_objective_aggregation, reward_weight=float(passes.reward_weights[0]),
        gather=passes.gather)
    extended["num_items_in_batch"] = passes.gather(loss_mask(extended).sum()).sum()  # line 21 is TRL's loss

    step = log_step(passes, inputs, extended, new_rows, supplement, completions, lam, rewards, B)
    # line 21's weighting: ``replay_loss_weighting="paper"`` rescales each row's advantages so that TRL's token sum
    # over ``num_items_in_batch`` is eq. "hir" (after the log, which keeps the unscaled advantages)
    prepare_loss_batch(extended, new_rows, B, m, weighting=args.replay_loss_weighting, num_replays=args.num_replays,
                       gather=passes.gather)
    return extended, step


def relabeller(args: Any, inputs: Sequence[dict[str, Any]], prompts: Sequence[Any],
               completions: Sequence[Any]) -> Callable[[int, int], Any] | None:
    """``relabel(i, j)`` for `hir_trl.step.replay.select_rewrite` under ``hindsight_relabel="achieved"``: response i's
    failed constraint j with the bound it achieved (`hir_trl.verifiers.achieved_constraint`); None for "drop"."""
    if args.hindsight_relabel != "achieved":
        return None
    return lambda i, j: achieved_constraint(inputs[i]["constraints"][j], completion_text(completions[i]),
                                            instruction_text(prompts[i]))


def replay_passes(passes: StepPasses, extended: dict[str, Any], new_rows: list[NewRow], B: int) -> None:
    """The passes under q' (in place): a replay's old log-probs for ``replay_old_logps="hindsight"`` (its vLLM
    correction then the identity) and its reference log-probs when ``beta > 0``.

    They run over ALL new rows, a count that is the same on every rank ((B / m) x k), so that ZeRO-3 ranks run the
    same number of forward passes; only the replays' results are kept. "hindsight" needs pi_old(y | q') only
    where old or sampling log-probs are stored: without them TRL's loss uses the detached current log-probs,
    which are exactly that.
    """
    hindsight = passes.args.replay_old_logps == "hindsight" and any(
        key in extended for key in ("old_per_token_logps", "sampling_per_token_logps"))
    if not new_rows or not (hindsight or "ref_per_token_logps" in extended):
        return
    new = [tensor[B:] for tensor in batch_inputs(extended)]
    keep = torch.tensor([row.kind == "replay" for row in new_rows], device=new[0].device).unsqueeze(1)
    if hindsight:
        old_q_prime, _ = passes.policy_pass(passes.model, *new, timer="replay_passes")
        for key, value in (("old_per_token_logps", old_q_prime), ("sampling_per_token_logps", old_q_prime),
                           ("importance_sampling_ratio", None)):
            if key in extended:
                tail = extended[key][B:]
                tail.copy_(torch.where(keep, torch.ones_like(tail) if value is None else value, tail))
    if "ref_per_token_logps" in extended:
        with passes.timer.timed("replay_passes"):
            ref_q_prime = passes.reference_logps(*new)
        tail = extended["ref_per_token_logps"][B:]
        tail.copy_(torch.where(keep, ref_q_prime, tail))


def log_step(passes: StepPasses, inputs, extended, new_rows: list[NewRow], supplement: SupplementarySamples | None,
             completions, lam: float, rewards: list[float], B: int) -> HiRStep:
    """The ``hir/*`` metrics (summed over ranks) and the completion log's new rows of a step; returns its `HiRStep`."""
    m = passes.num_generations
    local = replay_counts(new_rows, rewards, B, m, passes.args.num_replays,
                          fillers=supplement.fillers if supplement is not None else 0,
                          generated_tokens=int(extended["completion_mask"][:B].sum().item()),
                          sampled_lengths=extended["completion_mask"][:B].sum(1).tolist())
    counts = passes.gather(torch.tensor(local, dtype=torch.float64, device=passes.device))
    counts = counts.view(-1, len(local)).sum(0).tolist()
    if supplement is not None:  # already summed over ranks, fillers included
        counts[COUNTS.index("generated_tokens")] += supplement.generated_tokens
    for name, value in replay_metrics(counts, lam, m).items():
        passes.log_metric(name, value)
    advantages = sequence_advantages(extended)
    passes.log_hindsight_rows(
        passes.gather_object([str(x.get("row_id")) for x in inputs]), passes.gather_object(advantages[:B].tolist()),
        passes.gather_object(completion_log_rows(new_rows, inputs, completions, supplement, rewards, B, m)),
        passes.gather_object([advantages[B + i].item() for i, row in enumerate(new_rows) if row.kind != "pad"]))
    return HiRStep(new_rows=list(new_rows), rewards=rewards, lam=lam,
                   supplementary_verdicts=supplement.verdicts if supplement else None)


def hir_generation_batch(passes: StepPasses, shortfall: ShortfallPolicy, inputs: list[dict[str, Any]],
                         output: dict[str, Any], capture: HiRCapture) -> tuple[dict[str, Any], HiRStep]:
    """`complete_groups`, timed (``hir/seconds_*``, the slowest rank's), then the judge's metrics."""
    with passes.timer.timed("total"):
        extended, step = complete_groups(passes, shortfall, inputs, output, capture)
    slowest = passes.gather(torch.tensor(passes.timer.values(), dtype=torch.float64, device=passes.device))
    for name, value in zip(TIMINGS, slowest.view(-1, len(TIMINGS)).max(0).values.tolist()):
        passes.log_metric(f"hir/seconds_{name}", value)
    log_judge_metrics(passes, training=True)
    return extended, step


def trl_generation_batch(passes: StepPasses, inputs: Sequence[dict[str, Any]], output: dict[str, Any],
                         training: bool) -> dict[str, Any]:
    """A batch HiR leaves as TRL made it (evaluation, or no replays with TRL's own estimator): the judge's metrics,
    and HiR's completion-log columns for its rows when the log has them."""
    log_judge_metrics(passes, training)
    if passes.has_log_columns(LOG_COLUMNS):  # e.g. evaluation batches during HiR training
        row_ids = passes.gather_object([str(x.get("row_id")) for x in inputs])
        passes.extend_log_columns({"row_id": row_ids, "hindsight": [False] * len(row_ids),
                                   "supplementary": [False] * len(row_ids), "kept_constraints": [None] * len(row_ids)})
    return output


def log_judge_metrics(passes: StepPasses, training: bool) -> None:
    """Log the judge's ``judge/*`` metrics since the last call (`hir_trl.step.log.judge_metrics`)."""
    metrics = passes.pop_judge_metrics()
    if metrics is None:
        return
    for name, value in judge_metrics(metrics, passes.gather, passes.device).items():
        passes.log_metric(name, value, training=training)


__all__ = ["StepPasses", "check_batch", "complete_groups", "hir_generation_batch", "log_step", "relabeller",
           "replay_passes", "trl_generation_batch"]
