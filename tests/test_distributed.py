"""Two CPU processes (torchrun, gloo): every rank holds whole groups and adds the same number of rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, SAMPLE_DATA


@pytest.mark.slow
def test_torchrun_two_ranks_hold_the_same_number_of_rows(tmp_path, tiny_model_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [torchrun, "--nproc_per_node", "2", "--master_port", "29517", str(REPO_ROOT / "tests/scripts/ddp_rows.py"),
           str(tiny_model_path), str(SAMPLE_DATA), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    per_rank = [r["records"] for r in ranks]
    assert len(per_rank[0]) == len(per_rank[1]) == 1  # steps_per_generation=2 x num_iterations=2 per generation
    a, b = per_rank[0][0], per_rank[1][0]
    # generation batch per rank: 6 x 2 = 12 rows = 2 whole groups of m=6; + 2 groups x k=2 replays = 16
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
