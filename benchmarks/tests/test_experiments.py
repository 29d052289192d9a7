"""The experiment folders: packed and loose records, resuming from them, decision.json recomputed from the committed
records, and the generated reports and tables (README's "Does it work?" and benchmarks/README.md)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess

import pytest

from benchmarks.learning import decisive, experiments, paired, records, rounds

pytest.importorskip("scipy")
pytest.importorskip("yaml")

#: The fields decision.json gained when the experiments got folders; every other field is the earlier one's.
ADDED_FIELDS = {"experiment", "pair_preregistered"}


def _record(method: str, seed: int, **extra) -> dict:
    return {"method": method, "seed": seed, "evals": [{"step": 0, "ila": 0.1}], **extra}


def test_loose_records_replace_packed_ones_and_pack_folds_them_in(tmp_path):
    records.write_jsonl(tmp_path / records.RUNS_FILE, [_record("rl_cr", 0, tag="old"), _record("rl_cr", 10)])
    records.loose_path(tmp_path, "rl_cr", 0).parent.mkdir()
    records.loose_path(tmp_path, "rl_cr", 0).write_text(json.dumps(_record("rl_cr", 0, tag="new")))
    records.loose_path(tmp_path, "hir_cla", 1).write_text(json.dumps(_record("hir_cla", 1)))
    (tmp_path / records.LOOSE_DIR / "rl_ir-seed0.json").write_text('{"method": "rl_ir", ')  # a run still writing
    loaded = records.load_records(tmp_path)
    assert [records.record_key(r) for r in loaded] == ["hir_cla-seed1", "rl_cr-seed0", "rl_cr-seed10"]
    assert records.find(tmp_path, "rl_cr", 0)["tag"] == "new" and records.find(tmp_path, "rl_ir", 0) is None
    assert records.pack(tmp_path) == 2
    assert records.load_records(tmp_path) == loaded
    assert sorted(p.name for p in (tmp_path / records.LOOSE_DIR).iterdir()) == ["rl_ir-seed0.json"]
    assert len((tmp_path / records.RUNS_FILE).read_text().splitlines()) == 3
    assert records.pack(tmp_path) == 0


def test_a_bad_line_of_runs_jsonl_names_its_file_and_line(tmp_path):
    (tmp_path / records.RUNS_FILE).write_text(json.dumps(_record("rl_cr", 0)) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"runs\.jsonl:2: not a JSON object"):
        records.load_records(tmp_path)


def test_upsert_replaces_one_experiments_entries_in_place(tmp_path):
    path = tmp_path / "decision.json"
    records.upsert_decisions(["a"], [{"experiment": "a", "v": 1}], path)
    records.upsert_decisions(["b"], [{"experiment": "b", "v": 1}], path)
    records.upsert_decisions(["a"], [{"experiment": "a", "v": 2}, {"experiment": "a", "v": 3}], path)
    assert records.read_decisions(path) == [{"experiment": "a", "v": 2}, {"experiment": "a", "v": 3},
                                            {"experiment": "b", "v": 1}]
    with pytest.raises(ValueError, match="names experiment 'c'"):
        records.upsert_decisions(["a"], [{"experiment": "c"}], path)


def test_a_packed_record_with_the_same_settings_is_reused_without_a_run(tmp_path):
    from benchmarks.learning import run

    task_dir = tmp_path / "task-x"
    task_dir.mkdir()
    (task_dir / "meta.json").write_text(json.dumps({"sft": {"final_loss": 0.9}}))
    bench = run.BenchConfig(methods=("rl_cr",), seeds=(3,))
    packed = _record("rl_cr", 3, bench=json.loads(json.dumps(dataclasses.asdict(bench))),
                     checkpoint={"task": "task-x", "sft_final_loss": 0.9})
    records.write_jsonl(tmp_path / records.RUNS_FILE, [packed])
    logged = []
    assert run._launch("rl_cr", 3, bench, task_dir, tmp_path, logged.append) == packed
    assert logged and "reuse rl_cr seed 3" in logged[0]
    # another learning rate is another run: the packed record does not stand in for it
    other = dataclasses.replace(bench, learning_rate=1e-3)
    assert not run._reusable(packed, other, task_dir)


def test_records_written_under_the_former_preregistration_path_belong_to_the_experiment():
    spec = decisive.load_preregistration(records.experiment_dir("decisive-synthetic") / records.PREREGISTRATION_FILE)
    assert spec["path"] == "benchmarks/experiments/decisive-synthetic/preregistration.yaml"
    named = {r["preregistration"]["path"] for r in records.load_records(spec["folder"])}
    assert named == {"benchmarks/preregistered/decisive-synthetic.yaml"} <= records.preregistration_paths(spec)


@pytest.mark.slow
def test_decision_json_is_recomputed_from_the_packed_records():
    """Every decisive entry of the committed decision.json equals the one `decide` computes from the packed records
    now, and (in a checkout with its history) the decision.json of the layout before the folders, key for key."""
    specs = experiments.decisive_specs()
    fresh = decisive.decide_all(specs)
    committed = [d for d in records.read_decisions() if d["experiment"] in {s["experiment"] for s in specs}]
    assert json.loads(json.dumps(fresh)) == committed
    key = ("task", "family", "hir_arm", "baseline_arm")
    by_pair = {tuple(d[k] for k in key): d for d in fresh}
    extra = {p for p, d in by_pair.items() if not d["pair_preregistered"]}
    assert extra == {(task, family, "rl_cr", "rl_ir") for task in ("synthetic", "smollm2") for family in ("trl", "paper")}
    synthetic = by_pair[("synthetic", "trl", "rl_cr", "rl_ir")]
    assert len(synthetic["seeds"]) == 20 and synthetic["decision"] == "RL-CR ahead"
    assert synthetic["methods"] == {"hir": "rl_cr", "baseline": "rl_ir"}
    shown = subprocess.run(["git", "-C", str(records.REPO_ROOT), "show",
                            "f87c4a7:benchmarks/results-decisive/decision.json"], capture_output=True, text=True)
    if shown.returncode != 0:
        pytest.skip("the commit before the experiment folders is not in this checkout")
    before = json.loads(shown.stdout)
    assert len(before) == len(by_pair) - len(extra)
    for old in before:
        new = by_pair[tuple(old[k] for k in key)]
        assert {k: v for k, v in new.items() if k not in ADDED_FIELDS} == old


def test_every_generated_report_and_table_is_up_to_date():
    assert experiments.stale(experiments.generated()) == [], "run: python -m benchmarks.learning.experiments report"


def _section(text: str, heading: str) -> list[str]:
    """The non-blank lines under ``heading`` up to the next heading of its level or above (the heading excluded)."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if re.match(r"#{1,2} ", lines[i])), len(lines))
    return [line for line in lines[start:end] if line.strip()]


def test_readme_does_it_work_holds_the_forest_plot_and_the_generated_table_in_at_most_13_lines():
    text = experiments.README.read_text()
    section = _section(text, "## Does it work?")
    assert len(section) <= 13, section
    figure = section.index("<!-- results-table:start -->") - 1  # the forest plot, right above the table
    assert section[figure].startswith("![") and section[figure].endswith("(benchmarks/experiments/decision.svg)")
    table = experiments.readme_table(records.read_decisions())
    assert experiments.block(text, "results-table") == table
    assert "\n".join(section).count("| task | pair | seeds |") == 1
    rows = table.splitlines()[2:]
    assert {row.split(" | ")[0].lstrip("| ") for row in rows} == {"synthetic", "smollm2"}
    assert sum("RL-CR − RL-IR" in row for row in rows) == 2 and sum("− RL-CR" in row for row in rows) == 4


def _prose(lines: list[str]) -> str:
    """Markdown lines as they read: every run of white space one space."""
    return " ".join(" ".join(lines).split())


def _sentences(prose: str) -> list[str]:
    """The sentences of ``prose``: each ends with ".", "!" or "?" and a space (or the end); an unended one counts."""
    return [s for s in re.split(r"(?<=[.!?])\s+", prose.strip()) if s]


def test_sentences_are_counted_by_their_ends():
    said = _sentences("One; two (a, b). Two: [x](y.md#z). And three")
    assert said == ["One; two (a, b).", "Two: [x](y.md#z).", "And three"]
    one = "HiR at 6 + 2 against RL-CR at 6, the replays' gain (the RL-CR − RL-IR rows) of 1.9M and 0.5x."
    assert _sentences(one) == [one]


def test_readme_does_it_work_prose_is_at_most_3_sentences_and_carries_the_readme_rounds_clauses_only():
    """README's prose above the forest plot has a fixed size: the finding (its opening words as the binary-hir
    pre-registration keeps them), one slot for the clause of each complete round of `rounds.README_ROUNDS` (word for
    word, as that pre-registration promises), and a pointer to benchmarks/README.md, where every round's clause is."""
    section = _section(experiments.README.read_text(), "## Does it work?")
    figure = next(i for i, line in enumerate(section) if line.startswith("!["))
    said = _sentences(_prose(section[:figure]))
    assert len(said) <= 3, said
    decisions = records.read_decisions()
    def ahead_of_rl_cr(name: str) -> bool:
        entry = _entry(name)
        against_rl_cr = next((p for p in entry.get("pairs", []) if p["name"] == "HiR binary minus RL-CR"), {})
        return entry.get("status") == "complete" and against_rl_cr.get("decision") == paired.HIR_AHEAD

    # each pre-registration's default_rule: the opening words change only when HiR binary beats RL-CR
    opening = ("only HiR on the binary reward beats RL-CR" if ahead_of_rl_cr("binary-hir") else
               "only on a sparse binary reward does HiR beat RL-CR" if ahead_of_rl_cr("sparse-binary") else
               "no HiR arm beats RL-CR")
    assert said[0].startswith(f"On our pre-registered small-scale tests {opening}"), said[0]
    assert "(benchmarks/README.md#the-rounds-after-the-decisive-experiment-pre-registered)" in said[-1]
    clauses = rounds.readme_clauses(decisions, rounds.README_ROUNDS)
    assert len(said) == 2 + bool(clauses)  # the one slot, between the two fixed sentences, holds every clause
    for clause in clauses:
        assert clause in said[1], clause
    every = {c for labels in rounds.README_CLAUSES.values() for c in labels.values()}
    assert {c for c in every if c in " ".join(said)} == set(clauses)


def test_benchmarks_readme_carries_every_complete_rounds_clause():
    text = _prose(experiments.BENCH_README.read_text().splitlines())
    clauses = rounds.readme_clauses(records.read_decisions())
    assert {"equal-sampling", "written-objective", "replay-ratio"} <= {
        d["experiment"] for d in records.read_decisions() if d.get("status") == "complete"}
    assert len(clauses) >= 3
    for clause in clauses:  # a complete round's pre-registered finding
        assert clause in text, clause
    assert set(rounds.README_ROUNDS) <= set(rounds.README_CLAUSES)


@pytest.mark.parametrize("name", list(rounds.ROUNDS))
def test_readme_clauses_follow_each_complete_rounds_decision(name):
    spec = rounds.load_preregistration(records.experiment_dir(name) / records.PREREGISTRATION_FILE)
    rule = spec["pairs"][0]["rule"]  # the clause follows the primary pair's label
    labels = rounds.SIGN_LABELS[name] if rule == "sign" else (paired.HIR_AHEAD, paired.NO_USEFUL_GAIN,
                                                              paired.UNDECIDED)
    assert set(rounds.README_CLAUSES[name]) == set(labels)
    assert len(set(rounds.README_CLAUSES[name].values())) == 3
    entry = {"experiment": name, "status": "interim", "decision": f"interim (4 of 20 seeds): {labels[0]}"}
    assert rounds.readme_clauses([entry]) == [] == rounds.readme_clauses([entry], rounds.README_ROUNDS)
    for label in labels:
        said = rounds.readme_clauses([{**entry, "status": "complete", "decision": label}])
        assert said == [rounds.README_CLAUSES[name][label]]
        readme = rounds.readme_clauses([{**entry, "status": "complete", "decision": label}], rounds.README_ROUNDS)
        assert readme == (said if name in rounds.README_ROUNDS else [])


def _entry(name: str) -> dict:
    return next((d for d in records.read_decisions() if d.get("experiment") == name), {})


def test_the_paper_recipes_weighting_follows_the_written_objective_round():
    """Its default_rule: the paper recipes switch to replay_loss_weighting "paper" if and only if the complete
    round's primary pair says the written objective helps; until then, and otherwise, they keep "token"."""
    import yaml

    entry = _entry("written-objective")
    helps = entry.get("status") == "complete" and entry["decision"] == rounds.SIGN_LABELS["written-objective"][0]
    paths = [*records.REPO_ROOT.glob("recipes/*/hir/config_paper.yaml"),
             *records.REPO_ROOT.glob("recipes/*/random_replay/config_paper.yaml"),
             *records.REPO_ROOT.glob("recipes/*/hir/config_lora_24gb.yaml")]
    assert len(paths) >= 7
    from benchmarks.learning import run

    assert run.PAPER_REPLAY.get("replay_loss_weighting", "token") == ("paper" if helps else "token")
    for path in paths:
        assert yaml.safe_load(path.read_text())["replay_loss_weighting"] == ("paper" if helps else "token"), path


def test_the_replay_ratio_default_follows_the_replay_ratio_round():
    """Its default_rule: HiRConfig.replay_old_logps becomes "hindsight" if and only if the complete round's primary
    pair says the hindsight ratio helps; the paper recipes keep "original" either way."""
    import yaml

    from hir_trl import HiRConfig

    entry = _entry("replay-ratio")
    helps = entry.get("status") == "complete" and entry["decision"] == rounds.SIGN_LABELS["replay-ratio"][0]
    default = next(f.default for f in dataclasses.fields(HiRConfig) if f.name == "replay_old_logps")
    assert default == ("hindsight" if helps else "original")
    for path in records.REPO_ROOT.glob("recipes/*/hir/config_paper.yaml"):
        assert yaml.safe_load(path.read_text()).get("replay_old_logps", "original") == "original", path


def test_benchmarks_readme_is_short_and_its_tables_are_generated():
    text = experiments.BENCH_README.read_text()
    assert len(text.splitlines()) <= 300
    decisions = records.read_decisions()
    assert experiments.block(text, "decisions-table") == experiments.decisions_table(decisions)
    assert experiments.block(text, "experiments-table") == experiments.experiments_table()
    assert len(experiments.decisions_table(decisions).splitlines()) == len(decisions) + 2


def test_report_check_fails_on_a_stale_report(tmp_path, monkeypatch, capsys):
    files = experiments.generated()
    path, text = next(iter(files.items()))
    assert experiments.stale({path: text + "edited by hand\n"}) == [path]
    monkeypatch.setattr(experiments, "generated", lambda decisions=None, drawn=None: {path: text + "x"})
    assert experiments.main(["report", "--check"]) == 1
    assert "is out of date" in capsys.readouterr().err


def test_pack_folds_the_record_folders_inside_an_experiment(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(records, "EXPERIMENTS", tmp_path)
    for where in ("r", "r/pairing-check", "r/baseline"):
        records.loose_path(tmp_path / where, "hir_cla", 0).parent.mkdir(parents=True)
        records.loose_path(tmp_path / where, "hir_cla", 0).write_text(json.dumps(_record("hir_cla", 0, at=where)))
    (tmp_path / "r" / "notes").mkdir()  # a folder without records is not a record folder
    assert [p.name for p in records.record_folders(tmp_path / "r")] == ["r", "baseline", "pairing-check"]
    assert experiments.main(["pack", "r"]) == 0
    assert "r/pairing-check: 1 loose record(s) packed" in capsys.readouterr().out
    for where in ("r", "r/pairing-check", "r/baseline"):
        assert [x["at"] for x in records.read_jsonl(tmp_path / where / records.RUNS_FILE)] == [where]
        assert not (tmp_path / where / records.LOOSE_DIR).exists()


def test_the_experiments_table_links_a_report_about_to_be_generated(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "EXPERIMENTS", tmp_path)
    (tmp_path / "new-round").mkdir()
    (tmp_path / "new-round" / records.PREREGISTRATION_FILE).write_text("experiment: new-round\n")
    assert experiments.experiments_table().splitlines()[-1] == "| `experiments/new-round/` | yes | - | - |"
    row = experiments.experiments_table([tmp_path / "new-round" / experiments.REPORT_FILE]).splitlines()[-1]
    assert row == "| `experiments/new-round/` | yes | - | [report.md](experiments/new-round/report.md) |"
