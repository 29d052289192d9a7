"""A run's folder and its resume (`hir_trl.run_folder`), each rule in several variants, through ``hir-trl train`` and
the Python API:

1. ``--overwrite_output_dir`` never deletes what the same run reads, however it is spelled.
2. A run holds its folder: a second run is refused naming the holder; a dead holder leaves nothing stuck; only the
   main process holds it.
3. A final save that did not complete is never "already finished".
4. Resuming from an earlier checkpoint moves the later line aside.
5. Settings a checkpoint keeps are refused when changed at resume; so is a point inside a generation cycle.
6. The noisy cases end in one line: a folder turned read-only, Ctrl-C during the final save, a LoRA/full mismatch,
   a checkpoint without (whole) model weights.

The tiny runs are shared: one finished 2-step run (module scope), copied when a case changes it.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hir_trl.cli.main import main, parse_train_args
from hir_trl.run_folder import (
    ABANDONED,
    FINAL_MARK,
    LOCK_FILE,
    check_finished,
    check_output_dir,
    check_resume,
    check_resume_point,
    claim_run_folder,
    final_model,
    last_checkpoint,
    paths_read,
    release_run_folder,
    set_aside_later_line,
    start_final_save,
    training_run,
    unwritable,
)

from ..testing_utils import REPO_ROOT, SAMPLE_DATA, TINY_RECIPE, assert_one_line_error, write_checkpoint


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model_path):
    """A finished 2-step tiny run (a checkpoint per step, completion logs), and the model it started from."""
    out = tmp_path_factory.mktemp("finished") / "out"
    assert hir_train(out, tiny_model_path, "--max_steps", 2, "--save_steps", 1, "--save_total_limit", 3) == 0
    return out, tiny_model_path


def hir_train(out, model, *extra):
    """``hir-trl train`` on the tiny recipe from an already built model, in-process; the exit status."""
    return main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path", str(model),
                 "--build_tiny_model", "false", *map(str, extra)])


def copy_run(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished[0], tmp_path / "out"))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but the lock file (which names the latest run that held it)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


def last_line(err: str) -> str:
    return err.replace("\r", "\n").strip().splitlines()[-1]


def recipe_args(*flags):
    """The tiny recipe's `HiRConfig` with ``flags`` (as `hir-trl train` parses them)."""
    return parse_train_args(["--config", str(TINY_RECIPE), *map(str, flags)])[1]


def logged(out: Path) -> list[int]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [h["step"] for h in history if "reward/ila" in h]


# ------------------------------------------------------------------------------ 1. overwrite keeps what the run reads


@pytest.mark.parametrize("spelling", ["itself", "trailing-slash", "dot-relative", "symlink", "a-checkpoint"])
@pytest.mark.parametrize("build", ["false", "true"])
def test_overwrite_never_deletes_the_model_the_run_trains_from(finished, tmp_path, capsys, monkeypatch, spelling,
                                                               build):
    out = copy_run(finished, tmp_path)
    before = snapshot(out)
    if spelling == "symlink":
        (tmp_path / "link").symlink_to(out)
    if spelling == "dot-relative":
        monkeypatch.chdir(tmp_path)
    model = {"itself": str(out), "trailing-slash": f"{out}/", "dot-relative": "./out/",
             "symlink": str(tmp_path / "link"), "a-checkpoint": str(out / "checkpoint-2")}[spelling]
    code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path", model,
                 "--build_tiny_model", build, "--overwrite_output_dir", "true"])
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, "overwrite_output_dir: true would delete", "model_name_or_path",
                          "which this run reads")
    assert snapshot(out) == before  # nothing deleted, no random model trained in its place


@pytest.mark.parametrize("field", ["dataset_name", "config", "judge_cache_dir", "chat_template"])
def test_overwrite_never_deletes_the_data_the_recipe_or_a_cache_the_run_reads(finished, tmp_path, capsys, field):
    out = copy_run(finished, tmp_path)
    inside = out / "checkpoint-1"  # a folder the overwrite deletes
    data = shutil.copy(REPO_ROOT / "recipes" / "tiny" / "data" / "muldimif_listing_sample.jsonl", inside / "d.jsonl")
    recipe = shutil.copy(TINY_RECIPE, inside / "recipe.yaml") if field == "config" else TINY_RECIPE
    (inside / "cache").mkdir()
    (inside / "template.jinja").write_text("{{ messages }}")
    extra = {"dataset_name": ["--dataset_name", data], "config": [],
             "judge_cache_dir": ["--judge_cache_dir", inside / "cache"],
             "chat_template": ["--chat_template", inside / "template.jinja"]}[field]
    before = snapshot(out)
    code = main(["train", "--config", str(recipe), "--output_dir", str(out), "--model_name_or_path",
                 str(finished[1]), "--build_tiny_model", "false", "--overwrite_output_dir", "true", *map(str, extra)])
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, "would delete", f"{field} ", "which this run reads")
    assert snapshot(out) == before


def test_paths_read_names_every_existing_path_and_nothing_else(tmp_path):
    (tmp_path / "data.jsonl").write_text("{}\n")
    script = SimpleNamespace(dataset_name=str(tmp_path / "data.jsonl"), system_prompt="You are\nhelpful " * 300,
                             verifier_modules=[str(tmp_path), "not/there"])
    config = SimpleNamespace(output_dir=str(tmp_path), logging_dir=str(tmp_path), run_name=str(tmp_path))
    import dataclasses

    as_dataclass = [dataclasses.make_dataclass(name, [(k, object) for k in vars(ns)])(**vars(ns))
                    for name, ns in (("S", script), ("C", config))]
    mixture = dataclasses.make_dataclass("D", [("path", str), ("data_files", object)])
    as_dataclass.append(dataclasses.make_dataclass("M", [("datasets", list)])(
        [mixture("json", None), mixture("json", str(tmp_path / "data.jsonl"))]))  # TRL's datasets mixture
    found = paths_read(*as_dataclass, recipe="r.yaml")
    assert found == {"config": "r.yaml", "dataset_name": str(tmp_path / "data.jsonl"),
                     "verifier_modules[0]": str(tmp_path), "datasets[1].data_files": str(tmp_path / "data.jsonl")}
    # what the run writes (output_dir, logging_dir, run_name) is not "read"


# ------------------------------------------------------------------------------ 2. a run holds its folder


def _hold(folder, **env):
    """Start a process that holds ``folder`` (`claim_run_folder`), with ``env`` added to its environment; yields
    (process, folder)."""
    code = ("import sys, time\nfrom hir_trl.run_folder import claim_run_folder\nclaim_run_folder(sys.argv[1])\n"
            "print('held', flush=True)\ntime.sleep(900)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc, folder
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def holder(tmp_path):
    """A process holding ``tmp_path / 'out'`` of this test alone (it may be killed, the folder must stay empty)."""
    yield from _hold(tmp_path / "out")


@pytest.fixture(scope="module")
def shared_holder(tmp_path_factory):
    """A process holding one folder for the tests that only try to take it (each refused run leaves it as it was;
    the holder starts once: it imports hir_trl)."""
    yield from _hold(tmp_path_factory.mktemp("held") / "out")


@pytest.mark.parametrize("flags", [[], ["--overwrite_output_dir", "true"], ["--resume_from_checkpoint", "true"]])
@pytest.mark.parametrize("spelling", ["same", "trailing-slash", "symlink"])
def test_a_second_run_on_a_held_folder_is_refused_naming_the_holder(finished, shared_holder, tmp_path, capsys, flags,
                                                                    spelling):
    proc, folder = shared_holder
    shutil.copytree(finished[0], folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(LOCK_FILE))  # a finished run
    before = snapshot(folder)
    if spelling == "symlink":
        (tmp_path / "link").symlink_to(folder)
    out = {"same": str(folder), "trailing-slash": f"{folder}/", "symlink": str(tmp_path / "link")}[spelling]
    code = hir_train(out, finished[1], *flags)
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, f"is in use by another run (pid {proc.pid}", "wait for it to end")
    assert snapshot(folder) == before  # not overwritten, not resumed, not called finished


def test_hub_uploads_leave_out_the_lock_and_the_abandoned_line():
    from huggingface_hub.utils import filter_repo_objects
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    paths = [LOCK_FILE, f"{ABANDONED}/after-checkpoint-1/checkpoint-2/model.safetensors",
             f"{ABANDONED}/after-checkpoint-1/trainer_state.json", "model.safetensors", FINAL_MARK]
    # the patterns Trainer.push_to_hub and _push_from_checkpoint upload output_dir with
    kept = list(filter_repo_objects(paths, ignore_patterns=["_*", f"{PREFIX_CHECKPOINT_DIR}-*"]))
    assert kept == ["model.safetensors", FINAL_MARK]  # no pid or host name, no abandoned checkpoints on the Hub


def test_a_killed_holder_leaves_nothing_stuck(holder):
    proc, folder = holder
    with pytest.raises(ValueError, match=f"pid {proc.pid}"):
        claim_run_folder(str(folder))
    proc.send_signal(signal.SIGKILL)  # a crash: no clean-up ran
    proc.wait()
    claim_run_folder(str(folder))  # the OS released its lock with the process
    try:
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()
    finally:
        release_run_folder(str(folder))


def test_only_the_main_process_holds_the_folder(shared_holder, monkeypatch):
    proc, folder = shared_holder
    monkeypatch.setenv("RANK", "1")  # another rank of a torchrun / accelerate launch: never waits, never refused
    claim_run_folder(str(folder))
    release_run_folder(str(folder))
    other = folder.parent / "other"
    claim_run_folder(str(other))
    assert not other.exists()  # nothing taken, nothing created
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="in use by another run"):
        claim_run_folder(str(folder))


def test_a_node_of_the_same_launch_finding_the_folder_held_is_told_to_use_node_local_folders(tmp_path, monkeypatch):
    """``save_on_each_node: true`` on storage the nodes share: the first process of node 1 finds node 0's lock."""
    launch = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    for proc, folder in _hold(tmp_path / "out", RANK="0", GROUP_RANK="0", **launch):
        record = json.loads((folder / LOCK_FILE).read_text())
        assert record["launch"] == "10.0.0.1:29500" and record["node"] == "0"
        for name, value in {**launch, "RANK": "1", "GROUP_RANK": "1"}.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=f"held by node 0 of this same run \\(pid {proc.pid}.*set "
                                             "save_on_each_node: false"):
            claim_run_folder(str(folder), main_process=True)  # should_save: node 1's first process
        monkeypatch.setenv("MASTER_PORT", "29501")  # another launch: the plain refusal
        with pytest.raises(ValueError, match=f"is in use by another run \\(pid {proc.pid}"):
            claim_run_folder(str(folder), main_process=True)


def test_each_node_s_first_process_writes_its_own_folder(finished, tmp_path, monkeypatch):
    """With ``save_on_each_node`` the writer of a node-local folder is that node's first process (``writer``, the
    run's ``should_save``), whatever its global rank; without ``writer`` it stays global rank 0."""
    monkeypatch.setenv("RANK", "1")  # node 1's first process
    for writer, moves in ((None, False), (False, False), (True, True)):
        out = Path(shutil.copytree(finished[0], tmp_path / f"out-{writer}"))
        target, names = set_aside_later_line(str(out / "checkpoint-1"), str(out), writer=writer)
        assert "checkpoint-2" in names and (out / "checkpoint-2").exists() is not moves
        assert (target / "checkpoint-2").exists() is moves
        check_output_dir(str(out), None, True, writer=writer)  # --overwrite_output_dir: deletes only if it writes
        assert (out / "checkpoint-1").exists() is not moves
    out = Path(shutil.copytree(finished[0], tmp_path / "out-final"))
    start_final_save(str(out))  # global rank 0 only: the marker stays
    assert (out / FINAL_MARK).is_file()
    start_final_save(str(out), writer=True)
    assert not (out / FINAL_MARK).exists()


def test_each_node_s_first_process_saves_the_model_s_weights(tiny_model_path, tmp_path, monkeypatch):
    """``save_on_each_node``: transformers' ``save_pretrained`` writes weights on global rank 0 only; within
    `weights_on_each_node` the first process of another node writes them too (and nothing else changes)."""
    import torch
    from transformers import AutoModelForCausalLM

    from hir_trl.models.workarounds import weights_on_each_node

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a: 1)  # node 1's first process
    node_local = SimpleNamespace(save_on_each_node=True, should_save=True)
    for name, args, state_dict in (("plain", None, None), ("shared", SimpleNamespace(save_on_each_node=False,
                                                                                    should_save=True), None),
                                   ("gathered", node_local, {}), ("node", node_local, None)):
        with weights_on_each_node(model, args, state_dict) if args else contextlib.nullcontext():
            model.save_pretrained(tmp_path / name, is_main_process=True)
        assert (tmp_path / name / "model.safetensors").is_file() is (name == "node"), name
        assert "should_save_on_this_rank" not in vars(model)  # the method is back as transformers has it


@pytest.mark.slow
def test_under_torchrun_rank_0_refuses_and_no_rank_hangs(holder, tiny_model_path):
    proc, folder = holder
    launcher = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    command = [launcher, "--standalone", "--nproc_per_node", "2", "-m", "hir_trl.cli", "train", "--config",
               str(TINY_RECIPE), "--output_dir", str(folder), "--model_name_or_path", str(tiny_model_path),
               "--build_tiny_model", "false", "--per_device_train_batch_size", "6", "--max_steps", "1"]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)  # a hang fails here
    assert run.returncode != 0
    ours = [line for line in run.stderr.splitlines() if line.startswith("hir-trl train:")]
    assert len(ours) == 1 and f"is in use by another run (pid {proc.pid}" in ours[0], run.stderr[-3000:]
    assert [p.name for p in folder.iterdir()] == [LOCK_FILE]  # nothing written by either rank


def test_the_python_api_holds_the_folder_too(shared_holder):
    proc, folder = shared_holder
    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(folder), should_save=True), model=None)
    with pytest.raises(ValueError, match=f"in use by another run \\(pid {proc.pid}"):
        with training_run(trainer, None):
            pass
    trainer.args.should_save = False  # rank 1 of the same launch (it saves nothing): no lock, no wait
    with training_run(trainer, None) as checkpoint:
        assert checkpoint is None


def test_claims_nest_and_a_refused_run_leaves_no_folder(tmp_path, capsys, tiny_model_path):
    folder = tmp_path / "fresh"
    claim_run_folder(str(folder))
    claim_run_folder(str(folder))  # the CLI's claim, then HiRTrainer.train's: the same process
    release_run_folder(str(folder))
    assert (folder / LOCK_FILE).exists()
    release_run_folder(str(folder))
    assert not folder.exists()  # created by the claim, and nothing but the lock was written
    assert check_resume("true", str(folder)) is None and not folder.exists()  # a requeue before anything: a new run


def test_a_folder_that_cannot_be_written_is_one_line(tmp_path, capsys, tiny_model_path, monkeypatch):
    import filelock

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", self.lock_file)

    monkeypatch.setattr(filelock.FileLock, "acquire", denied)
    code = hir_train(tmp_path / "out", tiny_model_path)
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, f"output_dir {tmp_path / 'out'} cannot be written", "Permission denied",
                          "make it writable")


# ------------------------------------------------------------------------------ 3. an incomplete final save


@pytest.mark.parametrize("damage, why", [
    ("no-marker", f"no {FINAL_MARK}: the final save did not complete"),
    ("truncated-model", "model.safetensors has"),
    ("missing-tokenizer", "tokenizer.json is missing"),
    ("bad-marker", f"{FINAL_MARK} cannot be read"),
    ("no-weights-listed", "lists no model weights"),
])
def test_a_final_model_counts_only_when_all_of_it_is_there(finished, tmp_path, damage, why):
    out = copy_run(finished, tmp_path)
    record, reason = final_model(str(out))
    assert record["global_step"] == 2 and reason == ""
    if damage == "no-marker":
        (out / FINAL_MARK).unlink()
    elif damage == "truncated-model":
        data = (out / "model.safetensors").read_bytes()
        (out / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "missing-tokenizer":
        (out / "tokenizer.json").unlink()
    elif damage == "bad-marker":
        (out / FINAL_MARK).write_text("{")
    else:
        mark = json.loads((out / FINAL_MARK).read_text())
        mark["files"].pop("model.safetensors")
        (out / FINAL_MARK).write_text(json.dumps(mark))
    record, reason = final_model(str(out))
    assert record is None and why in reason, reason
    # a checkpoint at max_steps without a whole final model: resumed to write it, never "already finished"
    for requested in (True, str(out / "checkpoint-2")):
        note = check_finished(str(out / "checkpoint-2"), requested, str(out), 2)
        assert "is at step 2 of max_steps 2" in note and "holds no whole final model" in note


@pytest.mark.parametrize("damage", ["no-marker", "truncated-model"])
def test_an_unfinished_final_save_is_written_on_resume_then_finished(finished, tmp_path, capsys, damage):
    out = copy_run(finished, tmp_path)
    if damage == "no-marker":  # SIGKILL between the model and the marker
        (out / FINAL_MARK).unlink()
    else:  # a full disk while writing the model
        data = (out / "model.safetensors").read_bytes()
        (out / "model.safetensors").write_bytes(data[:100])
    capsys.readouterr()
    assert hir_train(out, finished[1], "--max_steps", 2, "--resume_from_checkpoint", "true") == 0
    err = capsys.readouterr().err
    assert "already finished" not in err and "holds no whole final model" in err, err
    assert last_line(err).endswith("wrote it from the checkpoint (no step left to train)") and "Traceback" not in err
    assert final_model(str(out))[0]["global_step"] == 2 and logged(out) == [1, 2]  # no step trained again
    assert hir_train(out, finished[1], "--max_steps", 2, "--resume_from_checkpoint", "true") == 0
    assert "already finished" in capsys.readouterr().err


@pytest.mark.parametrize("interrupted", ["save_model", "create_model_card"])
def test_ctrl_c_during_the_final_save_is_one_line_and_not_finished(tmp_path, capsys, tiny_model_path, monkeypatch,
                                                                   interrupted):
    from hir_trl import HiRTrainer

    original = getattr(HiRTrainer, interrupted)

    def interrupt(self, *args, **kwargs):
        if any(frame.function == "_save_checkpoint" for frame in inspect.stack()):  # a checkpoint's save: let it be
            return original(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(HiRTrainer, interrupted, interrupt)
    out = tmp_path / "out"
    code = hir_train(out, tiny_model_path, "--max_steps", 1, "--save_steps", 1, "--log_completions", "false")
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert last_line(err) == (f"hir-trl train: interrupted while saving the final model at step 1: {out} holds no "
                              f"whole final model; the last complete checkpoint is {out / 'checkpoint-1'}; resume "
                              f"with --resume_from_checkpoint {out / 'checkpoint-1'}")
    assert final_model(str(out))[0] is None
    monkeypatch.setattr(HiRTrainer, interrupted, original)
    assert hir_train(out, tiny_model_path, "--max_steps", 1, "--resume_from_checkpoint", "true", "--log_completions",
                     "false") == 0  # writes the final model from checkpoint-1
    assert final_model(str(out))[0]["global_step"] == 1 and "## HiR training" in (out / "README.md").read_text()


# ------------------------------------------------------------------------------ 4. the abandoned line


def test_resuming_from_an_earlier_checkpoint_continues_only_this_line(finished, tmp_path, capsys):
    out = copy_run(finished, tmp_path)
    capsys.readouterr()
    assert hir_train(out, finished[1], "--max_steps", 2, "--save_steps", 1,
                     "--resume_from_checkpoint", out / "checkpoint-1") == 0
    err = capsys.readouterr().err
    aside = out / "_abandoned" / "after-checkpoint-1"
    assert f"moved the later line aside to {aside} (checkpoint-2, completions/completions_00002.parquet" in err
    assert (aside / "checkpoint-2" / "trainer_state.json").is_file() and (aside / FINAL_MARK).is_file()
    assert final_model(str(out))[0]["global_step"] == 2 and logged(out) == [1, 2]
    assert f"- Resumed from `{out / 'checkpoint-1'}`" in (out / "README.md").read_text()  # the card says what ran
    assert check_resume(True, str(out)) == str(out / "checkpoint-2")  # this line's own checkpoint-2


# ------------------------------------------------------------------------------ 5. what a checkpoint keeps


@pytest.mark.parametrize("flag, value", [
    ("learning_rate", 5e-5), ("weight_decay", 0.1), ("adam_beta1", 0.8), ("adam_beta2", 0.99),
    ("adam_epsilon", 1e-6), ("optim", "sgd"), ("lr_scheduler_type", "linear"), ("warmup_steps", 1), ("seed", 7),
    ("per_device_train_batch_size", 6), ("num_generations", 4), ("num_iterations", 2),
])
def test_a_setting_the_checkpoint_keeps_is_refused_when_changed(finished, flag, value):
    checkpoint = str(finished[0] / "checkpoint-2")
    check_resume_point(checkpoint, recipe_args())  # the recipe's own values: fine
    with pytest.raises(ValueError, match=f"was trained with {flag} .*\\(this run: .*\\).*--{flag} ") as info:
        check_resume_point(checkpoint, recipe_args(f"--{flag}", value))
    assert f"(this run: {value}" in str(info.value) or flag == "warmup_steps"  # 1 -> 1.0
    assert "\n" not in str(info.value) and "--model_name_or_path" in str(info.value)


@pytest.mark.parametrize("flag, value", [("learning_rate", 5e-5), ("weight_decay", 0.1), ("adam_beta2", 0.99)])
def test_a_checkpoint_without_a_settings_record_is_checked_against_its_optimizer(finished, tmp_path, flag, value):
    checkpoint = Path(shutil.copytree(finished[0] / "checkpoint-2", tmp_path / "checkpoint-2"))
    state = json.loads((checkpoint / "hir_state.json").read_text())
    del state["settings"]  # an older hir-trl's checkpoint, or another trainer's
    (checkpoint / "hir_state.json").write_text(json.dumps(state))
    check_resume_point(str(checkpoint), recipe_args())
    with pytest.raises(ValueError, match=f"was trained with {flag} "):
        check_resume_point(str(checkpoint), recipe_args(f"--{flag}", value))


def test_a_model_only_checkpoint_takes_new_optimizer_settings_but_keeps_the_data_order(finished, tmp_path):
    checkpoint = Path(shutil.copytree(finished[0] / "checkpoint-2", tmp_path / "checkpoint-2"))
    for name in ("optimizer.pt", "scheduler.pt"):  # save_only_model: true
        (checkpoint / name).unlink()
    check_resume_point(str(checkpoint), recipe_args("--learning_rate", 5e-5, "--weight_decay", 0.1))  # honoured
    with pytest.raises(ValueError, match="was trained with seed 42 \\(this run: 7\\)"):
        check_resume_point(str(checkpoint), recipe_args("--seed", 7))


def test_a_changed_setting_is_one_line_through_the_cli_and_the_api(finished, tmp_path, capsys):
    out = copy_run(finished, tmp_path)
    (out / FINAL_MARK).unlink()  # not finished: the resume would train
    before = snapshot(out)
    code = hir_train(out, finished[1], "--learning_rate", 5e-5, "--resume_from_checkpoint", "true")
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, "was trained with learning_rate 0.0001 (this run: 5e-05)",
                          "--learning_rate 0.0001")
    assert snapshot(out) == before
    trainer = SimpleNamespace(args=recipe_args("--output_dir", out, "--learning_rate", 5e-5),
                              accelerator=SimpleNamespace(is_main_process=True), model=None)
    with pytest.raises(ValueError, match="learning_rate"), training_run(trainer, True):
        pass


def test_hir_trainer_train_checks_the_resume_point_and_the_card_names_it(finished, tmp_path):
    from hir_trl import HiRTrainer, load_hir_dataset

    out = copy_run(finished, tmp_path)
    args = recipe_args("--output_dir", out, "--learning_rate", 5e-5, "--max_steps", 3, "--save_strategy", "no",
                       "--log_completions", "false")
    trainer = HiRTrainer(str(finished[1]), args=args, train_dataset=load_hir_dataset(str(SAMPLE_DATA)))
    with pytest.raises(ValueError, match="was trained with learning_rate 0.0001 \\(this run: 5e-05\\)"):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 0  # refused before anything loaded
    trainer.args.learning_rate = 1e-4  # the checkpoint's: resumes
    trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 3 and trainer.resumed_from == str(out / "checkpoint-2")
    trainer.save_model(str(out))
    trainer.create_model_card()
    assert f"- Resumed from `{out / 'checkpoint-2'}`" in (out / "README.md").read_text()


def test_ctrl_c_points_at_the_checkpoint_resumed_from_until_this_run_saves_one(tmp_path):
    from hir_trl.run_folder import last_checkpoint

    out = tmp_path / "out"
    assert last_checkpoint(str(out)) is None
    assert last_checkpoint(str(out), "/elsewhere/checkpoint-4") == "/elsewhere/checkpoint-4"
    (out / "checkpoint-5").mkdir(parents=True)  # being saved: no trainer_state.json yet
    assert last_checkpoint(str(out), "/elsewhere/checkpoint-4") == "/elsewhere/checkpoint-4"
    (out / "checkpoint-5" / "trainer_state.json").write_text("{}")  # the weights are still to come
    assert last_checkpoint(str(out), "/elsewhere/checkpoint-4") == "/elsewhere/checkpoint-4"
    shutil.rmtree(out / "checkpoint-5")
    write_checkpoint(out / "checkpoint-5", 5)
    assert last_checkpoint(str(out), "/elsewhere/checkpoint-4") == str(out / "checkpoint-5")


def _checkpoints_with_steps(finished, tmp_path, args, steps) -> Path:
    """Copies of checkpoint-1 as checkpoint-N for each N of ``steps``, recorded as trained with ``args``."""
    from hir_trl.run_folder import resume_settings

    out = tmp_path / "out"
    for step in steps:
        folder = Path(shutil.copytree(finished[0] / "checkpoint-1", out / f"checkpoint-{step}"))
        state = json.loads((folder / "trainer_state.json").read_text())
        (folder / "trainer_state.json").write_text(json.dumps({**state, "global_step": step}))
        record = json.loads((folder / "hir_state.json").read_text())
        (folder / "hir_state.json").write_text(json.dumps({**record, "settings": resume_settings(args)}))
    return out


@pytest.mark.parametrize("flags, cycle", [
    (["--num_iterations", 2], 2),
    (["--steps_per_generation", 3], 3),
    (["--num_iterations", 3, "--steps_per_generation", 2, "--gradient_accumulation_steps", 2], 3),
    (["--steps_per_generation", 2, "--gradient_accumulation_steps", 2], 1),  # aligned: every step generates
])
def test_a_resume_inside_a_generation_cycle_is_refused_naming_the_boundaries(finished, tmp_path, flags, cycle):
    args = recipe_args(*flags)
    out = _checkpoints_with_steps(finished, tmp_path, args, range(1, 7))
    for step in range(1, 7):
        if step % cycle == 0:
            check_resume_point(str(out / f"checkpoint-{step}"), args)
            continue
        with pytest.raises(ValueError, match=f"is at step {step}, inside a generation cycle") as info:
            check_resume_point(str(out / f"checkpoint-{step}"), args)
        boundaries = ", ".join(str(out / f"checkpoint-{n}") for n in range(cycle, 7, cycle))
        assert f"({boundaries})" in str(info.value) and f"save_steps to a multiple of {cycle}" in str(info.value)


def test_a_resume_at_a_cycle_boundary_is_exact_and_inside_one_is_refused(tmp_path, capsys, tiny_model_path):
    out = tmp_path / "out"
    flags = ["--num_iterations", 2, "--save_steps", 1, "--save_total_limit", 5, "--log_completions", "false"]
    assert hir_train(out, tiny_model_path, "--max_steps", 3, *flags) == 0
    whole = json.loads((out / "trainer_state.json").read_text())["log_history"]
    capsys.readouterr()
    code = hir_train(out, tiny_model_path, "--max_steps", 3, *flags, "--resume_from_checkpoint", out / "checkpoint-1")
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, "checkpoint-1 is at step 1, inside a generation cycle",
                          f"({out / 'checkpoint-2'})")
    assert hir_train(out, tiny_model_path, "--max_steps", 3, *flags,
                     "--resume_from_checkpoint", out / "checkpoint-2") == 0
    resumed = json.loads((out / "trainer_state.json").read_text())["log_history"]
    step3 = [{k: v for k, v in entry.items() if k.startswith(("reward", "hir/", "loss", "grad_norm"))
              and not k.startswith("hir/seconds_")}  # timings aside
             for history in (whole, resumed) for entry in history if entry.get("step") == 3 and "reward/ila" in entry]
    assert step3[0] == step3[1]  # the same generation and update as the uninterrupted run


# ------------------------------------------------------------------------------ 6. one line, no traceback


def _adapter_checkpoint(finished, tmp_path, r=8) -> Path:
    folder = Path(shutil.copytree(finished[0] / "checkpoint-2", tmp_path / "lora" / "checkpoint-2"))
    (folder / "model.safetensors").rename(folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": 16,
                                                            "target_modules": ["q_proj", "v_proj"]}))
    return folder


def test_a_lora_or_full_mismatch_on_resume_is_refused(finished, tmp_path):
    full = str(finished[0] / "checkpoint-2")
    adapter = str(_adapter_checkpoint(finished, tmp_path))
    args = recipe_args()
    lora = {"r": 8, "lora_alpha": 16, "target_modules": {"v_proj", "q_proj"}}
    with pytest.raises(ValueError, match="holds a whole model .* this run trains a LoRA adapter"):
        check_resume_point(full, args, lora)
    with pytest.raises(ValueError, match="holds a LoRA adapter \\(adapter_model.safetensors\\), and this run trains "
                                         "the whole model: pass --use_peft true"):
        check_resume_point(adapter, args, None)
    with pytest.raises(ValueError, match="lora_r 8 \\(this run: 16\\)"):
        check_resume_point(adapter, args, {**lora, "r": 16})
    with pytest.raises(ValueError, match="lora_target_modules"):
        check_resume_point(adapter, args, {**lora, "target_modules": ["q_proj"]})
    check_resume_point(adapter, args, lora)  # the same adapter: fine
    check_resume_point(full, args, None)


@pytest.mark.parametrize("flags, fragment", [
    (["--use_peft", "true"], "holds a whole model (no adapter_model.safetensors), and this run trains a LoRA"),
    ([], "holds a LoRA adapter (adapter_model.safetensors), and this run trains the whole model"),
    (["--use_peft", "true", "--lora_r", 4, "--lora_alpha", 16, "--lora_target_modules", "q_proj", "v_proj"],
     "holds a LoRA adapter with lora_r 8 (this run: 4)"),
])
def test_a_lora_mismatch_is_one_line_through_the_cli(finished, tmp_path, capsys, flags, fragment):
    out = copy_run(finished, tmp_path)
    (out / FINAL_MARK).unlink()
    if "whole model (" not in fragment:  # the run's checkpoints hold a LoRA adapter
        for step in (1, 2):
            shutil.rmtree(out / f"checkpoint-{step}")
            shutil.copytree(_adapter_checkpoint(finished, tmp_path / str(step)), out / f"checkpoint-{step}")
    before = snapshot(out)
    code = hir_train(out, finished[1], *flags, "--resume_from_checkpoint", "true")
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, fragment)
    assert snapshot(out) == before


@pytest.mark.parametrize("damage, fragment", [
    ("no-weights", "checkpoint-2 holds no model weights (no model.safetensors, sharded model or LoRA adapter)"),
    ("missing-shard", "lacks model-00002-of-00002.safetensors, which model.safetensors.index.json names"),
    ("truncated", "model.safetensors is truncated or corrupt"),
])
def test_a_checkpoint_without_whole_weights_is_one_line(finished, tmp_path, capsys, damage, fragment):
    out = copy_run(finished, tmp_path)
    weights = out / "checkpoint-2" / "model.safetensors"
    if damage == "no-weights":
        weights.unlink()
    elif damage == "missing-shard":
        weights.rename(weights.with_name("model-00001-of-00002.safetensors"))
        index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                "b": "model-00002-of-00002.safetensors"}}
        weights.with_name("model.safetensors.index.json").write_text(json.dumps(index))
    else:
        weights.write_bytes(weights.read_bytes()[:1000])
    code = hir_train(out, finished[1], "--max_steps", 3, "--resume_from_checkpoint", out / "checkpoint-2")
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, fragment, f"resume from {out / 'checkpoint-1'} instead")


@pytest.mark.parametrize("where", ["checkpoint", "final"])
def test_a_folder_turning_read_only_mid_run_is_one_line(tmp_path, capsys, tiny_model_path, monkeypatch, where):
    import transformers.modeling_utils as modeling_utils

    def read_only(tensors, filename, *args, **kwargs):
        raise PermissionError(13, "Permission denied", filename)

    monkeypatch.setattr(modeling_utils, "safe_save_file", read_only)
    out = tmp_path / "out"
    flags = ["--save_steps", 1] if where == "checkpoint" else ["--save_strategy", "no"]
    code = hir_train(out, tiny_model_path, "--max_steps", 1, "--log_completions", "false", *flags)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err[-3000:]
    line = last_line(err)
    assert line.startswith(f"hir-trl train: error: stopped at step 1: cannot write to {out} ("), line
    assert "Permission denied" in line and "make it writable" in line
    assert final_model(str(out))[0] is None


@pytest.mark.parametrize("exc", [
    PermissionError(13, "Permission denied", "/x/model.safetensors"),
    OSError(30, "Read-only file system", "/x"),
    RuntimeError("Error while serializing: IoError(Os { code: 13, kind: PermissionDenied })"),
])
def test_unwritable_recognises_every_wording(exc):
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = exc
    assert unwritable(wrapped) and unwritable(exc)
    assert unwritable(ValueError("bad value")) is None


def test_check_output_dir_accepts_named_and_unnamed_keep(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    with pytest.raises(ValueError, match=f"would delete model_name_or_path {out} \\(it deletes "):
        check_output_dir(str(out), None, True, keep={"model_name_or_path": str(out)})
    with pytest.raises(ValueError, match="would delete .*checkpoint-1"):
        check_output_dir(str(out), None, True, keep=[str(out / "checkpoint-1" / "model.safetensors")])
    assert (out / "checkpoint-1").is_dir()


DAMAGES = {  # an interruption while checkpoint-2 was written, at each of its files
    "no trainer_state": lambda c: (c / "trainer_state.json").unlink(),
    "empty hir_state": lambda c: (c / "hir_state.json").write_text(""),
    "half a hir_state": lambda c: (c / "hir_state.json").write_text('{"rng": '),
    "truncated weights": lambda c: (c / "model.safetensors").write_bytes((c / "model.safetensors").read_bytes()[:20]),
    "no weights": lambda c: (c / "model.safetensors").unlink(),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_ctrl_c_names_the_checkpoint_the_resume_check_accepts(tmp_path, damage):
    """Ctrl-C's message (`last_checkpoint`) and the resume check (`check_resume`) agree on what is usable: the
    message never names a checkpoint that a resume then refuses."""
    first, second = write_checkpoint(tmp_path / "checkpoint-1", 1), write_checkpoint(tmp_path / "checkpoint-2", 2)
    assert last_checkpoint(str(tmp_path)) == str(second)
    DAMAGES[damage](second)
    assert last_checkpoint(str(tmp_path)) == str(first)
    assert check_resume(last_checkpoint(str(tmp_path)), str(tmp_path)) == str(first)
    with pytest.raises(ValueError, match=f"resume from {first} instead"):
        check_resume(str(second), str(tmp_path))
    DAMAGES[damage](first)
    assert last_checkpoint(str(tmp_path), resumed_from="elsewhere") == "elsewhere"  # none usable here


@pytest.mark.parametrize("name", ["README.md", "tokenizer.model", "chat_template.jinja"])
def test_a_file_no_resume_reads_leaves_the_checkpoint_usable(tmp_path, name):
    """Ctrl-C while HiR copies the model card into the checkpoint leaves an empty README.md: the checkpoint still
    resumes (nothing reads the card), and Ctrl-C names it."""
    write_checkpoint(tmp_path / "checkpoint-1", 1)
    second = write_checkpoint(tmp_path / "checkpoint-2", 2)
    (second / name).write_text("")
    assert last_checkpoint(str(tmp_path)) == str(second)
    assert check_resume(str(second), str(tmp_path)) == str(second)
