"""The relabelling round (``benchmarks/experiments/relabel-synthetic/``): does HiR default learn better when q'
keeps a failed counted constraint with the bound the completion achieved (``hindsight_relabel="achieved"``) than
when it drops it (``"drop"``, the paper's rewrite)?

The records of the round (its experiment folder, method ``hir_cla`` with the override) are paired
by seed with the decisive synthetic experiment's ``hir_cla`` ("drop") and ``rl_cr`` records, and the
pre-registered rules are applied to the 95% t-interval of the mean paired difference in final held-out ILA, in
points:

- primary, deciding: "achieved" minus "drop": lower bound > 0 -> "relabelling helps"; upper bound < 0 ->
  "relabelling hurts"; otherwise "unchanged within the noise";
- secondary: "achieved" minus RL-CR, with the decisive experiment's labels (`paired.decide`);
- mechanism: each constraint kind's final pass rate, paired by seed against both (`paired.compare_constraints`),
  and the relabelled constraints per replayed row.

Usage::

    python -m benchmarks.learning.relabel    # its entry of benchmarks/experiments/decision.json, and report.md
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.learning import one_round, paired, records

REPO_ROOT = Path(__file__).resolve().parents[2]
PREREGISTRATION = records.experiment_dir("relabel-synthetic") / records.PREREGISTRATION_FILE
DECISIVE = one_round.DECISIVE

HELPS, HURTS, UNCHANGED = "relabelling helps", "relabelling hurts", "unchanged within the noise"
#: The constraint kind the round was designed around.
FOCUS_KIND = "length_constraints:number_words (less than)"


def rule(ci95_low: float, ci95_high: float) -> str:
    """The pre-registered primary rule on the 95% interval of "achieved" minus "drop", in points."""
    return one_round.sign_rule(ci95_low, ci95_high, HELPS, HURTS, UNCHANGED)


def check(achieved: Sequence[dict[str, Any]], drop: Sequence[dict[str, Any]], rl_cr: Sequence[dict[str, Any]],
          seeds: Sequence[int], kinds_of: dict[str, Sequence[str]], bootstrap_reps: int = 10_000) -> dict[str, Any]:
    """The round's result over the pre-registered ``seeds`` the arms share; ``complete`` says whether all are in.

    Args:
        achieved, drop, rl_cr: run records (``benchmarks.learning.run``) of the three arms.
        seeds: the pre-registered seeds.
        kinds_of: held-out prompt id -> the kind of each of its constraints (`paired.constraint_kind`).

    Raises:
        ValueError: fewer than two seeds shared with "drop" (no interval).
    """
    out = one_round.check(achieved, drop, seeds, bootstrap_reps, labels=("achieved", "drop"), decide=rule,
                          per_step_keys=("replayed_rows", "relabelled_constraints", "supplementary_samples",
                                         "generated_tokens"))
    in_seeds = [r for r in achieved if r["seed"] in seeds]
    out["versus_rl_cr"] = one_round.versus_baseline(in_seeds, rl_cr, seeds, out["complete"], bootstrap_reps)
    out["constraint_kinds"] = {
        "versus_drop": paired.compare_constraints(in_seeds, drop, kinds_of),
        "versus_rl_cr": paired.compare_constraints(in_seeds, rl_cr, kinds_of),
    }
    return out


def _markdown(out: dict[str, Any]) -> str:
    lines = one_round.round_markdown(
        out, "Relabelling round: hindsight_relabel achieved against drop (HiR default, synthetic task)", "relabel",
        keys=("achieved", "drop"), names=("achieved", "drop"))
    for arm in ("achieved", "drop"):
        s = out["per_step"][arm]
        lines.append(f"- {arm}: {s['replayed_rows']:.2f} replayed rows, {s['relabelled_constraints']:.2f} relabelled "
                     f"constraints per replayed row (averaged over steps), {s['supplementary_samples']:.2f} "
                     f"supplementary samples and {s['generated_tokens']:.0f} generated tokens per step.")
    lines += ["", "## Final pass rate per constraint kind (points, paired by seed)", "",
              "| constraint kind | achieved | drop | achieved - drop [95% CI] | RL-CR | achieved - RL-CR [95% CI] |",
              "|---|---|---|---|---|---|"]
    drop_kinds, rl_kinds = out["constraint_kinds"]["versus_drop"], out["constraint_kinds"]["versus_rl_cr"]
    for kind, k in drop_kinds.items():
        r = rl_kinds.get(kind)
        mark = "**" if kind == FOCUS_KIND else ""
        lines.append(f"| {mark}`{kind}`{mark} | {k['a']:.1f} | {k['b']:.1f} | {k['t']['mean']:+.1f} "
                     f"[{k['t']['low']:+.1f}, {k['t']['high']:+.1f}] | "
                     + (f"{r['b']:.1f} | {r['t']['mean']:+.1f} [{r['t']['low']:+.1f}, {r['t']['high']:+.1f}] |"
                        if r else "- | - |"))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks.learning.decisive import held_out_kinds

    ns = one_round.round_parser(__doc__, PREREGISTRATION, DECISIVE).parse_args(argv)
    spec, results_dir, achieved, drop, rl_cr = one_round.round_records(ns.preregistration, ns.decisive, "trl")
    one_round.write_decision(check(achieved, drop, rl_cr, spec["seeds"], held_out_kinds(spec), ns.bootstrap_reps),
                             ns.preregistration, achieved, results_dir, _markdown)


if __name__ == "__main__":
    main()
