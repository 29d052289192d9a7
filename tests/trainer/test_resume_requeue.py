"""Every run can go on: a run killed at any moment continues with its command plus ``--resume_from_checkpoint true``
(a scheduler's requeue), each case in several variants, through the Python API (`hir_trl.run_folder`) and
``hir-trl train``:

1. ``true`` passes over a checkpoint killed while it was saved (or damaged) and resumes from the latest usable one;
   the unusable one is moved aside, so nothing points at it again. A checkpoint named explicitly is still refused.
2. ``true`` with no usable checkpoint (killed before the first one, or into an empty folder) starts the run again,
   its earlier start moved aside; a finished run without checkpoints stays finished.
3. A LoRA run with ``lora_target_modules: all-linear`` resumes from its own checkpoints (peft saves the option
   expanded into layer names); an adapter of other layers is still refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hir_trl.cli.main import main
from hir_trl.run_folder import (
    ABANDONED,
    FINAL_MARK,
    AlreadyFinished,
    _lora_problem,
    check_not_finished,
    check_resume,
    last_checkpoint,
    set_aside_later_line,
)

from ..testing_utils import TINY_RECIPE, write_checkpoint

DAMAGES = {
    "killed before its trainer state": lambda c: (c / "trainer_state.json").unlink(),
    "killed before anything": lambda c: [p.unlink() for p in c.iterdir()],
    "empty hir_state": lambda c: (c / "hir_state.json").write_text(""),
    "truncated weights": lambda c: (c / "model.safetensors").write_bytes((c / "model.safetensors").read_bytes()[:20]),
}


# ------------------------------------------------------------------------------ 1. past an unusable checkpoint


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_true_resumes_from_the_latest_usable_checkpoint(tmp_path, damage):
    first, second = write_checkpoint(tmp_path / "checkpoint-1", 1), write_checkpoint(tmp_path / "checkpoint-2", 2)
    DAMAGES[damage](second)
    for spelling in (True, "true", "True"):
        assert check_resume(spelling, str(tmp_path)) == str(first)
    with pytest.raises(ValueError, match=f"resume from {first} instead"):  # named, it is still refused
        check_resume(str(second), str(tmp_path))
    moved_to, moved = set_aside_later_line(str(first), str(tmp_path))
    assert moved == ["checkpoint-2"] and moved_to == tmp_path / ABANDONED / "after-checkpoint-1"
    assert last_checkpoint(str(tmp_path)) == str(first) and not second.exists()


def test_true_passes_over_several_unusable_checkpoints(tmp_path):
    first = write_checkpoint(tmp_path / "checkpoint-1", 1)
    for step in (2, 3):
        DAMAGES["killed before its trainer state"](write_checkpoint(tmp_path / f"checkpoint-{step}", step))
    assert check_resume("true", str(tmp_path)) == str(first)


# ------------------------------------------------------------------------------ 2. no usable checkpoint


@pytest.mark.parametrize("state", ["no folder", "empty folder", "only a killed checkpoint", "only logs"])
def test_true_without_a_usable_checkpoint_starts_again(tmp_path, state):
    out = tmp_path / "out"
    if state != "no folder":
        out.mkdir()
    if state == "only a killed checkpoint":
        DAMAGES["killed before its trainer state"](write_checkpoint(out / "checkpoint-1", 1))
    if state == "only logs":
        (out / "completions").mkdir()
        (out / "completions" / "completions_00001.parquet").write_bytes(b"x")
    (tmp_path / "keep.txt").write_text("the user's")
    assert check_resume("true", str(out)) is None
    check_not_finished(str(out))  # nothing finished here
    moved_to, moved = set_aside_later_line(None, str(out), from_start=True)
    if state in ("no folder", "empty folder"):
        assert moved == []
    else:
        assert moved and moved_to == out / ABANDONED / "after-step-0"
        assert not (out / "checkpoint-1").exists() and not (out / "completions" / "completions_00001.parquet").exists()
    assert (tmp_path / "keep.txt").read_text() == "the user's"


def test_a_finished_run_without_checkpoints_stays_finished(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "training_args.bin").write_bytes(b"args")
    (tmp_path / FINAL_MARK).write_text(json.dumps({"global_step": 5, "max_steps": 5, "files": {
        "model.safetensors": (tmp_path / "model.safetensors").stat().st_size, "training_args.bin": 4}}))
    assert check_resume("true", str(tmp_path)) is None
    with pytest.raises(AlreadyFinished, match="already finished: it holds its final model \\(step 5\\) and no "
                                              "checkpoint"):
        check_not_finished(str(tmp_path))


def test_a_requeue_before_the_first_checkpoint_trains_from_the_start(tmp_path, capsys, tiny_model_path):
    out = tmp_path / "out"
    DAMAGES["killed before its trainer state"](write_checkpoint(out / "checkpoint-1", 1))
    code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path",
                 str(tiny_model_path), "--build_tiny_model", "false", "--max_steps", "1", "--save_strategy", "no",
                 "--log_completions", "false", "--resume_from_checkpoint", "true"])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert f"no usable checkpoint in {out}, starting from step 0: moved the later line aside to " \
           f"{out / ABANDONED / 'after-step-0'} (checkpoint-1)" in err
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 1


# ------------------------------------------------------------------------------ 3. LoRA all-linear


def _adapter(folder: Path, target_modules) -> Path:
    write_checkpoint(folder, 2)
    (folder / "model.safetensors").rename(folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"r": 16, "lora_alpha": 32,
                                                            "target_modules": target_modules}))
    return folder


def _all_linear_names() -> list[str]:
    """What peft 0.21 writes to adapter_config.json for ``all-linear`` on the tiny Qwen2 model (2 layers)."""
    names = []
    for layer in range(2):
        names += [f"model.layers.{layer}.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
        names += [f"model.layers.{layer}.mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")]
    return names


@pytest.mark.parametrize("spelling", ["all-linear", ["all-linear"], "ALL-LINEAR"])
def test_all_linear_matches_the_layer_names_peft_saved(tmp_path, tiny_model_path, spelling):
    checkpoint = _adapter(tmp_path / "checkpoint-2", _all_linear_names())
    lora = {"r": 16, "lora_alpha": 32, "target_modules": spelling, "model": str(tiny_model_path)}
    assert _lora_problem(checkpoint, lora) is None
    # and the other way round: an adapter saved with the shorthand itself (older peft)
    assert _lora_problem(_adapter(tmp_path / "short" / "checkpoint-2", "all-linear"),
                         {**lora, "target_modules": _all_linear_names()}) is None


@pytest.mark.parametrize("this_run, saved", [
    ("all-linear", ["q_proj", "v_proj"]),
    (["q_proj", "v_proj"], "all-linear-expanded"),
    ("all-linear", "all-but-one"),
])
def test_all_linear_against_other_layers_is_refused(tmp_path, tiny_model_path, this_run, saved):
    names = _all_linear_names()
    if isinstance(saved, str):
        saved = {"all-linear-expanded": names, "all-but-one": names[1:]}[saved]
    checkpoint = _adapter(tmp_path / "checkpoint-2", saved)
    problem = _lora_problem(checkpoint, {"r": 16, "lora_alpha": 32, "target_modules": this_run,
                                         "model": str(tiny_model_path)})
    assert problem is not None and "lora_target_modules" in problem


def test_all_linear_against_a_base_that_cannot_be_read_is_left_to_peft(tmp_path):
    checkpoint = _adapter(tmp_path / "checkpoint-2", ["model.layers.0.self_attn.q_proj"])
    lora = {"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "model": str(tmp_path / "no-such-model")}
    assert _lora_problem(checkpoint, lora) is None


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_path):
    """A 2-step tiny LoRA all-linear run, a checkpoint per step."""
    out = tmp_path_factory.mktemp("lora") / "out"
    assert _train_lora(out, tiny_model_path, "--max_steps", "2") == 0
    return out, tiny_model_path


def _train_lora(out, model, *extra) -> int:
    return main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path", str(model),
                 "--build_tiny_model", "false", "--use_peft", "true", "--lora_target_modules", "all-linear",
                 "--save_steps", "1", "--log_completions", "false", *extra])


@pytest.mark.parametrize("kill", ["while saving checkpoint-2", "during the final save"])
def test_a_lora_all_linear_run_killed_goes_on_with_true(lora_run, tmp_path, capsys, kill):
    out = Path(shutil.copytree(lora_run[0], tmp_path / "out"))
    saved = json.loads((out / "checkpoint-1" / "adapter_config.json").read_text())["target_modules"]
    assert saved != "all-linear" and len(saved) > 1  # peft saved the layer names
    (out / FINAL_MARK).unlink()
    if kill == "while saving checkpoint-2":
        (out / "checkpoint-2" / "trainer_state.json").unlink()
    else:
        (out / "adapter_model.safetensors").write_bytes(b"")
    capsys.readouterr()
    assert _train_lora(out, lora_run[1], "--max_steps", "2", "--resume_from_checkpoint", "true") == 0, \
        capsys.readouterr().err[-3000:]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    assert json.loads((out / FINAL_MARK).read_text())["global_step"] == 2


def test_checkpoint_names_in_messages_are_never_the_failed_one(tmp_path):
    """The one-line hint of a refused, named checkpoint points elsewhere (an earlier checkpoint), never at itself."""
    first, second = write_checkpoint(tmp_path / "checkpoint-1", 1), write_checkpoint(tmp_path / "checkpoint-2", 2)
    DAMAGES["truncated weights"](second)
    with pytest.raises(ValueError) as refused:
        check_resume(str(second), str(tmp_path))
    hint = str(refused.value).split(";", 1)[1]
    assert str(first) in hint and str(second) not in hint.replace(f"delete {second}", "")

