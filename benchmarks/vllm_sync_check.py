"""One-off check of `hir_trl.models.workarounds`' weight sync on vLLM's CPU build, outside the trainer.

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_CPU_CI_ENV=1 \
        .venv-vllm/bin/python -m benchmarks.vllm_sync_check MODEL embed_tokens,q_proj,down_proj

Starts vLLM (float32, in-process like TRL's colocate mode) and loads the same model with transformers; then, for each
name fragment in turn, perturbs the matching transformers parameters (Gaussian noise, std 0.5), loads every parameter
into vLLM as TRL's colocate sync does, inside vLLM's layerwise reload bracket, repacks the embeddings (what
`fix_colocate_weight_sync` does) and prints the largest difference between vLLM's and the transformers model's
log-probs of a fixed 35-token sequence (nats).
"""
import os
import sys

import torch

os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29614")
from transformers import AutoModelForCausalLM
from vllm import LLM, SamplingParams
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

path = sys.argv[1]
llm = LLM(model=path, dtype="float32", distributed_executor_backend="external_launcher", max_model_len=256,
          max_num_batched_tokens=4096, max_num_seqs=4, seed=0)
hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
runner = llm.llm_engine.model_executor.driver_worker.model_runner
ids = list(range(5, 40))
def vllm_lp():
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    pl = out[0].prompt_logprobs[1:]
    return torch.tensor([d[t].logprob for d, t in zip(pl, ids[1:])])
def hf_lp():
    with torch.no_grad():
        lg = hf(torch.tensor([ids])).logits[0, :-1]
    return torch.log_softmax(lg, -1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
print("initial diff", (vllm_lp() - hf_lp()).abs().max().item())
groups = sys.argv[2].split(",")
for grp in groups:
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if grp in n:
                p.add_(torch.randn_like(p) * 0.5)
    model = runner.get_model()
    if "nobracket" not in sys.argv:
        initialize_layerwise_reload(model)
    for n, p in hf.named_parameters():
        model.load_weights([(n, p.data)])
    if "nobracket" not in sys.argv:
        finalize_layerwise_reload(model, runner.model_config)
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    for module in model.modules():
        if isinstance(module, VocabParallelEmbedding) and module.weight.numel():
            module.quant_method.process_weights_after_loading(module)
    llm.reset_prefix_cache()
    print(grp, "diff after sync", (vllm_lp() - hf_lp()).abs().max().item())
