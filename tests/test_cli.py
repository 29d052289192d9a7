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
    script_args, training_args, model_args = make_train_parser().parse_args_and_config(["--config", str(recipe)])
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
    assert "- hir" in (out / "README.md").read_text()
    assert (out / "model.safetensors").exists()
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
