"""Benchmark the soft-constraint judge (`hir_trl.judge.LiteLLMJudge`) against a loopback server.

The server (`tests.judge_server`, run in its own process so its CPU time does not count against the client)
answers every OpenAI chat-completions request with ``YES`` after a fixed latency (default 50 ms, a fast
hosted model). Two measurements:

1. Throughput: ``--calls`` distinct prompts (no cache hits, no duplicates) judged in one batch with
   ``--concurrency`` requests in flight: calls per second (target: >= 200 at concurrency 64).
2. Training-step overhead: the seconds one step's verification waits for the judge on a batch of
   ``--step-constraints`` distinct soft constraints (e.g. 96 = 16 completions x 6 soft constraints),
   sequential (one call at a time, as a plain loop over a synchronous client would) vs this judge, and a
   rerun of the same batch from the cache (zero calls).

Usage::

    python benchmarks/bench_judge.py                       # prints a JSON summary
    python benchmarks/bench_judge.py --output bench.json   # also writes it

Run it from the repository root (it imports ``tests.judge_server``). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from hir_trl.judge import LiteLLMJudge  # noqa: E402

KEY_ENV = "HIR_BENCH_JUDGE_KEY"


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    """Start `tests.judge_server` in a subprocess on loopback; returns (process, base URL)."""
    process = subprocess.Popen([sys.executable, "-m", "tests.judge_server", "--latency", str(latency)],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise RuntimeError("the judge server did not start")
    return process, json.loads(line)["base_url"]


def triples(tag: str, n: int) -> list[tuple[str, str, str]]:
    """n distinct (instruction, response, constraint) triples of realistic size."""
    instruction = "Write a short product description for a reusable water bottle. " * 4
    return [(f"{instruction}[{tag} {i}]", f"A sleek bottle that keeps drinks cold for 24 hours. Item {i}. " * 6,
             "The description should be written in a persuasive, upbeat tone.") for i in range(n)]


def timed(judge: LiteLLMJudge, batch: list[tuple[str, str, str]]) -> tuple[float, dict[str, float]]:
    judge.pop_metrics()
    start = time.perf_counter()
    verdicts = judge(batch)
    elapsed = time.perf_counter() - start
    if not all(v.passed for v in verdicts):
        raise RuntimeError(f"unexpected failures: {[v.error for v in verdicts if v.error][:3]}")
    return elapsed, judge.pop_metrics()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05, help="server latency per request, seconds")
    parser.add_argument("--concurrency", type=int, default=64, help="judge_max_concurrency")
    parser.add_argument("--calls", type=int, default=2000, help="distinct prompts in the throughput run")
    parser.add_argument("--step-constraints", type=int, default=96, help="soft constraints in one training step")
    parser.add_argument("--model", default="openai/bench", help="litellm model string (openai/ or hosted_vllm/)")
    parser.add_argument("--output", type=Path, help="also write the JSON summary to this file")
    args = parser.parse_args()

    os.environ[KEY_ENV] = "bench-key"
    process, base_url = start_server(args.latency)
    try:
        def judge(concurrency: int) -> LiteLLMJudge:
            return LiteLLMJudge(args.model, api_base=base_url, api_key_env=KEY_ENV, max_concurrency=concurrency,
                                timeout=30.0, max_retries=0)

        ours, sequential = judge(args.concurrency), judge(1)
        timed(ours, triples("warm-up", 2 * args.concurrency))  # litellm import, HTTP client, first-call imports
        timed(sequential, triples("warm-up-seq", 4))

        seconds, metrics = timed(ours, triples("throughput", args.calls))
        throughput = {"calls": int(metrics["judge/calls"]), "seconds": round(seconds, 3),
                      "calls_per_second": round(args.calls / seconds, 1),
                      "latency_p50_s": round(metrics["judge/latency_p50"], 4),
                      "latency_p95_s": round(metrics["judge/latency_p95"], 4),
                      "ideal_calls_per_second": round(args.concurrency / args.latency, 1)}

        step = triples("step", args.step_constraints)
        seq_seconds, _ = timed(sequential, step)
        our_seconds, _ = timed(ours, step)
        cached_seconds, cached = timed(ours, step)
        step_summary = {"soft_constraints": args.step_constraints, "sequential_seconds": round(seq_seconds, 3),
                        "ours_seconds": round(our_seconds, 3), "speedup": round(seq_seconds / our_seconds, 1),
                        "cached_rerun_seconds": round(cached_seconds, 4), "cached_rerun_calls": int(cached["judge/calls"])}
    finally:
        process.terminate()
        process.wait(10)

    summary = {
        "benchmark": "hir_trl.judge.LiteLLMJudge vs loopback OpenAI-compatible server",
        "server_latency_s": args.latency, "concurrency": args.concurrency, "model": args.model,
        "throughput": throughput, "training_step": step_summary,
        "target_calls_per_second": 200, "meets_target": throughput["calls_per_second"] >= 200,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
