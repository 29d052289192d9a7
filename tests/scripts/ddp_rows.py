"""Run by tests/trainer/test_distributed.py under torchrun: train and record, per rank and per generation batch, what
hindsight replay added (rows, sources, selections).

    torchrun --nproc_per_node N tests/scripts/ddp_rows.py MODEL DATA OUT [--skew] [--scripted]
             [--per-device-batch 6] [--max-steps 2] [--deepspeed CONFIG.json] [--skip-supplementary-on-rank0]

--skew:     rank 1 finds no replay candidate (it needs k supplementary samples per group) while rank 0 must join
            the same generation call with filler prompts.
--scripted: completions are a deterministic function of (prompt, occurrence in the call, step), whatever the
            batching, so a 1-process and a 2-process run with the same global batch generate the same text.
--deepspeed: train under DeepSpeed with this config (HiRConfig.deepspeed; on CPU set DS_ACCELERATOR=cpu); each rank
            records its engine, ZeRO stage and how many parameters are partitioned (ZeRO-3).
--skip-supplementary-on-rank0: a broken rank, for the negative control: with --skew, rank 0 needs no supplementary
            sample and skips the supplementary generation (and its collectives) that rank 1 needs.

Each rank writes OUT/rank<R>.json: its records per generation batch, the logged losses and grad norms, and the
DeepSpeed facts.
"""

import argparse
import json
import random
from collections import Counter
from pathlib import Path

import torch

from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset


def scripted_generation(trainer):
    words = " the a table | - word . , data list item row\n one two three".split(" ")
    vocab = sorted({i for w in words for i in trainer.processing_class(" " + w, add_special_tokens=False).input_ids})

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        seen = Counter()
        out = []
        for ids in prompt_ids:
            key = tuple(int(i) for i in ids)
            rng = random.Random(hash((key, seen[key], trainer.state.global_step)))
            seen[key] += 1
            out.append([rng.choice(vocab) for _ in range(rng.randint(4, 12))])
        return out, None

    trainer._generate_single_turn = generate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("output_dir")
    parser.add_argument("--skew", action="store_true")
    parser.add_argument("--scripted", action="store_true")
    parser.add_argument("--per-device-batch", type=int, default=6)
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--deepspeed", default=None)
    parser.add_argument("--skip-supplementary-on-rank0", action="store_true")
    parser.add_argument("--loss-weighting", default="token")
    cli = parser.parse_args()

    args = HiRConfig(output_dir=cli.output_dir, per_device_train_batch_size=cli.per_device_batch,
                     gradient_accumulation_steps=2, num_iterations=2, max_steps=cli.max_steps,
                     max_completion_length=12, bf16=False, use_cpu=True, gradient_checkpointing=False,
                     report_to="none", logging_steps=1, save_strategy="no", seed=0, beta=0.04,
                     replay_truncated_completions=True,  # the random tiny model never emits EOS
                     replay_shortfall="resample", replay_loss_weighting=cli.loss_weighting,
                     deepspeed=cli.deepspeed, ddp_timeout=120)  # a rank out of step fails, never waits 30 minutes
    trainer = HiRTrainer(model=cli.model, args=args, train_dataset=load_hir_dataset(cli.data))
    rank = trainer.accelerator.process_index
    if cli.skew and rank == 1:
        trainer.args.replay_min_satisfied = 100
    if cli.skip_supplementary_on_rank0 and rank == 0:
        trainer.args.replay_min_satisfied = 0  # every failed completion is a candidate: no shortfall on rank 0
        trainer.hir_passes.supplementary_samples = lambda inputs, fill, need_old_logps: None
    if cli.scripted:
        scripted_generation(trainer)
    tokenizer = trainer.processing_class
    generate_calls = []
    generate = trainer._generate_single_turn

    def counting(prompt_ids, *args, **kwargs):
        generate_calls.append(len(prompt_ids))
        return generate(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = counting
    records = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        generate_calls.clear()
        out = original(inputs)
        replay = trainer.last_replay
        B = len(inputs)
        row_ids = [str(x["row_id"]) for x in inputs]

        def text(row):
            return tokenizer.decode(out["completion_ids"][row][out["completion_mask"][row].bool()])

        added = []
        for i, kind in enumerate([r.kind for r in replay.new_rows]):
            if kind == "replay":
                src = replay.new_rows[i].source
                added.append({"kind": kind, "row_id": row_ids[src], "source_on_this_rank": 0 <= src < B,
                              "completion": text(B + i), "source_completion": text(src),
                              "q_prime": replay.new_rows[i].q_prime[-1]["content"]})
            elif kind == "supplementary":
                added.append({"kind": kind, "row_id": row_ids[replay.new_rows[i].group * trainer.num_generations],
                              "completion": text(B + i)})
        records.append({
            "rank": rank,
            "step": trainer.state.global_step,
            "lambda": replay.lam,
            "original_rows": B,
            "rows": {k: int(v.shape[0]) for k, v in out.items() if isinstance(v, torch.Tensor) and v.dim() > 0},
            "num_items_in_batch": int(out["num_items_in_batch"].item()),
            "local_loss_tokens": int(out["completion_mask"].sum().item()),
            # sum over this rank's loss tokens of the advantages TRL's loss multiplies (at ratio 1, minus the dapo
            # loss times num_items_in_batch)
            "advantage_token_sum": float((out["advantages"].unsqueeze(1) if out["advantages"].dim() == 1
                                          else out["advantages"]).mul(out["completion_mask"]).sum().item()),
            "row_ids": row_ids,
            "kinds": [r.kind for r in replay.new_rows],
            "added": added,
            "fillers": trainer._metrics["train"]["hir/filler_samples"][-1],
            "supplementary": trainer._metrics["train"]["hir/supplementary_samples"][-1],
            "generate_calls": list(generate_calls),
            "logged_generate_calls": trainer._metrics["train"]["hir/generate_calls"][-1],
        })
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    Path(cli.output_dir, f"rank{rank}.json").write_text(json.dumps({
        "records": records, "world": trainer.accelerator.num_processes,
        "losses": [entry["loss"] for entry in logged], "grad_norms": [entry["grad_norm"] for entry in logged],
        "deepspeed": deepspeed_facts(trainer)}))
    trainer.end()


def deepspeed_facts(trainer):
    """None without DeepSpeed; else the engine's class and ZeRO stage, and this rank's parameters: how many there
    are and how many are partitioned (ZeRO-3: the rank holds only its shard, ``ds_tensor``, of the ``ds_numel``
    elements, and the full tensor is released between forward passes)."""
    if trainer.is_deepspeed_enabled is False:
        return None
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    engine = trainer.model_wrapped
    params = list(engine.module.parameters())
    partitioned = [p for p in params if hasattr(p, "ds_tensor") and p.ds_status == ZeroParamStatus.NOT_AVAILABLE
                   and p.ds_tensor.numel() < p.ds_numel]
    return {"engine": type(engine).__name__, "stage": engine.zero_optimization_stage(), "params": len(params),
            "partitioned": len(partitioned), "accelerator": type(trainer.accelerator.device).__name__,
            "device": str(trainer.accelerator.device)}


if __name__ == "__main__":
    main()
