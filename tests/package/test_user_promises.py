"""Promises a user relies on without reading the code, each tried in several variants.

1. A run's folder holds one run (re-running a finished job, overwrite, resuming from elsewhere, completions/).
2. No credential reaches disk, however it is passed (nested in any dict option).
3. A run that trains nothing, or on non-finite numbers, does not exit 0 and saves no result.
4. ``hir-trl eval score`` scores each response against its own prompt.
5. Your own verifiers behave like built-ins.
6. ``hir-trl synth`` never destroys its input.
7. A key given twice in a YAML recipe is refused, naming both lines.
Plus the one-line errors of mistakes that used to print a traceback or blame the wrong field.

The tiny runs are shared: one finished 2-step run (module scope) serves every run-folder case, copied when a case
changes it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset, register_verifier
from hir_trl.cli.main import main
from hir_trl.guards import NonFiniteTrainingError, RewardFunctionError, check_rewards
from hir_trl.run_folder import (
    LOCK_FILE,
    check_output_dir,
    check_resume,
    final_model,
    last_checkpoint,
    optimizer_restart_note,
    run_outputs,
    set_aside_later_line,
)
from hir_trl.verifiers import FAMILIES, verify_constraint

from ..testing_utils import SAMPLE_DATA, TINY_RECIPE, assert_nothing_written, assert_one_line_error, train, write_rows
from .utils import native

SECRET = "Zq8vR2kLmN4pXw7Ty3Hb"  # a made-up key: it must never appear in an error, a card or a file


pytestmark = pytest.mark.usefixtures("clean_registry")  # registrations are process-wide (tests/conftest.py)


# ------------------------------------------------------------------------------ 1. a run's folder holds one run


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_path):
    """A finished 2-step tiny run (a checkpoint per step), and the model it started from."""
    root = tmp_path_factory.mktemp("finished")
    out = root / "out"
    assert main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path",
                 str(tiny_model_path), "--build_tiny_model", "false", "--max_steps", "2", "--save_steps", "1",
                 "--save_total_limit", "3"]) == 0
    return out, tiny_model_path


def _copy(run: Path, where: Path) -> Path:
    shutil.copytree(run, where)
    return where


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` but the lock file, which names the latest run that held the folder."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


def _resume_a_copy(finished_run, tmp_path, capsys, resume, *flags):
    """Train into a copy of the finished run with ``--resume_from_checkpoint resume`` (a ``checkpoint-N`` name
    inside the copy) and ``flags``: ``(copy, its files before, exit code, stdout, stderr)``."""
    run, model = finished_run
    out = _copy(run, tmp_path / "out")
    before = _snapshot(out)
    target = str(out / resume) if resume.startswith("checkpoint") else resume
    code, stdout, err = train(tmp_path, capsys, "--model_name_or_path", model, "--build_tiny_model", "false", *flags,
                              "--resume_from_checkpoint", target)
    return out, before, code, stdout, err


@pytest.mark.parametrize("resume", ["true", "checkpoint-2", "True"])
def test_rerunning_a_finished_job_trains_nothing_and_keeps_its_model(finished_run, tmp_path, capsys, resume):
    out, before, code, stdout, err = _resume_a_copy(finished_run, tmp_path, capsys, resume,
                                                    "--max_steps", "2", "--save_steps", "1")
    assert code == 0, err
    assert err.count("\n") == 1 and "already finished" in err and "step 2 of max_steps 2" in err, err
    assert _snapshot(out) == before  # no checkpoint-3, the final model and card untouched


def test_a_finished_run_is_recognised_by_its_final_state_too(finished_run, tmp_path, capsys):
    # the last checkpoint is older than the final model (max_steps not a multiple of save_steps)
    run, model = finished_run
    out = _copy(run, tmp_path / "out")
    shutil.rmtree(out / "checkpoint-2")
    before = _snapshot(out)
    code, _, err = train(tmp_path, capsys, "--model_name_or_path", model, "--build_tiny_model", "false",
                         "--max_steps", "2", "--resume_from_checkpoint", "true")
    assert code == 0 and "already finished" in err and "trainer_state" not in err.split("already finished")[0]
    assert _snapshot(out) == before


@pytest.mark.parametrize("resume", ["true", "checkpoint-1"])
def test_overwrite_and_resume_together_are_refused(finished_run, tmp_path, capsys, resume):
    out, before, code, stdout, err = _resume_a_copy(finished_run, tmp_path, capsys, resume,
                                                    "--overwrite_output_dir", "true")
    assert_one_line_error(code, stdout, err, "overwrite_output_dir", "resume_from_checkpoint", "not both")
    assert _snapshot(out) == before


def test_resuming_from_another_folder_into_a_run_is_refused(finished_run, tmp_path, capsys):
    run, model = finished_run
    other = _copy(run, tmp_path / "out")  # output_dir holds a run ...
    code, stdout, err = train(tmp_path, capsys, "--model_name_or_path", model, "--build_tiny_model", "false",
                              "--resume_from_checkpoint", run / "checkpoint-1")  # ... and the checkpoint is elsewhere
    assert_one_line_error(code, stdout, err, "holds another run", "checkpoint of another folder")
    assert sorted(p.name for p in (other / "completions").iterdir()) == sorted(
        p.name for p in (run / "completions").iterdir())
    # into an empty folder it is fine (checked up to the point of loading the model)
    check_output_dir(str(tmp_path / "empty"), str(run / "checkpoint-1"), False)


@pytest.mark.parametrize("where", ["file", "file_in_parent"])
def test_output_dir_that_is_a_file_is_one_line(tmp_path, capsys, where):
    target = tmp_path / "out"
    target.write_text("not a folder")
    extra = ["--resume_from_checkpoint", "true"] if where == "file_in_parent" else []
    code, stdout, err = train(tmp_path, capsys, *extra)
    assert_one_line_error(code, stdout, err, f"output_dir {target} is a file")
    assert "Errno" not in err and target.read_text() == "not a folder"


def test_overwrite_removes_the_previous_run_but_not_what_the_user_keeps(finished_run, tmp_path):
    run, _ = finished_run
    out = _copy(run, tmp_path / "out")
    (out / "mine").mkdir()
    (out / "mine" / "config.json").write_text("{}")  # a model the user keeps inside output_dir
    (out / "mine" / "model.safetensors").write_bytes(b"weights")
    (out / "train.jsonl").write_text('{"id": 1}\n')  # data
    (out / "notes.md").write_text("my notes")
    (out / "runs" / "x").mkdir(parents=True)
    (out / "runs" / "x" / "events.out.tfevents.1").write_bytes(b"tb")
    doomed = {p.name for p in run_outputs(str(out))}
    assert {"checkpoint-1", "checkpoint-2", "completions", "runs", "trainer_state.json", "training_args.bin",
            "README.md", "model.safetensors", "config.json"} <= doomed
    with pytest.raises(ValueError, match="would delete .*checkpoint-1"):  # a model the run reads from the old run
        check_output_dir(str(out), None, True, keep=[str(out / "checkpoint-1")])
    check_output_dir(str(out), None, True, keep=[str(out / "mine"), str(out / "train.jsonl")])
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != LOCK_FILE)
    assert left == ["mine/config.json", "mine/model.safetensors", "notes.md", "train.jsonl"], left
    check_output_dir(str(out), None, False)  # no longer holds a run


def test_a_users_readme_and_model_without_a_run_are_kept(tmp_path):
    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    (out / "checkpoint-3" / "trainer_state.json").write_text("{}")
    (out / "README.md").write_text("# my project\n")
    (out / "config.json").write_text("{}")  # no training_args.bin beside it: not a run's final model
    check_output_dir(str(out), None, True)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json"]


def test_a_final_model_alone_is_another_run(finished_run, tmp_path):
    run, _ = finished_run
    out = tmp_path / "out"
    out.mkdir()
    for name in ("training_args.bin", "model.safetensors", "config.json", "README.md"):
        shutil.copy(run / name, out / name)
    with pytest.raises(ValueError, match=r"holds another run \(training_args.bin\)"):
        check_output_dir(str(out), None, False)
    check_output_dir(str(out), None, True)
    assert not list(out.iterdir())


def test_resuming_from_an_earlier_checkpoint_moves_the_later_line_aside(finished_run, tmp_path):
    run, _ = finished_run
    out = _copy(run, tmp_path / "out")
    names = sorted(p.name for p in (out / "completions").glob("completions_*.parquet"))
    assert names == ["completions_00001.parquet", "completions_00002.parquet"]
    assert set_aside_later_line(str(run / "checkpoint-1"), str(out)) == (None, [])  # another folder's: nothing
    assert set_aside_later_line(str(out / "checkpoint-2"), str(out)) == (None, [])  # the latest: nothing later
    before = _snapshot(out)
    where, moved = set_aside_later_line(str(out / "checkpoint-1"), str(out))
    assert where == out / "_abandoned" / "after-checkpoint-1"
    assert {"checkpoint-2", "completions/completions_00002.parquet", "hir_final_model.json", "trainer_state.json",
            "model.safetensors", "training_args.bin"} <= set(moved)
    assert sorted(p.name for p in (out / "completions").glob("*.parquet")) == ["completions_00001.parquet"]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    for name, data in before.items():  # nothing lost: the abandoned line is kept as it was
        if name.startswith("checkpoint-2/") or name in moved:
            assert (where / name).read_bytes() == data, name
    assert last_checkpoint(str(out)) == str(out / "checkpoint-1")  # where Ctrl-C's message points now
    assert check_resume(True, str(out)) == str(out / "checkpoint-1")  # what `true` continues now
    assert final_model(str(out))[0] is None  # the abandoned final model no longer counts as finished
    # a second branch from the same point keeps the first one's files too
    shutil.copytree(where / "checkpoint-2", out / "checkpoint-2")
    assert set_aside_later_line(str(out / "checkpoint-1"), str(out))[0] == where.with_name("after-checkpoint-1-2")


def test_a_model_read_from_output_dir_stays_when_the_later_line_moves(finished_run, tmp_path):
    run, _ = finished_run
    out = _copy(run, tmp_path / "out")  # the run trains from output_dir's own final model (model_name_or_path: out)
    _, moved = set_aside_later_line(str(out / "checkpoint-1"), str(out), keep=[str(out)])
    assert "checkpoint-2" in moved and "model.safetensors" not in moved and "config.json" not in moved
    assert (out / "model.safetensors").is_file() and not (out / "hir_final_model.json").exists()


def test_resuming_a_model_only_checkpoint_says_the_optimizer_restarts(finished_run, tmp_path):
    run, _ = finished_run
    assert optimizer_restart_note(str(run / "checkpoint-1")) is None
    assert optimizer_restart_note(None) is None
    light = _copy(run / "checkpoint-1", tmp_path / "checkpoint-1")
    for name in ("optimizer.pt", "scheduler.pt"):
        (light / name).unlink(missing_ok=True)
    note = optimizer_restart_note(str(light))
    assert "save_only_model" in note and "optimizer" in note and "learning-rate schedule" in note


# ------------------------------------------------------------------------------ 2. no credential reaches disk


@pytest.mark.parametrize("field, value", [
    ("model_init_kwargs", {"token": SECRET}),
    ("model_init_kwargs", json.dumps({"token": SECRET})),  # as the command line gives it
    ("model_init_kwargs", {"device_map": "auto", "hub": {"auth_token": SECRET}}),
    ("model_init_kwargs", {"token": "hf_" + SECRET}),
    ("generation_kwargs", {"extra": [{"api_key": SECRET}]}),
    ("judge_extra_kwargs", {"extra_body": {"api_key": SECRET}}),
    ("judge_extra_kwargs", {"extra_body": {"metadata": {"Authorization": "Bearer " + SECRET}}}),
    ("judge_extra_kwargs", {"extra_body": {"headers": {"X-Tenant": SECRET}}}),
    ("judge_extra_kwargs", {"extra_body": {"note": "Bearer " + SECRET}}),
    ("judge_extra_kwargs", {"extra_body": {"note": "Bearer abcdefgh"}}),
])
def test_nested_credentials_are_refused_without_showing_them(tmp_path, field, value):
    with pytest.raises(ValueError, match="credential") as caught:
        HiRConfig(output_dir=str(tmp_path), bf16=False, per_device_train_batch_size=6, **{field: value})
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("field, value", [
    ("model_init_kwargs", {"token": True}),  # use the stored login: no secret
    ("generation_kwargs", {"pad_token_id": 3, "top_k": 20}),
    ("model_init_kwargs", {"revision": "0123456789abcdef0123456789abcdef01234567"}),  # a commit hash
    ("judge_extra_kwargs", {"extra_body": {"guided_choice": ["YES", "NO"]}}),
])
def test_ordinary_dict_options_are_accepted(tmp_path, field, value):
    args = HiRConfig(output_dir=str(tmp_path), bf16=False, per_device_train_batch_size=6, **{field: value})
    assert getattr(args, field) == value


def test_a_token_on_the_command_line_is_one_line_and_nothing_is_written(tmp_path, capsys):
    code, out, err = train(tmp_path, capsys, "--model_init_kwargs", json.dumps({"token": SECRET}))
    assert_one_line_error(code, out, err, "model_init_kwargs holds a credential", "HF_TOKEN")
    assert SECRET not in err
    assert_nothing_written(tmp_path)


# ------------------------------------------------------------------------------ 3. nothing trained, or non-finite


@pytest.mark.parametrize("argv, fragment", [
    (["--learning_rate", "nan"], "learning_rate must be a finite number"),
    (["--learning_rate", "inf"], "learning_rate must be a finite number"),
    (["--weight_decay", "nan"], "weight_decay must be a finite number"),
    (["--max_grad_norm", "inf"], "max_grad_norm must be a finite number"),
    (["--reward_weights", "nan"], "reward_weights[0] must be a finite number"),
    (["--reward_weights", "inf"], "reward_weights[0] must be a finite number"),
    (["--max_steps", "-1", "--num_train_epochs", "0"], "nothing would be trained"),
    (["--max_steps", "-1", "--num_train_epochs", "-2"], "nothing would be trained"),
])
def test_settings_that_cannot_train_are_one_line(tmp_path, capsys, argv, fragment):
    code, out, err = train(tmp_path, capsys, *argv)
    assert_one_line_error(code, out, err, fragment)
    assert_nothing_written(tmp_path)


def test_filtering_that_leaves_no_row_is_one_line(tmp_path, capsys, tiny_model_path):
    soft_only = [native(id=f"s-{i}", constraints=[{"text": "Sound cheerful.", "kind": "soft"}]) for i in range(3)]
    data = write_rows(tmp_path / "soft.jsonl", soft_only)
    code, out, err = train(tmp_path, capsys, "--dataset_name", data, "--model_name_or_path", tiny_model_path,
                           "--build_tiny_model", "false")
    assert_one_line_error(code, out, err, "soft_constraints: skip removed every row")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rewards, error, fragment", [
    ([1.0, math.inf], NonFiniteTrainingError, "returned inf for completion 1"),
    ([-math.inf, 0.0], NonFiniteTrainingError, "returned -inf for completion 0"),
    ([math.nan, 0.0], NonFiniteTrainingError, "return None for a completion"),
    ("10", RewardFunctionError, "it returned str"),
    (1.0, RewardFunctionError, "it returned float"),
    (torch.tensor(1.0), RewardFunctionError, "scalar"),
    ({"a": 1}, RewardFunctionError, "it returned dict"),
    (["1", "2"], RewardFunctionError, "item 0 is str"),
    ([1.0], RewardFunctionError, "it returned 1"),
])
def test_reward_function_results_are_checked_naming_the_function(rewards, error, fragment):
    with pytest.raises(error, match="'my_reward'") as caught:
        check_rewards("my_reward", rewards, 2)
    assert fragment in str(caught.value)


def test_good_reward_function_results_pass():
    assert check_rewards("f", [1, None], 2) == [1, None]
    assert check_rewards("f", np.array([0.5, 1.0]), 2) == [0.5, 1.0]
    assert check_rewards("f", torch.tensor([0.5, 1.0]), 2) == [0.5, 1.0]


def _api_trainer(tmp_path, model, **changes):
    args = HiRConfig(output_dir=str(tmp_path / "api"), use_cpu=True, bf16=False, report_to="none",
                     per_device_train_batch_size=12, num_generations=6, num_replays=2, max_steps=1,
                     max_completion_length=8, replay_truncated_completions=True, save_strategy="no", logging_steps=1,
                     **changes.pop("args", {}))
    return HiRTrainer(model if isinstance(model, torch.nn.Module) else str(model), args=args, train_dataset=load_hir_dataset(SAMPLE_DATA), **changes)


def test_an_infinite_reward_stops_training_naming_the_function(tmp_path, tiny_model_path):
    def length_bonus(prompts, completions, **kwargs):
        return [math.inf] * len(prompts)

    trainer = _api_trainer(tmp_path, tiny_model_path, reward_funcs=[length_bonus])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(NonFiniteTrainingError, match="'length_bonus' returned inf"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    assert not (tmp_path / "api" / "model.safetensors").exists()


@pytest.mark.parametrize("break_it, fragment", [
    ("reward_weights", "the gradient of"),  # NaN advantages -> NaN loss -> NaN gradients
    ("learning_rate", "became NaN or inf after the optimizer step"),
])
def test_non_finite_numbers_inside_training_stop_it_before_anything_is_saved(tmp_path, tiny_model_path, break_it,
                                                                             fragment):
    # past the config's own checks, as a subclass, a callback or an optimizer of one's own could do
    if break_it == "reward_weights":
        trainer = _api_trainer(tmp_path, tiny_model_path)
        trainer.reward_weights = torch.tensor([math.nan])
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer.param_groups[0]["lr"] = math.nan
        trainer = _api_trainer(tmp_path, model, optimizers=(optimizer, None))
    with pytest.raises(NonFiniteTrainingError, match=fragment):
        trainer.train()
    assert not (tmp_path / "api" / "model.safetensors").exists()


def test_disk_full_while_saving_is_one_line(tmp_path, capsys, tiny_model_path, monkeypatch):
    import transformers.modeling_utils as modeling_utils

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(modeling_utils, "safe_save_file", full)
    code, out, err = train(tmp_path, capsys, "--model_name_or_path", tiny_model_path, "--build_tiny_model", "false",
                           "--max_steps", "1", "--save_strategy", "no", "--max_completion_length", "8")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("hir-trl train: error: stopped at step 1: no space left on device"), err
    assert "Traceback" not in err and "free space" in line


# ------------------------------------------------------------------------------ 4. eval: each response, its prompt


def _eval_files(tmp_path, prompts, lines, name="bench.jsonl", newline="\n", base=1000):
    rows = [{"key": base + i, "prompt": p, "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
            for i, p in enumerate(prompts)]
    bench = tmp_path / name
    bench.write_bytes("".join(json.dumps(r) + newline for r in rows).encode())
    responses = tmp_path / ("responses-" + name)
    responses.write_bytes("".join(json.dumps(r) + newline for r in lines).encode())
    return bench, responses


def _score(capsys, tmp_path, bench, responses, *extra):
    from hir_trl.cli.eval import main as eval_main

    report = tmp_path / "report.json"
    code = eval_main(["score", "--benchmark", str(bench), "--responses", str(responses), "--output", str(report),
                      *map(str, extra)])
    _, err = capsys.readouterr()
    return code, err, (json.loads(report.read_text()) if code == 0 else None)


def _strict(report, name="IFEval"):
    """Row key -> the first sample's strict verdicts."""
    return {str(row["key"]): row["samples"][0]["strict"] for row in report["benchmarks"][name]["rows"]}


PROMPTS = [f"Write line {i} about rain.\nThen stop." for i in range(6)]


@pytest.mark.parametrize("base, key_of", [
    (0, lambda i: i + 1),  # 1-based line numbers as keys of a benchmark keyed 0, 1, ...
    (1, lambda i: str(i)),  # 0-based line indices, as strings
    (1000, lambda i: 1000 + (i + 1) % 6),  # keys shifted by one row
])
def test_a_key_that_contradicts_its_prompt_is_refused_naming_the_line(tmp_path, capsys, base, key_of):
    lines = [{"key": key_of(i), "prompt": p, "response": "no comma here"} for i, p in enumerate(PROMPTS)]
    bench, responses = _eval_files(tmp_path, PROMPTS, lines, base=base)
    code, err, _ = _score(capsys, tmp_path, bench, responses)
    assert code == 2 and err.count("\n") == 1, err
    assert "responses-bench.jsonl, line" in err and "key" in err and "Write line" in err, err


def test_matching_keys_and_prompts_score_and_nothing_is_called_unmatched(tmp_path, capsys):
    lines = [{"key": 1000 + i, "prompt": p, "response": "no comma here" if i % 2 else "a, b"}
             for i, p in enumerate(PROMPTS)]
    lines.append({"key": "other", "prompt": "Not a benchmark prompt.", "response": "x"})  # no such row: by prompt
    bench, responses = _eval_files(tmp_path, PROMPTS, lines)
    code, err, report = _score(capsys, tmp_path, bench, responses)
    assert code == 0, err
    assert report["unmatched_responses"]["count"] == 1
    assert report["unmatched_responses"]["prompts"] == ["Not a benchmark prompt."]
    strict = _strict(report)
    assert [strict[str(1000 + i)] for i in range(6)] == [[i % 2 == 1] for i in range(6)]


@pytest.mark.parametrize("bench_newline, prompt_newline, file_newline", [
    ("\n", "\r\n", "\n"), ("\r\n", "\n", "\r\n"), ("\n", "\r", "\r\n")])
def test_crlf_and_lf_prompts_and_files_match(tmp_path, capsys, bench_newline, prompt_newline, file_newline):
    prompts = [p.replace("\n", bench_newline) for p in PROMPTS]
    lines = [{"key": 1000 + i, "prompt": p.replace("\n", prompt_newline), "response": "no comma"}
             for i, p in enumerate(PROMPTS)]
    bench, responses = _eval_files(tmp_path, prompts, lines, newline=file_newline)
    code, err, report = _score(capsys, tmp_path, bench, responses)
    assert code == 0, err
    assert report["unmatched_responses"]["count"] == 0
    assert set(map(tuple, _strict(report).values())) == {(True,)}


def test_a_key_naming_another_benchmark_does_not_contradict(tmp_path, capsys):
    from hir_trl.evaluation.benchmarks import load_benchmark
    from hir_trl.evaluation.scoring import read_responses, score

    lines = [{"key": 1000 + i, "prompt": p, "response": "no comma", "benchmark": "A"} for i, p in enumerate(PROMPTS)]
    lines += [{"key": 1000, "prompt": "Another benchmark's prompt.", "response": "b, c", "benchmark": "B"}]
    bench_a, responses = _eval_files(tmp_path, PROMPTS, lines)
    bench_b, _ = _eval_files(tmp_path, ["Another benchmark's prompt."], [], name="b.jsonl")
    report = score([load_benchmark(bench_a, name="A"), load_benchmark(bench_b, name="B")], read_responses(responses))
    assert _strict(report, "A")["1000"] == [True]
    assert _strict(report, "B")["1000"] == [False]


# ------------------------------------------------------------------------------ 5. your verifiers, like built-ins


def _no_arguments(family, instruction_id):
    try:
        FAMILIES[family].REGISTRY[instruction_id]()
    except (TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("family", ["ifeval", "ifbench"])
def test_replace_true_registers_over_builtin_ids_with_a_colon(family):
    instruction_id = next(i for i in sorted(FAMILIES[family].REGISTRY) if ":" in i and _no_arguments(family, i))
    with pytest.raises(ValueError, match="built-in verifier.*replace=True"):
        register_verifier(family, instruction_id, lambda response: "ACME" in response)
    register_verifier(family, instruction_id, lambda response: "ACME" in response, replace=True)
    assert verify_constraint(family, instruction_id, {}, "ACME ok").passed is True
    assert verify_constraint(family, instruction_id, {}, "nothing").passed is False
    for bad in (" x", "a b", ":x", "x:"):
        with pytest.raises(ValueError, match="instruction_id"):
            register_verifier(family, bad, lambda response: True, replace=True)


@pytest.mark.parametrize("result, passed", [(np.bool_(True), True), (np.bool_(False), False),
                                            (np.all(np.array([1, 2]) > 0), True)])
def test_a_checker_may_return_a_numpy_bool(result, passed):
    register_verifier("acme", "np", lambda response: result)
    verdict = verify_constraint("acme", "np", {}, "some text")
    assert verdict.passed is passed and verdict.error is None


def _raises(response):
    raise RuntimeError("service down")


@pytest.mark.parametrize("check, fragment", [(lambda response: 1, "returned int 1"),
                                             (lambda response: None, "returned NoneType None"),
                                             (_raises, "RuntimeError: service down")])
def test_a_failing_checker_warns_once_and_is_named_in_the_summary(tmp_path, caplog, check, fragment):
    from hir_trl.cli.summary import training_summary

    register_verifier("acme", "flaky", check)
    with caplog.at_level(logging.WARNING, logger="hir_trl.verifiers.registry"):
        verdicts = [verify_constraint("acme", "flaky", {}, f"text {i}") for i in range(4)]
    assert all(v.passed is False and fragment in v.error for v in verdicts)
    warned = [r.getMessage() for r in caplog.records if "acme/flaky" in r.getMessage()]
    assert len(warned) == 1 and fragment in warned[0], warned
    summary = training_summary(tmp_path, [], log_completions=False)
    line = next(line for line in summary.splitlines() if "acme/flaky" in line)
    assert "4 failed check(s)" in line and fragment in line


@pytest.mark.parametrize("source, fragment", [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0)"),
    ("raise SystemExit(3)\n", "called sys.exit(3)"),
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--mine', required=True)\np.parse_args()\n",
     "called sys.exit(2)"),
])
def test_a_verifier_module_that_exits_at_import_does_not_end_the_run(tmp_path, capsys, source, fragment):
    module = tmp_path / "exits.py"
    module.write_text(source)
    code, out, err = train(tmp_path, capsys, "--verifier_modules", module)
    assert_one_line_error(code, out, err, "verifier_modules", "exits.py", fragment)
    assert_nothing_written(tmp_path)


def test_a_verifier_module_parsing_argv_does_not_take_over_the_cli(tmp_path, capsys):
    module = tmp_path / "greedy.py"
    module.write_text("import argparse, sys\nSEEN = list(sys.argv)\n"
                      "p = argparse.ArgumentParser()\np.add_argument('--max_steps', type=int, default=99)\n"
                      "ARGS = p.parse_args()\nprint('imported greedy')\n")
    argv = sys.argv[:]
    code, out, err = train(tmp_path, capsys, "--verifier_modules", module, "--max_steps", "1", "--dataset_name",
                           tmp_path / "none.jsonl")
    assert_one_line_error(code, "", err, "none.jsonl does not exist")  # got as far as the data
    assert out == "imported greedy\n" and sys.argv == argv
    imported = next(m for n, m in sys.modules.items() if n.startswith("hir_trl_verifier_module_") and "greedy" in n)
    assert imported.SEEN == [str(module)] and imported.ARGS.max_steps == 99


@pytest.mark.parametrize("family", ["acme", "zeta_rules"])
def test_an_unregistered_family_hints_at_verifier_modules(tmp_path, capsys, family):
    row = native(constraints=[{"text": "Mention Acme.", "family": family, "instruction_id": "mention"}])
    data = write_rows(tmp_path / "d.jsonl", [row])
    code, out, err = train(tmp_path, capsys, "--dataset_name", data)
    assert_one_line_error(code, out, err, f"unknown verifier family {family!r}", "--verifier_modules")
    assert "unknown instruction id" not in err


# ------------------------------------------------------------------------------ 6. synth never destroys its input


@pytest.mark.parametrize("how", ["same", "relative", "dotted", "symlink", "hardlink"])
def test_synth_refuses_to_write_over_its_input(tmp_path, capsys, monkeypatch, how):
    from hir_trl.cli.synth import main as synth_main

    source = tmp_path / "prompts.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"Write about {w}.", "extra": w}) + "\n" for w in ("rain", "sun")))
    before = source.read_bytes()
    monkeypatch.chdir(tmp_path)
    output = {"same": str(source), "relative": "prompts.jsonl", "dotted": "./sub/../prompts.jsonl",
              "symlink": "link.jsonl", "hardlink": "hard.jsonl"}[how]
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        os.symlink(source, tmp_path / "link.jsonl")
    elif how == "hardlink":
        os.link(source, tmp_path / "hard.jsonl")
    assert synth_main(["--dataset_name", str(source), "--output", output, "--num_constraints", "1"]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("hir-trl synth: error: --output") and err.count("\n") == 1 and "input" in err, err
    assert source.read_bytes() == before


@pytest.mark.parametrize("kwargs, fragment", [
    ({"description": "Use {missing} words.", "sample_kwargs": lambda rng, task: {"n": 3}}, "description of acme/"),
    ({"description": "Use {n} words.", "sample_kwargs": lambda rng, task: 1 / 0}, "sample_kwargs of acme/"),
    ({"description": "Use {n} words.", "sample_kwargs": lambda rng, task: [3]}, "not a dict"),
    ({"description": lambda n: 3, "sample_kwargs": lambda rng, task: {"n": 3}}, "not a string"),
])
def test_a_bad_synth_description_or_sampler_is_one_line_naming_it(tmp_path, capsys, kwargs, fragment):
    from hir_trl.cli.synth import main as synth_main

    register_verifier("acme", "words", lambda response, n: len(response.split()) <= n, **kwargs)
    source = tmp_path / "prompts.jsonl"
    source.write_text(json.dumps({"prompt": "Write about rain."}) + "\n")
    code = synth_main(["--dataset_name", str(source), "--output", str(tmp_path / "out.jsonl"), "--families", "acme",
                       "--num_constraints", "1"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and fragment in err and "acme/words" in err, err
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------------------ 7. duplicated YAML keys


@pytest.mark.parametrize("addition, key, lines", [
    ("learning_rate: 3.0e-4\n", "learning_rate", None),
    ("env:\n  A: 1\n  A: 2\n", "A", (2, 3)),
    ("max_steps: 5\nmax_steps: 6\n", "max_steps", None),
])
def test_a_key_given_twice_in_a_recipe_names_both_lines(tmp_path, capsys, addition, key, lines):
    text = TINY_RECIPE.read_text()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text + addition)
    code, out, err = train(tmp_path, capsys, recipe=recipe)
    all_lines = recipe.read_text().splitlines()
    found = [n for n, line in enumerate(all_lines, 1) if line.strip().startswith(f"{key}:")]
    first, second = found[:2] if lines is None else (len(text.splitlines()) + lines[0],
                                                      len(text.splitlines()) + lines[1])
    assert_one_line_error(code, out, err, str(recipe), repr(key), f"line {first} and line {second}")
    assert_nothing_written(tmp_path)


# ------------------------------------------------------------------------------ noisy: one line, the right words


def test_a_missing_local_model_path_says_no_such_model_folder(tmp_path, capsys):
    for path in (tmp_path / "no" / "model", "./no-model", "~/no/such/model"):
        code, out, err = train(tmp_path, capsys, "--build_tiny_model", "false", "--model_name_or_path", path)
        assert_one_line_error(code, out, err, "no such model folder")
        assert "Repo id" not in err


@pytest.mark.parametrize("argv, named", [
    (["--per_device_train_batch_size", "5"], "per_device_train_batch_size (5) x gradient_accumulation_steps (1)"),
    (["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2"],
     "per_device_train_batch_size (4) x gradient_accumulation_steps (2) = 8"),
    (["--per_device_train_batch_size", "3", "--steps_per_generation", "3"],
     "per_device_train_batch_size (3) x steps_per_generation (3) = 9"),
])
def test_a_batch_of_partial_groups_names_the_fields_the_user_set(tmp_path, capsys, argv, named):
    code, out, err = train(tmp_path, capsys, *argv)
    assert_one_line_error(code, out, err, named, "num_generations (6)")
    assert "generation_batch_size" not in err


@pytest.mark.parametrize("extra, fragment", [({"stream": True}, "'stream'"), ({"n": 3}, "'n'"),
                                             ({"stream_options": {"include_usage": True}}, "'stream_options'")])
def test_judge_arguments_the_judge_cannot_use_are_refused(tmp_path, capsys, extra, fragment):
    code, out, err = train(tmp_path, capsys, "--judge_extra_kwargs", json.dumps(extra))
    assert_one_line_error(code, out, err, f"judge_extra_kwargs must not set {fragment}")
