"""Two probes of a SmolLM2-135M-Instruct + LoRA step on CPU, one phase each (the README here has the figures).

``generate``: TRL's generation path (``unwrap_model_for_generation``, which turns activation checkpointing off) on
12 rows x 32 sampled tokens, the model in training mode as in a step; prints wall and CPU seconds.
``loss``: one loss forward (TRL's fused LM head, log-probs and entropies) and backward on ROWS x 230 tokens (64
completion tokens), twice; prints wall and CPU seconds and the peak RSS (the kernel's VmHWM, reset before each).

Run from the repository root with the model converted (``outputs/SmolLM2-135M-Instruct``), e.g.::

    OMP_NUM_THREADS=1 T=1 python benchmarks/experiments/main-job/probes.py generate
    OMP_NUM_THREADS=1 T=1 GC=1 ROWS=8 python benchmarks/experiments/main-job/probes.py loss

``T``: torch threads; ``GC``: 1 = activation checkpointing (non-reentrant, as TRL sets it).
"""

import os
import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

MODEL = "outputs/SmolLM2-135M-Instruct"


def peak_mb() -> float:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmHWM"))


def main(phase: str) -> None:
    torch.set_num_threads(int(os.environ.get("T", "1")))
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    if phase == "loss":
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()
    if os.environ.get("GC", "1") == "1":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if phase == "generate":
        from accelerate import Accelerator
        from trl.models.utils import unwrap_model_for_generation

        tokenizer = AutoTokenizer.from_pretrained(MODEL, padding_side="left")
        batch = tokenizer(["Tell me about cats. Answer in one or two short sentences. The output must follow the "
                           "following rules: 1. no commas 2. a title."] * 12, return_tensors="pt", padding=True)
        config = GenerationConfig(max_new_tokens=32, min_new_tokens=32, do_sample=True, temperature=1.0,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=[2], disable_compile=True)
        with unwrap_model_for_generation(model, Accelerator(cpu=True)) as unwrapped, torch.no_grad():
            wall, cpu = time.perf_counter(), time.process_time()
            unwrapped.generate(**batch, generation_config=config)
        print(f"generate T={os.environ.get('T', '1')} wall {time.perf_counter() - wall:.1f}s "
              f"cpu {time.process_time() - cpu:.1f}s")
        return
    rows, prompt, completion = int(os.environ.get("ROWS", "8")), 166, 64
    ids = torch.randint(100, 40000, (rows, prompt + completion))
    mask = torch.ones_like(ids)
    mask[:, :20] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-completion] = -100
    for i in range(2):
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        wall, cpu = time.perf_counter(), time.process_time()
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        (-out.log_probs[:, -completion:].mean()).backward()
        print(f"loss GC={os.environ.get('GC', '1')} rows={rows} pass {i}: wall {time.perf_counter() - wall:.1f}s "
              f"cpu {time.process_time() - cpu:.1f}s peak {peak_mb():.0f} MB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "generate")
