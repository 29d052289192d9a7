"""Every shipped recipe that trains runs as shipped at tiny size on CPU (tests/recipes/recipes_run.py; the CPU changes:
tests/recipes/recipes_cpu_changes.yaml).

`make test` runs the fast part: every recipe parses and validates with its CPU changes (the dataclasses' checks,
HiRConfig's validation), every change
names a real setting, and one recipe per accelerate config trains one step (ZeRO-3 only where deepspeed is
installed). `make test-recipes` (marker ``recipes``, ``HIR_TEST_RECIPES=1``) runs each recipe 2 steps, kills it
while it saves ``checkpoint-2`` and resumes it with ``--resume_from_checkpoint true``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest

from ..judge_server import FakeJudgeServer
from ..testing_utils import REPO_ROOT
from . import recipes_run

RECIPES = recipes_run.training_recipes()
IDS = [str(p.relative_to(recipes_run.RECIPES)) for p in RECIPES]


def _completions_per_step(path) -> int:
    recipe = recipes_run.read_recipe(path)
    return int(recipe.get("per_device_train_batch_size", 8)) * int(recipe.get("gradient_accumulation_steps", 1))


def _by_launch() -> dict[str, object]:
    """One recipe per accelerate config ("one process": none), the one with the fewest completions per step."""
    chosen: dict[str, object] = {}
    for path in sorted(RECIPES, key=lambda p: (_completions_per_step(p), str(p))):
        launch = recipes_run.accelerate_config(path)
        chosen.setdefault(launch.name if launch else "one process", path)
    return chosen


def test_every_recipe_that_trains_is_found():
    names = set(IDS)
    assert sum(n.endswith("config_paper.yaml") for n in names) == 12
    assert {"Qwen2.5-7B-Instruct/hir/config_lora_24gb.yaml", "SmolLM2-135M-Instruct/hir/config_cpu.yaml",
            "tiny/hir/config_cpu.yaml"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=IDS)
def test_every_recipe_parses_and_validates_with_its_cpu_changes(path, tmp_path):
    from hir_trl.cli.main import parse_train_args

    plan = recipes_run.plan_run(path, tmp_path, "http://127.0.0.1:9/v1")
    script_args, training_args, model_args = parse_train_args(["--config", str(path), *plan.flags])
    applied = {**vars(script_args), **vars(training_args), **vars(model_args)}
    for name, value, why in plan.changes:
        assert name in applied and why  # a real setting, with its reason
        assert str(applied[name]).lower() == str(value).lower() or (value == "none" and applied[name] == [])
    assert training_args.max_steps == 2 and training_args.save_steps == 1
    recipe = recipes_run.read_recipe(path)
    assert training_args.bf16 == bool(recipe.get("bf16", False))  # bf16 stays bf16


def test_the_cpu_changes_are_printed_with_their_reasons(tmp_path):
    plan = recipes_run.plan_run(REPO_ROOT / "recipes/Qwen2.5-7B-Instruct/hir/config_lora_24gb.yaml", tmp_path,
                                "http://127.0.0.1:9/v1")
    shown = recipes_run.describe(plan)
    assert "cpu change: load_in_4bit = False: bitsandbytes' 4-bit weights need a CUDA GPU" in shown
    assert "max_completion_length 1024 -> 16" in shown
    paper = recipes_run.plan_run(REPO_ROOT / "recipes/Qwen3-4B-Instruct-2507/hir/config_paper.yaml", tmp_path,
                                 "http://127.0.0.1:9/v1")
    assert "(accelerate: zero3.yaml, 2 CPU processes)" in recipes_run.describe(paper)
    assert "num_processes = 2" in recipes_run.describe(paper)


@pytest.mark.parametrize("path", [p for p in RECIPES if recipes_run.read_recipe(p).get("vllm_max_model_length")],
                         ids=lambda p: str(p.relative_to(recipes_run.RECIPES)))
def test_a_context_length_keeps_its_prompt_room_and_scales_its_completion(path, tmp_path):
    """vllm_max_model_length is prompt + completion: the prompts are the data's (not scaled), so only the completion
    part scales; 8192 // 256 = 32 would leave vLLM no room for a 112-token prompt."""
    recipe = recipes_run.read_recipe(path)
    sizes = {name: tiny for name, _, tiny in recipes_run.plan_run(path, tmp_path, "http://127.0.0.1:9/v1").sizes}
    assert sizes["max_completion_length"] < recipe["max_completion_length"]
    assert sizes["vllm_max_model_length"] - sizes["max_completion_length"] == (
        recipe["vllm_max_model_length"] - recipe["max_completion_length"])


@pytest.mark.parametrize("model", sorted(recipes_run.CHAT_FORMATS))
def test_the_tiny_model_keeps_the_architecture(model, tmp_path):
    import yaml
    from transformers import AutoConfig, AutoTokenizer

    table = recipes_run.load_changes()
    shape = yaml.safe_load((recipes_run.RECIPES / "model_shapes.yaml").read_text())[model]
    recipes_run.build_model(tmp_path, model, table["scale"], ["a few words to train the tokenizer on"] * 4)
    config, tokenizer = AutoConfig.from_pretrained(tmp_path), AutoTokenizer.from_pretrained(tmp_path)
    assert config.model_type == shape["model_type"]
    assert config.tie_word_embeddings == shape["tie_word_embeddings"]
    assert config.num_attention_heads // config.num_key_value_heads == \
        shape["num_attention_heads"] // shape["num_key_value_heads"]
    assert str(config.dtype).removeprefix("torch.") == shape["torch_dtype"]
    assert config.num_hidden_layers == table["scale"]["num_hidden_layers"]
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert ("<|start_header_id|>" in text) == (shape["model_type"] == "llama" and "Llama" in model)


def _deepspeed_missing() -> bool:
    return importlib.util.find_spec("deepspeed") is None


@pytest.mark.slow
@pytest.mark.parametrize("launch", sorted(_by_launch()))
def test_one_recipe_per_accelerate_config_trains_one_step(launch, tmp_path):
    path = _by_launch()[launch]
    if launch != "one process" and _deepspeed_missing():
        pytest.skip(f"{launch} needs deepspeed (not in the dev extra): make test-recipes runs it")
    with FakeJudgeServer() as judge:
        plan = recipes_run.plan_run(path, tmp_path, judge.base_url)
        recipes_run.prepare(plan, tmp_path)
        argv = [*recipes_run.command(plan, tmp_path), "--max_steps=1", "--log_completions=false"]
        run = subprocess.run(argv, cwd=REPO_ROOT, env=recipes_run.environment(plan), capture_output=True, text=True,
                             timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"] == 1


@pytest.mark.recipes
@pytest.mark.parametrize("path", RECIPES, ids=IDS)
def test_the_recipe_trains_is_killed_while_saving_and_resumes(path, tmp_path):
    if not os.environ.get("HIR_TEST_RECIPES"):
        pytest.skip("minutes per recipe: make test-recipes runs it (HIR_TEST_RECIPES=1)")
    plan = None
    with FakeJudgeServer() as judge:
        plan = recipes_run.plan_run(path, tmp_path, judge.base_url)
        print(recipes_run.describe(plan))
        recipes_run.prepare(plan, tmp_path)
        outcome = recipes_run.run_recipe(plan, tmp_path)
    print(f"   killed while saving: {outcome.killed_in_save} ({outcome.killed_s:.0f} s); resumed from "
          f"{outcome.resumed_from}: exit {outcome.resumed_rc}, global_step {outcome.steps} ({outcome.resumed_s:.0f} s)")
    assert outcome.ok, outcome.tail
