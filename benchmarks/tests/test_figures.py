"""The results as pictures (`benchmarks.learning.figures`): the forest plot holds every pair of decision.json, the
learning curves read the records of the right arms and seeds, the committed pictures show what the records hold now,
a picture is byte-reproducible, and without matplotlib the report still writes its tables and says so in one line.
The tests check the data behind each figure, not its pixels; no training."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from benchmarks.learning import experiments, figures, paired, records

pytest.importorskip("scipy")
pytest.importorskip("yaml")


def _pairs_in(entry: dict) -> list[tuple]:
    """The pairs of one decision.json entry, read independently of figures.py: (experiment, mean, low, high)."""
    def key(x: dict) -> tuple:
        return tuple(None if x.get(k) is None else round(x[k], figures.DIGITS)
                     for k in ("mean_diff_points", "ci95_low", "ci95_high"))

    if "family" in entry:
        return [(entry["experiment"], *key(entry))]
    if "pairs" in entry:
        return [(entry["experiment"], *key(p)) for p in entry["pairs"]]
    return [(entry["experiment"], *key(x)) for x in (entry, entry.get("versus_rl_cr")) if x]


def _rows(data: dict) -> list[dict]:
    return [row for group in data["groups"] for row in group["rows"]]


def test_the_forest_plot_holds_every_pair_of_decision_json_grouped_by_task_and_family():
    decisions = records.read_decisions()
    data = figures.forest_data(decisions)
    expected = [pair for entry in decisions for pair in _pairs_in(entry)]
    shown = [(r["experiment"], r["mean"], r["low"], r["high"]) for r in _rows(data)]
    assert sorted(shown, key=repr) == sorted(expected, key=repr)
    assert len(shown) >= 22  # 12 decisive pairs, 3 one-difference rounds (2 with RL-CR), 3 rounds' 7 pairs
    assert data["useful_gain"] == paired.USEFUL_GAIN_POINTS == 1.0
    groups = [(g["task"], g["family"]) for g in data["groups"]]
    assert len(groups) == len(set(groups))  # each task and family once
    for entry in decisions:
        if "family" in entry:  # a decisive pair sits in its own task and family
            group = data["groups"][groups.index((entry["task"], entry["family"]))]
            assert any(r["experiment"] == entry["experiment"] and r["mean"] == round(entry["mean_diff_points"], 3)
                       for r in group["rows"])
    by_name = {(r["experiment"], r["pair"]): r for r in _rows(data)}
    assert by_name[("decisive-synthetic", "RL-CR − RL-IR")]["preregistered"] is False
    assert by_name[("written-objective", "HiR paper written − HiR paper as run")]["rule"] == "sign"
    assert ("synthetic", "paper") in groups and ("smollm2", "trl") in groups
    written = [g for g in data["groups"] if g["task"] == "synthetic" and g["family"] == "paper"][0]
    assert {r["experiment"] for r in written["rows"]} >= {"written-objective", "ended-replays-paper-synthetic"}


def test_the_forest_plot_of_made_up_entries_keeps_pairs_without_an_interval():
    decisions = [
        {"experiment": "d", "task": "t", "family": "trl", "hir_arm": "hir_default", "baseline_arm": "rl_cr",
         "pair_preregistered": True, "seeds": [0, 1], "mean_diff_points": 1.23456, "ci95_low": -0.5,
         "ci95_high": 3.0, "decision": "undecided"},
        {"experiment": "r", "decision": "no records yet", "pairs": [
            {"name": "x minus y", "a": {"method": "rl_cr_rpp"}, "b": {"method": "rl_ir_rpp"}, "rule": "decisive",
             "seeds": [], "mean_diff_points": None, "ci95_low": None, "ci95_high": None},  # not run yet
            {"name": "z minus y", "a": {"method": "hir"}, "b": {"method": "rl_ir"}, "rule": "sign",
             "seeds": [0, 1, 2], "mean_diff_points": -2.0, "ci95_low": -3.0, "ci95_high": -1.0, "decision": "hurts"}]},
    ]
    data = figures.forest_data(decisions)
    assert [(g["task"], g["family"], [r["pair"] for r in g["rows"]]) for g in data["groups"]] == [
        ("t", "trl", ["HiR default − RL-CR"]), ("unknown task", "paper", ["x − y"]), ("unknown task", "trl", ["z − y"])]
    row = data["groups"][0]["rows"][0]
    assert (row["mean"], row["low"], row["high"], row["seeds"]) == (1.235, -0.5, 3.0, 2)
    not_run = data["groups"][1]["rows"][0]
    assert (not_run["mean"], not_run["seeds"], not_run["decision"]) == (None, 0, "no records yet")
    before = figures.data_digest(data)
    decisions[1]["pairs"][1]["ci95_high"] = -0.9  # the check sees a changed interval
    assert figures.data_digest(figures.forest_data(decisions)) != before


def _run(method: str, seed: int, ilas: list[float], train: list[float], cut: float | None = None) -> dict:
    """A record with held-out ILA ``ilas`` at steps 0, 4, 8 and per-step reward/ila ``train`` (steps 1, 2, ...)."""
    logs = [{"step": i + 1, "reward/ila": v, "reward/cla": v / 2, **({"completions/clipped_ratio": cut}
                                                                       if cut is not None else {})}
            for i, v in enumerate(train)]
    evals = [{"step": s, "ila": v, "truncated_fraction": v / 4} for s, v in zip((0, 4, 8), ilas)]
    return {"method": method, "seed": seed, "logs": logs, "evals": evals}


def test_the_curves_read_the_records_of_each_pairs_arms_and_seeds(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(records, "EXPERIMENTS", tmp_path / "benchmarks" / "experiments")
    own, base = (tmp_path / "benchmarks" / "experiments" / n for n in ("round-x", "base"))
    for folder in (own, base):
        folder.mkdir(parents=True)
    records.write_jsonl(own / records.RUNS_FILE, [
        _run("hir", 0, [0.1, 0.2, 0.3], [0.0] * 8, cut=0.5), _run("hir", 1, [0.1, 0.4, 0.5], [1.0] * 8, cut=0.25),
        _run("hir", 7, [0.9, 0.9, 0.9], [1.0] * 8),  # a seed outside the pair's: not shown
        _run("rl_ir", 0, [0.9, 0.9, 0.9], [1.0] * 8)])  # a method no pair reads from this folder
    records.write_jsonl(base / records.RUNS_FILE, [
        _run("rl_ir", 0, [0.1, 0.1, 0.1], [0.5] * 8), _run("rl_ir", 1, [0.1, 0.3, 0.3], [0.5] * 4 + [1.0] * 4),
        _run("hir", 0, [0.9, 0.9, 0.9], [1.0] * 8)])
    pair = {"name": "hir minus rl_ir", "a": {"method": "hir", "runs": "benchmarks/experiments/round-x"},
            "b": {"method": "rl_ir", "runs": "benchmarks/experiments/base"}, "rule": "decisive", "seeds": [0, 1]}
    decisions = [{"experiment": "round-x", "pairs": [pair]}]
    data = figures.curves_data("round-x", decisions)
    hir, rl_ir = data["arms"]
    assert (hir["label"], hir["method"], hir["runs"], hir["seeds"]) == (
        "HiR, ILA reward (round-x)", "hir", "benchmarks/experiments/round-x", [0, 1])
    assert (rl_ir["label"], rl_ir["seeds"]) == ("RL-IR (base)", [0, 1])
    assert [(p["step"], p["n"], p["mean"]) for p in hir["held_out_ila"]] == [(0, 2, 10.0), (4, 2, 30.0), (8, 2, 40.0)]
    assert [p["mean"] for p in rl_ir["held_out_cut"]] == [2.5, 5.0, 5.0]
    # training: 8 logged steps in one block of 8; rl_ir seed 1 averages 0.5 and 1.0 to 75%
    assert data["block_steps"] == figures.BLOCK_STEPS == 8
    assert [(p["step"], p["mean"]) for p in rl_ir["train_ila"]] == [(4.5, 62.5)]
    assert [p["mean"] for p in rl_ir["train_cla"]] == [31.25]
    low, high = rl_ir["train_ila"][0]["low"], rl_ir["train_ila"][0]["high"]
    t = paired.t_interval([50.0, 75.0])
    assert (low, high) == (round(t["low"], 3), round(t["high"], 3))
    assert [p["mean"] for p in hir["train_cut"]] == [37.5] and rl_ir["train_cut"] == []  # logged only by hir
    text = figures.curves_markdown(data)
    assert "](curves.svg)" in text and "only for HiR, ILA reward (round-x)" in text
    # an arm is shown over the seeds decided, and an experiment without records has no curves
    pair["seeds"] = [1]
    assert figures.curves_data("round-x", decisions)["arms"][0]["seeds"] == [1]
    assert figures.curves_data("nothing", [{"experiment": "nothing", "pairs": []}]) is None


def test_the_decisive_curves_show_every_arm_of_both_families_with_all_its_records():
    decisions = records.read_decisions()
    arms = figures.experiment_arms("decisive-smollm2", decisions)
    assert [a.method for a in arms] == ["hir_cla", "rl_cr", "rl_ir", "hir_paper_rpp", "rl_cr_rpp", "rl_ir_rpp"]
    data = figures.curves_data("decisive-smollm2", decisions)
    runs = records.by_method(records.load_records(records.experiment_dir("decisive-smollm2")))
    assert {a["method"]: a["seeds"] for a in data["arms"]} == {m: sorted(r["seed"] for r in rs)
                                                              for m, rs in runs.items()}
    final = data["arms"][0]["held_out_ila"][-1]
    ilas = [100 * paired.final_eval(r)["ila"] for r in runs["hir_cla"]]
    assert final["mean"] == round(sum(ilas) / len(ilas), 3) and final["n"] == len(ilas)


def test_the_committed_pictures_show_what_decision_json_and_the_records_hold_now():
    """``report --check``'s picture half: every picture's committed SVG carries the digest of its data now; every
    experiment whose report exists and has records shows its curves, and README and benchmarks/README show the
    forest plot."""
    decisions = records.read_decisions()
    pictures = experiments.pictures(decisions)
    assert figures.stale(pictures) == [], "run: python -m benchmarks.learning.experiments report"
    texts = experiments.generated(decisions, pictures)
    curves = {p.path.parent.name for p in pictures if p.path.name == figures.CURVES_FILE}
    for path in experiments.reports(decisions):
        if records.load_records(path.parent):
            assert path.parent.name in curves and "![Learning curves" in texts[path], path
    assert "](benchmarks/experiments/decision.svg)" in experiments.README.read_text()
    assert "](experiments/decision.svg)" in experiments.BENCH_README.read_text()
    for picture in pictures:
        assert picture.path.stat().st_size < 100_000, picture.path


def _small_picture(path) -> figures.Picture:
    decisions = [{"experiment": "d", "task": "t", "family": "trl", "hir_arm": "hir_default", "baseline_arm": "rl_cr",
                  "seeds": [0, 1], "mean_diff_points": 1.0, "ci95_low": -0.5, "ci95_high": 2.5,
                  "decision": "undecided"}]
    return dataclasses.replace(figures.forest_picture(decisions), path=path)


def test_a_picture_is_the_same_bytes_each_time_and_carries_its_data_digest(tmp_path):
    pytest.importorskip("matplotlib")
    picture = _small_picture(tmp_path / "a.svg")
    assert figures.stale([picture]) == [picture.path]
    assert figures.write([picture]) == [picture.path]
    first = picture.path.read_bytes()
    assert figures.committed_digest(picture.path) == picture.digest and figures.stale([picture]) == []
    assert figures.write([picture]) == []  # up to date: not redrawn
    figures.save(picture)
    assert picture.path.read_bytes() == first
    text = first.decode()
    assert "<dc:date>" not in text and "Matplotlib v" not in text and "HiR default − RL-CR" in text
    changed = dataclasses.replace(picture, data={**picture.data, "useful_gain": 2.0})
    assert figures.stale([changed]) == [picture.path]


def test_without_matplotlib_the_report_writes_its_tables_and_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(ImportError):
        import matplotlib  # noqa: F401
    picture = _small_picture(tmp_path / "a.svg")
    said = []
    assert figures.write([picture], said.append) == []
    assert len(said) == 1 and "matplotlib is not installed" in said[0] and "1 of 1 out of date" in said[0]
    assert not picture.path.exists() and figures.stale([picture]) == [picture.path]
    # the reports and tables do not need it, nor does the check of the pictures' data
    decisions = records.read_decisions()
    pictures = experiments.pictures(decisions)
    texts = experiments.generated(decisions, pictures)
    assert experiments.README in texts and all(path.suffix == ".md" for path in texts)
    assert isinstance(figures.stale(pictures), list)
