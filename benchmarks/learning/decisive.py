"""The decisive experiment: pre-registered arms, seeds and evaluation size, run and decided by paired intervals.

A pre-registration file (``benchmarks/experiments/decisive-<task>/preregistration.yaml``) fixes, before any of its
runs start, the task, the settings every arm shares (`benchmarks.learning.run.BenchConfig`), the arms of each family,
the seeds, the evaluation size and the decision rule. ``run`` executes it through the learning benchmark's harness
into the pre-registration's folder (each run record names the commit of its pre-registration; finished records,
packed or loose, are reused, so an interrupted run resumes); ``decide`` turns every pre-registration's records into
its entries of ``benchmarks/experiments/decision.json``: one object per (task, family, pair) with the paired
differences, their 95% t-interval and the decision (`benchmarks.learning.paired.decide`), plus the bootstrap over
seeds and prompts and the budget comparisons. The pairs are the pre-registered ones (HiR arm minus RL-CR, HiR arm
minus RL-IR) and, by the same rule but not pre-registered, RL-CR minus RL-IR: what the graded reward alone gives.

Usage (from the repository root)::

    python -m benchmarks.learning.decisive run benchmarks/experiments/decisive-synthetic/preregistration.yaml \\
        --family trl
    python -m benchmarks.learning.decisive run benchmarks/experiments/decisive-synthetic/preregistration.yaml \\
        --family trl --arms hir,rl_cr --seeds 0,1         # a subset, in the pre-registered settings
    python -m benchmarks.learning.decisive run benchmarks/experiments/decisive-synthetic/preregistration.yaml \\
        --family trl --seeds 12,13                        # re-estimation seeds, once the registered ones are in
    python -m benchmarks.learning.decisive decide         # the decisive entries of decision.json, from every record
    python -m benchmarks.learning.decisive constraints    # constraints.json: each pair per constraint kind
    python -m benchmarks.learning.decisive rows benchmarks/experiments/decisive-smollm2/preregistration.yaml \\
        --out rows.jsonl                                  # the real task's training rows, without the model
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.learning import paired, records  # noqa: E402

#: The pre-registrations ``decide`` and ``constraints`` read by default.
DECISIVE_GLOB = "decisive-*/" + records.PREREGISTRATION_FILE
#: The comparisons every family is decided on: (HiR arm, baseline arm), by the arm roles of the pre-registration.
PAIRS = (("hir", "rl_cr"), ("hir", "rl_ir"))
#: Decided by the same rule, not pre-registered: the graded reward's gain over the binary one, without replays.
EXTRA_PAIRS = (("rl_cr", "rl_ir"),)
#: How a decision names the first arm of a pair that is not HiR (the rule's labels say "HiR ahead").
ROLE_LABELS = {"rl_cr": "RL-CR", "rl_ir": "RL-IR"}
#: The `BenchConfig` fields a run of a pre-registration may set itself: how runs are scheduled, not what they do.
SCHEDULING = ("jobs", "threads", "device", "save_every")
#: The name of each family's HiR arm in decision.json.
HIR_ARM_NAMES = {"trl": "hir_default", "paper": "hir_paper"}
#: Sample-size re-estimation clauses written in a pre-registration's prose before the ``reestimation`` key existed,
#: by experiment. decisive-synthetic.yaml (`power:`): "when a family's pre-registered seeds are all in and the
#: observed sd of a pair's differences gives an expected half-width above 1.5, seeds 12, 13, ... (6, 7, ... for the
#: paper family) are added until benchmarks.learning.paired.seeds_for_half_width(observed sd, 1.5) is reached, at
#: most 20 seeds per arm, as the budget allows; the decision is taken on every seed run".
PROSE_REESTIMATION = {"decisive-synthetic": {"target_half_width": 1.5, "max_seeds_per_arm": 20}}


def load_preregistration(path: str | Path) -> dict[str, Any]:
    """The pre-registration as a dict, with its repository-relative ``path``.

    Raises:
        ValueError: a required key is missing, or an arm names an unknown method.
    """
    import yaml

    from benchmarks.learning.run import METHODS

    path = Path(path).resolve()
    spec = yaml.safe_load(path.read_text())
    for key in ("experiment", "task", "bench", "families", "decision_rule"):
        if key not in spec:
            raise ValueError(f"{path}: missing key {key!r}")
    for family, entry in spec["families"].items():
        for role in ("hir", "rl_cr", "rl_ir"):
            method = entry["arms"].get(role)
            if method not in METHODS:
                raise ValueError(f"{path}: family {family!r}, arm {role!r}: unknown method {method!r}")
        if not entry.get("seeds"):
            raise ValueError(f"{path}: family {family!r} has no seeds")
    reestimation = spec.get("reestimation") or PROSE_REESTIMATION.get(spec["experiment"])
    if reestimation is not None:
        missing = {"target_half_width", "max_seeds_per_arm"} - set(reestimation)
        if missing:
            raise ValueError(f"{path}: reestimation: missing {sorted(missing)}")
        spec["reestimation"] = dict(reestimation)
    spec["path"] = str(path.relative_to(REPO_ROOT))
    spec["folder"] = path.parent  # the experiment's folder: its records and report (not the older results_dir key)
    return spec


def bench_config(spec: dict[str, Any], methods: Sequence[str], seeds: Sequence[int], **overrides: Any):
    """The `BenchConfig` of a pre-registration for ``methods`` x ``seeds`` (``overrides``: only how runs are
    scheduled, ``jobs`` / ``threads`` / ``device`` / ``save_every``: never a setting of the runs)."""
    from benchmarks.learning.run import BenchConfig

    unknown = set(overrides) - set(SCHEDULING)
    if unknown:
        raise ValueError(f"only {', '.join(SCHEDULING)} may differ from the pre-registration (got {sorted(unknown)})")
    values = dict(spec["bench"], methods=tuple(methods), seeds=tuple(seeds), preregistration=spec["path"])
    values.update(overrides)
    return BenchConfig(**values)


def task_config(spec: dict[str, Any]):
    if spec["task"] == "synthetic":
        from benchmarks.learning.task import TaskConfig

        return TaskConfig(**(spec.get("task_config") or {}))
    from benchmarks.learning.real_task import RealTaskConfig

    values = dict(spec.get("task_config") or {})
    if "instruction_ids" in values:
        values["instruction_ids"] = tuple(values["instruction_ids"])
    return RealTaskConfig(**values)


def registered_seeds(entry: dict[str, Any], role: str) -> list[int]:
    """The pre-registered seeds of an arm: the family's ``seeds``, or its own list under ``arm_seeds``."""
    return list((entry.get("arm_seeds") or {}).get(role, entry["seeds"]))


def reestimation_seeds(spec: dict[str, Any], family: str) -> list[int]:
    """The seeds a pre-registration's sample-size re-estimation may add to ``family``: the family's seeds continued
    (``max(seeds) + 1, ...``) up to ``max_seeds_per_arm`` seeds in all; none without a ``reestimation`` clause."""
    clause = spec.get("reestimation")
    if not clause:
        return []
    seeds = spec["families"][family]["seeds"]
    return list(range(max(seeds) + 1, max(seeds) + 1 + clause["max_seeds_per_arm"] - len(seeds)))


def run(spec: dict[str, Any], family: str, roles: Sequence[str] | None = None, seeds: Sequence[int] | None = None,
        cache_root: Path | None = None, **scheduling: Any) -> None:
    """Run (or resume) the pre-registered runs of ``family``: ``roles`` (default all arms) x ``seeds`` (default
    the pre-registered ones). A seed must be pre-registered for every arm asked for, or be one of the family's
    re-estimation seeds (`reestimation_seeds`), which run only once every pre-registered seed of those arms has
    its record.

    Raises:
        ValueError: a seed that is neither pre-registered nor a re-estimation seed, or re-estimation seeds asked
            for before the pre-registered runs are all in.
    """
    from benchmarks.learning.run import run_all

    entry = spec["families"][family]
    roles = list(roles or entry["arms"])
    registered = sorted(set.intersection(*(set(registered_seeds(entry, role)) for role in roles)))
    seeds = list(seeds) if seeds is not None else registered
    extra = sorted(set(seeds) - set(registered))
    unknown = sorted(set(extra) - set(reestimation_seeds(spec, family)))
    if unknown:
        raise ValueError(f"seeds {unknown} are neither pre-registered nor re-estimation seeds for {family!r} "
                         f"arms {roles}")
    if extra:
        runs = paired.load_runs(spec["folder"])
        missing = []
        for role in roles:
            own = registered_seeds(entry, role)
            found = {r["seed"] for r in _records_of(runs, entry["arms"][role], spec, own)}
            missing += [(role, seed) for seed in own if seed not in found]
        if missing:
            raise ValueError(f"re-estimation seeds {extra} run only once every pre-registered seed is in; missing "
                             f"(arm, seed): {missing}")
    methods = [entry["arms"][role] for role in roles]
    bench = bench_config(spec, methods, seeds, **scheduling)
    kwargs = {"cache_root": cache_root} if cache_root else {}
    run_all(bench, task_config(spec), spec["folder"], report=False,
            log=lambda s: print(time.strftime("%H:%M:%S"), s, flush=True), **kwargs)


def _records_of(runs: dict[str, list[dict[str, Any]]], method: str, spec: dict[str, Any], seeds: Sequence[int]
                ) -> list[dict[str, Any]]:
    """The records of ``method`` that follow the pre-registration ``spec`` (at its path now or its former one,
    `records.preregistration_paths`), for its registered ``seeds``."""
    paths = records.preregistration_paths(spec)
    return [r for r in runs.get(method, [])
            if (r.get("preregistration") or {}).get("path") in paths and r["seed"] in seeds]


def _pair_records(spec: dict[str, Any], runs: dict[str, list[dict[str, Any]]], family: str, hir_role: str,
                  base_role: str) -> tuple[list[int], list[int], list[dict[str, Any]], list[dict[str, Any]]]:
    """(the seeds registered for both arms, the family's re-estimation seeds, the HiR arm's records, the
    baseline's) of one pair of a family. Re-estimation seeds' records count only once both arms have every
    registered seed."""
    entry = spec["families"][family]
    registered = sorted(set(registered_seeds(entry, hir_role)) & set(registered_seeds(entry, base_role)))
    extra = reestimation_seeds(spec, family)
    hir_runs, base_runs = (_records_of(runs, entry["arms"][role], spec, registered + extra)
                           for role in (hir_role, base_role))
    if not set(registered) <= {r["seed"] for r in hir_runs} & {r["seed"] for r in base_runs}:
        hir_runs, base_runs = ([r for r in rs if r["seed"] in registered] for rs in (hir_runs, base_runs))
    return registered, extra, hir_runs, base_runs


def _common_runs(hir_runs: Sequence[dict[str, Any]], base_runs: Sequence[dict[str, Any]]
                 ) -> tuple[list[int], list[dict[str, Any]], list[dict[str, Any]]]:
    """(the seeds both arms have finished, sorted; each arm's records of those seeds): what a pair compares, so a
    seed one arm has finished and the other has not never makes the two sides differ by that seed."""
    common = sorted({r["seed"] for r in hir_runs} & {r["seed"] for r in base_runs})
    return common, [r for r in hir_runs if r["seed"] in common], [r for r in base_runs if r["seed"] in common]


def reestimation(spec: dict[str, Any], registered_diffs: Sequence[float], added: Sequence[int]) -> dict[str, Any]:
    """The re-estimation of one pair, blinded to the mean: the sd of its differences on the pre-registered seeds,
    the seeds `paired.seeds_for_half_width` asks for at the clause's target half-width, the cap, and the
    re-estimation seeds in the decision."""
    clause = spec["reestimation"]
    sd = paired.t_interval(registered_diffs)["sd"]
    return {"sd_registered_points": sd, "target_half_width": clause["target_half_width"],
            "seeds_needed": paired.seeds_for_half_width(sd, clause["target_half_width"]),
            "max_seeds_per_arm": clause["max_seeds_per_arm"], "seeds_added": list(added)}


def committed_at(path: str) -> str | None:
    """The last commit that changed the repository-relative ``path`` (what a run records as its pre-registration's
    commit, see ``run.preregistration_of``); ``None`` outside a git checkout or for a file never committed."""
    from benchmarks.learning import run

    try:
        return run.last_commit(path) or None
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        return None


def decide_all(specs: Sequence[dict[str, Any]], bootstrap_reps: int = 10_000) -> list[dict[str, Any]]:
    """One decision object per (task, family, pair) of every pre-registration, from the records found so far.

    A pair with no common seed gets ``decision: "not run"``, with one ``"too few seeds"`` (no interval);
    ``complete`` says whether every pre-registered seed is in. Once it is, the rule is applied to every seed run,
    re-estimation seeds included (``reestimation`` says which, and why they were needed). Each object names its
    ``experiment`` and whether its pair is pre-registered (``pair_preregistered``: false for `EXTRA_PAIRS`, whose
    first arm is ``hir_arm`` and whose decision names that arm, "RL-CR ahead"); ``preregistration`` names the path
    and commit the records name (``git show COMMIT:PATH`` reads it).
    """
    out = []
    for spec in specs:
        runs = paired.load_runs(spec["folder"])
        for family, entry in spec["families"].items():
            for hir_role, base_role in PAIRS + EXTRA_PAIRS:
                hir_method, base_method = entry["arms"][hir_role], entry["arms"][base_role]
                registered, extra, hir_runs, base_runs = _pair_records(spec, runs, family, hir_role, base_role)
                common, hir_common, base_common = _common_runs(hir_runs, base_runs)
                commits = sorted({r["preregistration"]["commit"] for r in hir_runs + base_runs})
                named = sorted({r["preregistration"]["path"] for r in hir_runs + base_runs})
                item: dict[str, Any] = {
                    "experiment": spec["experiment"], "pair_preregistered": (hir_role, base_role) in PAIRS,
                    "task": spec["task"], "family": family,
                    "hir_arm": HIR_ARM_NAMES.get(family, hir_role) if hir_role == "hir" else hir_role,
                    "baseline_arm": base_role, "methods": {"hir": hir_method, "baseline": base_method},
                    "seeds": common, "seeds_preregistered": registered, "complete": set(registered) <= set(common),
                    "eval_completions": spec["bench"]["eval_prompts"] * spec["bench"]["eval_samples"],
                    "preregistration": {"path": named[0] if len(named) == 1 else spec["path"],
                                        "commit": commits[0] if len(commits) == 1 else
                                        commits or committed_at(spec["path"])},
                }
                if len(common) < 2:
                    item.update(decision="not run" if not common else "too few seeds", mean_diff_points=None,
                                ci95_low=None, ci95_high=None)
                    out.append(item)
                    continue
                result = paired.compare(hir_common, base_common, bootstrap_reps=bootstrap_reps)
                if hir_role != "hir":
                    result["decision"] = result["decision"].replace("HiR", ROLE_LABELS[hir_role])
                item.update(
                    eval_completions=result["eval_completions"] or item["eval_completions"],
                    mean_diff_points=result["t"]["mean"], ci95_low=result["t"]["low"], ci95_high=result["t"]["high"],
                    # the rule decides once every pre-registered seed is in; before that the label is interim
                    decision=result["decision"] if item["complete"]
                    else f"interim ({len(common)} of {len(registered)} seeds): {result['decision']}",
                    sd_diff_points=result["t"]["sd"],
                    diff_points_per_seed=result["diffs"], hir_final_ila_points=result["final_a"],
                    baseline_final_ila_points=result["final_b"], bootstrap_seeds_prompts=result.get("bootstrap"),
                    auc_ila_vs_tokens_diff=paired.auc_summary(result, "tokens"),
                    auc_ila_vs_seconds_diff=paired.auc_summary(result, "seconds"),
                    tokens_to_reach_baseline_final=paired.tokens_to_match(hir_common, base_common),
                )
                if spec.get("reestimation") and item["complete"]:
                    item["reestimation"] = reestimation(
                        spec, [d for s, d in zip(result["seeds"], result["diffs"]) if s in registered],
                        [s for s in common if s in extra])
                out.append(item)
    return out


def _seeds_text(d: dict[str, Any]) -> str:
    """"n of N" pre-registered seeds, plus the re-estimation seeds in the decision."""
    registered = [s for s in d["seeds"] if s in d["seeds_preregistered"]]
    text = f"{len(registered)} of {len(d['seeds_preregistered'])}"
    added = (d.get("reestimation") or {}).get("seeds_added")
    return f"{text} + {len(added)} re-estimation" if added else text


def all_final(decisions: Sequence[dict[str, Any]]) -> bool:
    """Whether every pair has all its pre-registered seeds and, where a re-estimation asked for more, as many as it
    asked for up to its cap: no record still to come can change a decision."""
    def final(d: dict[str, Any]) -> bool:
        re = d.get("reestimation")
        wanted = min(re["seeds_needed"], re["max_seeds_per_arm"]) if re else 0
        return d["complete"] and len(d["seeds"]) >= wanted
    return bool(decisions) and all(final(d) for d in decisions)


def _markdown(decisions: Sequence[dict[str, Any]]) -> str:
    title = "final decisions" if all_final(decisions) else "decisions so far"
    lines = [f"# Decisive experiment: {title}", "",
             "Rule (pre-registered): 95% t-interval of the mean paired difference in final held-out ILA (points), "
             "HiR arm minus baseline: lower bound > 0 -> HiR ahead; upper bound < +1 -> no useful gain; otherwise "
             "undecided. RL-CR minus RL-IR (not pre-registered) follows the same rule. Generated by "
             "`python -m benchmarks.learning.experiments report` from `decision.json`.", "",
             "| task | family | HiR arm | baseline | seeds (of pre-registered) | completions per eval | mean diff | 95% CI "
             "| bootstrap 95% (seeds x prompts) | decision | AUC vs tokens diff | HiR tokens to baseline's final / "
             "baseline's |", "|" + "---|" * 12]
    for d in decisions:
        if d["mean_diff_points"] is None:
            lines.append(f"| {d['task']} | {d['family']} | {d['hir_arm']} | {d['baseline_arm']} | "
                         f"{_seeds_text(d)} | {d['eval_completions']} | - | - | - "
                         f"| {d['decision']} | - | - |")
            continue
        boot = d.get("bootstrap_seeds_prompts") or {}
        boot_text = f"[{boot['low']:+.2f}, {boot['high']:+.2f}]" if boot else "-"
        auc = d["auc_ila_vs_tokens_diff"]
        ratio = d["tokens_to_reach_baseline_final"]["ratio"]
        lines.append(f"| {d['task']} | {d['family']} | {d['hir_arm']} | {d['baseline_arm']} | "
                     f"{_seeds_text(d)} | {d['eval_completions']} | "
                     f"{d['mean_diff_points']:+.2f} | [{d['ci95_low']:+.2f}, {d['ci95_high']:+.2f}] | {boot_text} | "
                     f"**{d['decision']}** | {auc['mean']:+.2f} [{auc['ci95_low']:+.2f}, {auc['ci95_high']:+.2f}] | "
                     f"{'not reached' if ratio is None else f'{ratio:.2f}'} |")
    notes = [d for d in decisions if d.get("reestimation")]
    if notes:
        lines += ["", "Sample-size re-estimation (pre-registered, blinded to the mean: the sd of the paired differences "
                  "on the pre-registered seeds sets the seeds needed for the target half-width, up to the cap):", "",
                  "| task | family | HiR arm | baseline | sd (points) | target half-width | seeds needed | cap | "
                  "re-estimation seeds in |", "|" + "---|" * 9]
        for d in notes:
            r = d["reestimation"]
            lines.append(f"| {d['task']} | {d['family']} | {d['hir_arm']} | {d['baseline_arm']} | "
                         f"{r['sd_registered_points']:.2f} | {r['target_half_width']} | {r['seeds_needed']} | "
                         f"{r['max_seeds_per_arm']} | {', '.join(map(str, r['seeds_added'])) or 'none yet'} |")
    return "\n".join(lines) + "\n"


def write_decisions(specs: Sequence[dict[str, Any]], path: Path = records.DECISION_FILE) -> list[dict[str, Any]]:
    """Recompute the entries of ``specs`` and put them into ``decision.json`` in place of their old ones; returns
    the new entries."""
    decisions = decide_all(specs)
    records.upsert_decisions([spec["experiment"] for spec in specs], decisions, path)
    return decisions


def report_markdown(experiment: str, decisions: Sequence[dict[str, Any]], constraints: Sequence[dict[str, Any]]
                    ) -> str:
    """The report of one decisive experiment: its decisions (`decision.json`'s entries) and, where measured, each
    pair per constraint kind (its ``constraints.json``)."""
    text = _markdown([d for d in decisions if d.get("experiment") == experiment])
    if constraints:
        text += "\n" + _constraints_markdown(constraints).replace("# Decisive experiment: f", "## F", 1)
    return text.replace("# Decisive experiment: ", f"# {experiment}: ", 1)


def held_out_kinds(spec: dict[str, Any]) -> dict[str, list[str]]:
    """Prompt id -> the kind of each constraint (`paired.constraint_kind`) of a pre-registration's held-out prompts,
    rebuilt from its task settings: the synthetic task's prompts come from its seed alone, the real task's from its
    seed and the MulDimIF requests in ``shared/data`` (`real_task.build_rows`); no model is needed for either.

    Raises:
        FileNotFoundError: the real task's MulDimIF file is not where `real_task.MULDIMIF_TEST` points.
    """
    if spec["task"] == "synthetic":
        from benchmarks.learning.task import build_data

        rows = build_data(task_config(spec), eval_only=True)["eval"]
    else:
        from benchmarks.learning.real_task import build_rows

        rows = build_rows(task_config(spec))["eval"][: spec["bench"]["eval_prompts"]]
    return {row["id"]: [paired.constraint_kind(c) for c in row["constraints"]] for row in rows}


def constraints_all(specs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, family, pair) with at least 2 common seeds: each constraint kind's final pass rates and paired
    difference (`paired.compare_constraints`), and each arm's pass rates over training on those common seeds
    (`paired.constraint_trajectory`), from the records found so far."""
    out = []
    for spec in specs:
        kinds_of = None
        runs = paired.load_runs(spec["folder"])
        for family in spec["families"]:
            for hir_role, base_role in PAIRS:
                _, _, hir_runs, base_runs = _pair_records(spec, runs, family, hir_role, base_role)
                common, hir_common, base_common = _common_runs(hir_runs, base_runs)
                if len(common) < 2:
                    continue
                kinds_of = kinds_of or held_out_kinds(spec)
                out.append({"task": spec["task"], "family": family, "hir_arm": HIR_ARM_NAMES.get(family, hir_role),
                            "baseline_arm": base_role,
                            "kinds": paired.compare_constraints(hir_common, base_common, kinds_of),
                            "trajectory": {"hir": paired.constraint_trajectory(hir_common, kinds_of),
                                           "baseline": paired.constraint_trajectory(base_common, kinds_of)}})
    return out


def _constraints_markdown(reports: Sequence[dict[str, Any]]) -> str:
    lines = ["# Decisive experiment: final held-out pass rate per constraint kind", "",
             "Per pair, the mean over seeds of each arm's pass rate (points) and the paired difference, HiR arm minus "
             "baseline, with its 95% t-interval over seeds. Not part of the decision rule: it says where a "
             "difference in ILA comes from. From `constraints.json` (`python -m benchmarks.learning.decisive "
             "constraints`).", ""]
    for rep in reports:
        lines += [f"### {rep['task']} / {rep['family']}: {rep['hir_arm']} vs {rep['baseline_arm']}", "",
                  "| constraint kind | seeds | HiR arm | baseline | difference | 95% CI |", "|---|---|---|---|---|---|"]
        for kind, k in rep["kinds"].items():
            lines.append(f"| `{kind}` | {len(k['seeds'])} | {k['a']:.1f} | {k['b']:.1f} | {k['t']['mean']:+.1f} | "
                         f"[{k['t']['low']:+.1f}, {k['t']['high']:+.1f}] |")
        lines += ["", *_trajectory_markdown(rep), ""]
    return "\n".join(lines)


def _trajectory_markdown(rep: dict[str, Any]) -> list[str]:
    hir, base = rep["trajectory"]["hir"], rep["trajectory"]["baseline"]
    cols = [(rep["hir_arm"], point) for point in hir] + [(rep["baseline_arm"], point) for point in base]
    lines = ["Over training (mean over the pair's common seeds, points):", "",
             "| constraint kind | " + " | ".join(f"{arm} @{p['step']}" for arm, p in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for kind in rep["kinds"]:
        lines.append(f"| `{kind}` | " + " | ".join(f"{p['kinds'][kind]:.1f}" for _, p in cols) + " |")
    lines.append("| mean completion tokens | " + " | ".join(
        "n/a" if p["mean_completion_tokens"] is None else f"{p['mean_completion_tokens']:.1f}" for _, p in cols) + " |")
    lines += ["", "Replay candidates over training: the held-out completions that failed a constraint but met at least "
              "one (Algorithm 1's candidates, cut off or not), in points of all completions, and the share of them "
              "failing each kind (points of candidates; a replay's q' drops what its completion failed):", "",
              "| | " + " | ".join(f"{arm} @{p['step']}" for arm, p in cols) + " |", "|---|" + "---|" * len(cols),
              "| candidates (of all completions) | " + " | ".join(f"{p['candidates']:.1f}" for _, p in cols) + " |"]
    for kind in rep["kinds"]:
        lines.append(f"| `{kind}` | " + " | ".join(f"{p['candidate_failures'][kind]:.1f}" for _, p in cols) + " |")
    return lines


CONSTRAINTS_FILE = "constraints.json"


def write_constraints(specs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``constraints.json`` in each experiment's folder (`constraints_all`); returns every report."""
    out = []
    for spec in specs:
        reports = constraints_all([spec])
        (spec["folder"] / CONSTRAINTS_FILE).write_text(json.dumps(reports, indent=1) + "\n")
        out += reports
    return out


def write_rows(spec: dict[str, Any], out: Path) -> int:
    """The real task's training rows of a pre-registration (``rl_prompts.jsonl``: exactly what its runs train on),
    built without the model; returns how many."""
    from benchmarks.learning.real_task import build_rows

    built = build_rows(task_config(spec))["rl"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row) + "\n" for row in built))
    return len(built)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run (or resume) a pre-registration's runs")
    run_parser.add_argument("preregistration", type=Path)
    run_parser.add_argument("--family", required=True)
    run_parser.add_argument("--arms", default=None, help="comma-separated arm roles (hir, rl_cr, rl_ir)")
    run_parser.add_argument("--seeds", default=None,
                            help="comma-separated, from the pre-registered seeds or the re-estimation seeds")
    run_parser.add_argument("--jobs", type=int, default=None)
    run_parser.add_argument("--threads", type=int, default=None)
    run_parser.add_argument("--save-every", type=int, default=None,
                            help="a resumable checkpoint every N optimizer steps: an interrupted run resumes from it")
    run_parser.add_argument("--cache-dir", type=Path, default=None)
    decide_parser = sub.add_parser("decide", help="the decisive entries of decision.json from the records so far")
    decide_parser.add_argument("preregistrations", nargs="*", type=Path,
                               help=f"default: every benchmarks/experiments/{DECISIVE_GLOB}")
    constraints_parser = sub.add_parser("constraints", help="write each experiment's constraints.json: each pair's "
                                        "final pass rate per constraint kind")
    constraints_parser.add_argument("preregistrations", nargs="*", type=Path,
                                    help=f"default: every benchmarks/experiments/{DECISIVE_GLOB}")
    rows_parser = sub.add_parser("rows", help="write a pre-registration's training rows (rl_prompts.jsonl) without "
                                 "the model")
    rows_parser.add_argument("preregistration", type=Path)
    rows_parser.add_argument("--out", type=Path, required=True)
    ns = parser.parse_args(argv)
    if ns.command == "rows":
        count = write_rows(load_preregistration(ns.preregistration), ns.out)
        print(json.dumps({"rows": count, "out": str(ns.out)}))
        return
    if ns.command == "run":
        spec = load_preregistration(ns.preregistration)
        if ns.family not in spec["families"]:
            parser.error(f"family {ns.family!r} is not in {ns.preregistration} ({sorted(spec['families'])})")
        if ns.save_every is not None and ns.save_every < 1:
            parser.error(f"--save-every must be at least 1 (got {ns.save_every})")
        scheduling = {k: v for k in SCHEDULING if k != "device" and (v := getattr(ns, k)) is not None}
        try:
            run(spec, ns.family, roles=ns.arms.split(",") if ns.arms else None,
                seeds=[int(s) for s in ns.seeds.split(",")] if ns.seeds else None, cache_root=ns.cache_dir,
                **scheduling)
        except ValueError as error:  # a seed or arm the pre-registration does not allow: one line, no traceback
            parser.error(str(error))
        return
    paths = ns.preregistrations or sorted(records.EXPERIMENTS.glob(DECISIVE_GLOB))
    if ns.command == "constraints":
        for rep in write_constraints([load_preregistration(p) for p in paths]):
            worst = min(rep["kinds"].items(), key=lambda item: item[1]["t"]["mean"])
            print(f"{rep['task']} {rep['family']} {rep['hir_arm']} - {rep['baseline_arm']}: largest deficit "
                  f"{worst[0]} {worst[1]['t']['mean']:+.1f} points")
        return
    decisions = write_decisions([load_preregistration(p) for p in paths])
    for d in decisions:
        ci = "-" if d["ci95_low"] is None else f"[{d['ci95_low']:+.2f}, {d['ci95_high']:+.2f}]"
        print(f"{d['task']:9s} {d['family']:5s} {d['hir_arm']} - {d['baseline_arm']}: seeds {d['seeds']} "
              f"CI {ci} -> {d['decision']}")


if __name__ == "__main__":
    main()
