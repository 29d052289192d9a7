"""Every shipped recipe that trains, run on CPU at tiny size (``make test-recipes``;
tests/recipes/test_recipes_run.py).

For each ``recipes/<Model>/<method>/config_*.yaml``:

1. A model of the recipe's architecture is built locally: the entry of ``recipes/model_shapes.yaml`` for its model
   (``model_type``, tied embeddings, grouped-query layout, ``torch_dtype``) scaled down by the rule of
   tests/recipes/recipes_cpu_changes.yaml, with a tokenizer trained on the recipe's data and a chat template of the
   model's format. The tiny recipes keep the model they build themselves.
2. The recipe file runs as shipped, with command-line flags for what a CPU (or this offline machine) cannot do, each
   listed with its reason in tests/recipes/recipes_cpu_changes.yaml, and the sizes of the scale rule. A recipe whose
   header says ``Launch: accelerate launch --config_file X`` runs under X as 2 CPU processes.
3. The run is killed (SIGKILL, no clean-up) while it saves ``checkpoint-2``, after its model weights and before
   its trainer state, then continued with the same command plus ``--resume_from_checkpoint true`` (a scheduler's
   requeue), which must finish: exit 0, ``global_step`` 2, a whole final model.

Nothing here downloads anything: the data and the judge are local stand-ins (listed as changes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..testing_utils import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES = REPO_ROOT / "recipes"
CHANGES_FILE = Path(__file__).with_name("recipes_cpu_changes.yaml")
#: Set in the training process: the step whose checkpoint save is killed (tests/recipes/recipes_entry.py).
KILL_ENV = "HIR_RECIPES_KILL_AT_SAVE"

_LAUNCH = re.compile(r"^#\s*Launch:\s*accelerate launch --config_file (\S+)", re.MULTILINE)

# The chat formats of the recipes' models, small: the real templates live on the Hub with the weights. ChatML
# (Qwen2.5 with its default system prompt, Qwen3-2507 without, SmolLM2 with its own) and Llama 3's header format.
_CHATML = (
    "{%- if messages[0]['role'] != 'system' and DEFAULT -%}"
    "{{- '<|im_start|>system\\n' + DEFAULT + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
_LLAMA3 = (
    "{{- '<|begin_of_text|>' -}}"
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: December 2023\\n\\n<|eot_id|>' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)
#: Per model: (chat template, special tokens beyond ChatML's, end-of-turn token).
CHAT_FORMATS = {
    "Qwen/Qwen2.5-7B-Instruct": (
        _CHATML.replace("DEFAULT", "'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.'"), [],
        "<|im_end|>"),
    "Qwen/Qwen3-4B-Instruct-2507": (_CHATML.replace("DEFAULT", "''"), [], "<|im_end|>"),
    "HuggingFaceTB/SmolLM2-135M-Instruct": (
        _CHATML.replace("DEFAULT", "'You are a helpful AI assistant named SmolLM, trained by Hugging Face'"), [],
        "<|im_end|>"),
    "meta-llama/Llama-3.2-3B-Instruct": (
        _LLAMA3, ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "<|eot_id|>"),
}
#: The published model of a recipe whose model_name_or_path is a local folder it builds (build_model).
LOCAL_MODELS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def load_changes() -> dict[str, Any]:
    """tests/recipes/recipes_cpu_changes.yaml: ``changes``, ``accelerate`` and ``scale``."""
    return yaml.safe_load(CHANGES_FILE.read_text(encoding="utf-8"))


def training_recipes() -> list[Path]:
    """Every recipe that trains: ``recipes/<Model>/<method>/config_*.yaml``."""
    return sorted(p for p in RECIPES.glob("*/*/config_*.yaml"))


def read_recipe(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def accelerate_config(path: Path) -> Path | None:
    """The accelerate config on the recipe's ``Launch:`` line, or None (one process, ``hir-trl train``)."""
    found = _LAUNCH.search(path.read_text(encoding="utf-8"))
    return REPO_ROOT / found.group(1) if found else None


def published_model(recipe: dict[str, Any]) -> str | None:
    """The model_shapes.yaml entry the recipe trains, or None for a recipe that builds its own tiny model."""
    if recipe.get("build_tiny_model"):
        return None
    return LOCAL_MODELS.get(recipe.get("build_model") or "", recipe.get("model_name_or_path"))


def tiny_shape(model: str, scale: dict[str, Any]) -> dict[str, Any]:
    """``model``'s published shape (recipes/model_shapes.yaml) scaled down by ``scale`` (the scale rule)."""
    shapes = yaml.safe_load((RECIPES / "model_shapes.yaml").read_text(encoding="utf-8"))
    shape = dict(shapes[model])
    heads, kv = shape["num_attention_heads"], shape.get("num_key_value_heads", shape["num_attention_heads"])
    head_dim = shape.get("head_dim", shape["hidden_size"] // heads)
    new_kv = scale["num_key_value_heads"]
    new_heads = new_kv * (heads // kv)
    new_head_dim = scale["head_dim"]
    hidden = round(shape["hidden_size"] / (heads * head_dim) * new_heads * new_head_dim)
    intermediate = 8 * max(1, round(shape["intermediate_size"] / shape["hidden_size"] * hidden / 8))
    shape.update(num_hidden_layers=scale["num_hidden_layers"], num_attention_heads=new_heads,
                 num_key_value_heads=new_kv, hidden_size=hidden, intermediate_size=intermediate)
    if "head_dim" in shapes[model]:
        shape["head_dim"] = new_head_dim
    return shape


def build_model(folder: Path, model: str, scale: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """Build the tiny ``model``-shaped model in ``folder`` (weights in its published dtype); its config's fields."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from hir_trl.models.tiny import build_tokenizer

    shape = tiny_shape(model, scale)
    template, extra_tokens, end_of_turn = CHAT_FORMATS[model]
    tokenizer = build_tokenizer(texts, vocab_size=scale["vocab_size"])
    if extra_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": extra_tokens})
    tokenizer.eos_token = end_of_turn
    tokenizer.chat_template = template
    fields = {k: v for k, v in shape.items() if k not in ("model_type", "torch_dtype", "vocab_size")}
    pad, eos = tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids(end_of_turn)
    config = AutoConfig.for_model(shape["model_type"], vocab_size=len(tokenizer), bos_token_id=pad,
                                  eos_token_id=eos, pad_token_id=pad, **fields)
    dtype = getattr(torch, shape.get("torch_dtype", "float32"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        built = AutoModelForCausalLM.from_config(config).to(dtype)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(built.generation_config, name, getattr(config, name))
    folder.mkdir(parents=True, exist_ok=True)
    built.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {**shape, "vocab_size": len(tokenizer)}


def _applies(change: dict[str, Any], recipe: dict[str, Any]) -> bool:
    if "when_field" in change:
        return bool(recipe.get(change["when_field"]))
    value = recipe.get(change["field"])
    if value is None:
        return "absent" in change["when"]
    if "unless_importable" in change:
        import importlib.util

        if importlib.util.find_spec(change["unless_importable"]) is not None:
            return False
    return value in change["when"] or str(value) in map(str, change["when"])


@dataclass
class Plan:
    """One recipe's run: what is changed and why, the command, and where it writes."""

    recipe: Path
    changes: list[tuple[str, Any, str]] = field(default_factory=list)  # (field, value, why)
    sizes: list[tuple[str, Any, Any]] = field(default_factory=list)  # (field, shipped, tiny)
    flags: list[str] = field(default_factory=list)
    accelerate: Path | None = None
    accelerate_changes: list[tuple[str, Any, str]] = field(default_factory=list)
    model: str | None = None

    @property
    def name(self) -> str:
        return str(self.recipe.relative_to(RECIPES))


def plan_run(path: Path, workdir: Path, judge_url: str, table: dict[str, Any] | None = None) -> Plan:
    """What running ``path`` on CPU at tiny size takes (`Plan`), its files under ``workdir``."""
    table = table or load_changes()
    recipe, scale = read_recipe(path), table["scale"]
    plan = Plan(path, accelerate=accelerate_config(path), model=published_model(recipe))
    for change in table["changes"]:
        if _applies(change, recipe):
            value = change["set"].format(judge_url=judge_url) if isinstance(change["set"], str) else change["set"]
            plan.changes.append((change["field"], value, change["why"]))
    if plan.accelerate is not None:
        plan.accelerate_changes = [(c["field"], c["set"], c["why"]) for c in table["accelerate"]]
    scaled = {name: max(scale["min_length"], int(recipe[name]) // scale["length_divisor"])
              for name in scale["lengths"] if recipe.get(name) is not None}
    for name in scale.get("contexts", []):  # prompt room as shipped (the data is not scaled) + the scaled completion
        if recipe.get(name) is not None:
            completion = int(recipe.get("max_completion_length") or 0)
            scaled[name] = int(recipe[name]) - completion + scaled.get("max_completion_length", completion)
    plan.sizes += [(name, recipe[name], tiny) for name, tiny in scaled.items()]
    plan.sizes += [("max_steps", recipe.get("max_steps", -1), scale["max_steps"]),
                   ("save_strategy", recipe.get("save_strategy", "steps"), "steps"),
                   ("save_steps", recipe.get("save_steps"), scale["save_steps"])]
    flags = [f"--{name}={_flag(value)}" for name, value, _ in plan.changes]
    flags += [f"--{name}={_flag(tiny)}" for name, _, tiny in plan.sizes]
    # where the run reads and writes (paths, not settings): the tiny model, a scratch output_dir and judge cache
    flags += [f"--output_dir={workdir / 'out'}", f"--model_name_or_path={workdir / 'model'}"]
    if recipe.get("judge_cache_dir"):
        flags.append(f"--judge_cache_dir={workdir / 'judge-cache'}")
    plan.flags = flags
    return plan


def _flag(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def describe(plan: Plan) -> str:
    """The lines printed for a recipe: every change with its reason, the sizes, the launch."""
    lines = [f"== {plan.name}" + (f" (accelerate: {plan.accelerate.name}, 2 CPU processes)" if plan.accelerate
                                  else " (one process)")]
    lines += [f"   cpu change: {name} = {value!r}: {why}" for name, value, why in plan.changes]
    lines += [f"   cpu change (accelerate): {name} = {value!r}: {why}" for name, value, why in plan.accelerate_changes]
    lines.append("   sizes: " + ", ".join(f"{name} {shipped} -> {tiny}" for name, shipped, tiny in plan.sizes))
    return "\n".join(lines)


def command(plan: Plan, workdir: Path) -> list[str]:
    """The launch: ``python -m tests.recipes.recipes_entry train --config RECIPE FLAGS``, under ``accelerate launch``
    with the recipe's accelerate config (changed as listed) when it names one."""
    entry = ["-m", "tests.recipes.recipes_entry", "train", "--config", str(plan.recipe.relative_to(REPO_ROOT)),
             *plan.flags]
    if plan.accelerate is None:
        return [sys.executable, *entry]
    config = yaml.safe_load(plan.accelerate.read_text(encoding="utf-8"))
    for name, value, _ in plan.accelerate_changes:
        config[name] = value
    config["main_process_port"] = free_port()
    derived = workdir / f"accelerate-{plan.accelerate.name}"
    derived.write_text(yaml.safe_dump(config), encoding="utf-8")
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(derived), *entry]


def environment(plan: Plan) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           **{name: str(value) for name, value in load_changes()["environment"].items()}}
    key = read_recipe(plan.recipe).get("judge_api_key_env")
    if key:
        env[key] = "stub-key"  # the local stub judge takes any key
    return env


@dataclass
class Outcome:
    recipe: str
    killed_rc: int | None = None
    killed_s: float = 0.0
    killed_in_save: bool = False
    resumed_rc: int | None = None
    resumed_s: float = 0.0
    steps: int | None = None
    final_model: bool = False
    resumed_from: str | None = None
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.killed_in_save and self.resumed_rc == 0 and self.steps == 2 and self.final_model


def _run(argv: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[int, float]:
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = -999
        finally:
            try:  # the launcher's other ranks, whatever state the kill left them in
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return rc, time.monotonic() - start


def run_recipe(plan: Plan, workdir: Path, timeout: float = 1200) -> Outcome:
    """Train ``plan``'s recipe 2 steps, killed while saving checkpoint-2, then resumed with the same command plus
    ``--resume_from_checkpoint true``; the `Outcome`."""
    from hir_trl.run_folder import final_model

    outcome = Outcome(plan.name)
    argv = command(plan, workdir)
    env = environment(plan)
    outcome.killed_rc, outcome.killed_s = _run(argv, {**env, KILL_ENV: "2"}, workdir / "killed.log", timeout)
    out = workdir / "out"
    partial = out / "checkpoint-2"
    outcome.killed_in_save = (out / "checkpoint-1" / "trainer_state.json").is_file() and partial.is_dir() and \
        not (partial / "trainer_state.json").exists()
    outcome.resumed_rc, outcome.resumed_s = _run([*argv, "--resume_from_checkpoint", "true"], env,
                                                 workdir / "resumed.log", timeout)
    log = (workdir / "resumed.log").read_text(errors="replace")
    found = re.search(r"resuming from (\S+?):", log)
    outcome.resumed_from = found.group(1) if found else None
    try:
        outcome.steps = json.loads((out / "trainer_state.json").read_text())["global_step"]
    except (OSError, ValueError, KeyError):
        outcome.steps = None
    outcome.final_model = final_model(str(out))[0] is not None
    if not outcome.ok:
        tail = (workdir / "killed.log").read_text(errors="replace")[-3000:] + "\n--- resumed ---\n" + log[-3000:]
        outcome.tail = tail
    return outcome


def prepare(plan: Plan, workdir: Path) -> None:
    """Build the tiny model of ``plan`` in ``workdir/model`` (the tiny recipes build their own on first use)."""
    if plan.model is None:
        return
    from hir_trl import load_hir_dataset

    recipe = read_recipe(plan.recipe)
    data = {name: value for name, value, _ in plan.changes}.get("dataset_name", recipe.get("dataset_name"))
    rows = load_hir_dataset(REPO_ROOT / data)
    texts = [m["content"] for row in rows for m in row["prompt"]] + [c["text"] for row in rows
                                                                     for c in row["constraints"]]
    build_model(workdir / "model", plan.model, load_changes()["scale"], texts)


def clean(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.recipes.recipes_run [--results FILE] [RECIPE-SUBSTRING ...]``: run the recipes (all, or those
    whose path contains one of the substrings) one after another, printing each one's changes and outcome; exit 1 when
    any did not finish through the kill and the resume."""
    import argparse
    import tempfile

    from ..judge_server import FakeJudgeServer

    parser = argparse.ArgumentParser(prog="python -m tests.recipes.recipes_run")
    parser.add_argument("--results", help="a JSON-lines file, one line per recipe")
    parser.add_argument("--keep", action="store_true", help="keep each recipe's folder (logs, checkpoints)")
    parser.add_argument("only", nargs="*")
    args = parser.parse_args(argv)
    recipes = [p for p in training_recipes() if not args.only or any(o in str(p) for o in args.only)]
    failed = []
    with FakeJudgeServer() as judge:
        for path in recipes:
            workdir = Path(tempfile.mkdtemp(prefix="recipe-"))
            plan = plan_run(path, workdir, judge.base_url)
            print(describe(plan), flush=True)
            prepare(plan, workdir)
            outcome = run_recipe(plan, workdir)
            status = "ok" if outcome.ok else "FAILED"
            print(f"   {status}: killed while saving checkpoint-2: {outcome.killed_in_save} ({outcome.killed_s:.0f} s); "
                  f"resumed from {outcome.resumed_from}, exit {outcome.resumed_rc}, global_step {outcome.steps}, "
                  f"final model {outcome.final_model} ({outcome.resumed_s:.0f} s)", flush=True)
            if not outcome.ok:
                failed.append(plan.name)
                print(outcome.tail, flush=True)
            if args.results:
                with open(args.results, "a", encoding="utf-8") as out:
                    record = {**outcome.__dict__, "ok": outcome.ok, "changes": [c[0] for c in plan.changes],
                              "accelerate": plan.accelerate.name if plan.accelerate else None, "workdir": str(workdir)}
                    record.pop("tail")
                    out.write(json.dumps(record) + "\n")
            if not args.keep and outcome.ok:
                clean(workdir)
    print(f"{len(recipes) - len(failed)} of {len(recipes)} recipes trained, were killed while saving and resumed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
