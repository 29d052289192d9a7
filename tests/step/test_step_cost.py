"""``hir-trl plan``'s estimate of HiR's own work per rank-step (`hir_trl.cli.step_cost`)."""

import math
from statistics import NormalDist

import pytest

from hir_trl.cli.step_cost import (
    HIR16K_HARD_PER_ROW,
    JUDGE_MEDIAN_S,
    JUDGE_SIGMA,
    RULE_SECONDS_PER_CHECK_PER_KTOKEN,
    step_cost_estimate,
    step_cost_line,
)


def test_estimate_by_hand():
    cost = step_cost_estimate(sampled_rows_per_rank=48, completion_tokens=4096, hard_per_row=5, soft_per_row=3,
                              judge_concurrency=64, judging=True)
    assert cost.verification_s == pytest.approx(48 * 5 * 4.096 * RULE_SECONDS_PER_CHECK_PER_KTOKEN)
    assert cost.judge_requests == 144
    slowest = JUDGE_MEDIAN_S * math.exp(JUDGE_SIGMA * NormalDist().inv_cdf(144 / 145))
    mean = JUDGE_MEDIAN_S * math.exp(JUDGE_SIGMA ** 2 / 2)
    assert cost.judge_batch_s == pytest.approx(slowest + (144 / 64 - 1) * mean)
    # a batch that fits in the concurrency waits for its slowest request only
    small = step_cost_estimate(sampled_rows_per_rank=8, completion_tokens=512, hard_per_row=5, soft_per_row=1,
                               judge_concurrency=64, judging=True)
    assert small.judge_batch_s == pytest.approx(JUDGE_MEDIAN_S * math.exp(JUDGE_SIGMA * NormalDist().inv_cdf(8 / 9)))
    assert step_cost_estimate(sampled_rows_per_rank=48, completion_tokens=4096, hard_per_row=5, soft_per_row=3,
                              judge_concurrency=64, judging=False).judge_batch_s == 0.0


def test_plan_line_uses_the_data_counts_or_hir16k():
    line = step_cost_line(48, 4096, {"rows": 10, "constraints": 50, "soft": 0}, 64, True)
    assert "rule verification about" in line and "judge" not in line  # no soft constraint: no judge batch
    unknown = step_cost_line(48, 4096, None, 64, True)
    assert "HIR-16K constraint counts" in unknown and "requests at a median latency of 3 s" in unknown
    hard = 48 * HIR16K_HARD_PER_ROW * 4.096 * RULE_SECONDS_PER_CHECK_PER_KTOKEN
    assert f"rule verification about {hard:.1f} s" in unknown
