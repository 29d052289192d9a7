"""GPU-only checks (skipped on CPU machines and in CI): the tiny recipe on one GPU, with TRL's transformers generation
and with vLLM in colocate mode; the learning benchmark's worker and the real-task step pilot on CUDA."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch

from hir_trl.cli.main import main

from ..testing_utils import REPO_ROOT, SAMPLE_DATA

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (pip install 'hir-trl[vllm]')")


@needs_cuda
@needs_vllm
@pytest.mark.parametrize("shortfall", ["resample", "pad"])
def test_tiny_recipe_with_colocated_vllm(tmp_path, shortfall):
    out = tmp_path / "run"
    main(["train", "--config", str(REPO_ROOT / "recipes/tiny/hir/config_cpu.yaml"), "--output_dir", str(out),
          "--model_name_or_path", str(tmp_path / "model"), "--use_cpu", "false", "--bf16", "true",
          "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", "0.2",
          "--replay_shortfall", shortfall, "--max_steps", "5", "--save_strategy", "no"])
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert "- hir" in (out / "README.md").read_text()
    steps = [h for h in history if "hir/rows_per_group" in h]
    assert len(steps) == 5
    if shortfall == "resample":
        assert all(h["hir/rows_per_group"] == 8 for h in steps)  # m + k real rows in every group
    assert all("sampling/importance_sampling_ratio/mean" in h for h in steps)  # vLLM correction on


@needs_cuda
def test_tiny_recipe_on_cuda_with_transformers_generation(tmp_path):
    """`hir-trl train` on one GPU, bf16 mixed precision, generation by TRL's transformers path (no vLLM)."""
    torch.cuda.reset_peak_memory_stats()
    out = tmp_path / "run"
    main(["train", "--config", str(REPO_ROOT / "recipes/tiny/hir/config_cpu.yaml"), "--output_dir", str(out),
          "--model_name_or_path", str(tmp_path / "model"), "--use_cpu", "false", "--bf16", "true",
          "--replay_shortfall", "resample", "--max_steps", "5", "--save_strategy", "no"])
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [h for h in history if "hir/rows_per_group" in h]
    assert len(steps) == 5 and all(h["hir/rows_per_group"] == 8 for h in steps)  # m + k rows in every group
    assert all(math.isfinite(h["loss"]) for h in steps)
    assert torch.cuda.max_memory_allocated() > 0  # the model and its batches lived on the GPU


@needs_cuda
def test_toy_learning_benchmark_on_cuda(tmp_path):
    """`benchmarks.learning.run --device cuda`: a worker trains and evaluates on the GPU and records it."""
    from benchmarks.learning.run import PRESETS, BenchConfig, run_all
    from benchmarks.learning.task import TaskConfig

    preset = PRESETS["toy"]
    bench = BenchConfig(**{**preset["bench"], "methods": ("hir", "rl_ir"), "prompts": 4, "eval_every": 2,
                           "device": "cuda"})
    run_all(bench, TaskConfig(**preset["task"]), tmp_path / "results", cache_root=tmp_path / "cache",
            log=lambda s: None)
    runs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results" / "runs").glob("*.json")}
    assert set(runs) == {"hir-seed0", "rl_ir-seed0"}
    for run in runs.values():
        assert run["machine"]["cuda_device"] == torch.cuda.get_device_name()
        assert run["cuda_max_memory_mb"] > 0 and all(s["peak_memory_mb"] > 0 for s in run["steps"])
        assert [e["step"] for e in run["evals"]] == [0, 2] and len(run["steps"]) == 2


@needs_cuda
def test_real_task_step_pilot_on_cuda(tiny_model_path):
    from benchmarks.learning.real_task import pilot_steps

    result = pilot_steps(SAMPLE_DATA, tiny_model_path, steps=2, max_completion_length=8, lora=True, device="cuda")
    assert result["device"] == "cuda" and result["cuda_device"] == torch.cuda.get_device_name()
    assert [s["step"] for s in result["steps"]] == [1, 2]
    assert all(s["peak_memory_mb"] > 0 and s["generation"] > 0 for s in result["steps"])
