"""The pre-registered rounds' helpers (benchmarks/learning/rounds.py): the pairing check and the blinded
re-estimation of seeds, and that each round's pre-registration is complete."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from benchmarks.learning import rounds

REPO = Path(__file__).resolve().parents[1]
DECISIVE = REPO / "benchmarks" / "results-decisive" / "synthetic"


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


def test_same_run_on_the_committed_cross_machine_rerun():
    committed = DECISIVE / "runs" / "hir_cla-seed0.json"
    rerun = DECISIVE / "cross-machine-check" / "hir_cla-seed0-rerun.json"
    if not rerun.is_file():
        pytest.skip("the decisive records are not where this commit keeps them")
    assert rounds.main(["check", str(committed), str(rerun)]) == 0
    assert rounds.main(["check", str(committed), str(DECISIVE / "runs" / "hir_cla-seed1.json")]) == 1


def test_seeds_to_run_reestimates_blinded_to_the_mean(tmp_path):
    spec = {"seeds": [0, 1, 2], "arm": "hir_cla", "reestimation": {"target_half_width": 1.5, "max_seeds_per_arm": 6},
            "results_dir": "new", "pairs": [{"a": {"method": "hir_cla", "runs": "new/runs"},
                                              "b": {"method": "hir_cla", "runs": "old/runs"}}]}
    for folder in ("new/runs", "old/runs"):
        (tmp_path / folder).mkdir(parents=True)
    finals = {"new": [0.20, 0.10, 0.25], "old": [0.10, 0.12, 0.11]}  # differences +10, -2, +14 points: sd 8.3
    for folder, values in finals.items():
        for seed, ila in enumerate(values[:2]):
            (tmp_path / folder / "runs" / f"hir_cla-seed{seed}.json").write_text(json.dumps(_record(seed, ila)))
    assert rounds.seeds_to_run(spec, tmp_path) == [0, 1, 2]  # a registered seed is missing: those first
    for folder, values in finals.items():
        (tmp_path / folder / "runs" / "hir_cla-seed2.json").write_text(json.dumps(_record(2, values[2])))
    assert rounds.seeds_to_run(spec, tmp_path) == [0, 1, 2, 3, 4, 5]  # sd 8.3 asks for more than the cap of 6
    shifted = {"new": [0.21, 0.20, 0.22], "old": [0.10, 0.10, 0.11]}  # differences +11, +10, +11: sd 0.6
    for folder, values in shifted.items():
        for seed, ila in enumerate(values):
            (tmp_path / folder / "runs" / f"hir_cla-seed{seed}.json").write_text(json.dumps(_record(seed, ila)))
    assert rounds.seeds_to_run(spec, tmp_path) == [0, 1, 2]  # a small sd: the registered seeds suffice


@pytest.mark.parametrize("name", ["equal-sampling", "written-objective", "replay-ratio"])
def test_round_preregistrations_are_complete(name):
    spec = rounds.load_preregistration(REPO / "benchmarks" / "experiments" / name / "preregistration.yaml")
    assert spec["experiment"] == name and spec["results_dir"] == f"benchmarks/experiments/{name}"
    for key in ("power", "budget", "command", "resume", "default_rule", "pairing_check"):
        assert spec[key].strip(), key
    decisive = (REPO / "benchmarks" / "preregistered" / "decisive-synthetic.yaml")
    if decisive.is_file():  # the same bench settings as the decisive experiment, but the one override
        import yaml

        bench = yaml.safe_load(decisive.read_text())["bench"]
        assert {k: v for k, v in spec["bench"].items() if k != "extra"} == bench
    assert json.loads(spec["bench"]["extra"])
