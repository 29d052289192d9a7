"""Paired comparisons of two arms of the learning benchmark, and the pre-registered decision rule.

Each run record of `benchmarks.learning.run` holds, for every held-out evaluation, the verdict of every
(prompt, sample) pair (``evals[i]["verdicts"]``: the prompt ids, the samples per prompt, and one string of '0'/'1'
per completion, a character per constraint). Two arms run with the same seeds are compared seed by seed:

- ``diffs``: final held-out ILA of arm A minus arm B, in points, per common seed;
- ``t``: the mean of those differences with its 95% t-interval over seeds (the interval the decision uses);
- ``bootstrap``: a 95% percentile interval from a two-level bootstrap that resamples seeds and held-out prompts
  (the same prompts for both arms, so the prompt pairing is kept);
- ``auc_tokens`` / ``auc_seconds``: the area under held-out ILA against generated tokens / training seconds, divided
  by the budget, over the budget both runs of a seed reached (the mean ILA over that budget, in points), paired by
  seed like the final ILA.

Decision rule (pre-registered in ``benchmarks/experiments/*/preregistration.yaml``), on the 95% t-interval [lo, hi] of the mean
paired difference in final held-out ILA, in points: ``lo > 0`` -> "HiR ahead"; else ``hi < +1`` -> "no useful gain";
else "undecided".

Usage::

    python -m benchmarks.learning.paired benchmarks/experiments/decisive-synthetic --pair hir_cla:rl_cr
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.learning import records

#: Decision labels, in the order of the rule.
HIR_AHEAD, NO_USEFUL_GAIN, UNDECIDED = "HiR ahead", "no useful gain", "undecided"
#: The "useful gain" threshold of the rule, in points of final held-out ILA.
USEFUL_GAIN_POINTS = 1.0


def decide(ci95_low: float, ci95_high: float, useful_gain: float = USEFUL_GAIN_POINTS) -> str:
    """The pre-registered rule on a 95% interval of the mean paired difference (points of ILA)."""
    if ci95_low > 0:
        return HIR_AHEAD
    if ci95_high < useful_gain:
        return NO_USEFUL_GAIN
    return UNDECIDED


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean of ``values`` with its two-sided t-interval (n - 1 degrees of freedom).

    Returns:
        ``{"n", "mean", "sd", "low", "high", "half_width"}``; with fewer than 2 values the interval is infinite.
    """
    from scipy import stats

    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n < 2:
        return {"n": n, "mean": mean, "sd": float("nan"), "low": -math.inf, "high": math.inf,
                "half_width": math.inf}
    sd = statistics.stdev(values)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half, "half_width": half}


def expected_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """Expected half-width of the t-interval of a mean of ``n`` paired differences with standard deviation ``sd``."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)


def seeds_for_half_width(sd: float, target: float, minimum: int = 2, maximum: int = 200) -> int:
    """The smallest number of seeds whose expected 95% half-width is at most ``target``."""
    for n in range(max(2, minimum), maximum + 1):
        if expected_half_width(sd, n) <= target:
            return n
    return maximum


# ------------------------------------------------------------------------------------------------ records


def per_prompt_ila(evaluation: dict[str, Any]) -> tuple[list[str], list[float]]:
    """(prompt ids, fraction of each prompt's samples that meet every constraint) of one held-out evaluation.

    Raises:
        KeyError: the evaluation stores no per-completion verdicts.
    """
    verdicts = evaluation["verdicts"]
    rows, samples, passed = verdicts["rows"], verdicts["samples"], verdicts["passed"]
    if len(passed) != len(rows) * samples:
        raise ValueError(f"{len(passed)} verdict strings for {len(rows)} prompts x {samples} samples")
    ila = []
    for r in range(len(rows)):
        chunk = passed[r * samples:(r + 1) * samples]
        ila.append(sum("0" not in v for v in chunk) / samples)
    return list(rows), ila


def constraint_kind(constraint: dict[str, Any]) -> str:
    """The kind a constraint is reported under: its ``instruction_id``, plus the ``relation`` of its ``kwargs``
    where it has one (``length_constraints:number_words`` "less than" and "at least" pull in opposite directions)."""
    relation = (constraint.get("kwargs") or {}).get("relation")
    return f"{constraint['instruction_id']} ({relation})" if relation else constraint["instruction_id"]


def constraint_pass_rates(evaluation: dict[str, Any], kinds_of: dict[str, Sequence[str]]) -> dict[str, float]:
    """Per constraint kind, the fraction of its (prompt, sample) verdicts met in one held-out evaluation.

    Args:
        evaluation: one entry of a record's ``evals``, with its ``verdicts``.
        kinds_of: prompt id -> the kind (`constraint_kind`) of each of its constraints, in verdict order.

    Raises:
        KeyError: a prompt of the evaluation is not in ``kinds_of``.
        ValueError: a verdict string does not have one character per constraint of its prompt.
    """
    verdicts = evaluation["verdicts"]
    met: dict[str, list[int]] = {}
    for r, row_id in enumerate(verdicts["rows"]):
        kinds = kinds_of[row_id]
        for passed in verdicts["passed"][r * verdicts["samples"]:(r + 1) * verdicts["samples"]]:
            if len(passed) != len(kinds):
                raise ValueError(f"prompt {row_id}: verdict {passed!r} for {len(kinds)} constraints")
            for kind, bit in zip(kinds, passed):
                met.setdefault(kind, []).append(bit == "1")
    return {kind: sum(bits) / len(bits) for kind, bits in sorted(met.items())}


def candidate_failure_shares(evaluation: dict[str, Any], kinds_of: dict[str, Sequence[str]]
                             ) -> tuple[float, dict[str, float]]:
    """Which constraints the completions a replay could come from fail, in one held-out evaluation.

    Candidates are the (prompt, sample) verdicts that failed at least one constraint and met at least one: the
    failed completions Algorithm 1 (lines 6-9) may replay, whether or not they were cut off (held-out verdicts do
    not say). Returns (candidates / all completions, {kind: share of candidates failing a constraint of that kind}),
    fractions in [0, 1]; a kind no candidate's prompt has is absent.

    Raises:
        KeyError: a prompt of the evaluation is not in ``kinds_of``.
        ValueError: a verdict string does not have one character per constraint of its prompt.
    """
    verdicts = evaluation["verdicts"]
    total, candidates, failing = 0, 0, {}
    for r, row_id in enumerate(verdicts["rows"]):
        kinds = kinds_of[row_id]
        for passed in verdicts["passed"][r * verdicts["samples"]:(r + 1) * verdicts["samples"]]:
            if len(passed) != len(kinds):
                raise ValueError(f"prompt {row_id}: verdict {passed!r} for {len(kinds)} constraints")
            total += 1
            if "0" not in passed or "1" not in passed:
                continue
            candidates += 1
            for kind in {kind for kind, bit in zip(kinds, passed) if bit == "0"}:
                failing[kind] = failing.get(kind, 0) + 1
    return (candidates / total if total else 0.0,
            {kind: n / candidates for kind, n in sorted(failing.items())})


def compare_constraints(runs_a: Sequence[dict[str, Any]], runs_b: Sequence[dict[str, Any]],
                        kinds_of: dict[str, Sequence[str]]) -> dict[str, dict[str, Any]]:
    """Per constraint kind, arm A against arm B at the final held-out evaluation, paired by seed: ``a`` and ``b``
    (mean pass rates over seeds, points), ``diffs`` (A - B per common seed, points) and ``t`` (their t-interval).

    Raises:
        ValueError: no common seed.
    """
    a_by_seed, b_by_seed = {r["seed"]: r for r in runs_a}, {r["seed"]: r for r in runs_b}
    seeds = sorted(set(a_by_seed) & set(b_by_seed))
    if not seeds:
        raise ValueError("the two arms share no seed")
    rates_a = [constraint_pass_rates(final_eval(a_by_seed[s]), kinds_of) for s in seeds]
    rates_b = [constraint_pass_rates(final_eval(b_by_seed[s]), kinds_of) for s in seeds]
    out = {}
    for kind in sorted(set().union(*rates_a, *rates_b)):
        a = [100 * r[kind] for r in rates_a]
        b = [100 * r[kind] for r in rates_b]
        diffs = [x - y for x, y in zip(a, b)]
        out[kind] = {"seeds": seeds, "a": sum(a) / len(a), "b": sum(b) / len(b), "diffs": diffs,
                     "t": t_interval(diffs)}
    return out


def constraint_trajectory(runs: Sequence[dict[str, Any]], kinds_of: dict[str, Sequence[str]]
                          ) -> list[dict[str, Any]]:
    """One arm's course over training: at each held-out evaluation step whose verdicts every run stored, the mean
    over runs of each constraint kind's pass rate (``kinds``, points) and of the completion length
    (``mean_completion_tokens``, tokens; None where a record lacks it). Shows when a kind is lost, not only that it is.
    Also the mean over runs of `candidate_failure_shares`: ``candidates`` (points of all completions) and
    ``candidate_failures`` (per kind, points of the candidates failing it; 0 in a run where no candidate fails it).

    Raises:
        ValueError: no run given.
        KeyError: the runs' held-out prompts differ (a kind is missing from one of them).
    """
    if not runs:
        raise ValueError("no run to follow")
    steps = sorted(set.intersection(*({e["step"] for e in r["evals"] if "verdicts" in e} for r in runs)))
    out = []
    for step in steps:
        evals = [next(e for e in r["evals"] if e["step"] == step) for r in runs]
        rates = [constraint_pass_rates(e, kinds_of) for e in evals]
        kinds = {kind: 100 * sum(r[kind] for r in rates) / len(rates)
                 for kind in sorted(set().union(*rates))}
        tokens = [e.get("mean_completion_tokens") for e in evals]
        shares = [candidate_failure_shares(e, kinds_of) for e in evals]
        failures = {kind: 100 * sum(f.get(kind, 0.0) for _, f in shares) / len(shares) for kind in kinds}
        out.append({"step": step, "seeds": sorted(r["seed"] for r in runs), "kinds": kinds,
                    "candidates": 100 * sum(c for c, _ in shares) / len(shares), "candidate_failures": failures,
                    "mean_completion_tokens": None if None in tokens else sum(tokens) / len(tokens)})
    return out


def final_eval(record: dict[str, Any]) -> dict[str, Any]:
    return max(record["evals"], key=lambda e: e["step"])


def curve(record: dict[str, Any], budget: str) -> tuple[list[float], list[float]]:
    """(cumulative budget at each evaluation, held-out ILA in points). ``budget``: "tokens" or "seconds"."""
    cumulative, total = {0: 0.0}, 0.0
    key = "generated_tokens" if budget == "tokens" else "step_seconds"
    for step in sorted(record["steps"], key=lambda s: s["step"]):
        total += step[key]
        cumulative[step["step"]] = total
    xs, ys = [], []
    for e in sorted(record["evals"], key=lambda e: e["step"]):
        if e["step"] in cumulative:
            xs.append(cumulative[e["step"]])
            ys.append(100 * e["ila"])
    return xs, ys


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def normalized_auc(xs: Sequence[float], ys: Sequence[float], limit: float) -> float:
    """Trapezoid area under (xs, ys) on [xs[0], limit], divided by ``limit - xs[0]``: the mean of y over it."""
    if limit <= xs[0]:
        return ys[0]
    px, py = [xs[0]], [ys[0]]
    for x, y in zip(xs[1:], ys[1:]):
        if x >= limit:
            break
        px.append(x)
        py.append(y)
    px.append(limit)
    py.append(_interpolate(xs, ys, limit))
    area = sum((px[i + 1] - px[i]) * (py[i + 1] + py[i]) / 2 for i in range(len(px) - 1))
    return area / (limit - xs[0])


def budget_to_reach(xs: Sequence[float], ys: Sequence[float], level: float) -> float | None:
    """The budget at which the curve first reaches ``level`` (linear between evaluations), or None."""
    for i, (x, y) in enumerate(zip(xs, ys)):
        if y >= level:
            if i == 0:
                return x
            x0, y0 = xs[i - 1], ys[i - 1]
            return x0 + (x - x0) * (level - y0) / (y - y0)
    return None


def bootstrap_interval(diff_matrix: Sequence[Sequence[float]], reps: int = 10_000, seed: int = 0,
                       confidence: float = 0.95) -> dict[str, float]:
    """Two-level bootstrap of the mean of ``diff_matrix[seed][prompt]`` (points): seeds and prompts resampled.

    Each replicate draws seeds with replacement and, independently, prompts with replacement (the same prompts for
    every seed and both arms), and averages the per-(seed, prompt) differences with those multiplicities.
    """
    import numpy as np

    d = np.asarray(diff_matrix, dtype=float)
    n, p = d.shape
    rng = np.random.default_rng(seed)
    w = rng.multinomial(n, [1 / n] * n, size=reps)          # (reps, n) seed multiplicities
    v = rng.multinomial(p, [1 / p] * p, size=reps)          # (reps, p) prompt multiplicities
    means = ((w @ d) * v).sum(axis=1) / (n * p)
    alpha = (1 - confidence) / 2
    return {"low": float(np.quantile(means, alpha)), "high": float(np.quantile(means, 1 - alpha)), "reps": reps}


def auc_summary(result: dict[str, Any], budget: str) -> dict[str, Any]:
    """The AUC difference of a :func:`compare` result against ``budget`` (``"tokens"`` or ``"seconds"``) as reported:
    ``mean``, ``ci95_low``, ``ci95_high`` (points of normalized area) and ``per_seed``.

    Raises:
        KeyError: ``budget`` is neither ``"tokens"`` nor ``"seconds"``.
    """
    auc = result[f"auc_{budget}"]
    return {"mean": auc["t"]["mean"], "ci95_low": auc["t"]["low"], "ci95_high": auc["t"]["high"],
            "per_seed": auc["diffs"]}


def compare(runs_a: Sequence[dict[str, Any]], runs_b: Sequence[dict[str, Any]], bootstrap_reps: int = 10_000
            ) -> dict[str, Any]:
    """Paired comparison of arm A against arm B over their common seeds (see the module docstring).

    Raises:
        ValueError: no common seed; the two runs of a seed start from different checkpoints (their records'
            ``checkpoint``: the task and its SFT loss, which differ when a machine does not rebuild the same SFT
            model); the final evaluations of a seed differ in prompts or samples.
    """
    a_by_seed = {r["seed"]: r for r in runs_a}
    b_by_seed = {r["seed"]: r for r in runs_b}
    seeds = sorted(set(a_by_seed) & set(b_by_seed))
    if not seeds:
        raise ValueError("the two arms share no seed")
    for seed in seeds:
        start_a, start_b = a_by_seed[seed].get("checkpoint"), b_by_seed[seed].get("checkpoint")
        if start_a is not None and start_b is not None and start_a != start_b:
            raise ValueError(f"seed {seed}: the two runs start from different checkpoints ({start_a} and {start_b}): "
                             "they are no pair")
    diffs, matrix, auc_tok, auc_sec, completions = [], [], [], [], None
    for seed in seeds:
        ea, eb = final_eval(a_by_seed[seed]), final_eval(b_by_seed[seed])
        diffs.append(100 * (ea["ila"] - eb["ila"]))
        if "verdicts" in ea and "verdicts" in eb:
            rows_a, ila_a = per_prompt_ila(ea)
            rows_b, ila_b = per_prompt_ila(eb)
            if rows_a != rows_b or ea["verdicts"]["samples"] != eb["verdicts"]["samples"]:
                raise ValueError(f"seed {seed}: the two arms' final evaluations differ in prompts or samples")
            matrix.append([100 * (x - y) for x, y in zip(ila_a, ila_b)])
            completions = len(ea["verdicts"]["passed"])
        for budget, out in (("tokens", auc_tok), ("seconds", auc_sec)):
            xa, ya = curve(a_by_seed[seed], budget)
            xb, yb = curve(b_by_seed[seed], budget)
            limit = min(xa[-1], xb[-1])
            out.append(normalized_auc(xa, ya, limit) - normalized_auc(xb, yb, limit))
    result = {"seeds": seeds, "diffs": diffs, "t": t_interval(diffs),
              "final_a": [100 * final_eval(a_by_seed[s])["ila"] for s in seeds],
              "final_b": [100 * final_eval(b_by_seed[s])["ila"] for s in seeds],
              "eval_completions": completions,
              "auc_tokens": {"diffs": auc_tok, "t": t_interval(auc_tok)},
              "auc_seconds": {"diffs": auc_sec, "t": t_interval(auc_sec)}}
    if len(matrix) == len(seeds):
        result["bootstrap"] = bootstrap_interval(matrix, reps=bootstrap_reps)
    result["decision"] = decide(result["t"]["low"], result["t"]["high"])
    return result


def mean_curve(runs: Sequence[dict[str, Any]], budget: str) -> tuple[list[float], list[float]]:
    """Mean over runs of (cumulative budget, ILA points) at the evaluation points every run shares."""
    curves = [curve(r, budget) for r in runs]
    points = min(len(c[0]) for c in curves)
    return ([statistics.fmean(c[0][i] for c in curves) for i in range(points)],
            [statistics.fmean(c[1][i] for c in curves) for i in range(points)])


def tokens_to_match(runs_hir: Sequence[dict[str, Any]], runs_base: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Generated tokens HiR's mean curve needs to reach the baseline's mean final ILA, as a fraction of the
    baseline's mean total tokens (None when it never reaches it)."""
    xh, yh = mean_curve(runs_hir, "tokens")
    xb, yb = mean_curve(runs_base, "tokens")
    reached = budget_to_reach(xh, yh, yb[-1])
    return {"baseline_final_ila": yb[-1], "baseline_tokens": xb[-1], "hir_tokens_to_reach": reached,
            "ratio": None if reached is None else reached / xb[-1]}


def load_runs(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Run records of an experiment folder (packed ``runs.jsonl`` and loose ``runs/*.json``,
    `benchmarks.learning.records.load_records`), by method; a ``runs/`` folder stands for its experiment."""
    folder = Path(folder)
    return records.by_method(records.load_records(folder.parent if folder.name == records.LOOSE_DIR else folder))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs_dir", type=Path, help="an experiment folder (or its runs/ folder)")
    parser.add_argument("--pair", action="append", required=True, help="HIR_METHOD:BASELINE_METHOD (repeatable)")
    ns = parser.parse_args(argv)
    runs = load_runs(ns.runs_dir)
    for pair in ns.pair:
        a, b = pair.split(":")
        result = compare(runs.get(a, []), runs.get(b, []))
        t = result["t"]
        print(f"{a} - {b}: seeds {result['seeds']}, diffs {[round(d, 2) for d in result['diffs']]}, "
              f"mean {t['mean']:+.2f} [{t['low']:+.2f}, {t['high']:+.2f}] -> {result['decision']}")


if __name__ == "__main__":
    main()
