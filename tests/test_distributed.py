"""Several CPU processes (torchrun, gloo): every rank holds whole groups, adds the same number of rows, keeps each
hindsight row beside its source, and selects what a 1-process run with the same global batch selects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, SAMPLE_DATA

pytestmark = pytest.mark.slow


def torchrun(tmp_path, model, nproc, name, *flags):
    launcher = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    out = tmp_path / name
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # --standalone: torchrun picks a free rendezvous port (fixed ports collided with other jobs on the machine)
    cmd = [launcher, "--standalone", "--nproc_per_node", str(nproc),
           str(REPO_ROOT / "tests/scripts/ddp_rows.py"), str(model), str(SAMPLE_DATA), str(out), *flags]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    assert all(r["world"] == nproc for r in ranks)
    return [r["records"] for r in ranks]


def test_torchrun_two_ranks_hold_the_same_number_of_rows(tmp_path, tiny_model_path):
    rank0, rank1 = torchrun(tmp_path, tiny_model_path, 2, "skew", "--skew")
    assert len(rank0) == len(rank1) == 1  # steps_per_generation=2 x num_iterations=2 per generation
    a, b = rank0[0], rank1[0]
    # generation batch per rank: 6 x 2 = 12 rows = 2 whole groups of m=6; + 2 groups x k=2 new rows = 16
    assert a["original_rows"] == b["original_rows"] == 12
    assert set(a["rows"].values()) == set(b["rows"].values()) == {16}
    for rec in (a, b):
        ids = rec["row_ids"]
        assert ids[:6] == [ids[0]] * 6 and ids[6:] == [ids[6]] * 6  # whole groups on the rank
    # rank 1 found no candidate: its 2 groups x k=2 rows are supplementary samples; rank 0 joined the same
    # generation call, padding its request with filler prompts (counted over both ranks in the metric)
    assert b["kinds"] == ["supplementary"] * 4
    supplementary_rank0 = a["kinds"].count("supplementary")
    assert a["fillers"] == b["fillers"] == 4 - supplementary_rank0
    assert a["supplementary"] == b["supplementary"] == 4 + supplementary_rank0
    # num_items_in_batch is global: both ranks' loss tokens
    assert a["num_items_in_batch"] == b["num_items_in_batch"] == a["local_loss_tokens"] + b["local_loss_tokens"]


def test_two_ranks_match_one_process_with_the_same_global_batch(tmp_path, tiny_model_path):
    """Scripted (batching-independent) completions: 2 ranks x 6 rows and 1 rank x 12 rows per micro-batch see the
    same prompts, so they must compute the same lambda and select the same completions, with each hindsight row
    on the rank of its source."""
    two = torchrun(tmp_path, tiny_model_path, 2, "two", "--scripted", "--max-steps", "4")
    one = torchrun(tmp_path, tiny_model_path, 1, "one", "--scripted", "--max-steps", "4", "--per-device-batch", "12")[0]
    assert len(one) == len(two[0]) == len(two[1]) == 2  # two generation batches
    for gen in range(2):
        rank0, rank1 = two[0][gen], two[1][gen]
        single = one[gen]
        assert rank0["lambda"] == rank1["lambda"] == single["lambda"]
        assert set(rank0["rows"].values()) == set(rank1["rows"].values()) == {16}
        assert set(single["rows"].values()) == {32}
        assert rank0["row_ids"] + rank1["row_ids"] == single["row_ids"]  # the same global batch, split by rank
        for rec in (rank0, rank1):
            for added in rec["added"]:
                if added["kind"] == "replay":
                    assert added["source_on_this_rank"] and added["row_id"] in rec["row_ids"]
                    assert added["completion"] == added["source_completion"]

        def selections(records):
            return sorted(json.dumps({k: v for k, v in a.items() if k != "source_on_this_rank"}, sort_keys=True)
                          for rec in records for a in rec["added"])

        assert selections([rank0, rank1]) == selections([single])
        assert any(a["kind"] == "replay" for a in single["added"])


def test_predicted_provision_keeps_ranks_in_step_with_one_generate_call(tmp_path, tiny_model_path):
    """supplementary_provision='predicted' with rank 1 short of every replay: the prediction is made from both ranks'
    shortfalls, so both ranks draw the same number of provisioned samples, and no rank needs a second call."""
    rank0, rank1 = torchrun(tmp_path, tiny_model_path, 2, "provision", "--skew", "--provision", "predicted",
                            "--max-steps", "4")
    assert len(rank0) == len(rank1) == 2  # two generation batches
    for a, b in zip(rank0, rank1):
        # per rank: 2 groups x (m = 6 + e = k = 2): the first batch has no history, the second's history holds
        # rank 1's shortfall of k in every group (rank 0 alone would predict less)
        assert a["generate_calls"] == b["generate_calls"] == [16]
        assert a["logged_generate_calls"] == b["logged_generate_calls"] == 1
        assert a["provisioned"] == b["provisioned"] == 2 * 2 * 2  # summed over the 2 ranks
        assert a["fillers"] == b["fillers"] == 0
        assert set(a["rows"].values()) == set(b["rows"].values()) == {16}
        assert b["kinds"] == ["supplementary"] * 4
        assert a["num_items_in_batch"] == b["num_items_in_batch"] == a["local_loss_tokens"] + b["local_loss_tokens"]
