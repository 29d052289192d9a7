"""What a HiR step logs: ``hir/*`` metrics, ``hir/seconds_*`` timings, ``judge/*`` metrics and the completion-log
rows of its new rows.

Plain functions over the step's rows and counts (no trainer): the trainer gathers the counts over ranks and hands
the results to TRL (`hir_trl.trl_adapter`).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch

from .batch import NewRow

#: Completion-log columns HiR writes itself.
LOG_COLUMNS = ("row_id", "hindsight", "supplementary", "kept_constraints")
#: ``hir/seconds_<name>`` timings (docs/step.md "Metrics").
TIMINGS = ("total", "extra_pass", "selection", "supplementary", "assembly", "replay_passes", "recording",
           "generation", "verification", "judge", "extra_rewards")
#: The timings that do not overlap (a nested block's time is its own), whose sum is the step's timed wall time:
#: `step_time_line` shares it out (``recording`` is inside ``generation``, ``total`` holds the others).
STEP_PARTS = ("generation", "verification", "judge", "extra_rewards", "extra_pass", "selection", "supplementary",
              "assembly", "replay_passes")
#: The per-rank counts `replay_counts` returns, in order (summed over ranks before `replay_metrics`).
COUNTS = ("replayed", "slots", "groups_all_failed", "groups", "integrity", "entropy", "supplementary", "padded",
          "relabelled", "fillers", "generated_tokens", "sampled", "sampled_tokens", "replay_tokens")


class StepTimer:
    """Wall seconds of named blocks of one generation batch; a block's time excludes the timed blocks nested in it,
    except ``"total"``, which keeps them (it is the whole of HiR's work on the batch).

    Args:
        synchronize: called at both ends of a block (``torch.cuda.synchronize`` on a GPU), or None.
    """

    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []
        self._synchronize = synchronize

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        if self._synchronize:
            self._synchronize()
        start = time.perf_counter()
        self._stack.append(0.0)
        try:
            yield
        finally:
            if self._synchronize:
                self._synchronize()
            elapsed = time.perf_counter() - start
            nested = self._stack.pop()
            self.seconds[name] += elapsed if name == "total" else elapsed - nested
            if self._stack:
                self._stack[-1] += elapsed

    def add(self, name: str, seconds: float) -> None:
        """Count ``seconds`` measured elsewhere (e.g. the ``seconds`` of a `hir_trl.rewards.ConstraintReward`) as a block
        ``name`` nested in the block now open, which then excludes them as it excludes its timed blocks."""
        self.seconds[name] += seconds
        if self._stack:
            self._stack[-1] += seconds

    def values(self) -> list[float]:
        """Seconds of each of `TIMINGS`, in order (0 for a block that did not run)."""
        return [self.seconds.get(name, 0.0) for name in TIMINGS]


def replay_counts(new_rows: Sequence[NewRow], rewards: Sequence[float], num_sampled: int, group_size: int, k: int,
                  fillers: int, generated_tokens: int, sampled_lengths: Sequence[int]) -> list[float]:
    """This rank's counts behind the ``hir/*`` metrics, in the order of `COUNTS`.

    Args:
        new_rows: the step's new rows; ``rewards``: (B + len(new_rows),) the reward of every row (ILA or CLA,
            in [0, 1]); ``groups_all_failed`` counts groups whose m sampled rows all have reward < 1 (no completion
            met every constraint), under either reward mode.
        num_sampled: B, sampled rows; ``group_size``: m; ``k``: replays per group.
        fillers: supplementary samples generated only to keep ranks in step; ``generated_tokens``: completion tokens
            of the B sampled rows.
        sampled_lengths: (B,) completion tokens of each sampled row; a replay's completion is its source's.

    Raises:
        ValueError: ``sampled_lengths`` does not have B entries.
    """
    if len(sampled_lengths) != num_sampled:
        raise ValueError(f"sampled_lengths has {len(sampled_lengths)} entries for {num_sampled} sampled rows")
    choices = [row.choice for row in new_rows if row.kind == "replay"]
    groups = num_sampled // group_size
    # a success meets every constraint: reward 1 under both reward modes (ILA 1, or a CLA of 1)
    all_failed = sum(all(rewards[g * group_size + j] < 1 for j in range(group_size)) for g in range(groups))
    return [len(choices), groups * k, all_failed, groups, sum(c.integrity for c in choices),
            sum(c.diversity for c in choices), sum(row.kind == "supplementary" for row in new_rows),
            sum(row.kind == "pad" for row in new_rows),
            sum(new is not None for c in choices for new in c.relabelled), fillers, generated_tokens,
            num_sampled, sum(sampled_lengths),
            sum(sampled_lengths[row.source] for row in new_rows if row.kind == "replay")]


def replay_metrics(counts: Sequence[float], lam: float, group_size: int) -> dict[str, float]:
    """The ``hir/*`` metrics of a step from `replay_counts` summed over ranks (docs/step.md "Metrics").

    ``hir/replay_integrity_mean``, ``hir/replay_entropy_mean`` and ``hir/replay_mean_length`` are NaN when nothing
    was replayed. ``hir/replay_mean_length`` and ``hir/sampled_mean_length``: mean completion tokens of the replays
    and of the sampled rows (whether replays favour long completions).
    """
    c = dict(zip(COUNTS, counts))
    replayed = c["replayed"]
    return {
        "hir/lambda": lam,
        "hir/replayed_rows": replayed,
        "hir/replayed_fraction": replayed / c["slots"] if c["slots"] else 0.0,
        "hir/supplementary_samples": c["supplementary"],
        "hir/filler_samples": c["fillers"],
        "hir/padded_rows": c["padded"],
        "hir/rows_per_group": (c["groups"] * group_size + replayed + c["supplementary"]) / c["groups"],
        "hir/generated_tokens": c["generated_tokens"],
        "hir/groups_all_failed": c["groups_all_failed"] / c["groups"],
        "hir/replay_integrity_mean": c["integrity"] / replayed if replayed else float("nan"),
        "hir/replay_entropy_mean": c["entropy"] / replayed if replayed else float("nan"),
        "hir/relabelled_constraints": c["relabelled"] / replayed if replayed else float("nan"),
        "hir/replay_mean_length": c["replay_tokens"] / replayed if replayed else float("nan"),
        "hir/sampled_mean_length": c["sampled_tokens"] / c["sampled"] if c["sampled"] else float("nan"),
    }


class LogRow(NamedTuple):
    """One new row in the completion log (TRL's columns, then HiR's)."""

    prompt: Any
    completion: Any
    row_id: str
    hindsight: bool
    supplementary: bool
    kept_constraints: str | None
    reward: float
    verdicts: str | None = None  # a supplementary sample's ``verdicts`` column entry (`verdict_log_entries`)


def verdict_log_entries(verdicts: Sequence[Sequence[Any]], constraints: Sequence[Sequence[Mapping[str, Any]]]
                        ) -> list[str]:
    """The completion log's ``verdicts`` column: per row of ``verdicts`` (its `hir_trl.verifiers.Verdict` per
    constraint) and of ``constraints`` (its normalized constraints, in the same order), a JSON list with one entry per
    constraint.

    Each entry is ``{"constraint": instruction id (text for a soft constraint), "kind": "hard" | "soft",
    "source": "rule" | "judge", "passed": bool}``, plus ``"error"`` (the checker's or judge's redacted error text)
    when the verdict is a failure to check, so rule verdicts, judge verdicts and judge errors sit side by side.
    """
    return [json.dumps([{"constraint": c.get("instruction_id") or c.get("text"), "kind": c.get("kind"),
                         "source": v.source, "passed": bool(v.passed), **({"error": v.error} if v.error else {})}
                        for c, v in zip(items, row)], ensure_ascii=False)
            for items, row in zip(constraints, verdicts)]


def completion_log_rows(new_rows: Sequence[NewRow], inputs: Sequence[dict[str, Any]], completions: Sequence[Any],
                        supplement: Any, rewards: Sequence[float], num_sampled: int,
                        group_size: int) -> list[LogRow]:
    """Completion-log entries of the new rows except padding. A replay shows q' and the indices of its kept
    constraints (JSON); a supplementary sample (of ``supplement``, a `hir_trl.step.state.SupplementarySamples`) its
    per-constraint verdicts."""
    out = []
    for i, row in enumerate(new_rows):
        if row.kind == "replay":
            kept = json.dumps([j for j, ok in enumerate(row.choice.kept) if ok])
            out.append(LogRow(row.q_prime, completions[row.source], str(inputs[row.source].get("row_id")), True,
                              False, kept, 1.0))
        elif row.kind == "supplementary":
            source = inputs[row.group * group_size]
            verdicts = supplement.verdicts
            out.append(LogRow(supplement.prompts[row.source], supplement.completions[row.source],
                              str(source.get("row_id")), False, True, None, rewards[num_sampled + i],
                              verdict_log_entries([verdicts.verdicts[row.source]], [source["constraints"]])[0]))
    return out


def judge_metrics(metrics: dict[str, float], gather: Callable[[torch.Tensor], torch.Tensor],
                  device: Any = None) -> dict[str, float]:
    """A judge's ``pop_metrics()`` ready to log: counters summed over ranks (``judge/seconds_per_step``: the
    slowest rank's), latency percentiles (``judge/latency_p50``/``_p95``, seconds) of this rank."""
    counters = sorted(key for key in metrics if "latency" not in key)  # the same keys on every rank
    out = {}
    if counters:
        local = torch.tensor([metrics[k] for k in counters], dtype=torch.float64, device=device)
        gathered = gather(local).view(-1, len(counters))
        for i, name in enumerate(counters):
            column = gathered[:, i]
            out[name] = (column.max() if name == "judge/seconds_per_step" else column.sum()).item()
    out.update({name: metrics[name] for name in ("judge/latency_p50", "judge/latency_p95") if name in metrics})
    return out


def replay_ratio_counts(per_token_logps: torch.Tensor, old_per_token_logps: torch.Tensor | None,
                        mask: torch.Tensor, replay_mask: torch.Tensor, advantages: torch.Tensor, *,
                        epsilon_low: float, epsilon_high: float, level: str = "token") -> torch.Tensor:
    """This micro-batch's replay importance ratios, as TRL's loss sees them: (3,) float32 ``[sum of ratios, clipped,
    count]`` over the replay rows' loss tokens, or over the replay rows when both the ratio and the advantage are one
    value per row (``level="sequence"`` with ``grpo``'s (N,) advantages), as TRL counts its ``clip_ratio/*``.

    The ratio is rho' = pi_theta(y | q') / pi_old(y | q) (paper eq. 7-8; pi_old(y | q') under
    ``replay_old_logps="hindsight"``), computed as `GRPOTrainer._compute_loss` computes ``coef_1`` (a sequence's
    ratio is exp of its mean token log-ratio); a token (or sequence) is clipped where TRL's clip takes its gradient
    away: rho' > 1 + ``epsilon_high`` with a positive advantage, or rho' < 1 - ``epsilon_low`` with a negative one
    (TRL's ``clip_ratio/region_mean``, restricted to replays).

    Args:
        per_token_logps: (N, T) log pi_theta of the loss's own forward pass (`GRPOTrainer._compute_loss`).
        old_per_token_logps: (N, T) the batch's ``old_per_token_logps``, or None (TRL then uses the detached
            current log-probs: every ratio is 1).
        mask: (N, T) loss tokens; replay_mask: (N,) True on replay rows; advantages: (N,) or (N, T).
        epsilon_low, epsilon_high: TRL's ``epsilon`` and ``epsilon_high``; level: ``importance_sampling_level``.
    """
    logps = per_token_logps.detach()
    log_ratio = logps - (logps if old_per_token_logps is None else old_per_token_logps)
    mask = mask.to(log_ratio.dtype) * replay_mask.to(log_ratio.dtype).unsqueeze(1)
    advantages = advantages if advantages.dim() == 2 else advantages.unsqueeze(1)
    if level == "sequence":  # one ratio per row: exp of its mean token log-ratio, (N, 1)
        ratio = torch.exp((log_ratio * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0))
    else:
        ratio = torch.exp(log_ratio)
    clipped = ((ratio > 1 + epsilon_high) & (advantages > 0)) | ((ratio < 1 - epsilon_low) & (advantages < 0))
    # per row when both are one value per row (TRL's global_masked_mean), else per loss token
    weight = (mask.sum(1, keepdim=True) > 0).to(mask.dtype) if clipped.size(1) == 1 else mask
    ratio = torch.where(weight > 0, ratio.expand_as(clipped), torch.zeros_like(weight))  # no inf x 0 off the mask
    return torch.stack([(ratio * weight).sum(), (clipped.to(weight.dtype) * weight).sum(), weight.sum()]).float()


def replay_ratio_metrics(totals: Sequence[float]) -> dict[str, float]:
    """``hir/replay_ratio_mean`` and ``hir/replay_clip_ratio`` from `replay_ratio_counts` summed over ranks; empty
    when the micro-batch holds no replay token (nothing to average)."""
    ratio_sum, clipped, count = totals
    if count <= 0:
        return {}
    return {"hir/replay_ratio_mean": ratio_sum / count, "hir/replay_clip_ratio": clipped / count}
