"""benchmarks/gpu/acceptance.sh on a machine without a GPU: it stops before any GPU work (exit 3), names what it would
run and writes no record; the launch scripts parse (``bash -n``); the plan's peak line is read as the record needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu.acceptance import NO_GPU, RECIPE, plan_peak_bytes

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here: the script would run the acceptance run")
def test_without_a_gpu_the_acceptance_script_names_what_it_would_run_and_stops(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "CARRY": str(tmp_path / "no-carry"), "CUDA_VISIBLE_DEVICES": ""}
    ran = subprocess.run(["bash", str(ROOT / "benchmarks/gpu/acceptance.sh"), "--out", str(tmp_path / "records")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == NO_GPU == 3, ran.stdout + ran.stderr
    assert "no CUDA GPU here" in ran.stdout and "nothing run" in ran.stdout
    assert "-m pytest -q -p no:cacheprovider -rs tests/recipes/test_gpu.py" in ran.stdout
    train = next(line for line in ran.stdout.splitlines() if " train " in line)
    assert str(RECIPE.relative_to(ROOT)) in train and "--bf16 true --max_steps 2" in train
    assert "plan --gpu_memory_gb" in ran.stdout
    assert not (tmp_path / "records").exists() and not (tmp_path / "no-carry").exists()  # nothing written or installed


@pytest.mark.parametrize("script", ["benchmarks/gpu/acceptance.sh", "benchmarks/gpu/prepare.sh",
                                    "recipes/slurm/train.slurm"])
def test_the_launch_scripts_parse(script):
    ran = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr


def test_the_plan_s_peak_line_is_read_in_bytes():
    text = "memory per GPU:\n  peak: training 1.5 GiB, generation 6.3 MiB; budget 72.0 GiB (90% of the GPU)\n"
    assert plan_peak_bytes(text) == {"training": 1.5 * 2**30, "generation": 6.3 * 2**20}
    assert plan_peak_bytes("verdict: fits\n") is None
