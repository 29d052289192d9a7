"""Run by tests/test_distributed.py under `torchrun --nproc_per_node 2`: train 2 steps and record, per rank,
how many rows each generation batch held before and after hindsight replay."""

import json
import sys
from pathlib import Path

import torch

from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset


def main(model_path: str, data_path: str, output_dir: str) -> None:
    args = HiRConfig(output_dir=output_dir, per_device_train_batch_size=6, gradient_accumulation_steps=2,
                     num_iterations=2, max_steps=2, max_completion_length=12, bf16=False, use_cpu=True,
                     gradient_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no", seed=0,
                     beta=0.04)
    trainer = HiRTrainer(model=model_path, args=args, train_dataset=load_hir_dataset(data_path))
    if trainer.accelerator.process_index == 1:
        # skew the ranks: rank 1 finds no replay candidate, so it needs k supplementary samples per group while
        # rank 0 (most likely) needs none and must join the generation call with filler prompts
        trainer.args.replay_min_satisfied = 100
    records = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        records.append({
            "rank": trainer.accelerator.process_index,
            "original_rows": len(inputs),
            "rows": {k: int(v.shape[0]) for k, v in out.items() if isinstance(v, torch.Tensor) and v.dim() > 0},
            "num_items_in_batch": int(out["num_items_in_batch"].item()),
            "local_loss_tokens": int(out["completion_mask"].sum().item()),
            "row_ids": [str(x["row_id"]) for x in inputs],
            "kinds": trainer.last_replay.kinds,
            "fillers": trainer._metrics["train"]["hir/filler_samples"][-1],
            "supplementary": trainer._metrics["train"]["hir/supplementary_samples"][-1],
        })
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    rank = trainer.accelerator.process_index
    Path(output_dir, f"rank{rank}.json").write_text(json.dumps({"records": records,
                                                                "world": trainer.accelerator.num_processes}))
    trainer.end()


if __name__ == "__main__":
    main(*sys.argv[1:4])
