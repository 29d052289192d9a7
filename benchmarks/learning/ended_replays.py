"""The ended-replays round (``benchmarks/experiments/ended-replays-paper-synthetic/``): under the paper's
objective (Reinforce++, KL, binary ILA reward, replays as rows of their group), does HiR learn better when only
completions that ended may be replayed (``replay_truncated_completions=False``, hir-trl's default) than when any
failure may be, a cut-off one too (the paper's)?

The records of the round (its experiment folder, method ``hir_paper_rpp`` with the override) are
paired by seed with the decisive synthetic experiment's paper-family ``hir_paper_rpp`` (any failure) and
``rl_cr_rpp`` records, and the pre-registered rules are applied to the 95% t-interval of the mean paired difference
in final held-out ILA, in points:

- primary, deciding: ended-only minus any failure: lower bound > 0 -> "ended-only replays help"; upper bound < 0 ->
  "ended-only replays hurt"; otherwise "unchanged within the noise";
- secondary: ended-only minus RL-CR (Reinforce++), with the decisive experiment's labels (`paired.decide`);
- mechanism: the fraction of held-out completions cut at the length limit and their mean length, at every
  evaluation after the start, paired by seed against any-failure replays.

Usage::

    python -m benchmarks.learning.ended_replays   # its entry of benchmarks/experiments/decision.json, and report.md
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.learning import one_round, paired, records

REPO_ROOT = Path(__file__).resolve().parents[2]
PREREGISTRATION = records.experiment_dir("ended-replays-paper-synthetic") / records.PREREGISTRATION_FILE
DECISIVE = one_round.DECISIVE

HELPS, HURTS, UNCHANGED = "ended-only replays help", "ended-only replays hurt", "unchanged within the noise"
#: Held-out evaluation fields compared by the mechanism report: (record key, scale to report units).
MECHANISM = (("truncated_fraction", 100.0), ("mean_completion_tokens", 1.0))


def rule(ci95_low: float, ci95_high: float) -> str:
    """The pre-registered primary rule on the 95% interval of ended-only minus any failure, in points."""
    return one_round.sign_rule(ci95_low, ci95_high, HELPS, HURTS, UNCHANGED)


def truncation(ended: Sequence[dict[str, Any]], any_failure: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per held-out evaluation step after the start that both arms of a seed have, and per `MECHANISM` field (cut
    fraction in points, mean completion length in tokens): each seed's ended-only and any-failure value, their
    paired differences and the t-interval of the mean difference. ``{step: {field: {"seeds", "ended",
    "any_failure", "diffs", "t"}}}``; a field a record's evaluation lacks is left out for that seed.
    """
    base = {r["seed"]: {e["step"]: e for e in r["evals"]} for r in any_failure}
    out: dict[int, dict[str, Any]] = {}
    for record in sorted(ended, key=lambda r: r["seed"]):
        other = base.get(record["seed"])
        if other is None:
            continue
        for evaluation in record["evals"]:
            step, match = evaluation["step"], other.get(evaluation["step"])
            if step == 0 or match is None:
                continue
            for field, scale in MECHANISM:
                if evaluation.get(field) is None or match.get(field) is None:
                    continue
                entry = out.setdefault(step, {}).setdefault(field, {"seeds": [], "ended": [], "any_failure": []})
                entry["seeds"].append(record["seed"])
                entry["ended"].append(scale * evaluation[field])
                entry["any_failure"].append(scale * match[field])
    for fields in out.values():
        for entry in fields.values():
            entry["diffs"] = [a - b for a, b in zip(entry["ended"], entry["any_failure"])]
            entry["t"] = paired.t_interval(entry["diffs"])
    return dict(sorted(out.items()))


def check(ended: Sequence[dict[str, Any]], any_failure: Sequence[dict[str, Any]], rl_cr: Sequence[dict[str, Any]],
          seeds: Sequence[int], bootstrap_reps: int = 10_000) -> dict[str, Any]:
    """The round's result over the pre-registered ``seeds`` the arms share; ``complete`` says whether all are in.

    Args:
        ended, any_failure, rl_cr: run records (``benchmarks.learning.run``) of the three arms.
        seeds: the pre-registered seeds.

    Raises:
        ValueError: fewer than two seeds shared with the any-failure arm (no interval).
    """
    out = one_round.check(ended, any_failure, seeds, bootstrap_reps, labels=("ended", "any_failure"), decide=rule,
                          per_step_keys=("replayed_rows", "supplementary_samples"))
    in_seeds = [r for r in ended if r["seed"] in seeds]
    # generated tokens per step as the profiler counted them (every generate call's completions), not the logged
    # hir/generated_tokens, which the code the round's runs come from undercounts under replay_shortfall "resample"
    for arm, runs in (("ended", in_seeds), ("any_failure", [r for r in any_failure if r["seed"] in out["seeds"]])):
        steps = [step["generated_tokens"] for r in runs if r["seed"] in out["seeds"] for step in r["steps"]]
        out["per_step"][arm]["generated_tokens"] = sum(steps) / len(steps) if steps else 0.0
    out["versus_rl_cr"] = one_round.versus_baseline(in_seeds, rl_cr, seeds, out["complete"], bootstrap_reps)
    out["truncation"] = truncation(in_seeds, [r for r in any_failure if r["seed"] in seeds])
    return out


def _markdown(out: dict[str, Any]) -> str:
    lines = one_round.round_markdown(
        out, "Ended-replays round: HiR paper with ended-only replays against any failure (paper family, synthetic "
        "task)", "ended_replays", keys=("ended", "any_failure"), names=("ended-only", "any failure"))
    for arm in ("ended", "any_failure"):
        s = out["per_step"][arm]
        lines.append(f"- {arm}: {s['replayed_rows']:.2f} replayed rows, {s['supplementary_samples']:.2f} "
                     f"supplementary samples and {s['generated_tokens']:.0f} generated tokens per step.")
    lines += ["", "## Held-out completions cut at the length limit, and their length (paired by seed)", "",
              "| step | measure | ended-only | any failure | ended - any [95% CI] |", "|---|---|---|---|---|"]
    names = {"truncated_fraction": "cut at the limit (%)", "mean_completion_tokens": "mean tokens"}
    for step, fields in out["truncation"].items():
        for field, e in fields.items():
            n = len(e["seeds"])
            lines.append(f"| {step} | {names[field]} | {sum(e['ended']) / n:.1f} | {sum(e['any_failure']) / n:.1f} | "
                         f"{e['t']['mean']:+.1f} [{e['t']['low']:+.1f}, {e['t']['high']:+.1f}] |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ns = one_round.round_parser(__doc__, PREREGISTRATION, DECISIVE).parse_args(argv)
    spec, results_dir, ended, any_failure, rl_cr = one_round.round_records(ns.preregistration, ns.decisive, "paper")
    if not ended:
        raise SystemExit(f"no {spec['arm']} record in {results_dir / 'runs'} yet: run the pre-registered command "
                         "first")
    one_round.write_decision(check(ended, any_failure, rl_cr, spec["seeds"], ns.bootstrap_reps), ns.preregistration,
                             ended, results_dir, _markdown)


if __name__ == "__main__":
    main()
