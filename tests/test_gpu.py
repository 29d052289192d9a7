"""GPU-only checks (skipped on CPU machines and in CI): the tiny recipe with vLLM in colocate mode."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from hir_trl.cli import main

from .conftest import REPO_ROOT

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
