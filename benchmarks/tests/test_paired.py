"""Paired comparisons and the decision rule of the decisive experiment (benchmarks/learning/paired.py, decisive.py)."""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path

import pytest

from benchmarks.learning import paired, records

pytest.importorskip("scipy")


def PREREG(name: str) -> Path:  # noqa: N802
    """The committed pre-registration of the experiment ``name``."""
    return records.experiment_dir(name) / records.PREREGISTRATION_FILE


def _record(method: str, seed: int, final_passed: list[str], rows: list[str], samples: int,
            tokens_per_step: int = 100, start_ila: float = 0.05) -> dict:
    """A run record with two evaluations (step 0 and step 2) and two steps."""
    final_ila = sum("0" not in v for v in final_passed) / len(final_passed)
    return {
        "method": method, "seed": seed,
        "evals": [{"step": 0, "ila": start_ila},
                  {"step": 2, "ila": final_ila, "verdicts": {"rows": rows, "samples": samples, "passed": final_passed}}],
        "steps": [{"step": 1, "generated_tokens": tokens_per_step, "step_seconds": 1.0},
                  {"step": 2, "generated_tokens": tokens_per_step, "step_seconds": 1.0}],
    }


def test_decision_rule_boundaries():
    assert paired.decide(0.01, 3.0) == paired.HIR_AHEAD
    assert paired.decide(0.0, 3.0) == paired.UNDECIDED          # a lower bound of exactly 0 is not > 0
    assert paired.decide(-2.0, 0.99) == paired.NO_USEFUL_GAIN
    assert paired.decide(-2.0, 1.0) == paired.UNDECIDED
    assert paired.decide(-5.0, -1.0) == paired.NO_USEFUL_GAIN   # HiR behind: its gain is not useful either


def test_t_interval_matches_the_textbook_formula():
    values = [-2.3, 3.1, 3.9, -2.3, 5.1]
    t = paired.t_interval(values)
    # t(0.975, 4) = 2.776445
    mean = sum(values) / 5
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    assert t["mean"] == pytest.approx(mean)
    assert t["half_width"] == pytest.approx(2.776445 * sd / math.sqrt(5), rel=1e-5)
    assert (t["low"], t["high"]) == pytest.approx((mean - t["half_width"], mean + t["half_width"]))
    assert math.isinf(paired.t_interval([1.0])["half_width"])


def test_seeds_for_half_width_is_the_smallest_sufficient_n():
    n = paired.seeds_for_half_width(2.31, 1.5)
    assert paired.expected_half_width(2.31, n) <= 1.5 < paired.expected_half_width(2.31, n - 1)


def test_per_prompt_ila_reads_row_major_verdicts():
    evaluation = {"verdicts": {"rows": ["a", "b"], "samples": 2, "passed": ["11", "10", "01", "00"]}}
    assert paired.per_prompt_ila(evaluation) == (["a", "b"], [0.5, 0.0])
    with pytest.raises(ValueError, match="3 verdict strings"):
        paired.per_prompt_ila({"verdicts": {"rows": ["a", "b"], "samples": 2, "passed": ["1", "1", "1"]}})


def test_normalized_auc_and_budget_to_reach():
    assert paired.normalized_auc([0, 10, 20], [5, 5, 5], 20) == pytest.approx(5)
    # a line from 0 to 10 over [0, 10]: mean 5; cut at 5: mean 2.5
    assert paired.normalized_auc([0, 10], [0, 10], 10) == pytest.approx(5)
    assert paired.normalized_auc([0, 10], [0, 10], 5) == pytest.approx(2.5)
    assert paired.budget_to_reach([0, 10, 20], [0, 4, 8], 6) == pytest.approx(15)
    assert paired.budget_to_reach([0, 10], [0, 4], 6) is None


def test_bootstrap_of_a_constant_difference_is_that_constant():
    boot = paired.bootstrap_interval([[2.0] * 7 for _ in range(4)], reps=500)
    assert boot["low"] == pytest.approx(2.0) and boot["high"] == pytest.approx(2.0)


def test_compare_pairs_by_seed_and_decides():
    rng = random.Random(0)
    rows, samples = [f"p{i}" for i in range(20)], 4
    runs_a, runs_b = [], []
    for seed in range(6):
        # arm A meets every constraint on 40% of completions, arm B on 10%: a clear, seed-stable gap
        a = ["11" if rng.random() < 0.4 else "10" for _ in range(len(rows) * samples)]
        b = ["11" if rng.random() < 0.1 else "01" for _ in range(len(rows) * samples)]
        runs_a.append(_record("hir_cla", seed, a, rows, samples, tokens_per_step=75))
        runs_b.append(_record("rl_cr", seed, b, rows, samples))
    runs_b.append(_record("rl_cr", 99, ["11"] * 80, rows, samples))  # unpaired seed: ignored
    result = paired.compare(runs_a, runs_b, bootstrap_reps=1000)
    assert result["seeds"] == list(range(6))
    expected = [100 * (sum("0" not in v for v in ra["evals"][1]["verdicts"]["passed"])
                       - sum("0" not in v for v in rb["evals"][1]["verdicts"]["passed"])) / 80
                for ra, rb in zip(runs_a, runs_b)]
    assert result["diffs"] == pytest.approx(expected)
    assert result["eval_completions"] == 80
    assert result["t"]["low"] > 0 and result["decision"] == paired.HIR_AHEAD
    assert result["bootstrap"]["low"] <= result["t"]["mean"] <= result["bootstrap"]["high"]
    # HiR spends 75% of the tokens: over the common token budget its curve is compared on the same x range
    assert all(d > 0 for d in result["auc_tokens"]["diffs"])
    summary = paired.auc_summary(result, "tokens")
    assert summary["per_seed"] == result["auc_tokens"]["diffs"]
    assert summary["mean"] == pytest.approx(sum(summary["per_seed"]) / 6)
    assert summary["ci95_low"] < summary["mean"] < summary["ci95_high"]
    with pytest.raises(KeyError):
        paired.auc_summary(result, "steps")
    match = paired.tokens_to_match(runs_a, runs_b)
    assert match["ratio"] is not None and match["ratio"] < 0.75


def test_compare_refuses_evaluations_on_different_prompts():
    a = _record("hir_cla", 0, ["1"] * 4, ["p0", "p1"], 2)
    b = _record("rl_cr", 0, ["1"] * 4, ["p0", "p2"], 2)
    c = _record("hir_cla", 1, ["1"] * 4, ["p0", "p1"], 2)
    with pytest.raises(ValueError, match="seed 0"):
        paired.compare([a], [b])
    with pytest.raises(ValueError, match="share no seed"):
        paired.compare([c], [b])


def test_compare_refuses_runs_of_a_seed_that_start_from_different_checkpoints():
    """A machine that does not rebuild the registered SFT model bit for bit gives another starting checkpoint: its
    runs pair with no record of the registered one (a record without ``checkpoint`` is not checked)."""
    rows = ["p0", "p1"]
    registered = {"task": "task-10225f1b7da5", "sft_final_loss": 0.9183009076118469}
    for other in ({**registered, "sft_final_loss": 0.9645636844}, {**registered, "task": "task-0000"}):
        runs_a = [{**_record("hir", s, ["1"] * 4, rows, 2), "checkpoint": registered} for s in (0, 1)]
        runs_b = [{**_record("rl_ir", s, ["0"] * 4, rows, 2), "checkpoint": registered if s == 0 else other}
                  for s in (0, 1)]
        with pytest.raises(ValueError, match="seed 1: the two runs start from different checkpoints"):
            paired.compare(runs_a, runs_b)
        assert paired.compare(runs_a[:1], runs_b[:1])["seeds"] == [0]  # the same start: a pair
    unrecorded = [_record("rl_ir", s, ["0"] * 4, rows, 2) for s in (0, 1)]
    assert paired.compare(runs_a, unrecorded)["seeds"] == [0, 1]


def test_decisive_preregistrations_load_and_name_known_methods():
    from benchmarks.learning.decisive import DECISIVE_GLOB, bench_config, load_preregistration, registered_seeds

    paths = sorted(records.EXPERIMENTS.glob(DECISIVE_GLOB))
    assert paths, "no pre-registration committed"
    for path in paths:
        spec = load_preregistration(path)
        bench = bench_config(spec, ["rl_cr"], spec["families"]["trl"]["seeds"])
        assert bench.preregistration == spec["path"]
        assert bench.eval_prompts * bench.eval_samples >= 800
        for entry in spec["families"].values():
            for role in entry["arms"]:
                assert set(registered_seeds(entry, role)) <= set(entry["seeds"])
                assert len(registered_seeds(entry, role)) >= 3
        with pytest.raises(ValueError, match="only jobs, threads, device, save_every may differ"):
            bench_config(spec, ["rl_cr"], [0], learning_rate=1.0)
        assert bench_config(spec, ["rl_cr"], [0], save_every=4).save_every == 4


def test_run_refuses_an_uncommitted_preregistration(tmp_path):
    from benchmarks.learning.run import REPO_ROOT, BenchConfig, preregistration_of

    assert preregistration_of(BenchConfig()) is None
    with pytest.raises(RuntimeError, match="does not exist"):
        preregistration_of(BenchConfig(preregistration="benchmarks/experiments/missing/preregistration.yaml"))
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probe = REPO_ROOT / "benchmarks" / "experiments" / f"probe-{tmp_path.name}.yaml"
    probe.write_text("experiment: probe\n")
    try:
        with pytest.raises(RuntimeError, match="not committed"):
            preregistration_of(BenchConfig(preregistration=str(probe.relative_to(REPO_ROOT))))
    finally:
        probe.unlink()
    committed = PREREG("decisive-synthetic")
    tracked = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "--error-unmatch", str(committed)],
                             capture_output=True).returncode == 0
    if tracked and not subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", str(committed)],
                                      capture_output=True, text=True).stdout:
        found = preregistration_of(BenchConfig(preregistration=str(committed.relative_to(REPO_ROOT))))
        assert len(found["commit"]) == 40 and found["path"].endswith(Path(committed).name)


def test_decide_all_marks_pairs_without_runs(tmp_path, monkeypatch):
    from benchmarks.learning import decisive
    from benchmarks.learning import run as run_module

    repo_root = decisive.REPO_ROOT

    spec = {"experiment": "x", "task": "synthetic", "path": "benchmarks/experiments/x/preregistration.yaml",
            "bench": {"eval_prompts": 2, "eval_samples": 2}, "folder": tmp_path / "res",
            "families": {"trl": {"arms": {"hir": "hir_cla", "rl_cr": "rl_cr", "rl_ir": "rl_ir"}, "seeds": [0, 1]}}}
    runs_dir = tmp_path / "res" / "runs"
    runs_dir.mkdir(parents=True)
    prereg = {"path": spec["path"], "commit": "c" * 40}
    for method, passed in (("hir_cla", ["1", "1", "1", "0"]), ("rl_cr", ["1", "0", "0", "0"])):
        for seed in (0, 1):
            record = _record(method, seed, passed if seed == 0 else passed[::-1], ["p0", "p1"], 2)
            record["preregistration"] = prereg
            (runs_dir / f"{method}-seed{seed}.json").write_text(json.dumps(record))
    monkeypatch.setattr(decisive, "REPO_ROOT", Path("/"))
    decisions = decisive.decide_all([spec], bootstrap_reps=200)
    by_pair = {(d["hir_arm"], d["baseline_arm"]): d for d in decisions}
    cr = by_pair[("hir_default", "rl_cr")]
    assert cr["seeds"] == [0, 1] and cr["complete"] and cr["mean_diff_points"] == pytest.approx(50.0)
    assert cr["preregistration"] == prereg and cr["eval_completions"] == 4
    assert cr["decision"] in (paired.HIR_AHEAD, paired.NO_USEFUL_GAIN, paired.UNDECIDED)
    not_run = by_pair[("hir_default", "rl_ir")]
    assert not_run["decision"] == "not run" and not_run["preregistration"] == prereg
    # with no run in either arm, the commit comes from git (none outside a checkout), never from records
    spec["path"] = "benchmarks/experiments/decisive-smollm2/preregistration.yaml"
    monkeypatch.setattr(run_module, "REPO_ROOT", Path("/"))
    assert all(d["preregistration"] == {"path": spec["path"], "commit": None} and d["decision"] == "not run"
               for d in decisive.decide_all([spec], bootstrap_reps=200))
    if (repo_root / ".git").exists():
        monkeypatch.setattr(decisive, "REPO_ROOT", repo_root)
        monkeypatch.setattr(run_module, "REPO_ROOT", repo_root)
        log = subprocess.run(["git", "-C", str(repo_root), "log", "-1", "--format=%H", "--", spec["path"]],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert len(log) == 40
        assert all(d["preregistration"]["commit"] == log for d in decisive.decide_all([spec], bootstrap_reps=200))
        monkeypatch.setattr(decisive, "REPO_ROOT", Path("/"))
    spec["path"] = prereg["path"]
    # before every pre-registered seed is in, the label says so
    spec["families"]["trl"]["seeds"] = [0, 1, 2]
    interim = decisive.decide_all([spec], bootstrap_reps=200)[0]
    assert not interim["complete"] and interim["decision"].startswith("interim (2 of 3 seeds): ")


def test_reestimation_seeds_join_the_decision_after_the_registered_ones(tmp_path, monkeypatch):
    from benchmarks.learning import decisive
    from benchmarks.learning import run as run_module

    spec = {"experiment": "x", "task": "synthetic", "path": "benchmarks/experiments/x/preregistration.yaml",
            "bench": {"eval_prompts": 2, "eval_samples": 2}, "folder": tmp_path / "res",
            "reestimation": {"target_half_width": 1.5, "max_seeds_per_arm": 4},
            "families": {"trl": {"arms": {"hir": "hir_cla", "rl_cr": "rl_cr", "rl_ir": "rl_ir"}, "seeds": [0, 1]}}}
    assert decisive.reestimation_seeds(spec, "trl") == [2, 3]
    runs_dir = tmp_path / "res" / "runs"
    runs_dir.mkdir(parents=True)
    monkeypatch.setattr(decisive, "REPO_ROOT", Path("/"))
    launched = []
    monkeypatch.setattr(run_module, "run_all", lambda bench, *a, **k: launched.append((bench.methods, bench.seeds)))

    def write(method, seed, passed):
        record = _record(method, seed, passed, ["p0", "p1"], 2)
        record["preregistration"] = {"path": spec["path"], "commit": "c" * 40}
        (runs_dir / f"{method}-seed{seed}.json").write_text(json.dumps(record))

    with pytest.raises(ValueError, match=r"seeds \[4\] are neither pre-registered nor re-estimation"):
        decisive.run(spec, "trl", roles=["hir", "rl_cr"], seeds=[4])
    with pytest.raises(ValueError, match=r"once every pre-registered seed is in.*\('hir', 1\)"):
        write("hir_cla", 0, ["11", "11", "10", "00"])
        write("rl_cr", 0, ["11", "10", "00", "00"])
        write("rl_cr", 1, ["11", "10", "00", "00"])
        decisive.run(spec, "trl", roles=["hir", "rl_cr"], seeds=[2])
    assert not launched
    # a re-estimation record before the registered seeds are all in does not count yet
    write("hir_cla", 2, ["11", "11", "11", "11"])
    write("rl_cr", 2, ["00", "00", "00", "00"])
    early = decisive.decide_all([spec], bootstrap_reps=200)[0]
    assert early["seeds"] == [0] and not early["complete"] and "reestimation" not in early
    write("hir_cla", 1, ["11", "11", "11", "00"])
    decisive.run(spec, "trl", roles=["hir", "rl_cr"], seeds=[2, 3])
    assert launched == [(("hir_cla", "rl_cr"), (2, 3))]
    cr = decisive.decide_all([spec], bootstrap_reps=200)[0]
    # seeds 0 and 1 (+25, +50 points) are registered; seed 2 (+100) joins the decision
    assert cr["seeds"] == [0, 1, 2] and cr["complete"] and cr["mean_diff_points"] == pytest.approx(175 / 3)
    assert cr["decision"] in (paired.HIR_AHEAD, paired.NO_USEFUL_GAIN, paired.UNDECIDED)
    re = cr["reestimation"]
    assert re["seeds_added"] == [2] and re["max_seeds_per_arm"] == 4
    assert re["sd_registered_points"] == pytest.approx(paired.t_interval([25.0, 50.0])["sd"])
    assert re["seeds_needed"] == paired.seeds_for_half_width(re["sd_registered_points"], 1.5)
    assert "2 of 2 + 1 re-estimation" in decisive._markdown([cr])
    # the re-estimation asked for more seeds than the 3 in, up to its cap of 4: the decision may still change
    assert re["seeds_needed"] > 3 and not decisive.all_final([cr])
    assert "decisions so far" in decisive._markdown([cr]) and not decisive.all_final([early])
    assert decisive.all_final([{**cr, "reestimation": {**re, "seeds_needed": 3}}])
    # the per-constraint report pairs the same seeds as the decision
    monkeypatch.setattr(decisive, "held_out_kinds", lambda spec: {"p0": ["a", "b"], "p1": ["a", "b"]})
    report = decisive.constraints_all([spec])[0]
    assert report["kinds"]["a"]["seeds"] == [0, 1, 2]
    assert report["kinds"]["b"]["diffs"][2] == pytest.approx(100.0)
    # and so does its course over training: a seed only the HiR arm has finished stays out of both columns
    write("hir_cla", 3, ["00", "00", "00", "00"])
    later = decisive.constraints_all([spec])[0]
    assert later["kinds"]["a"]["seeds"] == [0, 1, 2]
    assert later["trajectory"] == report["trajectory"]
    assert later["trajectory"]["hir"][-1]["kinds"]["a"] == pytest.approx(100 * (3 + 3 + 4) / 12)  # seeds 0, 1, 2


def test_the_synthetic_preregistration_reestimates_up_to_20_seeds_per_arm():
    from benchmarks.learning import decisive

    spec = decisive.load_preregistration(PREREG("decisive-synthetic"))
    assert "at most 20" in spec["power"] and "seeds 12, 13, ... (6, 7, ... for the" in spec["power"]
    assert decisive.reestimation_seeds(spec, "trl") == list(range(12, 20))
    assert decisive.reestimation_seeds(spec, "paper") == list(range(6, 20))
    smollm2 = decisive.load_preregistration(PREREG("decisive-smollm2"))
    assert decisive.reestimation_seeds(smollm2, "trl") == []


def test_one_round_rule_and_check_pair_pad_with_resample_by_seed():
    from benchmarks.learning import one_round

    assert one_round.rule(-3.0, -0.01) == one_round.WORSE
    assert one_round.rule(0.01, 3.0) == one_round.BETTER
    assert one_round.rule(-3.0, 0.0) == one_round.UNCHANGED == one_round.rule(0.0, 3.0)
    rng = random.Random(1)
    rows, samples = [f"p{i}" for i in range(20)], 4
    pad, resample = [], []
    for seed in range(3):
        # the same success rate in both arms: the interval must straddle 0
        pad.append(_record("hir_cla", seed, ["11" if rng.random() < 0.3 else "10" for _ in range(80)], rows, samples))
        resample.append(_record("hir_cla", seed, ["11" if rng.random() < 0.3 else "01" for _ in range(80)], rows,
                                samples))
    pad[0]["logs"] = [{"hir/replayed_rows": 6.0, "hir/supplementary_samples": 0.0}]
    resample[0]["logs"] = [{"hir/replayed_rows": 8.0, "hir/supplementary_samples": 1.0}]
    out = one_round.check(pad, resample, seeds=[0, 1, 2, 3], bootstrap_reps=200)
    assert out["seeds"] == [0, 1, 2] and not out["complete"]
    assert out["decision"].startswith("interim (3 of 4 seeds): ")
    assert out["ci95_low"] < out["mean_diff_points"] < out["ci95_high"]
    assert out["decision"].endswith(one_round.rule(out["ci95_low"], out["ci95_high"]))
    assert out["per_step"]["pad"]["replayed_rows"] == 6.0 and out["per_step"]["resample"]["supplementary_samples"] == 1.0
    with pytest.raises(ValueError, match="at least 2 common seeds"):
        one_round.check(pad[:1], resample, seeds=[0, 1])


def test_constraint_kind_splits_relations():
    assert paired.constraint_kind({"instruction_id": "punctuation:no_comma", "kwargs": {}}) == "punctuation:no_comma"
    words = {"instruction_id": "length_constraints:number_words", "kwargs": {"relation": "less than", "num_words": 9}}
    assert paired.constraint_kind(words) == "length_constraints:number_words (less than)"


def test_compare_constraints_finds_the_kind_that_differs():
    rows, samples = ["p0", "p1"], 2
    kinds_of = {"p0": ["comma", "short"], "p1": ["short", "keyword"]}
    # arm A never meets "short", arm B always does; both meet every other constraint
    runs_a = [_record("hir_cla", s, ["10", "10", "01", "01"], rows, samples) for s in range(3)]
    runs_b = [_record("rl_cr", s, ["11", "11", "11", "11"], rows, samples) for s in range(3)]
    rates = paired.constraint_pass_rates(paired.final_eval(runs_a[0]), kinds_of)
    assert rates == {"comma": 1.0, "keyword": 1.0, "short": 0.0}
    out = paired.compare_constraints(runs_a, runs_b, kinds_of)
    assert out["short"]["diffs"] == [-100.0] * 3 and out["short"]["a"] == 0.0 and out["short"]["b"] == 100.0
    assert out["comma"]["diffs"] == [0.0] * 3
    with pytest.raises(ValueError, match="p0"):
        paired.constraint_pass_rates(paired.final_eval(runs_a[0]), {"p0": ["comma"], "p1": ["short", "keyword"]})
    with pytest.raises(KeyError):
        paired.constraint_pass_rates(paired.final_eval(runs_a[0]), {"p1": ["short", "keyword"]})


def test_constraint_trajectory_follows_each_kind_over_the_evaluations():
    rows, samples = ["p0", "p1"], 2
    kinds_of = {"p0": ["comma", "short"], "p1": ["short", "keyword"]}
    runs = [_record("hir_cla", s, ["10", "10", "01", "01"], rows, samples) for s in range(2)]
    for seed, run in enumerate(runs):
        # the step-0 evaluation meets everything; the arm then loses "short"
        run["evals"][0]["verdicts"] = {"rows": rows, "samples": samples, "passed": ["11"] * 4}
        run["evals"][0]["mean_completion_tokens"] = 10.0
        run["evals"][1]["mean_completion_tokens"] = 20.0 + 10 * seed
    course = paired.constraint_trajectory(runs, kinds_of)
    assert [p["step"] for p in course] == [0, 2] and course[0]["seeds"] == [0, 1]
    assert course[0]["kinds"] == {"comma": 100.0, "keyword": 100.0, "short": 100.0}
    assert course[1]["kinds"] == {"comma": 100.0, "keyword": 100.0, "short": 0.0}
    assert course[0]["mean_completion_tokens"] == 10.0 and course[1]["mean_completion_tokens"] == 25.0
    # every completion meets everything at step 0 (no replay candidate); at step 2 each fails exactly one kind
    assert course[0]["candidates"] == 0.0 and course[0]["candidate_failures"]["short"] == 0.0
    assert course[1]["candidates"] == 100.0
    assert course[1]["candidate_failures"] == {"comma": 0.0, "keyword": 0.0, "short": 100.0}
    # an evaluation without verdicts in one run is left out, not filled in
    del runs[1]["evals"][0]["verdicts"]
    assert [p["step"] for p in paired.constraint_trajectory(runs, kinds_of)] == [2]
    del runs[0]["evals"][1]["mean_completion_tokens"]
    assert paired.constraint_trajectory(runs, kinds_of)[0]["mean_completion_tokens"] is None
    with pytest.raises(ValueError, match="no run"):
        paired.constraint_trajectory([], kinds_of)


def test_candidate_failure_shares_counts_only_partly_met_completions():
    rows, samples = ["p0", "p1"], 2
    kinds_of = {"p0": ["comma", "short"], "p1": ["short", "short", "keyword"]}
    # p0: one success, one candidate failing "short"; p1: one completion failing everything (not a candidate) and
    # one candidate failing both "short" constraints (counted once for the kind) and meeting "keyword"
    evaluation = {"verdicts": {"rows": rows, "samples": samples, "passed": ["11", "10", "000", "001"]}}
    candidates, failing = paired.candidate_failure_shares(evaluation, kinds_of)
    assert candidates == 0.5 and failing == {"short": 1.0}
    evaluation["verdicts"]["passed"][1] = "01"
    assert paired.candidate_failure_shares(evaluation, kinds_of)[1] == {"comma": 0.5, "short": 0.5}
    with pytest.raises(ValueError, match="p1"):
        paired.candidate_failure_shares(evaluation, {"p0": ["comma", "short"], "p1": ["short"]})


def test_held_out_kinds_rebuilds_the_synthetic_prompts():
    from benchmarks.learning import decisive
    from benchmarks.learning.task import TaskConfig, build_data

    # the held-out pool is drawn first, so building it alone gives the same prompts as the full build
    small = TaskConfig(num_rl_prompts=16, num_eval_prompts=8, num_sft_examples=8)
    assert build_data(small, eval_only=True)["eval"] == build_data(small)["eval"]
    spec = decisive.load_preregistration(PREREG("decisive-synthetic"))
    kinds = decisive.held_out_kinds(spec)
    rows = build_data(decisive.task_config(spec), eval_only=True)["eval"]
    assert list(kinds) == [row["id"] for row in rows] and len(rows) == spec["bench"]["eval_prompts"]
    assert kinds[rows[0]["id"]] == [paired.constraint_kind(c) for c in rows[0]["constraints"]]


def test_held_out_kinds_rebuilds_the_real_task_prompts_its_records_were_scored_on():
    """The real task's held-out prompts, rebuilt from the MulDimIF data without the model, give the committed records'
    per-constraint verdicts the same pass rates as the run computed itself (its ``family`` rates)."""
    from benchmarks.learning import decisive
    from benchmarks.learning.real_task import TYPE_OF_ID

    spec = decisive.load_preregistration(PREREG("decisive-smollm2"))
    kinds = decisive.held_out_kinds(spec)
    assert len(kinds) == spec["bench"]["eval_prompts"] == 200
    runs = records.load_records(spec["folder"])
    assert runs, "no committed record of the real task"
    for record in runs:
        final, name = record["evals"][-1], records.record_key(record)
        rates = paired.constraint_pass_rates(final, kinds)
        compared = 0
        for instruction_id, short in TYPE_OF_ID.items():
            own = final["family"].get(short)
            if own is None or math.isnan(own) or instruction_id not in rates:
                continue  # keywords:frequency is split by relation in `rates`
            assert rates[instruction_id] == pytest.approx(own), (name, instruction_id)
            compared += 1
        assert compared >= 8, name


def test_relabel_round_decides_against_drop_and_reports_rl_cr_and_constraint_kinds():
    from benchmarks.learning import relabel

    assert relabel.rule(0.01, 3.0) == relabel.HELPS
    assert relabel.rule(-3.0, -0.01) == relabel.HURTS
    assert relabel.rule(-3.0, 0.0) == relabel.UNCHANGED == relabel.rule(0.0, 3.0)
    rows, samples = [f"p{i}" for i in range(20)], 4
    kinds_of = {row: ["comma", "short"] for row in rows}
    rng = random.Random(3)
    # "achieved" meets "short" far more often than "drop"; RL-CR in between; "comma" always met
    achieved = [_record("hir_cla", s, ["11" if rng.random() < 0.6 else "10" for _ in range(80)], rows, samples)
                for s in range(4)]
    drop = [_record("hir_cla", s, ["11" if rng.random() < 0.1 else "10" for _ in range(80)], rows, samples)
            for s in range(4)]
    rl_cr = [_record("rl_cr", s, ["11" if rng.random() < 0.3 else "10" for _ in range(80)], rows, samples)
             for s in range(4)]
    achieved[0]["logs"] = [{"hir/replayed_rows": 8.0, "hir/relabelled_constraints": 0.5}]
    out = relabel.check(achieved, drop, rl_cr, seeds=[0, 1, 2, 3], kinds_of=kinds_of, bootstrap_reps=200)
    assert out["complete"] and out["decision"] == relabel.HELPS and out["ci95_low"] > 0
    assert out["versus_rl_cr"]["decision"] == paired.HIR_AHEAD
    assert out["versus_rl_cr"]["seeds"] == [0, 1, 2, 3]
    short = out["constraint_kinds"]["versus_drop"]["short"]
    assert short["t"]["low"] > 0 and out["constraint_kinds"]["versus_drop"]["comma"]["diffs"] == [0.0] * 4
    assert out["per_step"]["achieved"]["relabelled_constraints"] == 0.5
    assert out["per_step"]["drop"]["relabelled_constraints"] == 0.0  # the paper's rewrite relabels nothing
    interim = relabel.check(achieved[:3], drop, rl_cr, seeds=[0, 1, 2, 3], kinds_of=kinds_of, bootstrap_reps=200)
    assert interim["decision"].startswith("interim (3 of 4 seeds): ")
    assert interim["versus_rl_cr"]["decision"].startswith("interim (3 of 4 seeds): ")
    markdown = relabel._markdown({**out, "preregistration": {"path": "x", "commit": "y"}})
    assert f"**Decision (primary): {relabel.HELPS}.**" in markdown
    assert f"| `short` | {short['a']:.1f} | {short['b']:.1f} | {short['t']['mean']:+.1f} " in markdown


def test_ended_replays_round_decides_against_any_failure_and_pairs_truncation_by_seed():
    from benchmarks.learning import ended_replays

    assert ended_replays.rule(0.01, 3.0) == ended_replays.HELPS
    assert ended_replays.rule(-3.0, -0.01) == ended_replays.HURTS
    assert ended_replays.rule(-3.0, 0.0) == ended_replays.UNCHANGED == ended_replays.rule(0.0, 3.0)
    rows, samples = [f"p{i}" for i in range(20)], 4
    rng = random.Random(5)

    def arm(method: str, rate: float, cut: float) -> list[dict]:
        records = [_record(method, s, ["11" if rng.random() < rate else "10" for _ in range(80)], rows, samples)
                   for s in range(4)]
        for s, record in enumerate(records):  # the final evaluation's cut-off share and length, seed by seed
            record["evals"][-1].update(truncated_fraction=cut + 0.01 * s, mean_completion_tokens=40 + 100 * cut)
        return records

    ended, any_failure = arm("hir_paper_rpp", 0.5, 0.05), arm("hir_paper_rpp", 0.1, 0.8)
    rl_cr = arm("rl_cr_rpp", 0.3, 0.4)
    for record in ended:
        record["logs"] = [{"hir/generated_tokens": 60.0}]  # logged undercount: not what the report uses
    del ended[3]["evals"][-1]["mean_completion_tokens"]  # an older record without the length: left out, not zero
    out = ended_replays.check(ended, any_failure, rl_cr, seeds=[0, 1, 2, 3], bootstrap_reps=200)
    assert out["complete"] and out["decision"] == ended_replays.HELPS and out["ci95_low"] > 0
    assert out["versus_rl_cr"]["decision"] == paired.HIR_AHEAD and out["versus_rl_cr"]["seeds"] == [0, 1, 2, 3]
    assert out["per_step"]["ended"]["generated_tokens"] == 100  # the profiler's count (_record: 100 a step)
    cut = out["truncation"][2]["truncated_fraction"]
    assert cut["seeds"] == [0, 1, 2, 3] and cut["diffs"] == pytest.approx([-75.0] * 4)
    assert cut["t"]["mean"] == pytest.approx(-75.0) and 0 not in out["truncation"]  # the shared start is skipped
    length = out["truncation"][2]["mean_completion_tokens"]
    assert length["seeds"] == [0, 1, 2] and length["diffs"] == pytest.approx([-75.0] * 3)
    interim = ended_replays.check(ended[:2], any_failure, rl_cr, seeds=[0, 1, 2, 3], bootstrap_reps=200)
    assert interim["decision"].startswith("interim (2 of 4 seeds): ")
    assert interim["versus_rl_cr"]["decision"].startswith("interim (2 of 4 seeds): ")
    markdown = ended_replays._markdown({**out, "preregistration": {"path": "x", "commit": "y"}})
    assert f"**Decision (primary): {ended_replays.HELPS}.**" in markdown
    assert "| 2 | cut at the limit (%) | 6.5 | 81.5 | -75.0 [" in markdown


def test_ended_replays_preregistration_matches_the_decisive_settings():
    import yaml

    from benchmarks.learning import ended_replays

    spec = yaml.safe_load(ended_replays.PREREGISTRATION.read_text())
    decisive = yaml.safe_load(ended_replays.DECISIVE.read_text())
    assert spec["arm"] == decisive["families"]["paper"]["arms"]["hir"]
    assert spec["seeds"] == decisive["families"]["paper"]["seeds"]
    assert {k: v for k, v in spec["bench"].items() if k != "extra"} == decisive["bench"]
    assert json.loads(spec["bench"]["extra"]) == {"replay_truncated_completions": False}


def test_replay_audit_reports_what_the_selected_replays_drop():
    from benchmarks.learning.replay_audit import audit

    # one group of m = 4 for one prompt with constraints [short, comma]: a success, a long completion that fails
    # only "short" (high integrity), one that fails only "comma", and one that fails both (not a candidate)
    kinds = [["short", "comma"]] * 4
    verdicts = [[True, True], [False, True], [True, False], [False, False]]
    words = [10, 40, 12, 50]
    out = audit(kinds, verdicts, diversity=[0.5, 0.9, 0.1, 2.0], ended=[True] * 4, words=words, m=4, k=1, lam=2.0)
    assert out["candidates"] == 2 and out["replays"] == 1 and out["successes"] == 1
    # equal integrity (1/2): the higher F_div wins, so the long completion is replayed and its q' drops "short"
    assert out["dropped"] == {"short": 1.0} and out["only_failure"] == {"short": 1.0}
    assert out["failed_by_candidates"] == {"comma": 0.5, "short": 0.5}
    assert out["mean_words"] == {"replays": 40, "candidates": 26, "successes": 10, "all": 28}
    # a completion that did not end is never a candidate
    cut = audit(kinds, verdicts, diversity=[0.5, 0.9, 0.1, 2.0], ended=[True, False, True, True], words=words, m=4,
                k=1, lam=2.0)
    assert cut["dropped"] == {"comma": 1.0}


@pytest.mark.parametrize(("flags", "message"), [
    (["--seeds", "25"], "seeds [25] are neither pre-registered nor re-estimation seeds"),
    (["--save-every", "0"], "--save-every must be at least 1 (got 0)"),
])
def test_decisive_run_refuses_bad_flags_in_one_line(capsys, flags, message):
    from benchmarks.learning import decisive

    path = str(PREREG("decisive-synthetic"))
    with pytest.raises(SystemExit) as exit_info:
        decisive.main(["run", path, "--family", "trl", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
