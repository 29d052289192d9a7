"""Smoke test of the learning benchmark (benchmarks/learning): the toy preset end to end, so the harness keeps working.

Builds a tiny SFT model on the synthetic task (cached in a temporary directory), trains HiR and RL-IR for a few
steps each, and checks the per-run records, the cost breakdown and the report files.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import random

import pytest
import torch
import transformers
import trl

from benchmarks.learning.task import FAMILIES, TaskConfig, render_response, sample_prompt, verdicts


def test_writer_meets_exactly_the_planned_constraints():
    rng, cfg = random.Random(0), TaskConfig()
    for i in range(20):
        row = sample_prompt(rng, cfg, str(i))
        assert cfg.min_constraints <= len(row["constraints"]) <= cfg.max_constraints
        assert all(c["instruction_id"] in FAMILIES.values() for c in row["constraints"])
        plan = [rng.random() < 0.5 for _ in row["constraints"]]
        response = render_response(row, plan, rng)
        if response is not None:
            assert verdicts(row, response) == plan


@pytest.mark.slow
def test_toy_benchmark_end_to_end(tmp_path):
    from benchmarks.learning.run import PRESETS, BenchConfig, run_all

    preset = PRESETS["toy"]
    bench = BenchConfig(**{**preset["bench"], "methods": ("hir", "rl_ir"), "prompts": 4, "eval_every": 2})
    task = TaskConfig(**preset["task"])
    summary = run_all(bench, task, tmp_path / "results", cache_root=tmp_path / "cache", log=lambda s: None)

    runs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results" / "runs").glob("*.json")}
    assert set(runs) == {"hir-seed0", "rl_ir-seed0"}
    for run in runs.values():
        assert [e["step"] for e in run["evals"]] == [0, 2]
        for evaluation in run["evals"]:  # every (prompt, sample) verdict is stored, and gives the ILA
            verdicts = evaluation["verdicts"]
            assert verdicts["samples"] == bench.eval_samples and len(verdicts["rows"]) == bench.eval_prompts
            assert len(verdicts["passed"]) == bench.eval_prompts * bench.eval_samples
            assert all(set(v) <= {"0", "1"} and v for v in verdicts["passed"])
            met = sum("0" not in v for v in verdicts["passed"]) / len(verdicts["passed"])
            assert evaluation["ila"] == pytest.approx(met)
            assert 0 <= evaluation["truncated_fraction"] <= 1
        assert run["preregistration"] is None
        machine = run["machine"]  # where the run ran: floating-point results differ between processors
        assert machine["cores"] == os.cpu_count() and machine["torch"] == torch.__version__
        assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and machine["processor"]
        assert machine["cuda_device"] is None and len(machine["code_commit"]) == 40
        assert machine["packages"]["trl"] == trl.__version__
        assert machine["packages"]["transformers"] == transformers.__version__
        assert len(run["steps"]) == 2
        for step in run["steps"]:
            parts = sum(step[k] for k in ("generation", "verification", "nograd_pass", "selection", "trl_scoring",
                                          "optimizer"))
            assert parts == pytest.approx(step["step_seconds"], rel=0.05)
            assert step["generated_tokens"] > 0
            # the optimizer phase, micro-batch by micro-batch: every trained row, each with its shape and peak
            micro = step["micro_batches"]
            assert sum(mb["rows"] for mb in micro) == 2 * 8
            assert all(0 < mb["longest_completion"] <= mb["completion_tokens"] for mb in micro)
            if step["peak_memory_source"] == "hwm":
                assert all(0 < mb["peak_memory_mb"] <= step["peak_memory_mb"] + 1e-6 for mb in micro)
    # the step-0 evaluation (the starting checkpoint, fixed sampling seed) is computed once and shared
    first, second = (runs[name]["evals"][0] for name in ("hir-seed0", "rl_ir-seed0"))
    assert first["verdicts"] == second["verdicts"] and first["ila"] == second["ila"]
    assert "cached" in first and "cached" in second
    # HiR samples m = 6 per prompt, plus a supplementary sample for each replay slot no candidate fills (the toy
    # model rarely ends a completion, and cut-off completions are not replayed by default); RL-IR samples m + k = 8.
    # Only HiR runs the selection; neither runs a no-grad pass (HiR records its token entropies and
    # log-probs while sampling), and HiR's own timings are in its logs.
    first = next(lg for lg in runs["hir-seed0"]["logs"] if "hir/supplementary_samples" in lg)
    assert runs["hir-seed0"]["steps"][0]["generated_sequences"] == 2 * 6 + first["hir/supplementary_samples"]
    assert runs["rl_ir-seed0"]["steps"][0]["generated_sequences"] == 2 * 8
    assert runs["hir-seed0"]["steps"][0]["nograd_pass"] == 0 and runs["hir-seed0"]["steps"][0]["selection"] > 0
    assert runs["rl_ir-seed0"]["steps"][0]["nograd_pass"] == 0
    assert first["hir/seconds_extra_pass"] == 0 and first["hir/seconds_recording"] > 0
    names = ["results.md", "summary.json"]
    if importlib.util.find_spec("matplotlib") is not None:
        names += ["ila_vs_prompts.png", "ila_vs_time.png", "constraint_heatmap.png", "step_cost.png"]
    for name in names:
        assert (tmp_path / "results" / name).is_file(), name
    assert "tokens_early" in summary["targets"]


def test_paired_cost_summary_and_targets(tmp_path):
    """`benchmarks.paired_cost`: per-step means, HiR / GRPO ratios, the targets met, and where they are written."""
    from benchmarks.paired_cost import allocator_settings, overrides_to_argv, paired_summary, write_targets

    def run(steps, rss):
        keys = ("step_seconds", "generation", "hir_seconds", "optimizer", "generated_tokens", "generate_calls")
        return {"process_peak_rss_mb": rss, "overrides": [], "config": {},
                "steps": [dict(zip(keys, values)) for values in steps]}

    hir = run([(40.0, 20.0, 8.0, 15.0, 800, 2), (30.0, 10.0, 1.0, 15.0, 700, 1)], 5000.0)
    grpo = run([(38.0, 16.0, 0.0, 18.0, 1000, 1), (34.0, 14.0, 0.0, 18.0, 1000, 1)], 5000.0)
    paired = paired_summary(hir, grpo)
    assert paired["step_time_paired"] == {"hir": 35.0, "grpo": 36.0, "ratio": 35.0 / 36.0, "met": True}
    assert paired["generation_seconds_paired"] == {"hir": 15.0, "grpo": 15.0, "ratio": 1.0, "met": True}
    assert paired["tokens_paired"] == {"hir": 750.0, "grpo": 1000.0, "ratio": 0.75, "met": True}
    assert paired["generate_calls_paired"]["hir"] == 1.5 and paired["hir_seconds_per_step"] == 4.5
    assert paired["peak_rss_mb"] == {"hir": 5000.0, "grpo": 5000.0, "ratio": 1.0, "met": True}
    assert not paired_summary(run([(1, 1, 0, 1, 1, 1)], 7000.0), run([(1, 1, 0, 1, 1, 1)], 7000.0))["peak_rss_mb"]["met"]

    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"targets": {"tokens_all": {"ratio": 0.9}}, "costs": {}}))
    record = {"paired": paired, "recipe": "r.yaml", "threads": 1, "label": "default", "hir": hir, "grpo": grpo}
    write_targets(str(summary), record)
    write_targets(str(summary), {**record, "label": "provision-full"})
    written = json.loads(summary.read_text())
    assert written["targets"]["tokens_all"] == {"ratio": 0.9} and written["costs"] == {}  # the rest is kept
    assert written["targets"]["step_time_paired"]["ratio"] == 35.0 / 36.0
    assert written["targets"]["paired_variants"]["provision-full"]["tokens_paired"]["ratio"] == 0.75
    assert overrides_to_argv(["a=1", "b=x=y"]) == ["--a", "1", "--b", "x=y"]
    assert allocator_settings({"MALLOC_MMAP_THRESHOLD_": "65536", "PATH": "/bin", "OMP_NUM_THREADS": "1"}) == {
        "MALLOC_MMAP_THRESHOLD_": "65536"}
    write_targets(str(summary), {**record, "label": "mmap", "malloc": {"MALLOC_MMAP_THRESHOLD_": "65536"}})
    assert json.loads(summary.read_text())["targets"]["paired_variants"]["mmap"]["malloc"] == {
        "MALLOC_MMAP_THRESHOLD_": "65536"}
    with pytest.raises(SystemExit):
        overrides_to_argv(["novalue"])


def test_report_knows_every_benchmark_method():
    """Tables and plots cover every method a run can have (a report of paper-family runs alone must not come out
    empty)."""
    from benchmarks.learning.report import COLORS, METHOD_LABELS, METHOD_ORDER
    from benchmarks.learning.run import METHODS

    assert sorted(METHOD_ORDER) == sorted(METHODS)
    assert set(METHOD_LABELS) == set(COLORS) == set(METHODS)


def test_report_names_each_methods_estimator():
    from benchmarks.learning.report import _estimators, method_estimators

    runs = [{"method": "hir_paper_rpp", "overrides": {"advantage_estimator": "reinforce_pp"}},
            {"method": "hir_cla", "overrides": {}}]
    assert method_estimators(runs, {"extra": ""}) == {"hir_paper_rpp": "reinforce_pp", "hir_cla": "grpo"}
    # BenchConfig.extra is a JSON string (--extra): a report of runs with an override must read it, not crash
    assert method_estimators(runs, {"extra": '{"replay_truncated_completions": false}'})["hir_cla"] == "grpo"
    assert method_estimators(runs, {"extra": '{"advantage_estimator": "rloo"}'}) == {
        "hir_paper_rpp": "reinforce_pp", "hir_cla": "rloo"}

    assert _estimators({"hir_cla": "grpo", "rl_cr": "grpo"}, ["hir_cla", "rl_cr"]) == "`grpo` estimator"
    mixed = _estimators({"hir_cla": "grpo", "hir_paper_rpp": "reinforce_pp", "rl_cr_rpp": "reinforce_pp"},
                        ["hir_cla", "hir_paper_rpp", "rl_cr_rpp"])
    assert mixed == ("estimators `grpo` (HiR (default: CLA reward)); `reinforce_pp` (HiR (paper recipe: Reinforce++, "
                     "KL), RL-CR (Reinforce++, KL))")


@pytest.mark.slow
def test_interrupted_run_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    """A run with ``save_every`` killed mid-way resumes from its last checkpoint and ends where an uninterrupted run
    ends: the same held-out evaluations, losses and rewards (CPU, one thread: bit for bit)."""
    from benchmarks.learning.run import PRESETS, BenchConfig, last_checkpoint, partial_dir, run_worker
    from benchmarks.learning.task import ensure_sft_model
    from hir_trl import HiRTrainer

    preset = PRESETS["toy"]
    task_dir = ensure_sft_model(TaskConfig(**preset["task"]), root=tmp_path / "cache", log=lambda s: None)
    bench = BenchConfig(**{**preset["bench"], "prompts": 8, "eval_every": 2, "threads": 1})
    straight = tmp_path / "straight.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    run_worker("hir", 0, bench, task_dir, straight)
    assert torch.get_num_threads() == threads + 1  # the caller's thread count is given back
    torch.set_num_threads(threads)

    resumable = BenchConfig(**{**dataclasses.asdict(bench), "save_every": 2})
    out = tmp_path / "resumed.json"
    original, calls = HiRTrainer.training_step, []

    def killed_in_step_3(self, *args, **kwargs):
        calls.append(self.state.global_step)
        if self.state.global_step == 2:  # the third optimizer step, after checkpoint-2 was saved
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HiRTrainer, "training_step", killed_in_step_3)
    with pytest.raises(KeyboardInterrupt):
        run_worker("hir", 0, resumable, task_dir, out)
    monkeypatch.setattr(HiRTrainer, "training_step", original)
    partial = partial_dir(task_dir, "hir", 0, resumable, out)
    assert not out.exists() and last_checkpoint(partial).name == "checkpoint-2"

    run_worker("hir", 0, resumable, task_dir, out)
    a, b = json.loads(straight.read_text()), json.loads(out.read_text())
    assert [s["start_step"] for s in b["segments"]] == [0, 2] and a["segments"][0]["start_step"] == 0
    assert [e["step"] for e in b["evals"]] == [e["step"] for e in a["evals"]] == [0, 2, 4]
    for x, y in zip(a["evals"], b["evals"]):
        assert x["verdicts"] == y["verdicts"] and x["ila"] == y["ila"]
    assert [s["step"] for s in b["steps"]] == [1, 2, 3, 4]
    assert [lg["step"] for lg in b["logs"]] == [lg["step"] for lg in a["logs"]] == [1, 2, 3, 4]
    for x, y in zip(a["logs"], b["logs"]):
        for key in ("loss", "reward/ila", "reward/cla", "hir/replayed_rows", "hir/lambda"):
            assert x.get(key) == y.get(key), (x["step"], key)
    assert not partial.exists()  # the record is written: the checkpoints are gone


def test_machine_info_names_library_versions(monkeypatch):
    from benchmarks.learning import run as bench_run

    monkeypatch.setattr(bench_run, "RECORDED_PACKAGES", ("trl", "peft", "no-such-package-hir-trl"))
    packages = bench_run.machine_info()["packages"]
    assert packages == {"trl": trl.__version__, "peft": __import__("peft").__version__,
                        "no-such-package-hir-trl": None}
