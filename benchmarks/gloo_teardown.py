"""Stress check of `HiRTrainer.end` on two gloo (CPU) ranks: how often a rank hangs or aborts at teardown, with
`GLOO_TEARDOWN_PAUSE_SECONDS` as shipped ("pause") and set to 0 ("none").

    python -m benchmarks.gloo_teardown --runs 12 --out benchmarks/experiments/gloo-teardown

Builds a tiny model (`hir_trl.models.tiny`), then launches ``2 x runs`` two-rank `torchrun` jobs, alternating the arms so
that both see the same machine load. Each job trains 2 steps on the tiny listing sample, calls ``trainer.end()`` and
returns, which frees the trainer and its DDP-held process group. A job still alive after ``--timeout`` seconds is a
hang (it is killed); a job whose output says "terminate called" aborted at exit. Each job appends one line to
``OUT/runs.jsonl`` as it finishes; ``OUT/summary.json`` holds the counts per arm and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO_ROOT / "recipes" / "tiny" / "data" / "muldimif_listing_sample.jsonl"


def worker(model: str, arm: str) -> None:
    """One rank of one job (run under torchrun)."""
    import hir_trl.models.workarounds

    if arm == "none":
        hir_trl.models.workarounds.GLOO_TEARDOWN_PAUSE_SECONDS = 0
    output_dir = tempfile.mkdtemp()
    train_and_end(model, output_dir)  # the trainer is freed when this returns, as a user's main() returns
    shutil.rmtree(output_dir)


def train_and_end(model: str, output_dir: str) -> None:
    from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset

    args = HiRConfig(output_dir=output_dir, per_device_train_batch_size=6, gradient_accumulation_steps=2,
                     num_iterations=2, max_steps=2, max_completion_length=12, bf16=False, use_cpu=True,
                     report_to="none", save_strategy="no", seed=0, replay_truncated_completions=True,
                     replay_shortfall="resample")
    trainer = HiRTrainer(model=model, args=args, train_dataset=load_hir_dataset(str(SAMPLE_DATA)))
    trainer.train()
    trainer.end()


def launch(model: str, arm: str, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    launcher = str(Path(sys.executable).parent / "torchrun")
    cmd = [launcher, "--standalone", "--nproc_per_node", "2", "-m", "benchmarks.gloo_teardown", "--worker", model,
           "--arm", arm]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:  # torchrun starts each rank in a session of its own: kill them by pid
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        hung = True
    return {"arm": arm, "hung": hung, "returncode": None if hung else proc.returncode,
            "aborted": "terminate called" in output, "seconds": round(time.monotonic() - start, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12, help="jobs per arm")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds before a job counts as hung")
    parser.add_argument("--out", default="benchmarks/experiments/gloo-teardown")
    parser.add_argument("--worker", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--arm", choices=["pause", "none"], default="pause", help=argparse.SUPPRESS)
    cli = parser.parse_args(argv)
    if cli.worker:
        worker(cli.worker, cli.arm)
        return
    from hir_trl import load_hir_dataset
    from hir_trl.models.tiny import build_tiny_model

    from .learning.run import machine_info

    out = Path(cli.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = load_hir_dataset(str(SAMPLE_DATA))
    texts = [m["content"] for row in rows for m in row["prompt"]] + [c["text"] for row in rows for c in row["constraints"]]
    load_start = os.getloadavg()[0]
    wall = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model = str(build_tiny_model(Path(tmp), texts, vocab_size=1024))
        records = []
        with open(out / "runs.jsonl", "w", encoding="utf-8") as log:
            for i in range(cli.runs):
                for arm in ("pause", "none") if i % 2 == 0 else ("none", "pause"):
                    record = {"job": len(records), **launch(model, arm, cli.timeout)}
                    records.append(record)
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    print(json.dumps(record), flush=True)
    machine = machine_info()
    summary = {"command": "python -m benchmarks.gloo_teardown " + " ".join(sys.argv[1:] if argv is None else argv),
               "runs_per_arm": cli.runs, "timeout_seconds": cli.timeout, "machine": machine["processor"],
               "cpus": machine["cores"],
               "load_average_1min_start_end": [load_start, os.getloadavg()[0]],
               "wall_seconds": round(time.monotonic() - wall), "torch": machine["torch"],
               "arms": {arm: {"hung": sum(r["hung"] for r in records if r["arm"] == arm),
                              "aborted": sum(r["aborted"] for r in records if r["arm"] == arm),
                              "failed": sum((r["returncode"] not in (0, None)) for r in records if r["arm"] == arm)}
                        for arm in ("pause", "none")}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
