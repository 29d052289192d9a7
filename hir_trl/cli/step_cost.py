"""``hir-trl plan``'s estimate of HiR's own work per rank-step: rule verification and the judge's batch.

Both come from `benchmarks/step_cpu_cost.py` (results in ``benchmarks/experiments/step-cpu-cost/``): rule
verification grows with the hard checks and the completions' length; the judge's batch lasts about as long as its
slowest request, so it grows with the number of requests a rank sends (one per completion and soft constraint) and
the judge's latency tail. `HiRTrainer` sends the batch as soon as TRL has generated (`hir_trl.rewards.
ConstraintReward.judge_ahead`), so the step waits only for what TRL's old-log-prob and reference passes do not
cover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

#: Wall seconds of rule verification per hard check and per 1,000 completion tokens: the HIR-16K-format mix's, the
#: largest of the four mixes (IFEval 0.0010, IFBench 0.0012, MulDimIF 0.0016, HIR-16K format 0.0017) at 48 rows x
#: 4,096 tokens of `benchmarks/step_cpu_cost.py` (benchmarks/experiments/step-cpu-cost/), on a shared 2-core CPU at
#: a load of 13-15 (a GPU node's core is usually faster). IFEval rows that detect the response's language cost more.
RULE_SECONDS_PER_CHECK_PER_KTOKEN = 0.0017
#: Hard and soft constraints per row when the data cannot be counted: HIR-16K's (76,456 hard and 46,536 soft
#: constraints over 16,969 rows; paper, Appendix "HIR-16K").
HIR16K_HARD_PER_ROW, HIR16K_SOFT_PER_ROW = 76_456 / 16_969, 46_536 / 16_969
#: The judge latency the estimate assumes (the benchmark's server): log-normal, median 3 s, sigma 0.6 (p95 about 8
#: s), as measured of a served judge model.
JUDGE_MEDIAN_S, JUDGE_SIGMA = 3.0, 0.6


@dataclass(frozen=True)
class StepCostEstimate:
    """HiR's own work on one rank per generation batch: ``verification_s`` (rule verification of the sampled rows),
    ``judge_batch_s`` (the judge's batch, about its slowest request), ``judge_requests`` (requests of the rank)."""

    verification_s: float
    judge_batch_s: float
    judge_requests: float


def step_cost_estimate(*, sampled_rows_per_rank: float, completion_tokens: int, hard_per_row: float | None,
                       soft_per_row: float | None, judge_concurrency: int, judging: bool) -> StepCostEstimate:
    """Estimate one rank's rule verification and judge batch per generation batch.

    Args:
        sampled_rows_per_rank: completions sampled per generation batch on one rank (B).
        completion_tokens: the completions' length (``max_completion_length``: the estimate is at the cap).
        hard_per_row, soft_per_row: constraints per row of the data; None: HIR-16K's.
        judge_concurrency: ``judge_max_concurrency`` (requests in flight per rank).
        judging: whether soft constraints go to a judge.

    Returns:
        Seconds of rule verification (`RULE_SECONDS_PER_CHECK_PER_KTOKEN`), and of the judge's batch: the largest
        of n log-normal latencies (`JUDGE_MEDIAN_S`, `JUDGE_SIGMA`; the n/(n+1) quantile), plus a mean latency for
        each further ``judge_concurrency`` requests beyond the first (the requests that wait for a free slot); 0
        without a judge or soft constraints. Retries (429s, timeouts) come on top.
    """
    hard = HIR16K_HARD_PER_ROW if hard_per_row is None else hard_per_row
    soft = HIR16K_SOFT_PER_ROW if soft_per_row is None else soft_per_row
    verification = sampled_rows_per_rank * hard * completion_tokens / 1000 * RULE_SECONDS_PER_CHECK_PER_KTOKEN
    requests = sampled_rows_per_rank * soft if judging else 0.0
    batch = 0.0
    if requests >= 1:
        slowest = JUDGE_MEDIAN_S * math.exp(JUDGE_SIGMA * NormalDist().inv_cdf(requests / (requests + 1)))
        mean = JUDGE_MEDIAN_S * math.exp(JUDGE_SIGMA ** 2 / 2)
        batch = slowest + max(0.0, requests / max(1, judge_concurrency) - 1) * mean
    return StepCostEstimate(verification_s=verification, judge_batch_s=batch, judge_requests=requests)


def step_cost_line(sampled_rows_per_rank: float, completion_tokens: int, counts: dict | None,
                   judge_concurrency: int, judging: bool) -> str:
    """``hir-trl plan``'s line on HiR's own work per rank and generation batch (`step_cost_estimate`); ``counts``:
    the data's ``rows``, ``constraints`` and ``soft`` constraints, or None (HIR-16K's shares are assumed)."""
    rows = counts["rows"] if counts else 0
    cost = step_cost_estimate(
        sampled_rows_per_rank=sampled_rows_per_rank, completion_tokens=completion_tokens,
        hard_per_row=(counts["constraints"] - counts["soft"]) / rows if rows else None,
        soft_per_row=counts["soft"] / rows if rows else None, judge_concurrency=judge_concurrency, judging=judging)
    line = (f"HiR's own work per rank and generation batch (benchmarks/step_cpu_cost.py, completions at the cap"
            f"{'' if rows else ', HIR-16K constraint counts'}): rule verification about {cost.verification_s:.1f} s")
    if cost.judge_requests:
        line += (f"; the judge's batch about {cost.judge_batch_s:.0f} s ({cost.judge_requests:.0f} requests at a "
                 f"median latency of {JUDGE_MEDIAN_S:g} s), sent when generation ends: the step waits only for what "
                 "TRL's old-log-prob and reference passes do not cover")
    return line


__all__ = ["JUDGE_MEDIAN_S", "JUDGE_SIGMA", "RULE_SECONDS_PER_CHECK_PER_KTOKEN", "StepCostEstimate",
           "step_cost_estimate", "step_cost_line"]
