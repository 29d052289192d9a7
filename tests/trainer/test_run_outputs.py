"""What ``hir-trl train`` leaves in ``output_dir``: resuming from the latest checkpoint, refusing to mix two runs in
one folder, and a summary and model card that describe this run only."""

from __future__ import annotations

import json
import re

from hir_trl.cli.main import main

from ..testing_utils import REPO_ROOT

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


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.startswith("hir-trl train: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_output_dir_of_another_run_is_refused_unless_overwritten_and_then_holds_this_run_only(tmp_path,
                                                                                           tiny_model_path, capsys):
    out = tmp_path / "run"
    assert train(out, tiny_model_path, "--max_steps", 3, "--save_steps", 1, "--save_total_limit", 2) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    capsys.readouterr()
    # a second run with another seed into the same folder would mix with the first
    assert train(out, tiny_model_path, "--max_steps", 1, "--seed", 7) == 2
    err = one_line_error(capsys)
    assert "holds another run (checkpoint-2, checkpoint-3, completions/, trainer_state.json)" in err
    assert "--overwrite_output_dir true" in err and "--resume_from_checkpoint true" in err
    assert sorted(p.name for p in (out / "completions").iterdir())[-1] == "completions_00003.parquet"  # untouched

    assert train(out, tiny_model_path, "--max_steps", 1, "--seed", 7, "--save_steps", 1,
                 "--overwrite_output_dir", "true") == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert sorted(p.name for p in (out / "completions").iterdir()) == ["completions_00001.parquet"]
    assert f"last checkpoint : {out / 'checkpoint-1'}" in printed
    steps = re.findall(r"\[\d\] step (\d+), row", printed)  # example replays from this run's only step
    assert steps and set(steps) == {"1"}
    assert logged_steps(out) == [1]


def test_summary_reads_only_the_steps_of_this_run(tmp_path):
    from hir_trl.cli.summary import training_summary

    for step in (2, 5):  # checkpoint-5: left by an earlier run that this one resumed from checkpoint-2 of
        (tmp_path / f"checkpoint-{step}").mkdir()
    history = [{"step": 1, "reward/ila": 0.5, "hir/replayed_rows": 4.0, "hir/supplementary_samples": 0.0,
                "hir/padded_rows": 0.0},
               {"step": 3, "reward/ila": 0.5, "hir/replayed_rows": 3.0, "hir/supplementary_samples": 1.0,
                "hir/padded_rows": 2.0}]
    text = training_summary(tmp_path, history, log_completions=False, last_step=3)
    assert f"last checkpoint : {tmp_path / 'checkpoint-2'}" in text
    # the entry of step 3 is the mean over steps 2 and 3: 4 + 2 x 3 replays in all
    assert "Replays made: 10; supplementary samples: 2; padding rows: 4 (over 3 steps; each row is the mean" in text
    text = training_summary(tmp_path, history, log_completions=False, generations_per_step=0.5)
    assert f"last checkpoint : {tmp_path / 'checkpoint-5'}" in text and "Replays made: 5;" in text


def test_summary_names_the_largest_share_of_the_step_time():
    from hir_trl.cli.summary import step_time_line

    history = [{"step": 1, "reward/ila": 0.5, "hir/seconds_generation": 2.0, "hir/seconds_judge": 5.0,
                "hir/seconds_verification": 1.0, "hir/seconds_selection": 0.0},
               {"step": 2, "reward/ila": 0.5, "hir/seconds_generation": 6.0, "hir/seconds_judge": 1.0,
                "hir/seconds_verification": 1.0, "hir/seconds_selection": 0.0}]
    line = step_time_line(history)
    assert line.startswith("Step time: the largest share is generation (50% of 16.0 s timed over the run")
    assert "judge wait 38%, rule verification 12%" in line and "selection" not in line  # a part that took no time
    assert step_time_line([{"step": 1, "reward/ila": 0.5}]) is None  # a run without the timings


def test_step_timer_counts_time_measured_elsewhere_as_a_nested_block(monkeypatch):
    from hir_trl.step import log

    now = iter([0.0, 10.0])
    monkeypatch.setattr(log.time, "perf_counter", lambda: next(now))
    timer = log.StepTimer()
    with timer.timed("supplementary"):
        timer.add("verification", 3.0)  # e.g. ConstraintReward's rule verification inside the block
    assert timer.seconds == {"supplementary": 7.0, "verification": 3.0}
    timer.add("judge", 2.0)  # outside any block
    assert timer.seconds["judge"] == 2.0 and timer.seconds["supplementary"] == 7.0


def test_model_card_of_a_local_run_names_local_paths_not_hub_links(tmp_path, tiny_model_path, capsys):
    out = tmp_path / "my-run"
    assert train(out, tiny_model_path, "--max_steps", 1, "--save_strategy", "no", "--log_completions", "false") == 0
    card = (out / "README.md").read_text()
    assert "None" not in card.split("## HiR training")[0], card
    assert "# Model Card for my-run" in card
    assert f"`{tiny_model_path}` (local)" in card and f'model="{out}"' in card
    assert "huggingface.co/datasets/" not in card  # the local dataset file is named in the HiR section instead
    assert "- Dataset: `" in card and "muldimif_listing_sample.jsonl" in card


def test_max_steps_zero_is_refused_not_trained(tmp_path, tiny_model_path, capsys):
    assert train(tmp_path / "run", tiny_model_path, "--max_steps", 0) == 2
    assert "max_steps must be >= 1 (or -1: train for num_train_epochs epochs), got 0" in one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_a_truncated_or_corrupt_checkpoint_file_is_one_line_naming_it(tmp_path, tiny_model_path, capsys):
    import shutil

    out = tmp_path / "run"
    assert train(out, tiny_model_path, "--max_steps", 1, "--save_steps", 1, "--log_completions", "false") == 0
    checkpoint = out / "checkpoint-1"
    pristine = tmp_path / "pristine"
    shutil.copytree(checkpoint, pristine)
    capsys.readouterr()
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json",
                 "hir_state.json"):
        for damage in ("truncated", "garbage"):
            shutil.rmtree(checkpoint)
            shutil.copytree(pristine, checkpoint)
            data = (checkpoint / name).read_bytes()
            (checkpoint / name).write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00garbage" * 8)
            assert train(out, tiny_model_path, "--max_steps", 2, "--resume_from_checkpoint", checkpoint) == 2, name
            err = one_line_error(capsys)
            assert f"resume_from_checkpoint: {checkpoint / name} is truncated or corrupt (" in err, (name, err)
    shutil.rmtree(checkpoint)
    shutil.copytree(pristine, checkpoint)  # intact again: resumes
    assert train(out, tiny_model_path, "--max_steps", 2, "--resume_from_checkpoint", "true",
                 "--log_completions", "false") == 0
