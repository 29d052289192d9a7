"""What ``hir-trl train`` leaves in ``output_dir``: resuming from the latest checkpoint, refusing to mix two runs in
one folder, and a summary and model card that describe this run only."""

from __future__ import annotations

import json

from hir_trl.cli import main

from .conftest import REPO_ROOT

TINY_RECIPE = REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu.yaml"


def train(out, model, *extra):
    """``hir-trl train`` on the tiny recipe (an already built model), in-process; the exit status."""
    return main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path", str(model),
                 "--build_tiny_model", "false", *map(str, extra)])


def logged_steps(out):
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [h["step"] for h in history if "reward/ila" in h]


def test_resume_from_checkpoint_true_resumes_from_the_latest_checkpoint(tmp_path, tiny_model_path, capsys):
    out = tmp_path / "run"
    assert train(out, tiny_model_path, "--max_steps", 2, "--save_steps", 1, "--save_total_limit", 3) == 0
    first = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    capsys.readouterr()
    assert train(out, tiny_model_path, "--max_steps", 3, "--save_steps", 1, "--resume_from_checkpoint", "true") == 0
    assert "Traceback" not in capsys.readouterr().err
    # steps 1-2 come from checkpoint-2 (not trained again), step 3 is new
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert logged_steps(out) == [1, 2, 3]
    assert [h for h in history if h.get("step") in (1, 2) and "reward/ila" in h] == [
        h for h in first if "reward/ila" in h]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
