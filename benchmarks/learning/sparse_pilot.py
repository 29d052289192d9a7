"""Pilot of the sparse variant of the synthetic task: measures only the starting model (no training arm).

For each candidate ``TaskConfig`` (more constraints per prompt than the default 3-6; the same generator and the same
SFT recipe), the task is built (or read from the cache / a stored start) and its SFT checkpoint is evaluated exactly
as a run's step-0 evaluation is (`run.HeldOutEval`): the first ``eval_prompts`` held-out prompts, ``eval_samples``
completions each at ``eval_temperature``, at most ``max_completion_length`` new tokens, the fixed sampling seed. The
chosen variant is the first whose held-out ILA is at most 1% while its CLA stays well above 0.

    python -m benchmarks.learning.sparse_pilot --out benchmarks/experiments/sparse-binary/pilot.jsonl

One record per candidate is appended as it finishes (resumable: a candidate with a record is skipped).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.learning.task import TaskConfig, ensure_sft_model, read_jsonl, sample_responses, score_responses  # noqa: E402

#: The candidates, in the order they are tried: the default task's generator and SFT recipe, more constraints per
#: prompt (there are 8 constraint families, so 8 is the most a prompt can have).
CANDIDATES: dict[str, dict[str, Any]] = {
    "c5-7": {"min_constraints": 5, "max_constraints": 7},
    "c6-8": {"min_constraints": 6, "max_constraints": 8},
    "c7-8": {"min_constraints": 7, "max_constraints": 8},
}
#: The registered rounds' held-out evaluation (benchmarks/experiments/binary-hir/preregistration.yaml's bench).
EVAL = {"eval_prompts": 128, "eval_samples": 16, "eval_temperature": 1.0, "max_completion_length": 80}


def measure(name: str, overrides: dict[str, Any], cache: Path | None) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = TaskConfig(**overrides)
    start = time.perf_counter()
    task_dir = ensure_sft_model(cfg, root=cache, threads=1)
    built = time.perf_counter() - start
    meta = json.loads((task_dir / "meta.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(task_dir / "model")
    model = AutoModelForCausalLM.from_pretrained(task_dir / "model", dtype=torch.float32)
    rows = read_jsonl(task_dir / "eval_rows.jsonl")[: EVAL["eval_prompts"]]
    start = time.perf_counter()
    expanded, responses = sample_responses(model, tokenizer, rows, samples=EVAL["eval_samples"],
                                           temperature=EVAL["eval_temperature"],
                                           max_new_tokens=EVAL["max_completion_length"])
    scores = score_responses(expanded, responses)
    passed = scores.pop("passed")
    constraints = [len(r["constraints"]) for r in rows]
    return {"candidate": name, "task_config": dataclasses.asdict(cfg), "task": task_dir.name,
            "sft_final_loss": (meta["sft"] or {}).get("final_loss"), **EVAL,
            "completions": len(responses), "ila": scores["ila"], "cla": scores["cla"],
            "prompts_with_any_success": sum(
                any("0" not in p for p in passed[i * EVAL["eval_samples"]:(i + 1) * EVAL["eval_samples"]])
                for i in range(len(rows))),
            "mean_constraints": sum(constraints) / len(constraints), "scores": scores,
            "build_seconds": built, "eval_seconds": time.perf_counter() - start,
            "machine": {"processor": platform.processor(), "cores": os.cpu_count(), "torch": torch.__version__,
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        "load_average": os.getloadavg()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="pilot.jsonl: one record per candidate")
    parser.add_argument("--candidates", default=",".join(CANDIDATES), help="comma-separated names of CANDIDATES")
    parser.add_argument("--cache-dir", type=Path, default=None, help="the task cache (default benchmarks/.cache)")
    ns = parser.parse_args(argv)
    done = {r["candidate"] for r in read_jsonl(ns.out)} if ns.out.is_file() else set()
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    for name in ns.candidates.split(","):
        if name in done:
            print(f"{name}: measured already")
            continue
        record = measure(name, CANDIDATES[name], ns.cache_dir)
        with ns.out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{name}: held-out ILA {100 * record['ila']:.2f}% CLA {100 * record['cla']:.1f}% over "
              f"{record['completions']} completions ({record['prompts_with_any_success']} prompts with a success), "
              f"SFT loss {record['sft_final_loss']:.4f}, built in {record['build_seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
