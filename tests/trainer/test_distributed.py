"""Several CPU processes (torchrun, gloo): every rank holds whole groups, adds the same number of rows, keeps each
hindsight row beside its source, and selects what a 1-process run with the same global batch selects.

The DeepSpeed tests (marker ``deepspeed``; ``make test-deepspeed-cpu``) run the same script under ZeRO-2 and ZeRO-3
on CPU (``DS_ACCELERATOR=cpu``, gloo) with ``recipes/deepspeed/zero{2,3}_cpu.json``: every rank must run a DeepSpeed
engine at that stage, with every parameter partitioned under ZeRO-3, and log the loss and grad norm of the DDP run.
They skip with the reason when deepspeed is not installed (it is not in the dev extra)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..testing_utils import REPO_ROOT, SAMPLE_DATA

pytestmark = pytest.mark.slow


def launch(tmp_path, model, nproc, name, *flags):
    """Run tests/scripts/ddp_rows.py under torchrun; returns (the finished process, its output folder)."""
    launcher = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    out = tmp_path / name
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "DS_ACCELERATOR": "cpu"}  # DeepSpeed's CPU accelerator (only read when --deepspeed is given)
    # --standalone: torchrun picks a free rendezvous port (fixed ports collided with other jobs on the machine)
    cmd = [launcher, "--standalone", "--nproc_per_node", str(nproc),
           str(REPO_ROOT / "tests/scripts/ddp_rows.py"), str(model), str(SAMPLE_DATA), str(out), *flags]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as exc:  # a hang: the ranks went out of step and nothing noticed
        pytest.fail(f"torchrun {' '.join(flags)} did not finish in {exc.timeout} s: the ranks hang")
    return proc, out


def torchrun_ranks(tmp_path, model, nproc, name, *flags):
    """Each rank's JSON record (see tests/scripts/ddp_rows.py) of a run that must succeed."""
    proc, out = launch(tmp_path, model, nproc, name, *flags)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    assert all(r["world"] == nproc for r in ranks)
    return ranks


def torchrun(tmp_path, model, nproc, name, *flags):
    return [r["records"] for r in torchrun_ranks(tmp_path, model, nproc, name, *flags)]


def check_skewed_step(rank0, rank1):
    """What --skew must give on 2 ranks, whatever the launcher (see test_torchrun_two_ranks_hold_the_same_number_of_rows)."""
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


def test_torchrun_two_ranks_hold_the_same_number_of_rows(tmp_path, tiny_model_path):
    rank0, rank1 = torchrun(tmp_path, tiny_model_path, 2, "skew", "--skew")
    check_skewed_step(rank0, rank1)


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


def test_paper_loss_weighting_on_two_ranks_matches_one_process(tmp_path, tiny_model_path):
    """replay_loss_weighting 'paper' counts the groups and loss tokens of all ranks: 2 ranks x 6 rows and 1 rank x 12
    rows (the same global batch) give the same objective, sum(A' x mask) / num_items_in_batch, and it is not the
    token mean's."""
    flags = ("--scripted", "--max-steps", "2")
    two = torchrun(tmp_path, tiny_model_path, 2, "two", *flags, "--loss-weighting", "paper")
    one = torchrun(tmp_path, tiny_model_path, 1, "one", *flags, "--per-device-batch", "12", "--loss-weighting",
                   "paper")[0]
    token = torchrun(tmp_path, tiny_model_path, 1, "token", *flags, "--per-device-batch", "12")[0]
    assert len(one) == len(two[0]) == len(two[1]) == len(token) == 1
    (rank0,), (rank1,), (single,), (mean,) = two[0], two[1], one, token
    assert rank0["num_items_in_batch"] == rank1["num_items_in_batch"] == single["num_items_in_batch"]
    paper = single["advantage_token_sum"] / single["num_items_in_batch"]
    assert (rank0["advantage_token_sum"] + rank1["advantage_token_sum"]) / rank0["num_items_in_batch"] == \
        pytest.approx(paper, rel=1e-5, abs=1e-7)
    assert paper != pytest.approx(mean["advantage_token_sum"] / mean["num_items_in_batch"], rel=1e-3, abs=1e-6)


# ------------------------------------------------------------------------------------------ DeepSpeed on CPU

DEEPSPEED_CONFIGS = REPO_ROOT / "recipes" / "deepspeed"
#: the skewed step (rank 1 needs supplementary samples, rank 0 joins with fillers) with batching-independent
#: completions, so that a DDP and a DeepSpeed run see the same rows and must log the same losses
SKEWED_SCRIPTED = ("--skew", "--scripted")


def require_deepspeed():
    pytest.importorskip("deepspeed", reason="deepspeed is not installed (not in the dev extra): make test-deepspeed-cpu "
                                            "installs it and runs these tests")


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory, tiny_model_path):
    require_deepspeed()  # only the DeepSpeed tests compare with it
    return torchrun_ranks(tmp_path_factory.mktemp("ddp"), tiny_model_path, 2, "ddp", *SKEWED_SCRIPTED)


@pytest.mark.deepspeed
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_on_cpu_keeps_ranks_in_step_and_logs_the_ddp_loss(tmp_path, tiny_model_path, ddp_reference,
                                                                         stage):
    config = DEEPSPEED_CONFIGS / f"zero{stage}_cpu.json"
    assert "train_batch_size" not in json.loads(config.read_text())  # accelerate on CPU cannot fill it in
    ranks = torchrun_ranks(tmp_path, tiny_model_path, 2, f"zero{stage}", *SKEWED_SCRIPTED, "--deepspeed", str(config))
    for rank in ranks:
        facts = rank["deepspeed"]
        assert facts["engine"] == "DeepSpeedEngine" and facts["stage"] == stage and facts["device"].startswith("cpu")
        # ZeRO-3 with stage3_param_persistence_threshold 0: every parameter is partitioned over the 2 ranks (with the
        # threshold accelerate would set, 10 x hidden size, none of the tiny model's would be)
        assert facts["partitioned"] == (facts["params"] if stage == 3 else 0) and facts["params"] > 0
    check_skewed_step(ranks[0]["records"], ranks[1]["records"])
    for rank, reference in zip(ranks, ddp_reference):
        assert reference["deepspeed"] is None and len(rank["losses"]) == 2
        assert rank["losses"] == pytest.approx(reference["losses"], rel=1e-5, abs=1e-7)
        assert rank["grad_norms"] == pytest.approx(reference["grad_norms"], rel=1e-4)
        assert rank["records"][0]["row_ids"] == reference["records"][0]["row_ids"]
        assert rank["records"][0]["added"] == reference["records"][0]["added"]


@pytest.mark.deepspeed
def test_a_rank_that_skips_a_collective_fails_and_does_not_hang(tmp_path, tiny_model_path):
    """Negative control for the tests above: if a rank skipped the supplementary generation that another rank needs
    (the collective HiR adds), ZeRO-3 must stop the run with an error, not wait forever (a 900 s limit fails it)."""
    require_deepspeed()
    proc, out = launch(tmp_path, tiny_model_path, 2, "broken", *SKEWED_SCRIPTED, "--skip-supplementary-on-rank0",
                       "--deepspeed", str(DEEPSPEED_CONFIGS / "zero3_cpu.json"))
    assert proc.returncode != 0
    assert not (out / "rank0.json").exists() and not (out / "rank1.json").exists()
    # gloo sees the mismatch at once ("Received data size doesn't match expected size. Is there a distributed
    # collective mismatch in your code?"); a wait would end at ddp_timeout (120 s) with a timeout error instead
    assert re.search(r"collective mismatch|timed? ?out", proc.stderr, re.I), proc.stderr[-3000:]

