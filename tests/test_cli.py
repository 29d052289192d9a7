"""`hir-trl train`: every recipe parses, the tiny recipe trains, and replayed prompts keep exactly the
constraints their completions met (checked on the completion logs of a 20-step run on real data)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hir_trl.cli import main, make_train_parser
from hir_trl.data import load_rows
from hir_trl.rewards import ConstraintReward
from hir_trl.templates import join_instruction

from .conftest import REPO_ROOT, shared_file

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
    main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path",
          str(tmp_path / "model"), *extra])
    return out


def test_tiny_recipe_trains_and_writes_a_hir_checkpoint(tmp_path):
    out = _train(tmp_path, "--max_steps", "2", "--save_steps", "2")
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
            assert entry["ila"] == 1.0
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
