"""`hir-trl train`: every recipe parses, the tiny recipe trains and prints a readable summary without warnings the
user cannot act on, Ctrl-C leaves a checkpoint that resumes, and replayed prompts keep exactly the constraints
their completions met (checked on the completion logs of a 20-step run on real data)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from hir_trl.cli import summary
from hir_trl.cli.main import main, make_train_parser
from hir_trl.data.loading import load_rows
from hir_trl.data.templates import join_instruction
from hir_trl.rewards import ConstraintReward

from ..testing_utils import REPO_ROOT, SAMPLE_DATA, shared_file, write_checkpoint

TINY_RECIPE = REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu.yaml"
RECIPES = sorted(p for p in (REPO_ROOT / "recipes").rglob("config_*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_recipe_parses(recipe):
    # GPU recipes ask for bf16, which TrainingArguments refuses on a CPU-only machine: override only that
    script_args, training_args, model_args = make_train_parser().parse_args_and_config(
        ["--config", str(recipe), "--bf16", "false"])
    assert script_args.dataset_name and model_args.model_name_or_path
    assert training_args.num_generations >= 2


def test_unknown_recipe_key_fails(tmp_path):
    bad = tmp_path / "config_bad.yaml"
    bad.write_text(TINY_RECIPE.read_text() + "\nnum_replay: 3\n")  # typo of num_replays
    with pytest.raises(ValueError, match="num_replay"):
        make_train_parser().parse_args_and_config(["--config", str(bad)])


def test_cli_usage(capsys):
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert "hir-trl train" in capsys.readouterr().out


def _train(tmp_path, *extra):
    out = tmp_path / "run"
    code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path",
                 str(tmp_path / "model"), *extra])
    assert code == 0
    return out


def test_train_hides_only_the_checkpointing_deprecations_trl_triggers(tiny_model_path):
    # TRL's no-grad passes call the deprecated gradient_checkpointing_disable / _enable of transformers 5
    from transformers import AutoModelForCausalLM

    from hir_trl.cli.main import _UNACTIONABLE_WARNINGS

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)

    def messages(hide: bool) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if hide:
                for pattern in _UNACTIONABLE_WARNINGS:
                    warnings.filterwarnings("ignore", message=pattern, category=FutureWarning)
            model.gradient_checkpointing_enable()
            model.gradient_checkpointing_disable()
            warnings.warn("`gradient_checkpointing_fancy` is deprecated and will be removed in v6", FutureWarning, stacklevel=1)
        return [str(w.message) for w in seen]

    shown = messages(hide=False)
    assert any("gradient_checkpointing_disable" in m for m in shown)
    assert any("gradient_checkpointing_enable" in m for m in shown)
    # what is hidden is exactly those; an unrelated deprecation still shows
    assert messages(hide=True) == ["`gradient_checkpointing_fancy` is deprecated and will be removed in v6"]


def test_tiny_recipe_trains_and_writes_a_hir_checkpoint(tmp_path, capsys, recwarn):
    # transformers 5 warns that TRL's gradient_checkpointing is deprecated, at config creation and at every
    # generation: nothing a user can act on, so `hir-trl train` hides exactly those (they do fire here)
    with pytest.warns(FutureWarning, match="gradient_checkpointing"):
        make_train_parser().parse_args_and_config(["--config", str(TINY_RECIPE)])
    recwarn.clear()
    warnings.simplefilter("always")
    out = _train(tmp_path, "--max_steps", "2", "--save_steps", "2")
    assert not [str(w.message) for w in recwarn if "gradient_checkpointing" in str(w.message)]
    _check_summary(capsys.readouterr().out, out)
    assert (tmp_path / "model" / "config.json").exists()  # built locally on first use
    assert "- hir" in (out / "checkpoint-2" / "README.md").read_text()
    card = (out / "README.md").read_text()
    assert "- hir" in card and "arXiv:2512.23457" in card and "@article{hir2025" in card
    # HiR hyperparameters, the dataset and the final metrics
    assert "## HiR training" in card and "muldimif_listing_sample.jsonl" in card
    for field in ("`num_generations`: `6`", "`num_replays`: `2`", "`lambda_0`: `2.0`", "`eta`: `0.05`",
                  "`replay_selection`: `curriculum`", "`advantage_estimator`: `grpo`"):
        assert field in card, field
    assert "Latest metrics (step 2)" in card and "| `hir/lambda` | 2.1 |" in card and "`reward/ila`" in card
    assert (out / "model.safetensors").exists()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    history = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    steps = [h for h in history if "loss" in h]
    assert len(steps) == 2
    for h in steps:
        assert h["hir/replayed_rows"] > 0
        for key in ("hir/lambda", "hir/replayed_fraction", "hir/groups_all_failed", "hir/replay_integrity_mean",
                    "hir/replay_entropy_mean", "reward/ila", "reward/cla"):
            assert key in h


def _check_summary(printed, out):
    """The end-of-run summary: per-step figures equal the logged ones, the example replays are real replays from
    the completion log (q, the q' trained on, y), and the paths exist."""
    assert "HiR run summary" in printed
    history = [h for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "reward/ila" in h]
    lines = printed.splitlines()
    for h in history:
        expected = [str(h["step"]), f"{100 * h['reward/ila']:.1f}", f"{100 * h['reward/cla']:.1f}",
                    f"{h['hir/replayed_rows']:g}", f"{h['hir/supplementary_samples']:g}", f"{h['hir/padded_rows']:g}"]
        assert expected in [line.split() for line in lines], expected
    total = sum(h["hir/replayed_rows"] for h in history)
    padded = sum(h["hir/padded_rows"] for h in history)
    assert f"Replays made: {total:g}; supplementary samples: " in printed
    assert f"; padding rows: {padded:g} (over " in printed
    rows = {row["row_id"]: row for row in load_rows(SAMPLE_DATA)}
    starts = [i for i, line in enumerate(lines) if re.match(r"\s+\[\d\] step \d+, row ", line)]
    assert len(starts) == 2
    for i in starts:
        step, row_id = re.match(r"\s+\[\d\] step (\d+), row (\S+)", lines[i]).groups()
        table = pd.read_parquet(out / "completions" / f"completions_{int(step):05d}.parquet")
        entry = table[table["hindsight"] & (table["row_id"] == row_id)].iloc[0]
        row = rows[row_id]
        kept = [row["constraints"][j]["text"] for j in json.loads(entry["kept_constraints"])]
        assert lines[i + 1].strip() == "q : " + summary._clip(row["prompt"][-1]["content"], 300)
        q_prime = entry["prompt"][-1]["content"]  # the instruction the replay was trained on
        assert lines[i + 2].strip() == "q': " + summary._clip(q_prime, 600)
        assert all(text in q_prime for text in kept)
        assert lines[i + 3].strip() == f"y : {summary._clip(entry['completion'][0]['content'], 160)!r}"
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    for label, path in [("last checkpoint", checkpoints[-1]), ("completion log", out / "completions"),
                        ("model card", out / "README.md"), ("final model", out)]:
        assert re.search(rf"^\s+{label}\s+: {re.escape(str(path))}$", printed, re.M), label
        assert path.exists()


def _interrupted_run(tmp_path, tiny_model_path, min_step):
    """Start `hir-trl train` in a subprocess, send SIGINT once checkpoint-<min_step> is complete; (status, stderr)."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "hir_trl.cli", "train", "--config", str(TINY_RECIPE), "--output_dir", str(out),
               "--model_name_or_path", str(tiny_model_path), "--build_tiny_model", "false", "--max_steps", "500",
               "--save_steps", "1", "--save_total_limit", "4", "--log_completions", "false"]
    # SIGINT back to its default in the child: a test process started in the background may ignore it (inherited)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 600
        while not (out / f"checkpoint-{min_step}" / "trainer_state.json").exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, out


@pytest.mark.slow
def test_sigint_leaves_a_loadable_checkpoint_that_resumes_even_without_hir_state(tmp_path, tiny_model_path, caplog,
                                                                               capsys):
    from transformers import AutoModelForCausalLM

    code, err, out = _interrupted_run(tmp_path, tiny_model_path, min_step=2)
    assert code == 130 and "Traceback" not in err, err[-3000:]
    message = err.replace("\r", "\n").strip().splitlines()[-1]  # the last line, after the closed progress bar
    match = re.fullmatch(r"hir-trl train: interrupted at step (\d+); the last complete checkpoint is (\S+); "
                         r"resume with --resume_from_checkpoint (\S+)", message)
    assert match, err[-2000:]
    step, checkpoint = int(match.group(1)), Path(match.group(2))
    assert match.group(3) == str(checkpoint) and checkpoint.parent == out
    saved = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
    assert 2 <= saved <= step
    assert AutoModelForCausalLM.from_pretrained(checkpoint).num_parameters() > 0  # loadable
    assert (checkpoint / "hir_state.json").exists() and (checkpoint / "README.md").exists()

    # a checkpoint without hir_state.json (e.g. copied without it) still resumes, with a warning
    (checkpoint / "hir_state.json").unlink()
    with caplog.at_level(logging.WARNING, logger="hir_trl.step.replay"):
        code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path",
                     str(tiny_model_path), "--build_tiny_model", "false", "--max_steps", str(saved + 1),
                     "--resume_from_checkpoint", str(checkpoint), "--save_strategy", "no", "--log_completions",
                     "false"])
    assert code == 0
    assert any("has no hir_state.json: resuming" in r.getMessage() for r in caplog.records)
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    resumed = [h for h in history if "hir/lambda" in h]
    assert resumed[-1]["step"] == saved + 1
    assert resumed[-1]["hir/lambda"] == pytest.approx(2.0 * 1.05 ** saved)  # lambda follows the restored step
    assert "interrupted" not in capsys.readouterr().err


def test_resume_from_an_incomplete_checkpoint_is_a_one_line_error(tmp_path, capsys):
    out = tmp_path / "run"
    write_checkpoint(out / "checkpoint-2", 2)
    (out / "checkpoint-3").mkdir()  # interrupted while it was being saved: no trainer_state.json
    argv = ["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path",
            str(tmp_path / "model")]
    assert main([*argv, "--resume_from_checkpoint", str(out / "checkpoint-3")]) == 2  # named: refused
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint-3 is not a complete checkpoint" in err
    assert f"resume from {out / 'checkpoint-2'} instead" in err
    assert not (tmp_path / "model").exists()


def test_a_tracker_that_is_not_installed_is_one_line_before_anything_loads(tmp_path, capsys):
    """The paper recipes log to wandb: without it installed, `hir-trl train` stops at once with one line naming
    the fix, before the data or the model load (transformers would raise from inside the trainer)."""
    from transformers.integrations import get_available_reporting_integrations

    if "wandb" in get_available_reporting_integrations():
        pytest.skip("wandb is installed here")
    argv = ["train", "--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / "run"), "--model_name_or_path",
            str(tmp_path / "model"), "--report_to", "wandb"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert ("report_to: wandb is not installed: pip install 'hir-trl[trackers]' (and log in), or pass --report_to "
            "none") in err
    assert not (tmp_path / "model").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("trackers, install", [
    (["trackio"], "pip install 'hir-trl[trackers]'"),
    (["comet_ml"], "pip install comet-ml"),
    (["wandb", "comet_ml"], "pip install 'hir-trl[trackers]' and pip install comet-ml")])
def test_a_missing_tracker_names_the_extra_that_installs_it_or_its_package(trackers, install, monkeypatch):
    import transformers.integrations

    from hir_trl.cli.train import check_trackers

    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: ["tensorboard"])
    with pytest.raises(ValueError) as raised:
        check_trackers(trackers)
    assert f"report_to: {', '.join(trackers)} is not installed: {install} (and log in)" in str(raised.value)
    check_trackers(["tensorboard", "none"])  # installed ones, and none, pass


@pytest.mark.slow
def test_twenty_steps_on_shared_hir16k_rows_keep_exactly_the_satisfied_constraints(tmp_path):
    data = shared_file("hir16k_format/muldimif_listing_type3.jsonl")
    out = _train(tmp_path, "--dataset_name", str(data), "--max_steps", "20", "--save_strategy", "no")
    rows = {row["row_id"]: row for row in load_rows(data)}
    checker = ConstraintReward()
    files = sorted((out / "completions").glob("completions_*.parquet"))
    assert len(files) == 20
    replayed = 0
    for path in files:
        table = pd.read_parquet(path)
        hindsight = table[table["hindsight"]]
        for _, entry in hindsight.iterrows():
            row = rows[entry["row_id"]]
            completion = entry["completion"][0]["content"]
            met = checker.verify([row["prompt"]], [completion], [row["constraints"]]).passed(0)
            kept = json.loads(entry["kept_constraints"])
            assert kept == [i for i, ok in enumerate(met) if ok]  # exactly the satisfied ones
            assert 0 < len(kept) < len(met)
            texts = [row["constraints"][i]["text"] for i in kept]
            assert entry["prompt"][-1]["content"] == join_instruction(row["task"], texts, row["template"])
            # a replay's reward is 1 under either reward_mode; the logged column is named after it (default 'cla')
            assert entry["cla" if "cla" in entry else "ila"] == 1.0
            replayed += 1
    assert replayed > 0


PAPER_MODELS = {"Qwen3-4B-Instruct-2507": "Qwen/Qwen3-4B-Instruct-2507", "Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
                "Llama-3.2-3B-Instruct": "meta-llama/Llama-3.2-3B-Instruct"}


@pytest.mark.parametrize("model", sorted(PAPER_MODELS))
def test_paper_recipes_use_appendix_a_hyperparameters(model):
    parsed = {}
    for variant in ("hir", "rl_ir", "rl_cr", "random_replay"):
        recipe = REPO_ROOT / "recipes" / model / variant / "config_paper.yaml"
        parsed[variant] = make_train_parser().parse_args_and_config(["--config", str(recipe), "--bf16", "false"])
    for script_args, args, model_args in parsed.values():
        assert model_args.model_name_or_path == PAPER_MODELS[model]
        assert script_args.dataset_name == "sastpg/HIR-16K"
        assert args.num_generations + args.num_replays == 8  # rollout_n = 8
        assert (args.learning_rate, args.beta, args.temperature, args.top_p) == (1e-6, 1e-4, 1.0, 1.0)
        assert (args.max_completion_length, args.num_train_epochs, args.lr_scheduler_type) == (4096, 5, "constant")
        assert args.advantage_estimator == "reinforce_pp"
        # 64 prompts per optimizer step on 8 GPUs
        assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 8 == 64 * args.num_generations
    hir, rl_ir, rl_cr, random_replay = (parsed[v][1] for v in ("hir", "rl_ir", "rl_cr", "random_replay"))
    assert (hir.num_replays, hir.lambda_0, hir.eta, hir.replay_selection, hir.reward_mode) == (2, 2.0, 0.05,
                                                                                              "curriculum", "ila")
    assert (rl_ir.num_replays, rl_ir.reward_mode) == (0, "ila")
    assert (rl_cr.num_replays, rl_cr.reward_mode) == (0, "cla")
    assert (random_replay.num_replays, random_replay.replay_selection) == (2, "random")
    for variant in ("hir", "random_replay"):  # supplementary samples in a second call, after the selection (§3.2)
        args = parsed[variant][1]
        assert args.replay_shortfall == "resample"
