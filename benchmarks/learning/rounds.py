"""Helpers of the pre-registered rounds after the decisive experiment (``benchmarks/experiments/<round>/
preregistration.yaml``: ``equal-sampling``, ``written-objective``, ``replay-ratio``, ``binary-hir``), run by
``benchmarks/sweeps/rounds.sh``. Every record is read through `benchmarks.learning.records`: an experiment folder's
packed ``runs.jsonl`` (gzipped once finished: ``runs.jsonl.gz``) and its loose ``runs/*.json``; a round's
pairing-check rerun and its fallback baselines are record folders of their own inside the round's folder
(``pairing-check/``, and the one its ``pairing_check:`` names).

- ``check A B --method M --seed S``: the pairing check every round runs first. B is a rerun, at the round's commit
  and on the round's machine, of a committed decisive record A: the two must be the same run (`same_run`: every
  logged step's loss, rewards, replays and tokens, and every held-out verdict) for the round's new arm to be paired
  with the decisive records. A and B are each a record folder, a ``.jsonl`` file of records or one record's
  ``.json``. Exit 0 when they are the same run, `NOT_THE_SAME` (3, and the differences) when not, 2 when a record
  is missing (1 stays Python's own: a crash is never read as "not the same run"). A round whose pairs reuse records
  of two code paths checks one record of each (`MORE_CHECKS`).
- ``seeds PREREG [--a-runs FOLDER] [--b-runs FOLDER]``: the seeds of the round's new arm to run now: its registered seeds, plus, once they are all in,
  the re-estimation seeds its ``reestimation`` clause asks for (blinded to the mean: the sd of the primary pair's
  paired differences on the registered seeds, `paired.seeds_for_half_width`, capped).
- ``missing FOLDER METHODS SEEDS``: the seeds (comma-separated) of which some method has no record in FOLDER yet.
- `decision` / `write_decisions`: each round's entry of ``benchmarks/experiments/decision.json`` (run by
  ``python -m benchmarks.learning.experiments decide``): its pairing checks, and each registered pair's 95%
  t-interval and label (``rule: sign`` with the round's `SIGN_LABELS`, ``rule: decisive`` with `paired.decide`), over
  the baselines `FALLBACK` and `MORE_CHECKS` name when a check failed; `markdown` its ``report.md``.

Usage (from the repository root)::

    python -m benchmarks.learning.rounds check benchmarks/experiments/decisive-synthetic \\
        benchmarks/experiments/replay-ratio/pairing-check --method hir_cla --seed 0
    python -m benchmarks.learning.rounds seeds benchmarks/experiments/replay-ratio/preregistration.yaml
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.learning import paired, records  # noqa: E402

#: Logged per-step values that must be equal in a pairing check: what the rounds' ``pairing_check:`` lists (loss,
#: rewards, replays, supplementary samples, tokens), and ``reward/cla`` within `CLA_REL_TOL` (it is logged in float32
#: by some commits and float64 by others, so the 7th significant digit may differ). Metrics that later commits added
#: (``hir/padded_rows``, ``hir/replay_ratio_mean``, ...) are absent from the decisive records and are not compared.
SAME_KEYS = ("loss", "reward/ila", "hir/replayed_rows", "hir/supplementary_samples", "hir/generated_tokens",
             "completions/mean_length")
CLA_REL_TOL = 1e-6
#: ``check``'s exit status when the two records are not the same run.
NOT_THE_SAME = 3


def same_run(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The differences between two run records (``benchmarks.learning.run``) that must be one run: the method,
    seed and starting checkpoint, every logged step's `SAME_KEYS` and ``reward/cla``, and every held-out
    evaluation's per-(prompt, sample) verdicts. Wall times and ``hir/seconds_*`` may differ. Empty: the same run."""
    out = [f"{key}: {a.get(key)!r} != {b.get(key)!r}" for key in ("method", "seed", "checkpoint")
           if a.get(key) != b.get(key)]
    logs_a, logs_b = ({e["step"]: e for e in r["logs"]} for r in (a, b))
    if sorted(logs_a) != sorted(logs_b):
        out.append(f"logged steps differ: {len(logs_a)} against {len(logs_b)}")
    for step in sorted(set(logs_a) & set(logs_b)):
        ea, eb = logs_a[step], logs_b[step]
        for key in SAME_KEYS:
            if ea.get(key) != eb.get(key):
                out.append(f"step {step} {key}: {ea.get(key)!r} != {eb.get(key)!r}")
        ca, cb = ea.get("reward/cla"), eb.get("reward/cla")
        if (ca is None) != (cb is None) or (ca is not None and not math.isclose(ca, cb, rel_tol=CLA_REL_TOL)):
            out.append(f"step {step} reward/cla: {ca!r} != {cb!r}")
    evals_a, evals_b = ({e["step"]: e for e in r["evals"]} for r in (a, b))
    if sorted(evals_a) != sorted(evals_b):
        out.append(f"evaluated steps differ: {sorted(evals_a)} against {sorted(evals_b)}")
    for step in sorted(set(evals_a) & set(evals_b)):
        if evals_a[step]["verdicts"] != evals_b[step]["verdicts"]:
            out.append(f"step {step}: held-out verdicts differ (ILA {evals_a[step]['ila']} against "
                       f"{evals_b[step]['ila']})")
    return out


#: The rounds, in the order `benchmarks/sweeps/rounds.sh` runs them: experiment -> the title of its report.
ROUNDS = {
    "equal-sampling": "Equal sampling: HiR default (6 samples + 2 replays) against RL-CR with 6 samples",
    "written-objective": "The written objective: HiR paper with replay_loss_weighting paper against HiR paper as run",
    "replay-ratio": "The replay ratio: HiR default with replay_old_logps hindsight against original",
    "binary-hir": "The binary reward: HiR on ILA (positive replays of ended completions) against RL-IR",
    "sparse-binary": "The sparse binary reward: HiR on ILA against RL-IR from a start at 0.5% held-out ILA",
}
NO_RECORDS = "no records yet"


def load_preregistration(path: str | Path) -> dict[str, Any]:
    """A round's pre-registration as a dict.

    Raises:
        ValueError: a required key is missing.
    """
    import yaml

    spec = yaml.safe_load(Path(path).read_text())
    for key in ("experiment", "bench", "arm", "seeds", "results_dir", "pairs", "decision_rule"):
        if key not in spec:
            raise ValueError(f"{path}: missing key {key!r}")
    return spec


def load_record(where: Path, method: str | None = None, seed: int | None = None) -> dict[str, Any] | None:
    """One run record: the ``.json`` file ``where`` itself, or the record of ``method`` and ``seed`` in the ``.jsonl``
    (or gzipped ``.jsonl.gz``) file or record folder ``where`` (`records.find`: a loose record before a packed one);
    ``None`` when absent.

    Raises:
        ValueError: ``where`` is a ``.jsonl`` file or a folder and ``method`` or ``seed`` is not given.
    """
    where = Path(where)
    if where.suffix == ".json":
        return json.loads(where.read_text()) if where.is_file() else None
    if method is None or seed is None:
        raise ValueError(f"{where}: a records folder or .jsonl file needs --method and --seed")
    if where.name.endswith((".jsonl", ".jsonl.gz")):
        return next((r for r in records.read_jsonl(where) if records.record_key(r) == f"{method}-seed{seed}"), None)
    return records.find(where, method, seed)


def missing_seeds(folder: Path, methods: Sequence[str], seeds: Sequence[int]) -> list[int]:
    """The ``seeds`` of which some of ``methods`` has no record (packed or loose) in the record ``folder``."""
    return [s for s in seeds if any(records.find(folder, m, s) is None for m in methods)]


def start_differences(folder: Path, start: dict[str, Any]) -> list[str]:
    """Why runs from the starting checkpoint ``start`` (``{"task": ..., "sft_final_loss": ...}``, as run.py records
    it) would pair with none of the records in ``folder``: one line per other checkpoint they start from; empty when
    every record that names its checkpoint names ``start``. SFT is not bit-reproducible across CPU kernels (torch's
    and MKL's), so a machine can rebuild the same task into another model; its runs are then no pair of the
    records (`paired.compare` refuses them)."""
    starts = {json.dumps(r["checkpoint"], sort_keys=True) for runs in paired.load_runs(folder).values() for r in runs
              if r.get("checkpoint")}
    mine = json.dumps(start, sort_keys=True)
    return [f"{folder} starts from {other}; this machine's task cache from {mine}" for other in sorted(starts - {mine})]


def start_agreement(found: Sequence[dict[str, Any]], start: dict[str, Any]) -> dict[str, Any]:
    """Whether every record of a round of `OWN_START` starts from its pre-registration's stored ``start``
    (``{"task": ..., "sft_final_loss": ...}``): ``task``, ``sft_final_loss``, ``records`` (how many) and ``others``
    (``<method>-seed<seed>`` of each record naming another checkpoint or none)."""
    want = {"task": start["task"], "sft_final_loss": start["sft_final_loss"]}
    return {**want, "records": len(found),
            "others": sorted(records.record_key(r) for r in found if r.get("checkpoint") != want)}


def _finals(folder: Path, method: str) -> dict[int, float]:
    """Seed -> final held-out ILA (points) of a method's records in the record ``folder``."""
    return {r["seed"]: 100 * paired.final_eval(r)["ila"] for r in paired.load_runs(folder).get(method, [])}


def seeds_to_run(spec: dict[str, Any], repo: Path | None = None) -> list[int]:
    """The new arm's seeds to run now: the registered ``seeds``; once each has a record, those plus the
    re-estimation seeds (``reestimation``: ``target_half_width``, ``max_seeds_per_arm``) that the sd of the primary
    pair's differences on the registered seeds asks for (blinded: the mean is not looked at). The primary pair is
    ``pairs[0]``, whose sides ``a`` and ``b`` each name a ``method`` and the record folder (``runs``, relative to
    ``repo``, by default `REPO_ROOT` as it is at the call) of its records."""
    repo = REPO_ROOT if repo is None else repo
    seeds = list(spec["seeds"])
    clause = spec.get("reestimation")
    if not clause:
        return seeds
    pair = spec["pairs"][0]
    a, b = (_finals(repo / pair[side]["runs"], pair[side]["method"]) for side in ("a", "b"))
    if not set(seeds) <= set(a) & set(b):
        return seeds
    needed = paired.seeds_for_half_width(paired.t_interval([a[s] - b[s] for s in seeds])["sd"],
                                         clause["target_half_width"])
    total = min(max(needed, len(seeds)), clause["max_seeds_per_arm"])
    return seeds + list(range(max(seeds) + 1, max(seeds) + 1 + total - len(seeds)))


def round_records(folder: Path) -> list[dict[str, Any]]:
    """Every record of a round: its own folder's and those of the record folders inside it (pairing check,
    fallback baselines)."""
    return [r for f in records.record_folders(folder) for r in records.load_records(f)]


#: Per round: the method its pairing check reruns (the decisive record of seed 0), and where a failed check sends
#: each pair (its ``pairing_check:``): pair index -> (the side whose records change, the record folder inside the
#: round's folder), or ``None``: the pair is then not reported. A round of `OWN_START` reuses no record and has none.
FALLBACK: dict[str, tuple[str, dict[int, tuple[str, str] | None]]] = {
    "equal-sampling": ("rl_cr", {0: ("a", "hir_cla")}),
    "written-objective": ("hir_paper_rpp", {0: ("b", "baselines"), 1: ("b", "baselines"), 2: None}),
    "replay-ratio": ("hir_cla", {0: ("b", "baseline")}),
    "binary-hir": ("rl_ir", {0: ("b", "baselines"), 1: ("b", "baselines")}),
}
#: Per round whose pairs reuse decisive records of more than one code path: each further pairing check's method
#: (its decisive record of seed 0, rerun into the same ``pairing-check/`` folder) -> where its failure sends the pairs
#: it governs, as in `FALLBACK`.
MORE_CHECKS: dict[str, dict[str, dict[int, tuple[str, str] | None]]] = {
    "binary-hir": {"hir_cla": {2: ("b", "baselines")}},
}
#: The rounds that run every arm themselves from a stored starting checkpoint (their pre-registration's ``start:``,
#: benchmarks/learning/starts): no record of another round is reused, so there is no pairing check; instead every
#: record must name the stored start (`start_agreement`).
OWN_START: tuple[str, ...] = ("sparse-binary",)
#: Each round's labels of a ``rule: sign`` pair (its ``decision_rule:``): lower bound > 0, upper bound < 0, otherwise.
SIGN_LABELS = {
    "equal-sampling": ("two more samples help", "they hurt", "unchanged within the noise"),
    "written-objective": ("the written objective helps", "the written objective hurts", "unchanged within the noise"),
    "replay-ratio": ("the hindsight ratio helps", "the hindsight ratio hurts", "unchanged within the noise"),
    "binary-hir": ("the binary reward is ahead", "the binary reward is behind", "unchanged within the noise"),
}


#: What a round found, in one clause per decision label (the round's ``default_rule:``), once it is complete; a round
#: that is not complete adds nothing. Every complete round's clause stands in benchmarks/README.md ("The rounds after
#: the decisive experiment"); those of `README_ROUNDS` also in README's "Does it work?" prose.
README_CLAUSES: dict[str, dict[str, str]] = {
    "equal-sampling": {
        "HiR ahead": "at equal sampling the replays save samples (HiR at 6 samples + 2 replays beats RL-CR at 6)",
        "no useful gain": "at equal sampling the replays do not save samples (HiR at 6 samples + 2 replays is not "
                          "ahead of RL-CR at 6)",
        "undecided": "whether the replays save samples at equal sampling (HiR at 6 + 2 against RL-CR at 6) is not "
                     "established",
    },
    "written-objective": {  # primary A; the paper recipes switch to "paper" iff it helps
        "the written objective helps": "the paper's written loss weighting (replay_loss_weighting: paper) learns "
                                       "better than the released code's token mean, so the paper recipes use it",
        "the written objective hurts": "the paper's written loss weighting (replay_loss_weighting: paper) learns "
                                       "worse than the released code's token mean, which the paper recipes keep",
        "unchanged within the noise": "the paper's written loss weighting (replay_loss_weighting: paper) is level "
                                      "with the released code's token mean within the noise, which the paper "
                                      "recipes keep",
    },
    "replay-ratio": {  # the primary pair; HiRConfig's default becomes "hindsight" iff it helps
        "the hindsight ratio helps": "a replay ratio of 1 (replay_old_logps: hindsight) helps HiR default, so it is "
                                     "the default",
        "the hindsight ratio hurts": "a replay ratio of 1 (replay_old_logps: hindsight) hurts HiR default, which "
                                     "keeps the paper's ratio",
        "unchanged within the noise": "a replay ratio of 1 (replay_old_logps: hindsight) leaves HiR default level "
                                      "within the noise, which keeps the paper's ratio",
    },
    "binary-hir": {  # the primary pair, HiR on ILA minus RL-IR; word for word its pre-registration's default_rule
        "HiR ahead": "with the binary reward alone the replays make HiR learn: HiR on ILA (positive replays of ended "
                     "completions) beats RL-IR on the synthetic task",
        "no useful gain": "with the binary reward alone the replays do not make HiR learn better: HiR on ILA (positive "
                          "replays of ended completions) gains less than a point over RL-IR on the synthetic task, if "
                          "anything",
        "undecided": "whether the replays make the binary reward learn (HiR on ILA, positive replays of ended "
                     "completions, against RL-IR on the synthetic task) is not established",
    },
    "sparse-binary": {  # the primary pair, HiR on ILA minus RL-IR; word for word its readme_sentences
        "HiR ahead": "where the binary reward is sparse (starting held-out ILA 0.5%), the replays make it learn: HiR "
                     "on ILA (positive replays of ended completions) beats RL-IR on the sparse synthetic task",
        "no useful gain": "even where the binary reward is sparse (starting held-out ILA 0.5%), the replays do not "
                          "make it learn better: HiR on ILA gains less than a point over RL-IR on the sparse "
                          "synthetic task, if anything",
        "undecided": "whether the replays make a sparse binary reward learn (HiR on ILA against RL-IR on the sparse "
                     "synthetic task, starting held-out ILA 0.5%) is not established",
    },
}


#: The rounds whose clause README's "Does it work?" prose carries, in its one slot (its second sentence: "On the
#: paper's central claim, CLAUSE; and CLAUSE."), once complete: the rounds about the paper's central claim, whose
#: pre-registrations promise README their clause word for word. README's prose has a fixed size (at most 3
#: sentences); the other rounds' clauses stand in benchmarks/README.md only.
README_ROUNDS: tuple[str, ...] = ("binary-hir", "sparse-binary")


def readme_clauses(decisions: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> list[str]:
    """The `README_CLAUSES` of the complete rounds among ``decisions`` (entries of ``decision.json``), of the rounds
    ``names`` only when given (`README_ROUNDS`: README's; ``None``: every round's, benchmarks/README.md's).

    Raises:
        KeyError: a complete round's decision has no clause.
    """
    return [README_CLAUSES[d["experiment"]][d["decision"]] for d in decisions
            if d.get("experiment") in README_CLAUSES and d.get("status") == "complete"
            and (names is None or d["experiment"] in names)]


def pairing_check(name: str, method: str | None = None) -> dict[str, Any]:
    """The round's pairing check of ``method`` (by default its `FALLBACK` one) from its records: ``method``,
    ``same_run`` (``None`` while the rerun has no record), the first `same_run` ``differences`` and the rerun's
    `arm_cost` (``cost``, once it has a record)."""
    method = FALLBACK[name][0] if method is None else method
    rerun = records.find(records.experiment_dir(name) / "pairing-check", method, 0)
    committed = records.find(records.experiment_dir("decisive-synthetic"), method, 0)
    if rerun is None or committed is None:
        return {"method": method, "same_run": None, "differences": []}
    differences = same_run(committed, rerun)
    return {"method": method, "same_run": not differences, "differences": differences[:5], "cost": arm_cost([rerun])}


def _pair_result(name: str, pair: dict[str, Any], seeds: Sequence[int], complete: bool,
                 bootstrap_reps: int) -> dict[str, Any]:
    """One pair's interval and label over ``seeds`` (`one_round.check`), marked interim unless ``complete``."""
    from benchmarks.learning import one_round

    if pair["rule"] == "sign":
        better, worse, unchanged = SIGN_LABELS[name]

        def rule(low: float, high: float) -> str:
            return one_round.sign_rule(low, high, better, worse, unchanged)
    else:
        rule = paired.decide
    a, b = (paired.load_runs(REPO_ROOT / pair[side]["runs"]).get(pair[side]["method"], []) for side in ("a", "b"))
    head = {"name": pair["name"], "rule": pair["rule"], "a": pair["a"], "b": pair["b"]}
    try:
        out = one_round.check(a, b, seeds, bootstrap_reps, labels=("a", "b"), decide=rule,
                              areas=("tokens", "seconds"))
    except ValueError as err:  # fewer than two common seeds (no interval yet), or runs that are no pair
        common = sorted({r["seed"] for r in a} & {r["seed"] for r in b} & set(seeds))
        said = "not run" if not common else "too few seeds" if len(common) < 2 else f"no pair: {err}"
        return {**head, "seeds": common, "decision": said,
                "mean_diff_points": None, "ci95_low": None, "ci95_high": None}
    if out["complete"] and not complete:  # this pair's seeds are in, the primary pair's are not yet
        out["decision"] = f"interim (the primary pair is not complete): {out['decision']}"
    chosen = [[r for r in side if r["seed"] in set(out["seeds"])] for side in (a, b)]
    return {**head, **out, "cost": {side: arm_cost(runs) for side, runs in zip(("a", "b"), chosen)}}


#: The replay ratio's mechanism, per logged step (the replay-ratio pre-registration reports it beside its decision):
#: the replays' mean ratio pi(y|q')/pi_old and clipped share, and TRL's clipped share of all tokens.
MECHANISM_KEYS = ("hir/replay_ratio_mean", "hir/replay_clip_ratio", "clip_ratio/region_mean")


def arm_cost(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What an arm's runs cost, reported beside a decision: ``runs``, ``wall_seconds`` (median, min, max of each
    run's whole wall time, its held-out evaluations included), ``generated_tokens_per_step`` (mean over every
    optimizer step of every run, from the step profiler: sampled completions, supplementary samples included),
    ``held_out_cut_percent`` (held-out step -> mean over runs of the share of held-out completions cut at
    ``max_completion_length``, percent, for the steps after 0), ``mechanism`` (each of `MECHANISM_KEYS` -> its mean
    over every logged step of every run that logs it; absent from records older than the metric),
    ``steps_with_success_fraction`` (the share of logged optimizer steps whose ``reward/ila``, the sampled
    completions' mean binary reward, is above 0: the steps where a binary reward without replays has any signal) and
    the ``machines`` (processor, cores, torch's CPU capability, code commit) they ran on."""
    import statistics

    walls = sorted(r["wall_seconds"] for r in runs if r.get("wall_seconds") is not None)
    tokens = [s["generated_tokens"] for r in runs for s in r.get("steps", []) if "generated_tokens" in s]
    machines = sorted({f"{m.get('processor')}, {m.get('cores')} cores, {m.get('cpu_capability')}, code "
                       f"{str(m.get('code_commit'))[:7]}" for r in runs if (m := r.get("machine"))})
    cut: dict[int, list[float]] = {}
    for r in runs:
        for e in r.get("evals", []):
            if e["step"] > 0 and e.get("truncated_fraction") is not None:
                cut.setdefault(e["step"], []).append(100 * e["truncated_fraction"])
    logged = {key: [e[key] for r in runs for e in r.get("logs", []) if e.get(key) is not None]
              for key in MECHANISM_KEYS}
    ila = [e["reward/ila"] for r in runs for e in r.get("logs", []) if e.get("reward/ila") is not None]
    return {"runs": len(runs), "mechanism": {key: statistics.fmean(v) for key, v in logged.items() if v},
            "steps_with_success_fraction": sum(v > 0 for v in ila) / len(ila) if ila else None,
            "held_out_cut_percent": {str(step): statistics.fmean(v) for step, v in sorted(cut.items())},
            "wall_seconds": {"median": statistics.median(walls), "min": walls[0], "max": walls[-1]} if walls
            else None,
            "generated_tokens_per_step": statistics.fmean(tokens) if tokens else None, "machines": machines}


def decision(name: str, bootstrap_reps: int = 10_000) -> dict[str, Any]:
    """The round ``name``'s entry of ``decision.json``, from its pre-registration and records.

    While it has none: ``status`` and ``decision`` "no records yet", the registered arm, override (``{}`` for a
    round whose arm is a method of its own), seeds and pairs, and the pre-registration's path and commit (the last
    commit that changed it, what its runs will record). Then: the pairing check (`pairing_check`; when it failed,
    the pairs `FALLBACK` names read the round's own baseline records) and, for a round of `MORE_CHECKS`, each further
    one (``more_pairing_checks``, the same way), every pair's 95% t-interval and label over the seeds to run
    (`seeds_to_run`), ``status`` "interim" until each of those seeds has its record, then "complete"; the first
    pair's figures and label at the top (``decision``), each pair's in ``pairs``; the path and commit the round's
    records name.
    """
    from benchmarks.learning.decisive import committed_at

    folder = records.experiment_dir(name)
    path = folder / records.PREREGISTRATION_FILE
    spec = load_preregistration(path)
    found = round_records(folder)
    relative = str(path.relative_to(REPO_ROOT))
    clause = spec.get("reestimation") or {}
    entry: dict[str, Any] = {
        "experiment": name, "status": NO_RECORDS, "decision": NO_RECORDS, "complete": False,
        "arm": spec["arm"], "override": json.loads(spec["bench"].get("extra") or "{}"), "seeds": [],
        "seeds_preregistered": list(spec["seeds"]),
        **({"max_seeds_per_arm": clause["max_seeds_per_arm"]} if clause else {}),
        "pairs": [{"name": p["name"], "a": p["a"], "b": p["b"], "rule": p["rule"]} for p in spec["pairs"]],
        "mean_diff_points": None, "ci95_low": None, "ci95_high": None,
        "preregistration": {"path": relative, "commit": committed_at(relative)},
    }
    if not found:
        return entry
    own_start = name in OWN_START
    check = None if own_start else pairing_check(name)
    more = [pairing_check(name, method) for method in MORE_CHECKS.get(name, {})]
    pairs = [dict(p, a=dict(p["a"]), b=dict(p["b"])) for p in spec["pairs"]]
    fallbacks = [*([] if own_start else [(check, FALLBACK[name][1])]),
                 *((c, MORE_CHECKS[name][c["method"]]) for c in more)]
    for done, fallback in fallbacks:
        if done["same_run"] is not False:
            continue
        for index, where in fallback.items():
            if where is None:
                pairs[index] = None
            elif pairs[index] is not None:
                pairs[index][where[0]]["runs"] = str((folder / where[1]).relative_to(REPO_ROOT))
    pairs = [p for p in pairs if p is not None]
    seeds = seeds_to_run({**spec, "pairs": pairs})
    a, b = (set(_finals(REPO_ROOT / pairs[0][side]["runs"], pairs[0][side]["method"])) for side in ("a", "b"))
    complete = set(seeds) <= a & b
    results = [_pair_result(name, p, seeds, complete, bootstrap_reps) for p in pairs]
    commits = sorted({r["preregistration"]["commit"] for r in found if r.get("preregistration")})
    top = results[0]
    failed = [done["method"] for done, _ in fallbacks if done["same_run"] is False]
    if own_start:
        baseline = "run in this round, from the stored start"
    elif not failed:
        baseline = "the decisive records"
    elif not more:
        baseline = "re-run at the round's commit (the pairing check failed)"
    else:
        baseline = (f"re-run at the round's commit for the pairs that rest on {' and '.join(failed)} (its pairing "
                    "check failed), the decisive records otherwise")
    entry.update(status="complete" if complete else "interim", decision=top["decision"], complete=complete,
                 seeds=top["seeds"], seeds_to_run=seeds, pairing_check=check,
                 **({"more_pairing_checks": more} if more else {}), baseline=baseline,
                 **({"start": start_agreement(found, spec["start"])} if own_start else {}),
                 mean_diff_points=top["mean_diff_points"], ci95_low=top["ci95_low"], ci95_high=top["ci95_high"],
                 pairs=results)
    if commits:
        entry["preregistration"]["commit"] = commits[0] if len(commits) == 1 else commits
    return entry


def write_decisions(names: Sequence[str] = tuple(ROUNDS)) -> list[dict[str, Any]]:
    """Put each round's `decision` into ``decision.json`` in place of its old entry (`records.upsert_decisions`)."""
    entries = [decision(name) for name in names]
    for entry in entries:
        records.upsert_decisions([entry["experiment"]], [entry])
    return entries


def _seeds_text(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(
        map(str, seeds))


def _cost_row(label: str, cost: dict[str, Any]) -> str:
    """One row of a report's arm table from an `arm_cost`."""
    w = cost["wall_seconds"]
    wall = f"{w['median']:.0f}" if cost["runs"] == 1 else f"{w['median']:.0f} [{w['min']:.0f}, {w['max']:.0f}]"
    tokens = "-" if cost["generated_tokens_per_step"] is None else f"{cost['generated_tokens_per_step']:.0f}"
    cut = ", ".join(f"{step}: {v:.1f}" for step, v in cost.get("held_out_cut_percent", {}).items()) or "-"
    mech = ", ".join("-" if (v := cost.get("mechanism", {}).get(k)) is None else f"{v:.3f}" for k in MECHANISM_KEYS)
    success = "-" if (v := cost.get("steps_with_success_fraction")) is None else f"{100 * v:.1f}"
    return (f"| {label} | {cost['runs']} | {wall} | {tokens} | {success} | {cut} | {mech} | "
            f"{'; '.join(cost['machines']) or 'not recorded'} |")


def markdown(entry: dict[str, Any]) -> str:
    """A round's ``report.md`` from its `decision` entry."""
    prereg, seeds = entry["preregistration"], entry["seeds_preregistered"]
    cap = f", up to {entry['max_seeds_per_arm']} after the blinded re-estimation" if "max_seeds_per_arm" in entry \
        else ""
    lines = [f"# {ROUNDS.get(entry['experiment'], entry['experiment'])} (synthetic task)", "",
             f"Pre-registration: `{prereg['path']}` (commit {prereg['commit']}). Generated by "
             "`python -m benchmarks.learning.experiments report`.", ""]
    if entry["status"] == NO_RECORDS:
        override = f"with `{json.dumps(entry['override'])}`" if entry["override"] else "(no override)"
        checks = ("every arm runs in the round itself, from the stored start" if entry["experiment"] in OWN_START
                  else "its pairing checks come first" if entry["experiment"] in MORE_CHECKS
                  else "its pairing check comes first")
        lines += [f"**No records yet**: the round is pre-registered and not run. New arm: `{entry['arm']}` "
                  f"{override}, seeds {_seeds_text(seeds)}{cap}; {checks}. Run and resume: "
                  + ("its pre-registration's `command:`" if entry["experiment"] in OWN_START
                     else "`bash benchmarks/sweeps/rounds.sh`")
                  + " (benchmarks/README.md, \"The rounds after the decisive experiment\").", "",
                  "| pair (a - b, final held-out ILA, points) | a | b | rule |", "|---|---|---|---|"]
        for p in entry["pairs"]:
            lines.append(f"| {p['name']} | `{p['a']['method']}` in `{p['a']['runs']}` | `{p['b']['method']}` in "
                         f"`{p['b']['runs']}` | {p['rule']} |")
        return "\n".join(lines) + "\n"
    check, more = entry["pairing_check"], entry.get("more_pairing_checks", [])
    said = {True: "the same run", False: "not the same run", None: "not run yet"}
    if check is None:
        start = entry["start"]
        others = ", ".join(start["others"]) or "none"
        checked = (f"No pairing check: every arm runs in this round from the stored start `{start['task']}` (SFT "
                   f"loss {start['sft_final_loss']!r}); records naming another start: {others}")
    elif not more:
        checked = (f"Pairing check ({check['method']} seed 0 rerun against the decisive record): "
                   f"{said[check['same_run']]}")
    else:
        checked = "Pairing checks (seed 0 rerun against the decisive record): " + "; ".join(
            f"{c['method']}: {said[c['same_run']]}" for c in (check, *more))
    lines += [f"**{entry['status'].capitalize()}.** {checked}; baselines: {entry['baseline']}. Seeds to run: "
              f"{_seeds_text(entry['seeds_to_run'])}.", "",
              "| pair (a - b, final held-out ILA, points) | seeds | mean | 95% t-interval | decision |",
              "|---|---|---|---|---|"]
    for p in entry["pairs"]:
        interval = ("- | -" if p["mean_diff_points"] is None else
                    f"{p['mean_diff_points']:+.2f} | [{p['ci95_low']:+.2f}, {p['ci95_high']:+.2f}]")
        lines.append(f"| {p['name']} | {len(p['seeds'])} | {interval} | {p['decision']} |")
    measured = [p for p in entry["pairs"] if p.get("cost")]
    if measured:
        lines += ["", "Beside the decision, deciding nothing (each pair over its common seeds): the bootstrap over "
                  "seeds and held-out prompts, the paired difference in normalized area under held-out ILA against "
                  "generated tokens and against training seconds (points; seconds depend on the load the runs "
                  "shared), and each arm's cost.", "",
                  "| pair | bootstrap 95% | area vs tokens | area vs seconds |", "|---|---|---|---|"]
        for p in measured:
            boot = p.get("bootstrap_seeds_prompts") or {}
            areas = [p[k] for k in ("auc_ila_vs_tokens_diff", "auc_ila_vs_seconds_diff")]
            cells = [f"{x['mean']:+.2f} [{x['ci95_low']:+.2f}, {x['ci95_high']:+.2f}]" for x in areas]
            lines.append(f"| {p['name']} | [{boot['low']:+.2f}, {boot['high']:+.2f}] | {cells[0]} | {cells[1]} |"
                         if boot else f"| {p['name']} | - | {cells[0]} | {cells[1]} |")
        lines += ["", "| arm (method in folder) | runs | wall seconds per run, median [min, max] | generated tokens "
                  "per step | steps with a sampled completion of reward 1 (%) | held-out completions cut at the "
                  "limit, by step (%) | replay ratio mean, replay clip ratio, TRL clip ratio (mean per step) | "
                  "machine |", "|---|---|---|---|---|---|---|---|"]
        seen = set()
        for p in measured:
            for side in ("a", "b"):
                arm, cost = p[side], p["cost"][side]
                key = (arm["method"], arm["runs"])
                if key in seen or not cost["wall_seconds"]:
                    continue
                seen.add(key)
                lines.append(_cost_row(f"`{arm['method']}` in `{arm['runs']}`", cost))
        for done in ([] if check is None else [check]) + list(more):
            rerun = done.get("cost")
            if rerun and rerun["wall_seconds"]:
                lines.append(_cost_row(f"`{done['method']}` seed 0, the pairing-check rerun", rerun))
    return "\n".join(lines) + "\n"


def _checkpoint_of(task_dir: Path) -> dict[str, Any]:
    meta = json.loads((task_dir / "meta.json").read_text())
    return {"task": task_dir.name, "sft_final_loss": (meta["sft"] or {}).get("final_loss")}


def _machine() -> dict[str, Any]:
    """The processor, torch and kernel settings a start was built with (a subset of `run.machine_info`)."""
    from benchmarks.learning.run import machine_info

    info = machine_info()
    return {k: info[k] for k in ("processor", "cores", "torch", "cpu_capability", "numerics_env")}


def _start_check(folder: Path, cache: Path | None, starts_dir: Path | None, rebuild: bool) -> int:
    """`start-check`: this machine's task cache (unpacked from the stored start where one is stored, else built) must
    be the starting checkpoint of every record in ``folder``; a cache built here that is not the stored start is
    named. With ``rebuild``, the task is also rebuilt in a scratch cache and compared with the stored start file by
    file (the rebuild is reported, never used)."""
    import tempfile

    from benchmarks.learning import starts
    from benchmarks.learning.task import TaskConfig, ensure_sft_model

    cfg = TaskConfig()
    entry = starts.stored_entry(cfg.key(), starts_dir)
    task_dir = ensure_sft_model(cfg, root=cache, threads=1, starts_dir=starts_dir)
    rc = 0
    if entry is None:
        print(f"task-{cfg.key()}: no stored start (benchmarks/learning/starts); this cache was built on this machine")
    else:
        local = starts.differences(entry["files"], starts.manifest(task_dir))
        for line in local:
            print(f"{task_dir}/{line}")
        if local:
            print(f"{task_dir} is not the stored start (built here before it was stored?): remove it, and the next "
                  "run unpacks the stored one")
            rc = NOT_THE_SAME
        else:
            print(f"task-{cfg.key()}: the stored start (sha256 {entry['sha256'][:12]}, content "
                  f"{entry['fingerprint'][:12]})")
    differences = start_differences(folder, _checkpoint_of(task_dir))
    for line in differences:
        print(line)
    print("the same starting checkpoint" if not differences else "another starting checkpoint: no run here pairs")
    rc = rc or (NOT_THE_SAME if differences else 0)
    if rebuild:
        with tempfile.TemporaryDirectory(prefix="hir-rebuild-") as scratch:
            rebuilt = ensure_sft_model(cfg, root=Path(scratch), threads=1, starts_dir=Path(scratch) / "no-starts")
            print(f"rebuilt here: SFT loss {_checkpoint_of(rebuilt)['sft_final_loss']!r} on {_machine()}")
            if entry is None:
                print("nothing stored to compare the rebuild with")
            else:
                lines = starts.differences(entry["files"], starts.manifest(rebuilt))
                for line in lines:
                    print(f"rebuild: {line}")
                print("the rebuild equals the stored start, file for file" if not lines else
                      f"the rebuild differs from the stored start (stored SFT loss {entry['sft_final_loss']!r}, "
                      f"built on {entry.get('machine')}): runs start from the stored one")
                rc = rc or (NOT_THE_SAME if lines else 0)
    return rc


def _store_start(folder: Path, cache: Path | None, starts_dir: Path | None) -> int:
    """`store-start`: store this machine's task cache once every record in ``folder`` starts from it."""
    from benchmarks.learning import starts
    from benchmarks.learning.task import TaskConfig, ensure_sft_model

    cfg = TaskConfig()
    task_dir = ensure_sft_model(cfg, root=cache, threads=1, starts_dir=starts_dir)
    checkpoint = _checkpoint_of(task_dir)
    differences = start_differences(folder, checkpoint)
    for line in differences:
        print(line)
    if differences:
        print("not stored: this cache is not the checkpoint the records start from")
        return NOT_THE_SAME
    entry = starts.store(task_dir, cfg.key(), checkpoint["sft_final_loss"], starts_dir, machine=_machine())
    print(f"stored {task_dir} as {entry['archive']} ({entry['bytes']} bytes, {len(entry['files'])} files, content "
          f"{entry['fingerprint'][:12]})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="exit 0 when two run records are the same run")
    check.add_argument("committed", type=Path, help="record folder, .jsonl(.gz) file or .json record")
    check.add_argument("rerun", type=Path, help="record folder, .jsonl(.gz) file or .json record")
    check.add_argument("--method", default=None, help="the method of the records (for a folder or .jsonl)")
    check.add_argument("--seed", type=int, default=None, help="the seed of the records (for a folder or .jsonl)")
    seeds = sub.add_parser("seeds", help="print the new arm's seeds to run now, comma-separated")
    seeds.add_argument("preregistration", type=Path)
    seeds.add_argument("--a-runs", default=None, help="the primary pair's new-arm record folder instead of "
                       "pairs[0].a.runs (where the sweep writes the records)")
    seeds.add_argument("--b-runs", default=None, help="the primary pair's baseline record folder instead of "
                       "pairs[0].b.runs (the round's own baseline, when its pairing check failed)")
    missing = sub.add_parser("missing", help="print the seeds (comma-separated) some method has no record of")
    missing.add_argument("folder", type=Path, help="a record folder (runs.jsonl and runs/)")
    missing.add_argument("methods", help="comma-separated methods")
    missing.add_argument("seeds", help="comma-separated seeds")
    start = sub.add_parser("start-check", help="exit 0 when this machine's task cache (built if absent) holds the "
                           "starting checkpoint of every record in a folder")
    start.add_argument("folder", type=Path, help="a record folder (runs.jsonl and runs/), e.g. the decisive records")
    start.add_argument("--cache-dir", type=Path, default=None, help="the task cache (default benchmarks/.cache)")
    start.add_argument("--starts-dir", type=Path, default=None,
                       help="the stored starts (default benchmarks/learning/starts)")
    start.add_argument("--rebuild", action="store_true", help="also rebuild the task here (SFT, about 15 CPU-minutes "
                       "at the registered size) and report whether the rebuild equals the stored start")
    store = sub.add_parser("store-start", help="store this machine's task cache as the synthetic task's starting "
                           "checkpoint, once it is the one every record in a folder starts from")
    store.add_argument("folder", type=Path, help="a record folder whose records must all start from this checkpoint")
    store.add_argument("--cache-dir", type=Path, default=None, help="the task cache (default benchmarks/.cache)")
    store.add_argument("--starts-dir", type=Path, default=None,
                       help="where the start is stored (default benchmarks/learning/starts)")
    ns = parser.parse_args(argv)
    if ns.command == "start-check":
        return _start_check(ns.folder, ns.cache_dir, ns.starts_dir, ns.rebuild)
    if ns.command == "store-start":
        return _store_start(ns.folder, ns.cache_dir, ns.starts_dir)
    if ns.command == "check":
        try:
            pair = [load_record(p, ns.method, ns.seed) for p in (ns.committed, ns.rerun)]
        except ValueError as error:
            parser.error(str(error))
        for path, record in zip((ns.committed, ns.rerun), pair):
            if record is None:
                print(f"{path}: no record of {ns.method} seed {ns.seed}; run it first", file=sys.stderr)
                return 2
        differences = same_run(*pair)
        for line in differences[:20]:
            print(line)
        print("the same run" if not differences else f"{len(differences)} differences: not the same run")
        return 0 if not differences else NOT_THE_SAME
    if ns.command == "missing":
        try:
            wanted = [int(s) for s in ns.seeds.split(",") if s]
        except ValueError:
            parser.error(f"seeds {ns.seeds!r}: give comma-separated integers, for example 0,1,2")
        print(",".join(map(str, missing_seeds(ns.folder, ns.methods.split(","), wanted))))
        return 0
    spec = load_preregistration(ns.preregistration)
    for side, folder in (("a", ns.a_runs), ("b", ns.b_runs)):
        if folder:
            spec["pairs"][0][side]["runs"] = folder
    print(",".join(map(str, seeds_to_run(spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
