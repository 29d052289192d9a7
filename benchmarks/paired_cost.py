"""Paired cost of a HiR step against its GRPO counterpart (RL-CR under the default CLA reward), on a real recipe.

The two runs start together, as two processes with ``--threads`` torch threads each, so that they share the
machine's load step for step. Both come from the same ``hir-trl train`` recipe (``--recipe``):

- ``hir``: the recipe as it is (plus ``--hir KEY=VALUE`` overrides, e.g. ``replay_shortfall=resample``);
- ``grpo``: the same recipe with replay off and the same trained rows per group: ``num_generations = m + k``,
  ``num_replays = 0``, the same groups per generation batch (``per_device_train_batch_size`` scaled by
  (m + k) / m), the recipe's ``reward_mode`` (``cla``: RL-CR; ``ila``: RL-IR), plus ``--grpo KEY=VALUE``
  overrides.

Both use the recipe's seed, so TRL's sampler gives them the same prompts in the same order. Each records, per
optimizer step (`benchmarks.learning.profiling.StepProfiler`): the step's seconds, generation seconds
(``_generate_single_turn``, every decoding round), HiR's share (``hir/seconds_total``: selection, rewrite,
supplementary round, assembly, passes), the optimizer seconds (loss, backward, ``optimizer.step``), generated
tokens and sequences, generate calls, and the step's peak resident set size, overall and by phase.

Usage (from the repository root; the model of the recipe must exist, e.g. after one ``make train``)::

    python -m benchmarks.paired_cost --recipe recipes/SmolLM2-135M-Instruct/hir/config_cpu.yaml --steps 4 \\
        --out benchmarks/results-smollm2-cpu/paired --summary benchmarks/results-smollm2-cpu/summary.json
    python -m benchmarks.paired_cost --recipe ... --hir replay_shortfall=resample --label resample

``--summary`` writes the paired means into that file's ``targets`` (``step_time_paired``,
``generation_seconds_paired``, ``tokens_paired``, ``peak_rss_mb``), under ``paired_variants.<label>`` for a
``--label`` other than ``default``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Per-step fields written by a worker (besides the profiler's per-phase peaks).
STEP_FIELDS = ("step_seconds", "generation", "hir_seconds", "supplementary_seconds", "optimizer", "generated_tokens",
               "generated_sequences", "generate_calls", "peak_memory_mb")
#: Targets of the paired comparison (HiR / GRPO ratios, and the peak RSS of the main job).
TARGETS = {"step_time": 1.0, "generation_seconds": 1.0, "tokens": 0.80, "peak_rss_ratio": 1.05, "peak_rss_mb": 6144}


def overrides_to_argv(pairs: list[str]) -> list[str]:
    """``["key=value", ...]`` as ``["--key", "value", ...]``.

    Raises:
        SystemExit(2): an override without ``=``.
    """
    argv = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"paired_cost: override {pair!r} is not KEY=VALUE")
        argv += [f"--{key.lstrip('-')}", value]
    return argv


def worker(args: argparse.Namespace) -> None:
    """One run (``--method hir`` or ``grpo``): train ``--steps`` steps of the recipe and write the per-step record."""
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(REPO_ROOT))
    from benchmarks.learning.profiling import StepProfiler
    from hir_trl.cli.main import parse_train_args, prepare_training

    base = ["--config", args.recipe, "--max_steps", str(args.steps), "--save_strategy", "no",
            "--output_dir", args.output_dir, "--log_completions", "false", "--report_to", "none", "--logging_steps", "1"]
    script_args, training_args, model_args = parse_train_args(base)
    extra = overrides_to_argv(args.override)
    if args.method == "grpo":
        m, k, spg = training_args.num_generations, training_args.num_replays, training_args.steps_per_generation
        rows = training_args.per_device_train_batch_size * spg // m * (m + k)  # the same groups, m + k rows each
        if rows % spg:
            raise SystemExit(f"paired_cost: {rows} GRPO rows per generation batch do not split into "
                             f"steps_per_generation={spg} micro-batches")
        extra = ["--num_generations", str(m + k), "--num_replays", "0",
                 "--per_device_train_batch_size", str(rows // spg), *extra]
    script_args, training_args, model_args = parse_train_args(base + extra)
    start = time.perf_counter()
    trainer, _ = prepare_training(script_args, training_args, model_args)
    setup = time.perf_counter() - start
    profiler = StepProfiler("cpu").attach(trainer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "hir/seconds_total" in h or "loss" in h]
    steps = []
    for i, record in enumerate(profiler.steps):
        log = logged[i] if i < len(logged) else {}
        steps.append({**record, "hir_seconds": log.get("hir/seconds_total", 0.0),
                      "supplementary_seconds": log.get("hir/seconds_supplementary", 0.0),
                      "hir_generate_calls": log.get("hir/generate_calls"),
                      "supplementary_samples": log.get("hir/supplementary_samples")})
    config = {key: getattr(training_args, key) for key in (
        "num_generations", "num_replays", "per_device_train_batch_size", "steps_per_generation",
        "gradient_accumulation_steps", "reward_mode", "replay_shortfall",
        "gradient_checkpointing", "max_completion_length", "seed")}
    Path(args.result).write_text(json.dumps({
        "method": args.method, "config": config, "overrides": args.override, "threads": args.threads,
        "setup_seconds": setup, "process_peak_rss_mb": profiler.process_peak_mb(),
        "steps": steps}, indent=1))


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def paired_summary(hir: dict[str, Any], grpo: dict[str, Any]) -> dict[str, Any]:
    """Per-step means of both runs, their HiR / GRPO ratios and the targets met (see `TARGETS`)."""

    def pair(field: str, target: float | None, reduce=mean) -> dict[str, Any]:
        a = reduce([s[field] for s in hir["steps"]])
        b = reduce([s[field] for s in grpo["steps"]])
        out = {"hir": a, "grpo": b, "ratio": a / b if b else float("nan")}
        if target is not None:
            out["met"] = out["ratio"] <= target
        return out

    rss = {"hir": hir["process_peak_rss_mb"], "grpo": grpo["process_peak_rss_mb"]}
    rss["ratio"] = rss["hir"] / rss["grpo"]
    rss["met"] = rss["hir"] <= TARGETS["peak_rss_mb"] and rss["ratio"] <= TARGETS["peak_rss_ratio"]
    return {
        "step_time_paired": pair("step_seconds", TARGETS["step_time"]),
        "generation_seconds_paired": pair("generation", TARGETS["generation_seconds"]),
        "tokens_paired": pair("generated_tokens", TARGETS["tokens"]),
        "generate_calls_paired": pair("generate_calls", None),
        "optimizer_seconds_paired": pair("optimizer", None),
        "hir_seconds_per_step": mean([s["hir_seconds"] for s in hir["steps"]]),
        "peak_rss_mb": rss,
        "steps": len(hir["steps"]),
    }


def allocator_settings(env: dict[str, str]) -> dict[str, str]:
    """The glibc malloc tunables both workers ran with (``MALLOC_*`` variables, e.g. ``MALLOC_MMAP_THRESHOLD_``):
    they move a CPU process's peak RSS, so every record names them."""
    return {key: value for key, value in sorted(env.items()) if key.startswith("MALLOC_") or key == "GLIBC_TUNABLES"}


def run_pair(args: argparse.Namespace) -> dict[str, Any]:
    """Start both workers together, wait for both, and write ``<out>/<label>.json`` (per-step records and means)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if args.mmap_threshold is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
    with tempfile.TemporaryDirectory(prefix="paired-cost-") as tmp:
        procs, results = {}, {}
        for method, overrides in (("hir", args.hir), ("grpo", args.grpo)):
            results[method] = Path(tmp, f"{method}.json")
            cmd = [sys.executable, "-m", "benchmarks.paired_cost", "worker", "--method", method, "--recipe",
                   args.recipe, "--steps", str(args.steps), "--threads", str(args.threads), "--output-dir",
                   str(Path(tmp, method)), "--result", str(results[method])]
            for pair in overrides:
                cmd += ["--override", pair]
            log = open(out / f"{args.label}-{method}.log", "w")
            procs[method] = (subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT),
                             log)
        failed = []
        for method, (proc, log) in procs.items():
            if proc.wait() != 0:
                failed.append(method)
            log.close()
        if failed:
            raise SystemExit(f"paired_cost: the {', '.join(failed)} run failed; see {out}/{args.label}-*.log")
        runs = {method: json.loads(path.read_text()) for method, path in results.items()}
    record = {"recipe": args.recipe, "label": args.label, "threads": args.threads, "malloc": allocator_settings(env),
              "hir": runs["hir"], "grpo": runs["grpo"], "paired": paired_summary(runs["hir"], runs["grpo"])}
    (out / f"{args.label}.json").write_text(json.dumps(record, indent=1))
    return record


def write_targets(summary_path: str, record: dict[str, Any]) -> None:
    """Put the paired figures into ``summary_path``'s ``targets`` (``paired_variants.<label>`` unless default)."""
    path = Path(summary_path)
    summary = json.loads(path.read_text()) if path.exists() else {}
    targets = summary.setdefault("targets", {})
    paired = {**record["paired"], "recipe": record["recipe"], "threads": record["threads"],
              "malloc": record.get("malloc", {}),
              "hir_overrides": record["hir"]["overrides"], "grpo_overrides": record["grpo"]["overrides"],
              "hir_config": record["hir"]["config"], "grpo_config": record["grpo"]["config"]}
    if record["label"] == "default":
        targets.update(paired)
    else:
        targets.setdefault("paired_variants", {})[record["label"]] = paired
    path.write_text(json.dumps(summary, indent=1) + "\n")


def print_table(record: dict[str, Any]) -> None:
    for method in ("hir", "grpo"):
        print(f"{method}: " + "; ".join(
            f"step {s['step']}: {s['step_seconds']:.1f}s gen {s['generation']:.1f}s hir {s['hir_seconds']:.1f}s "
            f"opt {s['optimizer']:.1f}s tok {s['generated_tokens']} calls {s['generate_calls']} "
            f"rss {s['peak_memory_mb']:.0f}MB" for s in record[method]["steps"]))
    paired = record["paired"]
    for key in ("step_time_paired", "generation_seconds_paired", "tokens_paired", "generate_calls_paired",
                "optimizer_seconds_paired", "peak_rss_mb"):
        print(f"{key}: " + json.dumps(paired[key]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paired_cost", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    work = sub.add_parser("worker", help="one run (started by the pair)")
    work.add_argument("--method", choices=["hir", "grpo"], required=True)
    work.add_argument("--result", required=True)
    work.add_argument("--output-dir", required=True)
    work.add_argument("--override", action="append", default=[])
    for p in (parser, work):
        p.add_argument("--recipe", default="recipes/SmolLM2-135M-Instruct/hir/config_cpu.yaml")
        p.add_argument("--steps", type=int, default=4)
        p.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results-smollm2-cpu/paired")
    parser.add_argument("--hir", nargs="*", default=[], help="KEY=VALUE overrides of the HiR run")
    parser.add_argument("--grpo", nargs="*", default=[], help="KEY=VALUE overrides of the GRPO run")
    parser.add_argument("--both", nargs="*", default=[], help="KEY=VALUE overrides of both runs")
    parser.add_argument("--label", default="default")
    parser.add_argument("--mmap-threshold", type=int, default=None, metavar="BYTES",
                        help="glibc MALLOC_MMAP_THRESHOLD_ for both runs: allocations of at least BYTES get their own "
                             "mapping, returned to the system when freed (a fixed value also stops glibc raising it)")
    parser.add_argument("--summary", help="summary.json whose 'targets' get the paired figures")
    args = parser.parse_args(argv)
    if args.command == "worker":
        worker(args)
        return
    args.hir, args.grpo = [*args.both, *args.hir], [*args.both, *args.grpo]
    record = run_pair(args)
    print_table(record)
    if args.summary:
        write_targets(args.summary, record)


if __name__ == "__main__":
    main()
