"""The one-round learning check (``benchmarks/experiments/one-round-synthetic/``): does HiR default learn as well
with ``replay_shortfall="pad"`` (never a second generation call) as with the paper's ``"resample"``?

The records of the check (its experiment folder, method ``hir_cla`` with the override) are paired by
seed with the ``hir_cla`` records of the decisive synthetic experiment (``resample``), and the pre-registered rule is
applied to the 95% t-interval of the mean paired difference in final held-out ILA, pad minus resample, in points:
upper bound < 0 -> "pad learns worse"; lower bound > 0 -> "pad learns better"; otherwise "unchanged within the noise".
Beside it: the area under ILA against generated tokens, and the replay and padding rows per step of both arms.

Usage::

    python -m benchmarks.learning.one_round     # its entry of benchmarks/experiments/decision.json, and report.md
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.learning import paired, records

REPO_ROOT = records.REPO_ROOT
PREREGISTRATION = records.experiment_dir("one-round-synthetic") / records.PREREGISTRATION_FILE
DECISIVE = records.experiment_dir("decisive-synthetic") / records.PREREGISTRATION_FILE
BASELINE_RUNS = records.experiment_dir("decisive-synthetic")

WORSE, BETTER, UNCHANGED = "pad learns worse", "pad learns better", "unchanged within the noise"


def sign_rule(ci95_low: float, ci95_high: float, better: str, worse: str, unchanged: str) -> str:
    """A round's primary rule on the 95% interval of variant minus baseline (points): ``better`` if its lower bound
    is above 0, ``worse`` if its upper bound is below 0, else ``unchanged``."""
    if ci95_low > 0:
        return better
    if ci95_high < 0:
        return worse
    return unchanged


def rule(ci95_low: float, ci95_high: float) -> str:
    """The pre-registered rule on the 95% interval of pad minus resample, in points."""
    return sign_rule(ci95_low, ci95_high, BETTER, WORSE, UNCHANGED)


def _per_step(records: Sequence[dict[str, Any]], key: str) -> float:
    values = [log.get(key) or 0.0 for r in records for log in r.get("logs") or []]
    return statistics.fmean(values) if values else 0.0


def check(pad_records: Sequence[dict[str, Any]], resample_records: Sequence[dict[str, Any]], seeds: Sequence[int],
          bootstrap_reps: int = 10_000, labels: tuple[str, str] = ("pad", "resample"),
          decide: Callable[[float, float], str] = rule,
          per_step_keys: Sequence[str] = ("replayed_rows", "supplementary_samples", "generated_tokens"),
          areas: Sequence[str] = ("tokens",)) -> dict[str, Any]:
    """The check's result over the pre-registered ``seeds`` both arms have; ``complete`` says whether all are in.

    A variant against its baseline, paired by seed: ``labels`` name the two arms in the output keys, ``decide`` is
    the pre-registered rule on the 95% interval of the mean difference (points), ``per_step_keys`` the ``hir/*``
    metrics averaged over every step of each arm, ``areas`` the x-axes (``tokens``, ``seconds``) of the reported
    difference in the area under held-out ILA (``auc_ila_vs_<x>_diff``, `paired.auc_summary`).

    Raises:
        ValueError: fewer than two common seeds (no interval).
    """
    pad = [r for r in pad_records if r["seed"] in seeds]
    base = [r for r in resample_records if r["seed"] in seeds]
    result = paired.compare(pad, base, bootstrap_reps=bootstrap_reps)
    if len(result["seeds"]) < 2:
        raise ValueError(f"the check needs at least 2 common seeds, has {result['seeds']}")
    t = result["t"]
    common = set(result["seeds"])
    pad, base = [r for r in pad if r["seed"] in common], [r for r in base if r["seed"] in common]
    decision = decide(t["low"], t["high"])
    complete = sorted(common) == sorted(seeds)
    return {
        "seeds": result["seeds"], "seeds_preregistered": list(seeds), "complete": complete,
        "decision": decision if complete else f"interim ({len(common)} of {len(seeds)} seeds): {decision}",
        "mean_diff_points": t["mean"], "ci95_low": t["low"], "ci95_high": t["high"], "sd_diff_points": t["sd"],
        "diff_points_per_seed": result["diffs"], f"{labels[0]}_final_ila_points": result["final_a"],
        f"{labels[1]}_final_ila_points": result["final_b"], "bootstrap_seeds_prompts": result.get("bootstrap"),
        "eval_completions": result["eval_completions"],
        **{f"auc_ila_vs_{x}_diff": paired.auc_summary(result, x) for x in areas},
        "per_step": {arm: {key: _per_step(records, f"hir/{key}") for key in per_step_keys}
                     for arm, records in zip(labels, (pad, base))},
    }


def versus_baseline(records: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]], seeds: Sequence[int],
                    complete: bool, bootstrap_reps: int = 10_000) -> dict[str, Any]:
    """A round's variant against one of the decisive experiment's baselines (secondary, deciding nothing), paired by
    seed over ``seeds``: the mean difference in final held-out ILA (points), its 95% t-interval, the per-seed figures
    and the decisive experiment's label (`paired.decide`), marked interim unless the round is ``complete``."""
    result = paired.compare([r for r in records if r["seed"] in seeds], [r for r in baseline if r["seed"] in seeds],
                            bootstrap_reps=bootstrap_reps)
    t = result["t"]
    label = paired.decide(t["low"], t["high"])
    return {
        "seeds": result["seeds"], "mean_diff_points": t["mean"], "ci95_low": t["low"], "ci95_high": t["high"],
        "sd_diff_points": t["sd"], "diff_points_per_seed": result["diffs"],
        "rl_cr_final_ila_points": result["final_b"],
        "decision": label if complete else f"interim ({len(result['seeds'])} of {len(seeds)} seeds): {label}",
    }


def round_markdown(out: dict[str, Any], title: str, module: str, keys: tuple[str, str], names: tuple[str, str]
                   ) -> list[str]:
    """The head of a round's ``report.md`` that has an RL-CR comparison (`versus_baseline`): title, pre-registration,
    the per-seed table (variant, baseline, RL-CR) and the primary, secondary and area lines. ``keys`` are `check`'s
    ``labels``; ``names`` how the text calls the variant and its baseline (e.g. ``("achieved", "drop")``)."""
    rl, (a_name, b_name) = out["versus_rl_cr"], names
    lines = [
        f"# {title}", "",
        f"Pre-registration: `{out['preregistration']['path']}` (commit {out['preregistration']['commit']}). "
        f"Generated by `python -m benchmarks.learning.{module}`.", "",
        f"| seed | {a_name} final ILA | {b_name} final ILA | {a_name} - {b_name} | RL-CR final ILA | "
        f"{a_name} - RL-CR |",
        "|---|---|---|---|---|---|",
    ]
    rl_by_seed = dict(zip(rl["seeds"], zip(rl["rl_cr_final_ila_points"], rl["diff_points_per_seed"])))
    for seed, a, b, d in zip(out["seeds"], out[f"{keys[0]}_final_ila_points"], out[f"{keys[1]}_final_ila_points"],
                             out["diff_points_per_seed"]):
        base, diff = rl_by_seed.get(seed, (None, None))
        lines.append(f"| {seed} | {a:.1f} | {b:.1f} | {d:+.1f} | "
                     + (f"{base:.1f} | {diff:+.1f} |" if base is not None else "- | - |"))
    auc, a_title = out["auc_ila_vs_tokens_diff"], a_name[0].upper() + a_name[1:]
    return lines + [
        "",
        interval_line(out, f"{a_title} minus {b_name}:"),
        f"- **Decision (primary): {out['decision']}.**",
        f"- {a_title} minus RL-CR: {rl['mean_diff_points']:+.2f} points, 95% t-interval "
        f"[{rl['ci95_low']:+.2f}, {rl['ci95_high']:+.2f}]: {rl['decision']} (secondary, decides nothing).",
        f"- Area under ILA against generated tokens, {a_name} minus {b_name}: {auc['mean']:+.2f} "
        f"[{auc['ci95_low']:+.2f}, {auc['ci95_high']:+.2f}] points.",
    ]


def interval_line(out: dict[str, Any], label: str) -> str:
    """The markdown line of a `check` result's mean difference, 95% t-interval and bootstrap interval."""
    boot = out.get("bootstrap_seeds_prompts") or {}
    return (f"- {label} {out['mean_diff_points']:+.2f} points, 95% t-interval "
            f"[{out['ci95_low']:+.2f}, {out['ci95_high']:+.2f}] (sd {out['sd_diff_points']:.2f}, "
            f"{len(out['seeds'])} seeds, {out['eval_completions']} completions per evaluation)"
            + (f"; bootstrap over seeds and prompts [{boot['low']:+.2f}, {boot['high']:+.2f}]" if boot else "") + ".")


def _markdown(out: dict[str, Any]) -> str:
    lines = [
        "# One-round learning check: replay_shortfall pad against resample (HiR default, synthetic task)",
        "",
        f"Pre-registration: `{out['preregistration']['path']}` (commit {out['preregistration']['commit']}). "
        "Generated by `python -m benchmarks.learning.one_round`.",
        "",
        "| seed | pad final ILA | resample final ILA | difference (points) |",
        "|---|---|---|---|",
    ]
    for seed, a, b, d in zip(out["seeds"], out["pad_final_ila_points"], out["resample_final_ila_points"],
                             out["diff_points_per_seed"]):
        lines.append(f"| {seed} | {a:.1f} | {b:.1f} | {d:+.1f} |")
    auc = out["auc_ila_vs_tokens_diff"]
    lines += [
        "",
        interval_line(out, "Mean difference"),
        f"- **Decision: {out['decision']}.**",
        f"- Area under ILA against generated tokens, pad minus resample: {auc['mean']:+.2f} "
        f"[{auc['ci95_low']:+.2f}, {auc['ci95_high']:+.2f}] points.",
    ]
    for arm in ("pad", "resample"):
        s = out["per_step"][arm]
        lines.append(f"- {arm}: {s['replayed_rows']:.2f} replayed rows, {s['supplementary_samples']:.2f} "
                     f"supplementary samples and {s['generated_tokens']:.0f} generated tokens per step.")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preregistration", type=Path, default=PREREGISTRATION)
    parser.add_argument("--baseline-runs", type=Path, default=BASELINE_RUNS, help="the experiment folder of the "
                        "resample records")
    ns = parser.parse_args(argv)
    spec = yaml.safe_load(ns.preregistration.read_text())
    results_dir = ns.preregistration.resolve().parent
    pad = paired.load_runs(results_dir).get(spec["arm"], [])
    resample = paired.load_runs(ns.baseline_runs).get(spec["arm"], [])
    write_decision(check(pad, resample, spec["seeds"]), ns.preregistration, pad, results_dir, _markdown)


def round_parser(doc: str, preregistration: Path, decisive: Path) -> argparse.ArgumentParser:
    """The command line of a round's report: ``--preregistration``, ``--decisive`` (the comparators'
    pre-registration) and ``--bootstrap-reps``, with these defaults."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preregistration", type=Path, default=preregistration)
    parser.add_argument("--decisive", type=Path, default=decisive, help="the pre-registration of the comparators")
    parser.add_argument("--bootstrap-reps", type=int, default=10_000)
    return parser


def round_records(preregistration: Path, decisive: Path, family: str
                  ) -> tuple[dict[str, Any], Path, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """A round's pre-registration and records: ``(spec, results_dir, variant, hir, rl_cr)``: the round's own runs of
    its ``arm``, and the decisive experiment's ``family`` HiR and RL-CR runs that name ``decisive`` as their
    pre-registration."""
    import yaml

    spec = yaml.safe_load(preregistration.read_text())
    decisive_spec = yaml.safe_load(decisive.read_text())
    decisive_paths = records.preregistration_paths(
        {"path": str(decisive.resolve().relative_to(REPO_ROOT)), "experiment": decisive_spec["experiment"]})
    results_dir = preregistration.resolve().parent
    variant = paired.load_runs(results_dir).get(spec["arm"], [])
    base = paired.load_runs(decisive.resolve().parent)
    arms = decisive_spec["families"][family]["arms"]
    hir, rl_cr = ([r for r in base.get(arms[role], [])
                   if (r.get("preregistration") or {}).get("path") in decisive_paths] for role in ("hir", "rl_cr"))
    return spec, results_dir, variant, hir, rl_cr


def write_decision(out: dict[str, Any], preregistration: Path, runs: Sequence[dict[str, Any]], results_dir: Path,
                   markdown: Callable[[dict[str, Any]], str]) -> None:
    """Name the experiment and the pre-registration (the path and commit its ``runs`` name) in ``out``, put it into
    ``benchmarks/experiments/decision.json`` in place of the experiment's old entry, write ``results_dir/report.md``
    and print it."""
    import yaml

    commits = sorted({r["preregistration"]["commit"] for r in runs})
    named = sorted({r["preregistration"]["path"] for r in runs})
    experiment = yaml.safe_load(preregistration.read_text())["experiment"]
    out = {"experiment": experiment, **out,
           "preregistration": {"path": named[0] if len(named) == 1 else str(preregistration.resolve().relative_to(
               REPO_ROOT)), "commit": commits[0] if len(commits) == 1 else commits}}
    records.upsert_decisions([experiment], [out])
    (results_dir / REPORT_FILE).write_text(markdown(out))
    print(markdown(out))


REPORT_FILE = "report.md"


if __name__ == "__main__":
    main()
