"""The training state each engine holds per rank after ``accelerator.prepare``, counted tensor by tensor, for
`hir-trl plan`'s state terms to be checked against (tests/cli/test_plan_engines.py; ``make test-plan-engines``).

Run on 2 CPU processes, one engine per launch (DeepSpeed as transformers' Trainer runs ``--deepspeed``)::

    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 benchmarks/plan_engines.py --engine zero3 \\
        --deepspeed recipes/deepspeed/zero3_cpu.json --out outputs/plan-engines
    accelerate launch --config_file recipes/accelerate_configs/fsdp2.yaml --num_processes 2 \\
        benchmarks/plan_engines.py --engine fsdp2 --out outputs/plan-engines
    accelerate launch --config_file recipes/accelerate_configs/multi_cpu.yaml benchmarks/plan_engines.py \\
        --engine lora --out outputs/plan-engines

A tiny Qwen3 model (`MODEL_CONFIG`) is built from its config as the trainer builds it (``dtype``), with a reference
model of the same config (TRL prepares it as `GRPOTrainer` does: ``trl.models.prepare_deepspeed`` /
``prepare_fsdp``; LoRA has none: its reference is the adapter-disabled model). The policy and torch's AdamW go
through ``accelerator.prepare``; one forward and backward on 2 x 16 random tokens, then the bytes of the gradients,
then ``optimizer.step()`` and the bytes of the optimizer state. Each figure is the sum of numel x element size of
the tensors the engine keeps for that term on this rank:

- weights: the module's parameters as this rank holds them (DeepSpeed ZeRO-3: each parameter's ``ds_tensor``
  partition; FSDP2: each DTensor's local shard; tied parameters once); LoRA: the frozen base and the adapters
  apart;
- gradients: ZeRO-2 its gradient partition (``averaged_gradients``), ZeRO-3 its ``grad_partitions_flat_buffer``;
  FSDP2 the local shards of ``param.grad``; DDP (LoRA) ``param.grad``;
- optimizer state: every tensor in the AdamW state, plus DeepSpeed's fp32 master partitions
  (``single_partition_of_fp32_groups`` / ``fp32_partitioned_groups_flat``);
- reference model: its parameters as this rank holds them.

A checkpoint is saved as the trainer saves one (``accelerator.save_state``, plus the model's safetensors under
DeepSpeed, as ``Trainer._save_checkpoint`` does) and its bytes on disk counted, all ranks' files together.
Rank 0 writes ``<out>/<engine>.json``: ``{"rank0": {...}, "rank1": {...}, "parameters", "checkpoint_bytes",
"model_config", "dtype", "mixed_precision"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

#: The tiny model: Qwen3's layout (q/k norms, GQA, tied embeddings), sized so that no term is a handful of bytes.
MODEL_CONFIG = dict(model_type="qwen3", vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True,
                    max_position_embeddings=512)
#: LoRA as the recipes set it (all-linear), a small r.
LORA = dict(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear")


def tensor_bytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def local(tensor):
    """A DTensor's local shard, or the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def parameter_bytes(module, trainable: bool | None = None) -> int:
    """Bytes of ``module``'s parameters on this rank (ZeRO-3 partitions, FSDP2 shards), each once; ``trainable``
    True / False keeps only those that do / do not require grad."""
    total, seen = 0, set()
    for param in module.parameters():
        if id(param) in seen or (trainable is not None and param.requires_grad != trainable):
            continue
        seen.add(id(param))
        total += tensor_bytes(param.ds_tensor) if hasattr(param, "ds_tensor") else tensor_bytes(local(param))
    return total


def optimizer_state_bytes(optimizer) -> int:
    return sum(tensor_bytes(local(value)) for state in optimizer.state.values() for value in state.values()
               if hasattr(value, "numel") and value.dim() > 0)


def main() -> None:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedType
    from transformers import AutoConfig, AutoModelForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", required=True, choices=["zero2", "zero3", "fsdp2", "lora"])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--deepspeed", help="a DeepSpeed JSON (recipes/deepspeed/zero{2,3}_cpu.json), run under torchrun")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    def force_fsdp():
        pass

    if args.deepspeed:
        # as transformers' Trainer takes `--deepspeed file.json`: the file's "auto" values filled from the run
        from accelerate.utils import DeepSpeedPlugin

        ds_config = json.loads(Path(args.deepspeed).read_text())
        ds_config.update(train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=1, gradient_clipping=1.0)
        ds_config["bf16"] = {"enabled": args.dtype == "bfloat16"}
        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=ds_config),
                                  mixed_precision="bf16" if args.dtype == "bfloat16" else "no")
    elif os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and not torch.cuda.is_available():
        # accelerate selects FSDP only on an accelerator device: on CPU processes (gloo) the launcher's FSDP settings
        # are taken as its plugin reads them and the state says FSDP, so that prepare runs the real
        # fsdp2_prepare_model / fully_shard
        from accelerate.utils import FullyShardedDataParallelPlugin

        accelerator = Accelerator(cpu=True)
        plugin = FullyShardedDataParallelPlugin()
        if accelerator.mixed_precision != "no":
            plugin.set_mixed_precision(accelerator.mixed_precision)

        def force_fsdp():  # the shared state is set again by what re-reads the environment (prepare)
            accelerator.state.distributed_type = DistributedType.FSDP
            accelerator.state.fsdp_plugin = plugin

        force_fsdp()
    else:
        accelerator = Accelerator(cpu=not torch.cuda.is_available())
    dtype = getattr(torch, args.dtype)
    config = AutoConfig.for_model(**MODEL_CONFIG)

    def build():
        if accelerator.distributed_type == DistributedType.DEEPSPEED:
            # what from_pretrained does under zero3_init_flag: the weights are partitioned as they are created
            from transformers.integrations import is_deepspeed_zero3_enabled

            if is_deepspeed_zero3_enabled():
                import deepspeed
                from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

                model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]  # imported before zero.Init patches torch
                with deepspeed.zero.Init(config_dict_or_path=accelerator.state.deepspeed_plugin.deepspeed_config):
                    return model_class._from_config(config, dtype=dtype)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)

    model = build()
    parameters = sum(p.numel() for p in model.parameters()) if not hasattr(next(model.parameters()), "ds_numel") \
        else sum(p.ds_numel for p in model.parameters())
    reference = None
    if args.engine == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(**LORA))
    else:
        from trl.models import prepare_deepspeed, prepare_fsdp

        reference = build().eval()
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    force_fsdp()
    if reference is not None:
        reference = (prepare_deepspeed(reference, accelerator) if accelerator.distributed_type == DistributedType.DEEPSPEED
                     else prepare_fsdp(reference, accelerator) if accelerator.distributed_type == DistributedType.FSDP
                     else reference)
    module = accelerator.unwrap_model(model)
    facts: dict[str, int] = {}
    import torch.distributed as dist

    print(f"rank {dist.get_rank()}/{dist.get_world_size()}: {accelerator.distributed_type}, "
          f"mixed precision {accelerator.mixed_precision}, {type(model).__name__}", flush=True)
    if args.engine == "lora":
        facts["base weights"] = parameter_bytes(module, trainable=False)
        facts["adapter weights"] = parameter_bytes(module, trainable=True)
    else:
        facts["weights"] = parameter_bytes(module)

    input_ids = torch.randint(0, MODEL_CONFIG["vocab_size"], (2, 16), device=accelerator.device)
    loss = model(input_ids=input_ids, labels=input_ids).loss
    zero = getattr(model, "optimizer", None) if accelerator.distributed_type == DistributedType.DEEPSPEED else None
    if zero is not None:  # the engine's own backward: accelerate's also steps (and frees the gradients) at once
        model.backward(loss)
    else:
        accelerator.backward(loss)
    if zero is not None and getattr(zero, "grads_in_partition", None) is not None:  # ZeRO-2: this rank's partition
        facts["gradients"] = tensor_bytes(zero.grads_in_partition)
    elif zero is not None and hasattr(zero, "averaged_gradients"):  # ZeRO-1, or ZeRO-2 without contiguous gradients
        facts["gradients"] = sum(tensor_bytes(g) for grads in zero.averaged_gradients.values() if grads
                                 for g in grads if g is not None)
    elif zero is not None and hasattr(zero, "grad_partitions_flat_buffer"):  # ZeRO-3
        facts["gradients"] = tensor_bytes(zero.grad_partitions_flat_buffer)
    else:
        facts["gradients"] = sum(tensor_bytes(local(p.grad)) for p in module.parameters() if p.grad is not None)
    if zero is not None:
        masters = getattr(zero, "single_partition_of_fp32_groups", None) or getattr(
            zero, "fp32_partitioned_groups_flat", [])
        facts["fp32 master weights"] = sum(tensor_bytes(t) for t in masters)
    if zero is not None:
        model.step()
    else:
        optimizer.step()
        optimizer.zero_grad()
    inner = zero.optimizer if zero is not None else optimizer.optimizer
    facts["AdamW moments"] = optimizer_state_bytes(inner)
    if reference is not None:
        facts["reference model"] = parameter_bytes(getattr(reference, "module", reference))

    out = Path(args.out)
    checkpoint = out / f"{args.engine}-checkpoint"
    if dist.get_rank() == 0 and checkpoint.exists():
        shutil.rmtree(checkpoint)
    accelerator.wait_for_everyone()
    force_fsdp()
    accelerator.save_state(str(checkpoint))
    if accelerator.distributed_type == DistributedType.DEEPSPEED:  # Trainer also saves the (gathered) model
        state = accelerator.get_state_dict(model)
        if dist.get_rank() == 0:
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in state.items()
                       if k != "lm_head.weight" or not MODEL_CONFIG["tie_word_embeddings"]},
                      str(checkpoint / "model.safetensors"))
    accelerator.wait_for_everyone()
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, facts)
    if dist.get_rank() == 0:
        files = [p for p in checkpoint.rglob("*") if p.is_file()]
        record = {f"rank{i}": f for i, f in enumerate(gathered)}
        record.update(parameters=parameters, checkpoint_bytes=sum(p.stat().st_size for p in files),
                      checkpoint_files={str(p.relative_to(checkpoint)): p.stat().st_size for p in files},
                      model_config=MODEL_CONFIG, dtype=args.dtype, mixed_precision=accelerator.mixed_precision,
                      processes=dist.get_world_size(), lora=LORA if args.engine == "lora" else None,
                      world=os.environ.get("WORLD_SIZE"))
        (out / f"{args.engine}.json").write_text(json.dumps(record, indent=1))
        shutil.rmtree(checkpoint)
    accelerator.end_training()


if __name__ == "__main__":
    main()
