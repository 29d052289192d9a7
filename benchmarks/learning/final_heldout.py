"""Re-score saved final models of the real-model task on the held-out rows with more samples.

The in-run evaluation samples 1 completion per held-out row (64 completions: one prompt is 1.6 points, the binomial sd
of a 10% rate about 3.7 points), too few to separate methods. This scores every saved final model (``save_final``)
and the starting model again with the same settings for all: ``--samples`` completions per held-out row at
temperature 1, 64 new tokens, a fixed seed different from the in-run one (so the samples are new), scored by
`benchmarks.learning.real_task.score_responses`. One JSON per model in ``--output-dir``; an existing one is reused
(an interrupted run resumes).

    python -m benchmarks.learning.final_heldout --task-dir benchmarks/.cache/real-<key> \\
        --models benchmarks/.cache/final-real-<key>/* --output-dir benchmarks/results-smollm2-cpu/final-heldout
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task-dir", type=Path, required=True, help="the real task's cache folder (eval_rows.jsonl)")
    parser.add_argument("--models", type=Path, nargs="+", required=True,
                        help="model folders; 'base' names the task's starting model")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    ns = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.learning.real_task import evaluate_held_out
    from benchmarks.learning.task import read_jsonl

    if ns.threads:
        torch.set_num_threads(ns.threads)
    rows = read_jsonl(ns.task_dir / "eval_rows.jsonl")
    ns.output_dir.mkdir(parents=True, exist_ok=True)
    for path in ns.models:
        name = "base" if str(path) == "base" else path.name
        model_dir = ns.task_dir / "model" if name == "base" else path
        out = ns.output_dir / f"{name}.json"
        if out.is_file():
            print(f"reuse {out}", file=sys.stderr)
            continue
        start = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        scores, responses = evaluate_held_out(model, tokenizer, rows, samples=ns.samples, temperature=1.0,
                                              max_new_tokens=ns.max_new_tokens, seed=ns.seed,
                                              batch_size=ns.batch_size)
        record = {"model": str(model_dir), "samples": ns.samples, "seed": ns.seed, "rows": len(rows),
                  "max_new_tokens": ns.max_new_tokens, "seconds": time.perf_counter() - start,
                  "scores": scores, "first_responses": responses[:4]}
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"{name}: ILA {scores['ila']:.4f} CLA {scores['cla']:.4f} ({record['seconds']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
