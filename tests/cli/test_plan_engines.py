"""`hir-trl plan`'s per-rank state terms against the bytes the engines hold per rank (``make test-plan-engines``).

For each engine, 2 CPU processes run ``benchmarks/plan_engines.py`` at tiny size (a 4M-parameter Qwen3, bf16): DeepSpeed
ZeRO-2 and ZeRO-3 (``recipes/deepspeed/zero{2,3}_cpu.json`` with bf16 on, as transformers' Trainer takes
``--deepspeed``), FSDP2 (``recipes/accelerate_configs/fsdp2.yaml``: FULL_SHARD, bf16 mixed precision) and LoRA under
DDP (``multi_cpu.yaml``). Each of plan's state terms (weights, gradients, optimizer state, reference model; LoRA's
frozen base and adapters) must equal the engine's bytes within 5%, and one checkpoint's size on disk the plan's. The
measured table is benchmarks/experiments/plan-engines/README.md.

Marked ``plan_engines``; skipped without deepspeed (not in the dev extra), so `make test` skips it: each launch takes
about a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hir_trl.cli.plan import ModelShape, Sharding, disk_plan, memory_plan, sharding_from_files

from ..testing_utils import REPO_ROOT

pytestmark = pytest.mark.plan_engines
SCRIPT = REPO_ROOT / "benchmarks" / "plan_engines.py"
CONFIGS = REPO_ROOT / "recipes" / "accelerate_configs"
DEEPSPEED = REPO_ROOT / "recipes" / "deepspeed"
ENGINES = ("zero2", "zero3", "fsdp2", "lora")
#: Files of a checkpoint that are no training state (RNG states, DeepSpeed's recovery scripts and tag).
NOT_STATE = ("random_states_", "zero_to_fp32.py", "zero_to_torch.py", "latest")


def launch_command(engine: str, out) -> list[str]:
    if engine in ("zero2", "zero3"):
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(SCRIPT), "--engine",
                engine, "--deepspeed", str(DEEPSPEED / f"{engine}_cpu.json"), "--out", str(out)]
    config = CONFIGS / ("fsdp2.yaml" if engine == "fsdp2" else "multi_cpu.yaml")
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "2",
            str(SCRIPT), "--engine", engine, "--out", str(out)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    pytest.importorskip("deepspeed", reason="deepspeed is not installed (not in the dev extra): make test-plan-engines")
    out = tmp_path_factory.mktemp("plan-engines")
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    records = {}
    for engine in ENGINES:
        result = subprocess.run(launch_command(engine, out), cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                timeout=900)
        assert result.returncode == 0, (engine, result.stdout[-3000:], result.stderr[-6000:])
        records[engine] = json.loads((out / f"{engine}.json").read_text())
    return records


def planned(engine: str, record: dict) -> tuple[dict[str, float], float | None]:
    """plan's state terms per rank for the measured run, by the engine's names, and one checkpoint's bytes."""
    shape = ModelShape.from_config(record["model_config"], name="tiny qwen3")
    assert shape.parameters() == record["parameters"]
    lora = record["lora"]
    if engine in ("zero2", "zero3"):
        sharding, _ = sharding_from_files(None, str(DEEPSPEED / f"{engine}_cpu.json"), mixed_precision=True)
    elif engine == "fsdp2":
        sharding, _ = sharding_from_files(str(CONFIGS / "fsdp2.yaml"), None, mixed_precision=True)
    else:
        sharding = Sharding()
    memory = memory_plan(shape, processes=record["processes"], sharding=sharding, weight_bytes=2, act_bytes=2,
                         rows_per_micro_batch=2, sequence_tokens=16, sequences_per_call=2, generation="generate",
                         gradient_checkpointing=False, reference_model=lora is None,
                         lora_r=lora["r"] if lora else None, lora_target_modules=lora and lora["target_modules"],
                         lora_dropout=lora["lora_dropout"] if lora else 0.0)
    terms = {t.name.split(" (")[0]: t.bytes for t in memory.terms if t.phase == "state"}
    if lora:
        plan = {"frozen base weights": terms["base weights"],
                "adapters, gradients, AdamW state": terms["LoRA adapters, gradients and AdamW state"]}
        return plan, None
    disk = disk_plan(parameters=shape.parameters(), weight_bytes=2, sharding=sharding, lora_parameters=None,
                     save_only_model=False, save_total_limit=1, saves=1,
                     tied_parameters=shape.vocab * shape.hidden)["per_checkpoint"]
    return {"weights": terms["weights"], "gradients": terms["gradients"],
            "optimizer state": terms["optimizer state"], "reference model": terms["reference model"]}, disk


def engine_terms(record: dict, rank: str) -> dict[str, int]:
    facts = record[rank]
    if record["lora"]:
        return {"frozen base weights": facts["base weights"],
                "adapters, gradients, AdamW state": facts["adapter weights"] + facts["gradients"]
                + facts["AdamW moments"]}
    return {"weights": facts["weights"], "gradients": facts["gradients"],
            "optimizer state": facts.get("fp32 master weights", 0) + facts["AdamW moments"],
            "reference model": facts["reference model"]}


def checkpoint_bytes(record: dict) -> int:
    return sum(size for name, size in record["checkpoint_files"].items()
               if not any(part.startswith(NOT_STATE) for part in name.split("/")))


def table(records: dict) -> str:
    """The comparison as a Markdown table (what benchmarks/experiments/plan-engines/README.md records)."""
    rows = ["| engine | term (per rank) | plan (bytes) | engine rank 0 | engine rank 1 | gap |", "|---|---|---:|---:|---:|---:|"]
    for engine, record in records.items():
        plan, disk = planned(engine, record)
        ranks = [engine_terms(record, rank) for rank in ("rank0", "rank1")]
        for name, value in plan.items():
            gap = (value - ranks[0][name]) / ranks[0][name] if ranks[0][name] else 0.0
            rows.append(f"| {engine} | {name} | {value:,.0f} | {ranks[0][name]:,} | {ranks[1][name]:,} | {gap:+.1%} |")
        if disk is not None:
            real = checkpoint_bytes(record)
            rows.append(f"| {engine} | checkpoint (all ranks' files) | {disk:,.0f} | {real:,} | | "
                        f"{(disk - real) / real:+.1%} |")
    return "\n".join(rows)


@pytest.mark.parametrize("engine", ENGINES)
def test_plan_state_terms_equal_the_engines_bytes_per_rank(measured, engine):
    record = measured[engine]
    plan, disk = planned(engine, record)
    for rank in ("rank0", "rank1"):
        held = engine_terms(record, rank)
        for name, value in plan.items():
            assert value == pytest.approx(held[name], rel=0.05), (engine, rank, name, value, held[name])
    if disk is not None:
        assert disk == pytest.approx(checkpoint_bytes(record), rel=0.05), (engine, record["checkpoint_files"])


def test_record_the_table(measured):
    """Writes the table to $PLAN_ENGINES_TABLE when set (benchmarks/experiments/plan-engines/README.md)."""
    text = table(measured)
    assert text.count("\n") >= 4 * 4
    if os.environ.get("PLAN_ENGINES_TABLE"):
        with open(os.environ["PLAN_ENGINES_TABLE"], "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
