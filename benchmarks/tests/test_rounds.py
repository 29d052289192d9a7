"""The pre-registered rounds' helpers (benchmarks/learning/rounds.py): the pairing check and the blinded
re-estimation of seeds on packed and loose records, each round's pre-registration complete and pointing at record
folders of the experiments' layout, and their decision.json entries while they have no records."""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
from pathlib import Path

import pytest

from benchmarks.learning import records, rounds

REPO = Path(__file__).resolve().parents[2]
DECISIVE = records.experiment_dir("decisive-synthetic")


def _record(seed: int, ila: float, cla: float = 0.5) -> dict:
    return {"method": "hir_cla", "seed": seed, "checkpoint": {"task": "t"},
            "logs": [{"step": 1, "loss": 0.1, "reward/ila": 0.25, "reward/cla": cla, "hir/replayed_rows": 8.0}],
            "evals": [{"step": 0, "ila": 0.05, "verdicts": {"passed": ["01"]}},
                      {"step": 2, "ila": ila, "verdicts": {"passed": ["11" if ila else "01"]}}]}


def test_same_run_names_what_differs():
    a = _record(0, 0.2)
    assert rounds.same_run(a, copy.deepcopy(a)) == []
    assert rounds.same_run(a, _record(0, 0.2, cla=0.5 * (1 + 1e-8))) == []  # reward/cla's logging precision
    b = copy.deepcopy(a)
    b["logs"][0]["hir/replayed_rows"] = 7.0
    b["evals"][1]["verdicts"]["passed"] = ["10"]
    differences = rounds.same_run(a, b)
    assert len(differences) == 2 and "hir/replayed_rows" in differences[0] and "verdicts" in differences[1]


@pytest.mark.parametrize("key", rounds.SAME_KEYS)
def test_same_run_compares_each_preregistered_key_and_not_later_metrics(key):
    """A rerun at a later commit logs metrics the committed record predates (``hir/padded_rows``): still the same
    run; any pre-registered key that differs is named."""
    a = _record(0, 0.2)
    for k in rounds.SAME_KEYS:
        a["logs"][0].setdefault(k, 1.0)
    b = copy.deepcopy(a)
    b["logs"][0].update({"hir/padded_rows": 0.0, "hir/replay_ratio_mean": 1.02})
    assert rounds.same_run(a, b) == []
    b["logs"][0][key] = a["logs"][0][key] + 1
    assert rounds.same_run(a, b) == [f"step 1 {key}: {a['logs'][0][key]!r} != {b['logs'][0][key]!r}"]


def test_same_run_on_the_committed_cross_machine_rerun(capsys):
    """The decisive hir_cla seed 0, packed in runs.jsonl, and its rerun on another machine (checks.jsonl) are one
    run; seed 1 is not seed 0."""
    checks = DECISIVE / "checks.jsonl"
    assert rounds.main(["check", str(DECISIVE), str(checks), "--method", "hir_cla", "--seed", "0"]) == 0
    assert "the same run" in capsys.readouterr().out
    seed1 = records.find(DECISIVE, "hir_cla", 1)
    assert rounds.same_run(records.find(DECISIVE, "hir_cla", 0), seed1) != []


def test_check_reads_loose_records_and_says_when_one_is_missing(tmp_path, capsys):
    rerun = records.loose_path(tmp_path, "hir_cla", 0)
    rerun.parent.mkdir()
    rerun.write_text(json.dumps(_record(0, 0.2)))
    committed = tmp_path / "committed.jsonl"
    records.write_jsonl(committed, [_record(0, 0.2), _record(1, 0.3)])
    assert rounds.main(["check", str(committed), str(tmp_path), "--method", "hir_cla", "--seed", "0"]) == 0
    with pytest.raises(SystemExit) as stopped:  # a .jsonl file needs --method and --seed: one line, exit 2
        rounds.main(["check", str(committed), str(rerun)])
    assert stopped.value.code == 2 and "needs --method and --seed" in capsys.readouterr().err
    assert rounds.main(["check", str(committed), str(tmp_path), "--method", "hir_cla", "--seed", "1"]) == 2
    assert "no record of hir_cla seed 1" in capsys.readouterr().err
    assert rounds.main(["check", str(committed), str(rerun), "--method", "hir_cla", "--seed", "1"]) == 3


def test_missing_seeds_counts_packed_and_loose_records(tmp_path, capsys):
    records.write_jsonl(tmp_path / records.RUNS_FILE, [_record(0, 0.2), {**_record(1, 0.2), "method": "rl_cr"}])
    records.loose_path(tmp_path, "hir_cla", 1).parent.mkdir()
    records.loose_path(tmp_path, "hir_cla", 1).write_text(json.dumps(_record(1, 0.2)))
    assert rounds.missing_seeds(tmp_path, ["hir_cla"], [0, 1, 2]) == [2]
    assert rounds.missing_seeds(tmp_path, ["hir_cla", "rl_cr"], [0, 1, 2]) == [0, 2]
    assert rounds.main(["missing", str(tmp_path), "hir_cla,rl_cr", "0,1,2"]) == 0
    assert capsys.readouterr().out.strip() == "0,2"


def test_start_differences_names_each_other_starting_checkpoint(tmp_path, capsys, monkeypatch):
    registered = {"task": "task-1", "sft_final_loss": 0.9183}
    records.write_jsonl(tmp_path / records.RUNS_FILE, [{**_record(s, 0.2), "checkpoint": registered} for s in (0, 1)])
    assert rounds.start_differences(tmp_path, registered) == []
    for other in ({"task": "task-1", "sft_final_loss": 0.9646}, {"task": "task-2", "sft_final_loss": 0.9183}):
        lines = rounds.start_differences(tmp_path, other)
        assert len(lines) == 1 and "0.9183" in lines[0] and str(other["sft_final_loss"]) in lines[0]
    # a folder whose records start from two checkpoints pairs with neither alone
    records.loose_path(tmp_path, "rl_ir", 2).parent.mkdir()
    records.loose_path(tmp_path, "rl_ir", 2).write_text(json.dumps(
        {**_record(2, 0.2), "method": "rl_ir", "checkpoint": {"task": "task-1", "sft_final_loss": 0.9646}}))
    assert len(rounds.start_differences(tmp_path, registered)) == 1
    # the command: the cache's meta.json is this machine's checkpoint (a built cache is read, not rebuilt)
    import benchmarks.learning.task as task

    def cached(cfg, root=None, log=print, threads=None, starts_dir=None):
        folder = tmp_path / "cache" / "task-1"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "meta.json").write_text(json.dumps({"sft": {"final_loss": 0.9183}}))
        return folder

    monkeypatch.setattr(task, "ensure_sft_model", cached)
    assert rounds.main(["start-check", str(tmp_path)]) == rounds.NOT_THE_SAME  # the rl_ir record starts elsewhere
    assert "another starting checkpoint" in capsys.readouterr().out
    records.loose_path(tmp_path, "rl_ir", 2).unlink()
    assert rounds.main(["start-check", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "the same starting checkpoint"


def test_the_registered_checkpoint_is_the_one_every_decisive_record_and_binary_hir_record_starts_from():
    registered = {"task": "task-10225f1b7da5", "sft_final_loss": 0.9183009076118469}
    assert rounds.start_differences(DECISIVE, registered) == []
    assert rounds.start_differences(records.experiment_dir("binary-hir"), registered) == []


def test_seeds_to_run_reestimates_blinded_to_the_mean(tmp_path):
    spec = {"seeds": [0, 1, 2], "arm": "hir_cla", "reestimation": {"target_half_width": 1.5, "max_seeds_per_arm": 6},
            "results_dir": "new", "pairs": [{"a": {"method": "hir_cla", "runs": "new"},
                                              "b": {"method": "hir_cla", "runs": "old"}}]}
    (tmp_path / "old").mkdir()

    def write(finals, seeds):  # the new arm's records loose (as a run writes them), the old one's packed
        (tmp_path / "new" / records.LOOSE_DIR).mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            records.loose_path(tmp_path / "new", "hir_cla", seed).write_text(json.dumps(_record(seed, finals["new"][seed])))
        old = {r["seed"]: r for r in records.load_records(tmp_path / "old")}
        old.update({seed: _record(seed, finals["old"][seed]) for seed in seeds})
        records.write_jsonl(tmp_path / "old" / records.RUNS_FILE, old.values())

    finals = {"new": [0.20, 0.10, 0.25], "old": [0.10, 0.12, 0.11]}  # differences +10, -2, +14 points: sd 8.3
    write(finals, [0, 1])
    assert rounds.seeds_to_run(spec, tmp_path) == [0, 1, 2]  # a registered seed is missing: those first
    write(finals, [2])
    assert rounds.seeds_to_run(spec, tmp_path) == [0, 1, 2, 3, 4, 5]  # sd 8.3 asks for more than the cap of 6
    records.pack(tmp_path / "new")
    assert rounds.seeds_to_run(spec, tmp_path) == [0, 1, 2, 3, 4, 5]  # the same once packed
    write({"new": [0.21, 0.20, 0.22], "old": [0.10, 0.10, 0.11]}, [0, 1, 2])  # +11, +10, +11: sd 0.6
    assert rounds.seeds_to_run(spec, tmp_path) == [0, 1, 2]  # a small sd: the registered seeds suffice


@pytest.mark.parametrize("name", list(rounds.ROUNDS))
def test_round_preregistrations_are_complete(name):
    import yaml

    spec = rounds.load_preregistration(records.experiment_dir(name) / records.PREREGISTRATION_FILE)
    assert spec["experiment"] == name and spec["results_dir"] == f"benchmarks/experiments/{name}"
    # a round that reuses records checks the pairing first; one of rounds.OWN_START names its stored start instead
    own = ("start",) if name in rounds.OWN_START else ("pairing_check",)
    for key in ("power", "budget", "command", "resume", "default_rule", *own):
        assert spec[key] if key == "start" else spec[key].strip(), key
    # the same bench settings as the decisive experiment (how many run at a time is scheduling only), but the one
    # override of a decisive arm, or none for an arm that is a method the decisive experiment did not run
    bench = yaml.safe_load((DECISIVE / records.PREREGISTRATION_FILE).read_text())["bench"]
    assert {k: v for k, v in spec["bench"].items() if k not in ("extra", "jobs")} == {
        k: v for k, v in bench.items() if k != "jobs"}
    decisive_methods = set(records.by_method(records.load_records(DECISIVE)))
    assert json.loads(spec["bench"].get("extra") or "{}") or spec["arm"] not in decisive_methods
    # every pair reads an experiment folder: the round's own, or the decisive one, whose records hold the method
    for pair in spec["pairs"]:
        for side in ("a", "b"):
            folder = pair[side]["runs"]
            assert folder in (spec["results_dir"], "benchmarks/experiments/decisive-synthetic"), (pair["name"], folder)
            if folder.endswith("decisive-synthetic"):
                assert len(records.by_method(records.load_records(REPO / folder))[pair[side]["method"]]) == 20
    text = (records.experiment_dir(name) / records.PREREGISTRATION_FILE).read_text()
    assert "results-decisive" not in text and "benchmarks/preregistered" not in text


def test_binary_hir_runs_the_registered_arm_and_its_readme_clauses_are_registered_word_for_word():
    """The binary-hir round's arm, run.py's `hir`, pins what its pre-registration says (the decisive pins for the
    shortfall and the rewrite, the binary reward, curriculum selection, positive replays of ended completions); the
    README clause of each primary label stands word for word in its default_rule."""
    from benchmarks.learning import run

    spec = rounds.load_preregistration(records.experiment_dir("binary-hir") / records.PREREGISTRATION_FILE)
    assert spec["arm"] == "hir" and "extra" not in spec["bench"] and "reestimation" not in spec
    assert spec["seeds"] == list(range(20))
    settings = {**run.DECISIVE_PINS, **run.method_overrides("hir", run.BenchConfig(m=6, k=2))}
    assert settings == {"replay_shortfall": "resample", "hindsight_relabel": "drop", "num_generations": 6,
                        "num_replays": 2, "replay_selection": "curriculum", "reward_mode": "ila",
                        "replay_advantage": "positive", "replay_truncated_completions": False}
    assert [(p["a"]["method"], p["b"]["method"], p["rule"]) for p in spec["pairs"]] == [
        ("hir", "rl_ir", "decisive"), ("hir", "rl_cr", "decisive"), ("hir", "hir_cla", "sign")]
    for clause in rounds.README_CLAUSES["binary-hir"].values():
        assert f'"{clause}"' in spec["default_rule"], clause
    assert set(rounds.MORE_CHECKS["binary-hir"]) == {"hir_cla"} and rounds.FALLBACK["binary-hir"][0] == "rl_ir"


def test_sparse_binary_runs_every_arm_from_its_stored_start_and_its_readme_clauses_are_registered_word_for_word():
    """The sparse-binary round runs its three arms itself (no pairing check, no record of another round) from the
    start its pre-registration stores; README's clause of each primary label is its readme_sentences' word for
    word."""
    spec = rounds.load_preregistration(records.experiment_dir("sparse-binary") / records.PREREGISTRATION_FILE)
    assert "sparse-binary" in rounds.OWN_START and "sparse-binary" not in rounds.FALLBACK
    assert [(p["a"]["method"], p["b"]["method"], p["rule"]) for p in spec["pairs"]] == [
        ("hir", "rl_ir", "decisive"), ("hir", "rl_cr", "decisive")]
    assert {p[side]["runs"] for p in spec["pairs"] for side in ("a", "b")} == {spec["results_dir"]}
    stored = json.loads((REPO / "benchmarks" / "learning" / "starts" / "registry.json").read_text())
    entry = next(e for key, e in stored.items() if f"task-{key}" == spec["start"]["task"])
    assert entry["sft_final_loss"] == spec["start"]["sft_final_loss"] and entry["archive"] == spec["start"]["archive"]
    assert entry["fingerprint"] == spec["start"]["content"]

    def said(text: str) -> str:
        return " ".join(text.split())
    assert {k: said(v) for k, v in spec["readme_sentences"].items()} == rounds.README_CLAUSES["sparse-binary"]
    assert "sparse-binary" in rounds.README_ROUNDS


def test_a_round_of_its_own_start_names_every_record_from_another_start(tmp_path, monkeypatch):
    """sparse-binary's entry on scratch records: no pairing check; each record that names another starting
    checkpoint is listed by the start agreement (and so in the report); the share of steps with any sampled
    completion of reward 1 is each arm's."""
    repo = tmp_path / "repo"
    experiments = repo / "benchmarks" / "experiments"
    monkeypatch.setattr(records, "EXPERIMENTS", experiments)
    monkeypatch.setattr(rounds, "REPO_ROOT", repo)
    folder = experiments / "sparse-binary"
    folder.mkdir(parents=True)
    text = (REPO / "benchmarks" / "experiments" / "sparse-binary" / records.PREREGISTRATION_FILE).read_text()
    (folder / records.PREREGISTRATION_FILE).write_text(text)
    spec = rounds.load_preregistration(folder / records.PREREGISTRATION_FILE)
    start = {"task": spec["start"]["task"], "sft_final_loss": spec["start"]["sft_final_loss"]}

    def record(method, seed, ila, successes, checkpoint=start):
        return {"method": method, "seed": seed, "checkpoint": dict(checkpoint), "wall_seconds": 10.0,
                "logs": [{"step": i + 1, "reward/ila": 0.25 if i < successes else 0.0} for i in range(4)],
                "steps": [{"step": i + 1, "generated_tokens": 100, "step_seconds": 1.0} for i in range(128)],
                "evals": [{"step": 0, "ila": 0.0, "verdicts": {"rows": ["p0", "p1"], "samples": 1,
                                                                "passed": ["00", "10"]}},
                          {"step": 128, "ila": ila, "verdicts": {"rows": ["p0", "p1"], "samples": 1,
                                                                 "passed": ["11", "10"]}}]}
    runs = [record("hir", s, 0.02 + 0.01 * s, 3) for s in range(3)] + [
        record("rl_ir", s, 0.01, 1) for s in range(3)] + [record("rl_cr", s, 0.03, 2) for s in range(3)]
    runs[4]["checkpoint"] = {"task": "task-elsewhere", "sft_final_loss": 0.5}
    records.write_jsonl(folder / records.RUNS_FILE, runs)
    entry = rounds.decision("sparse-binary", bootstrap_reps=20)
    assert entry["pairing_check"] is None and entry["status"] == "interim" and entry["seeds"] == [0, 1, 2]
    assert entry["start"] == {**start, "records": 9, "others": ["rl_ir-seed1"]}
    assert entry["mean_diff_points"] is None and "different checkpoints" in entry["decision"]  # paired.compare's
    assert "records naming another start: rl_ir-seed1" in rounds.markdown(entry)
    runs[4]["checkpoint"] = dict(start)
    records.write_jsonl(folder / records.RUNS_FILE, runs)
    entry = rounds.decision("sparse-binary", bootstrap_reps=20)
    assert entry["start"]["others"] == [] and entry["mean_diff_points"] == pytest.approx(2.0)
    cost = entry["pairs"][0]["cost"]
    assert (cost["a"]["steps_with_success_fraction"], cost["b"]["steps_with_success_fraction"]) == (0.75, 0.25)
    report = rounds.markdown(entry)
    assert "No pairing check" in report and "records naming another start: none" in report
    assert "| `hir` in `benchmarks/experiments/sparse-binary` | 3 | 10 [10, 10] | 100 | 75.0 |" in report


def test_a_round_without_records_has_a_no_records_yet_entry_and_report(tmp_path, monkeypatch):
    """Each round's entry and report before its first record (its pre-registration alone, in a scratch
    experiments folder), naming the commit that last changed the pre-registration."""
    experiments = tmp_path / "benchmarks" / "experiments"
    monkeypatch.setattr(records, "EXPERIMENTS", experiments)
    monkeypatch.setattr(rounds, "REPO_ROOT", tmp_path)
    for name in rounds.ROUNDS:
        path = f"benchmarks/experiments/{name}/preregistration.yaml"
        (experiments / name).mkdir(parents=True)
        (tmp_path / path).write_text((REPO / path).read_text())
        fresh = rounds.decision(name)
        assert fresh["status"] == "no records yet" and fresh["seeds"] == [] and fresh["mean_diff_points"] is None
        assert fresh["preregistration"]["path"] == path
        shown = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%H", "--", path],
                               capture_output=True, text=True)
        if shown.returncode == 0 and shown.stdout.strip():  # a checkout with its history
            assert fresh["preregistration"]["commit"] == shown.stdout.strip()
        report = rounds.markdown(fresh)
        assert "**No records yet**" in report and path in report
        assert all(f"| {p['name']} |" in report for p in fresh["pairs"])


def _round_on_decisive_records(tmp_path, monkeypatch, name, methods, max_seed=None):
    """A scratch repository holding round ``name``'s real pre-registration and the decisive records of ``methods``
    (seeds below ``max_seed``); returns the round's folder and those records."""
    repo = tmp_path / "repo"
    experiments = repo / "benchmarks" / "experiments"
    monkeypatch.setattr(records, "EXPERIMENTS", experiments)
    monkeypatch.setattr(rounds, "REPO_ROOT", repo)
    folder = experiments / name
    folder.mkdir(parents=True)
    (folder / records.PREREGISTRATION_FILE).write_text(
        (REPO / "benchmarks" / "experiments" / name / records.PREREGISTRATION_FILE).read_text())
    decisive = [r for r in records.load_records(DECISIVE)
                if r["method"] in methods and (max_seed is None or r["seed"] < max_seed)]
    (experiments / "decisive-synthetic").mkdir()
    records.write_jsonl(experiments / "decisive-synthetic" / records.RUNS_FILE, decisive)
    return folder, decisive


def test_a_round_is_decided_from_its_records_by_its_registered_rule(tmp_path, monkeypatch):
    """The replay-ratio round on decisive records: the pairing check, interim figures, the registered rule once the
    seeds are in, and the fallback baseline folder once the pairing check fails."""
    import yaml

    folder, decisive = _round_on_decisive_records(tmp_path, monkeypatch, "replay-ratio", ("hir_cla", "rl_cr"), 12)
    hir = {r["seed"]: r for r in decisive if r["method"] == "hir_cla"}

    def hindsight(seed):  # the decisive hir_cla record, 2 points higher at the end
        record = copy.deepcopy(hir[seed])
        record["evals"][-1]["ila"] += 0.02
        return record

    (folder / "pairing-check").mkdir()
    records.write_jsonl(folder / "pairing-check" / records.RUNS_FILE, [hir[0]])
    entry = rounds.decision("replay-ratio", bootstrap_reps=50)
    assert entry["status"] == "interim" and entry["pairing_check"]["same_run"] is True
    assert entry["pairs"][0]["decision"] == "not run" and entry["seeds_to_run"] == list(range(12))
    records.write_jsonl(folder / records.RUNS_FILE, [hindsight(s) for s in range(6)])
    entry = rounds.decision("replay-ratio", bootstrap_reps=50)
    assert entry["decision"] == "interim (6 of 12 seeds): the hindsight ratio helps"
    assert entry["mean_diff_points"] == pytest.approx(2.0) and entry["seeds"] == list(range(6))
    records.write_jsonl(folder / records.RUNS_FILE, [hindsight(s) for s in range(12)])
    entry = rounds.decision("replay-ratio", bootstrap_reps=50)
    assert entry["status"] == "complete" and entry["decision"] == "the hindsight ratio helps"  # sd 0: 12 suffice
    assert entry["pairs"][1]["name"] == "HiR default hindsight minus RL-CR" and entry["pairs"][1]["rule"] == "decisive"
    assert entry["pairs"][1]["decision"] in ("HiR ahead", "no useful gain", "undecided")
    assert "| HiR default hindsight minus HiR default | 12 | +2.00 |" in rounds.markdown(entry)
    cost = entry["pairs"][0]["cost"]
    assert cost["a"]["runs"] == cost["b"]["runs"] == 12 and cost["a"]["wall_seconds"] == cost["b"]["wall_seconds"]
    assert cost["a"]["generated_tokens_per_step"] == pytest.approx(
        statistics.fmean(s["generated_tokens"] for r in hir.values() for s in r["steps"]))
    areas = entry["pairs"][0]["auc_ila_vs_seconds_diff"]["per_seed"]  # the same curves but a higher last point
    assert len(areas) == 12 and all(x > 0 for x in areas)
    assert "| `hir_cla` in `benchmarks/experiments/replay-ratio` | 12 |" in rounds.markdown(entry)
    failed = copy.deepcopy(hir[0])
    failed["logs"][0]["loss"] += 1.0
    records.write_jsonl(folder / "pairing-check" / records.RUNS_FILE, [failed])
    entry = rounds.decision("replay-ratio", bootstrap_reps=50)
    assert entry["pairing_check"]["same_run"] is False and entry["status"] == "interim"
    assert entry["pairs"][0]["b"]["runs"] == "benchmarks/experiments/replay-ratio/baseline"
    assert entry["pairs"][0]["decision"] == "not run" and entry["pairs"][1]["decision"] != "not run"
    assert yaml.safe_load((folder / records.PREREGISTRATION_FILE).read_text())["pairs"][0]["b"]["runs"].endswith(
        "decisive-synthetic")  # the fallback is the decision's, the pre-registration is not touched


def test_binary_hir_is_decided_with_its_two_pairing_checks(tmp_path, monkeypatch):
    """binary-hir on decisive records: both pairing checks in the one pairing-check folder; a failed hir_cla check
    sends the HiR default pair, and only it, to the round's baselines folder; a failed rl_ir check the other two."""
    folder, decisive = _round_on_decisive_records(tmp_path, monkeypatch, "binary-hir", ("hir_cla", "rl_cr", "rl_ir"))
    by = {(r["method"], r["seed"]): r for r in decisive}
    entry = rounds.decision("binary-hir", bootstrap_reps=20)
    assert entry["status"] == "no records yet" and entry["override"] == {}
    assert "New arm: `hir` (no override)" in rounds.markdown(entry)
    (folder / "pairing-check").mkdir()
    records.write_jsonl(folder / "pairing-check" / records.RUNS_FILE, [by["rl_ir", 0], by["hir_cla", 0]])
    binary = [{**copy.deepcopy(by["hir_cla", s]), "method": "hir"} for s in range(20)]
    records.write_jsonl(folder / records.RUNS_FILE, binary)
    entry = rounds.decision("binary-hir", bootstrap_reps=20)
    assert entry["status"] == "complete" and entry["baseline"] == "the decisive records"
    assert [c["same_run"] for c in (entry["pairing_check"], *entry["more_pairing_checks"])] == [True, True]
    assert entry["decision"] == "HiR ahead" and entry["mean_diff_points"] == pytest.approx(7.412109375)
    assert entry["pairs"][2]["decision"] == "unchanged within the noise"  # the same records: 0 on every seed
    report = rounds.markdown(entry)
    assert "Pairing checks (seed 0 rerun against the decisive record): rl_ir: the same run; hir_cla: the same run" in report
    assert "| `hir_cla` seed 0, the pairing-check rerun |" in report and "| `rl_ir` seed 0, the pairing-check rerun |" in report
    failed = copy.deepcopy(by["hir_cla", 0])
    failed["logs"][0]["loss"] += 1.0
    records.write_jsonl(folder / "pairing-check" / records.RUNS_FILE, [by["rl_ir", 0], failed])
    entry = rounds.decision("binary-hir", bootstrap_reps=20)
    assert [p["b"]["runs"] for p in entry["pairs"]] == ["benchmarks/experiments/decisive-synthetic"] * 2 + [
        "benchmarks/experiments/binary-hir/baselines"]
    assert entry["pairs"][2]["decision"] == "not run" and entry["status"] == "complete"
    assert "for the pairs that rest on hir_cla" in entry["baseline"]
    failed = copy.deepcopy(by["rl_ir", 0])
    failed["logs"][0]["loss"] += 1.0
    records.write_jsonl(folder / "pairing-check" / records.RUNS_FILE, [failed, by["hir_cla", 0]])
    entry = rounds.decision("binary-hir", bootstrap_reps=20)
    assert [p["b"]["runs"] for p in entry["pairs"]] == ["benchmarks/experiments/binary-hir/baselines"] * 2 + [
        "benchmarks/experiments/decisive-synthetic"]
    assert entry["status"] == "interim" and entry["decision"] == "not run"


def test_run_no_report_writes_the_records_only(monkeypatch):
    from benchmarks.learning import run

    seen = []
    monkeypatch.setattr(run, "run_all", lambda bench, task, results_dir, **kw: seen.append((results_dir, kw["report"])))
    for extra in (["--no-report"], []):
        run.main(["--methods", "rl_cr", "--seeds", "0", "--results-dir", "somewhere", *extra])
    assert seen == [(Path("somewhere"), False), (Path("somewhere"), True)]


def test_the_rounds_entries_of_decision_json_are_computed_from_their_records():
    """Each round's entry in decision.json is what `rounds.decision` computes from the committed records (run
    ``python -m benchmarks.learning.experiments pack`` and ``decide`` after new records)."""
    entries = {d["experiment"]: d for d in records.read_decisions()}
    for name in rounds.ROUNDS:
        assert entries[name] == json.loads(json.dumps(rounds.decision(name))), name


def test_arm_cost_reports_wall_time_tokens_cut_share_and_machine():
    runs = [{"wall_seconds": w, "steps": [{"generated_tokens": t}],
             "evals": [{"step": 0, "truncated_fraction": 0.5}, {"step": 64, "truncated_fraction": c64},
                       {"step": 128, "truncated_fraction": c128}],
             "machine": {"processor": "AMD EPYC", "cores": 2, "cpu_capability": "AVX2", "code_commit": "dbd2ab4ce3"}}
            for w, t, c64, c128 in ((600.0, 1000, 0.25, 0.5), (800.0, 1200, 0.75, 1.0), (700.0, 1100, 0.5, 0.0))]
    runs[0]["logs"] = [{"hir/replay_ratio_mean": 0.75, "hir/replay_clip_ratio": 0.25, "clip_ratio/region_mean": 0.0},
                       {"hir/replay_ratio_mean": 1.25, "hir/replay_clip_ratio": None, "clip_ratio/region_mean": 0.5}]
    runs[1]["logs"] = [{"loss": 0.1}]  # a record older than the metrics
    cost = rounds.arm_cost(runs)
    assert cost["mechanism"] == {"hir/replay_ratio_mean": 1.0, "hir/replay_clip_ratio": 0.25,
                                 "clip_ratio/region_mean": 0.25}
    assert cost["runs"] == 3
    assert cost["wall_seconds"] == {"median": 700.0, "min": 600.0, "max": 800.0}
    assert cost["generated_tokens_per_step"] == 1100
    assert cost["held_out_cut_percent"] == {"64": 50.0, "128": 50.0}  # step 0 (the SFT model) is not an arm's
    assert cost["machines"] == ["AMD EPYC, 2 cores, AVX2, code dbd2ab4"]
    bare = rounds.arm_cost([{"wall_seconds": 500.0, "evals": [{"step": 128}]}])
    assert bare["held_out_cut_percent"] == {} and bare["mechanism"] == {} and bare["generated_tokens_per_step"] is None and bare["machines"] == []
