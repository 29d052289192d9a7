"""``hir-trl plan``: the arithmetic of a launch, before it is made, without loading any weights.

From a recipe (the same keys and flags as ``hir-trl train``) and the launch shape (processes, ZeRO stage or FSDP, the
vLLM mode, the GPU's memory), `plan` prints the batch layout, the memory per GPU, the judge's load and the disk the
checkpoints take, and a verdict: whether the launch fits on the GPU, the term that breaks it and the setting that
fixes it. The model's shape comes from its ``config.json`` (a local folder, ``--model_config``, or the published
shapes of the recipes' models in ``recipes/model_shapes.yaml``).

The figures are plain functions of numbers (`ModelShape`, `batch_plan`, `memory_plan`, `judge_plan`, `disk_plan`);
the parameters are counted on the model transformers builds from the config on the meta device (no memory). Memory is in bytes, printed in GiB (2**30 bytes; a GPU sold as "80 GB" has 80 GiB).
Where a figure is an estimate, its function says what it counts and where the formula comes from
(docs/scale-out.md "Plan a launch").
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .step_cost import step_cost_line

GIB = 2**30

#: Share of a GPU's memory that training may plan to use: the rest is the CUDA context, NCCL's buffers and the
#: caching allocator's fragmentation (an allowance, not a measurement).
USABLE_FRACTION = 0.9
#: What a colocated vLLM engine keeps inside its ``vllm_gpu_memory_utilization`` share besides weights and KV cache
#: (its profiling peak of activations, CUDA graphs): an allowance.
VLLM_OVERHEAD_BYTES = 1 * GIB
#: Characters per token, to turn the judge prompt's text into tokens (a rough average for English text).
CHARS_PER_TOKEN = 4
#: Bytes of one 4-bit (NF4/FP4) weight with bitsandbytes' quantization constants: 4 bits plus one 32-bit absmax per
#: 64 weights (0.5 bit), or 0.127 bit with nested quantization (QLoRA paper, Dettmers et al. 2023, section 3).
QUANT_4BIT_BYTES = {False: (4 + 0.5) / 8, True: (4 + 0.127) / 8}


# ----------------------------------------------------------------------------------------------------- the model


#: PEFT's default targets when its table has no entry for the model type (the Llama/Qwen layouts' q_proj, v_proj).
PEFT_DEFAULT_TARGETS = ("q_proj", "v_proj")


@dataclass(frozen=True)
class ModelCounts:
    """What transformers' own model of a config holds, counted on the meta device (no memory, no weights).

    Attributes: ``parameters`` (every parameter, tied ones once), ``linear`` (each ``nn.Linear`` but the output
    embeddings: qualified name -> (in features, out features); what PEFT's ``all-linear`` adapts and bitsandbytes
    quantizes), ``layers`` (the decoder layers: modules of a class in the model's ``_no_split_modules``, the unit
    FSDP's TRANSFORMER_BASED_WRAP and ZeRO-3's prefetch gather), ``layer_parameters`` (the largest such layer's
    parameters), ``model_type``.
    """

    parameters: int
    linear: dict[str, tuple[int, int]]
    layers: int
    layer_parameters: int
    model_type: str


@functools.lru_cache(maxsize=32)
def _meta_counts(config_json: str) -> ModelCounts:
    """`ModelCounts` of the model ``AutoModelForCausalLM.from_config`` builds from a config (a JSON string, the
    cache's key) on the meta device, as accelerate's ``init_empty_weights`` / ``estimate-memory`` builds it.

    Raises:
        ValueError: transformers does not know the ``model_type`` or cannot build the config (one line).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    config = json.loads(config_json)
    model_type = str(config.get("model_type", ""))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        hf_config = AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
        model.tie_weights()  # on the meta device transformers leaves tied embeddings untied until asked
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"transformers cannot build a causal LM of model_type {model_type!r} from this config "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    output = model.get_output_embeddings()
    linear = {name: (module.in_features, module.out_features) for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and module is not output}
    block_names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [module for module in model.modules() if type(module).__name__ in block_names]
    layer_parameters = max((sum(p.numel() for p in block.parameters()) for block in blocks), default=0)
    return ModelCounts(parameters=sum(p.numel() for p in model.parameters()), linear=linear, layers=len(blocks),
                       layer_parameters=layer_parameters, model_type=model_type)


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only model, read from its ``config.json``; its parameters are counted on the model
    transformers builds from that config (`ModelCounts`: any architecture transformers knows, mixture-of-experts
    included).

    Attributes: ``layers`` (num_hidden_layers), ``hidden`` (hidden_size), ``intermediate`` (intermediate_size),
    ``heads`` / ``kv_heads`` (attention and key-value heads), ``head_dim``, ``vocab`` (vocab_size), ``tied``
    (tie_word_embeddings), ``max_positions`` (max_position_embeddings), ``dtype`` (torch_dtype of the checkpoint),
    ``name``, ``config`` (the config dict itself).
    """

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    max_positions: int | None = None
    dtype: str | None = None
    name: str = ""
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str = "") -> ModelShape:
        """The shape of a ``config.json`` (a dict); ``head_dim`` defaults to hidden_size / num_attention_heads.

        Raises:
            ValueError: a field the plan needs is missing or not a positive integer (naming it and ``name``).
        """
        config = config.get("text_config", config) if "num_hidden_layers" not in config else config
        values = {}
        for key in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"):
            value = config.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name or 'the model config'}: {key} must be a positive integer, got {value!r} "
                                 "(hir-trl plan reads a decoder-only config.json)")
            values[key] = value
        heads = values["num_attention_heads"]
        return cls(layers=values["num_hidden_layers"], hidden=values["hidden_size"],
                   intermediate=values["intermediate_size"], heads=heads,
                   kv_heads=int(config.get("num_key_value_heads") or heads),
                   head_dim=int(config.get("head_dim") or values["hidden_size"] // heads),
                   vocab=values["vocab_size"], tied=bool(config.get("tie_word_embeddings", False)),
                   max_positions=config.get("max_position_embeddings"),
                   dtype=config.get("torch_dtype") or config.get("dtype"), name=name, config=dict(config))

    def counts(self) -> ModelCounts:
        """`ModelCounts` of transformers' meta-device model of ``config`` (cached per config).

        Raises:
            ValueError: no ``model_type`` transformers knows (naming the model).
        """
        if not self.config.get("model_type"):
            raise ValueError(f"{self.name or 'the model config'}: no model_type (hir-trl plan builds the model "
                             "transformers builds from config.json, on the meta device)")
        try:
            return _meta_counts(json.dumps(dict(self.config), sort_keys=True, default=str))
        except ValueError as exc:
            raise ValueError(f"{self.name or 'the model config'}: {exc}") from None

    def parameters(self) -> int:
        """Every parameter of the model transformers builds from the config (tied embeddings once; every expert of
        a mixture-of-experts)."""
        return self.counts().parameters

    def linear_parameters(self) -> int:
        """Weights of every ``nn.Linear`` but the output embeddings (what bitsandbytes quantizes to 4 / 8 bits)."""
        return sum(a * b for a, b in self.counts().linear.values())

    def layer_parameters(self) -> int:
        """Parameters of the largest decoder layer (the unit ZeRO-3 / FSDP gather)."""
        return self.counts().layer_parameters

    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        """KV cache of one token: layers x KV heads x head_dim x 2 (K and V) x bytes per value."""
        return self.layers * self.kv_heads * self.head_dim * 2 * dtype_bytes

    def lora_modules(self, target_modules: Any) -> dict[str, tuple[int, int]]:
        """The ``nn.Linear`` layers LoRA adapts, as PEFT matches ``target_modules``: ``all-linear`` (every linear
        layer but the output embeddings), a list of names (a module whose name is one of them or ends in
        ``.name``), a string (a regular expression the whole name matches), or None (PEFT's default targets for the
        model type, ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``)."""
        import re

        linear = self.counts().linear
        if target_modules in (None, [], ()):
            try:
                from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults
            except ImportError:  # pragma: no cover - peft is a dependency
                defaults = {}
            target_modules = list(defaults.get(self.counts().model_type) or PEFT_DEFAULT_TARGETS)
        if target_modules in ("all-linear", ["all-linear"]):
            return dict(linear)
        if isinstance(target_modules, str):
            return {name: s for name, s in linear.items() if re.fullmatch(target_modules, name)}
        names = list(target_modules)
        return {name: s for name, s in linear.items()
                if any(name == target or name.endswith("." + target) for target in names)}

    def lora_parameters(self, r: int, target_modules: Any) -> int:
        """LoRA's trainable parameters: r x (in + out) for each adapted linear layer (`lora_modules`)."""
        return sum(r * (a + b) for a, b in self.lora_modules(target_modules).values())

    def lora_dropout_values_per_token(self, target_modules: Any) -> float:
        """Values one decoder layer keeps per token for LoRA's dropout (``lora_dropout > 0``): each adapted layer
        applies its own dropout to its input and ``lora_A`` keeps that dropped copy for its backward, so each keeps
        ``in features`` values (the activations' dtype) and the dropout's mask (``in features`` bytes, bool), where
        with ``lora_dropout: 0`` ``lora_A`` keeps the input the layer already has. Averaged over the layers."""
        inputs = sum(a for a, _ in self.lora_modules(target_modules).values())
        return inputs / max(1, self.counts().layers or self.layers)


#: Bytes per parameter of a torch dtype name.
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}


# ---------------------------------------------------------------------------------------------- the batch layout


@dataclass(frozen=True)
class BatchPlan:
    """How HiR lays out the batch (docs/step.md; `hir_trl.configs.batch_layout_problem`), all ranks together unless
    named ``_per_rank``.

    A generation call samples ``per_device_train_batch_size x steps_per_generation`` rows per rank (whole groups of
    m); HiR adds k replay slots per group (replays, supplementary samples or padding rows); the extended batch is
    split into ``steps_per_generation`` micro-batches, and an optimizer step takes ``gradient_accumulation_steps`` of
    them.
    """

    processes: int
    prompts_per_generation: int
    sampled_per_generation: int
    replay_slots_per_generation: int
    trained_rows_per_generation: int
    sequences_per_call_per_rank: int
    rows_per_micro_batch: int
    generations_per_step: float
    prompts_per_step: float
    sampled_per_step: float
    replay_slots_per_step: float
    trained_rows_per_step: int
    generated_tokens_per_step: float
    steps_per_epoch: int | None


def batch_plan(*, per_device_train_batch_size: int, gradient_accumulation_steps: int, steps_per_generation: int,
               num_generations: int, num_replays: int, processes: int, max_completion_length: int,
               resample: bool, num_iterations: int = 1, dataset_rows: int | None = None) -> BatchPlan:
    """The batch arithmetic of one optimizer step and of one generation call.

    Args:
        per_device_train_batch_size: sampled rows per rank per micro-batch slot (TRL's meaning).
        gradient_accumulation_steps: micro-batches per optimizer step.
        steps_per_generation: micro-batches one generation call feeds (TRL's; its default is
            gradient_accumulation_steps).
        num_generations, num_replays: m and k.
        processes: ranks (GPUs) in all.
        max_completion_length: the cap on generated tokens per completion.
        resample: ``replay_shortfall: resample``: a group short of candidates gets up to k supplementary samples
            (generated tokens count them at the cap: an upper bound).
        num_iterations: TRL's passes over one generation batch (each optimizer step reuses it).
        dataset_rows: prompts in the training split, for the optimizer steps per epoch (TRL drops an incomplete
            generation batch), or None.

    Returns:
        A `BatchPlan`. Raises ValueError when a rank's generation batch is no whole number of groups or the extended
        batch does not split evenly (the checks of `hir_trl.configs.batch_layout_problem`).
    """
    m, k = num_generations, num_replays
    sampled_rank = per_device_train_batch_size * steps_per_generation
    if sampled_rank % m:
        raise ValueError(f"per_device_train_batch_size x steps_per_generation = {sampled_rank} is no whole number of "
                         f"groups of num_generations = {m}")
    trained_rank = sampled_rank + sampled_rank // m * k
    if trained_rank % steps_per_generation:
        raise ValueError(f"the extended batch of {trained_rank} rows per rank does not split into "
                         f"steps_per_generation = {steps_per_generation} micro-batches")
    prompts = sampled_rank // m * processes
    generations_per_step = gradient_accumulation_steps / (steps_per_generation * num_iterations)
    micro = trained_rank // steps_per_generation
    steps_per_epoch = None
    if dataset_rows is not None:
        steps_per_epoch = int(dataset_rows // prompts * steps_per_generation * num_iterations
                              // gradient_accumulation_steps)
    return BatchPlan(
        processes=processes, prompts_per_generation=prompts, sampled_per_generation=prompts * m,
        replay_slots_per_generation=prompts * k, trained_rows_per_generation=prompts * (m + k),
        sequences_per_call_per_rank=sampled_rank, rows_per_micro_batch=micro,
        generations_per_step=generations_per_step, prompts_per_step=prompts * generations_per_step,
        sampled_per_step=prompts * m * generations_per_step, replay_slots_per_step=prompts * k * generations_per_step,
        trained_rows_per_step=micro * gradient_accumulation_steps * processes,
        generated_tokens_per_step=prompts * (m + (k if resample else 0)) * generations_per_step * max_completion_length,
        steps_per_epoch=steps_per_epoch)


# ------------------------------------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class Sharding:
    """How the training state is spread over the ranks: ``kind`` ``none`` (one process or DDP), ``deepspeed`` or
    ``fsdp``; ``stage`` as ZeRO's (0: nothing sharded, 1: optimizer state, 2: + gradients, 3: + weights; FSDP's
    FULL_SHARD is 3, SHARD_GRAD_OP 2); offload of the optimizer state / the weights to CPU; ``upcast_trainable``:
    FSDP2 under bf16/fp16 mixed precision, where accelerate's ``fsdp2_prepare_model`` casts every trainable
    parameter to float32 before sharding it (its master weights; ``MixedPrecisionPolicy`` casts them for compute)."""

    kind: str = "none"
    stage: int = 0
    offload_optimizer: bool = False
    offload_params: bool = False
    upcast_trainable: bool = False

    def describe(self) -> str:
        if self.kind == "none":
            return "no sharding (one process or DDP)"
        offload = [what for what, on in (("optimizer", self.offload_optimizer), ("weights", self.offload_params))
                   if on]
        name = f"DeepSpeed ZeRO-{self.stage}" if self.kind == "deepspeed" else f"FSDP (ZeRO-{self.stage} equivalent)"
        return (name + (f", {' and '.join(offload)} offloaded to CPU" if offload else "")
                + (", trainable weights in fp32 (FSDP2 mixed precision)" if self.upcast_trainable else ""))


@dataclass(frozen=True)
class Term:
    """One memory term: ``name``, ``bytes`` per GPU, the ``phase`` it belongs to (``state``: all run long;
    ``training``: the loss's forward and backward; ``generation``: one generation call; ``vllm``: the colocated
    engine's share), and ``fix``: the setting that shrinks it."""

    name: str
    bytes: float
    phase: str
    fix: str


@dataclass(frozen=True)
class MemoryPlan:
    """The memory terms of one GPU, each phase's peak, the budget and the verdict (``fits``; ``breaking``: the
    largest term of the phase over budget, or None)."""

    terms: list[Term]
    peaks: dict[str, float]
    budget: float
    gpu_bytes: float | None
    fits: bool | None
    breaking: Term | None
    cpu_bytes: float
    notes: list[str]
    vllm_sequences: int | None = None


def state_bytes_per_parameter(weight_bytes: float, sharding: Sharding) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) in bytes per parameter of a full fine-tune with AdamW, unsharded.

    torch's AdamW (one process, DDP, FSDP) keeps its two moments in the parameters' dtype: w + w + 2w (16 bytes in
    float32, as accelerate's ``estimate-memory`` counts "float32" training: model, gradients, 2 x model for Adam).
    DeepSpeed's bf16/fp16 training adds an fp32 master copy: w + w + (4 + 8), 16 bytes in bf16 (the ZeRO paper's
    2 + 2 + K with K = 12). FSDP2 under mixed precision (``upcast_trainable``) trains fp32 weights whatever they
    were loaded in: 4 + 4 + 8 (measured: benchmarks/experiments/plan-engines).
    """
    if sharding.upcast_trainable:
        return 4, 4, 8
    if sharding.kind == "deepspeed":
        return weight_bytes, weight_bytes, (4 if weight_bytes < 4 else 0) + 8
    return weight_bytes, weight_bytes, 2 * weight_bytes


def activation_bytes_per_token(shape: ModelShape, act_bytes: float, checkpointing: bool) -> float:
    """Activation memory the backward pass keeps per token (all layers), an estimate.

    A decoder layer keeps about ``8 x hidden + 4 x intermediate`` values per token for its backward: the two
    RMSNorms' inputs and outputs, q/k/v, the attention output and o_proj's input (about 8 x hidden), and the SwiGLU
    MLP's gate, up, activation and product (4 x intermediate). SDPA / flash attention keep no seq x seq scores
    (Korthikanti et al. 2022, "Reducing Activation Recomputation", eq. 1 without its 5as/h term). With gradient
    checkpointing each layer keeps only its input (hidden values) and one layer is recomputed at a time. TRL computes
    the completion tokens' log-probs through its fused LM head, in tiles, so no full logits are kept.
    """
    per_layer = (8 * shape.hidden + 4 * shape.intermediate) * act_bytes
    if checkpointing:
        return shape.layers * shape.hidden * act_bytes + per_layer
    return shape.layers * per_layer


def memory_plan(shape: ModelShape, *, processes: int, sharding: Sharding, weight_bytes: float, act_bytes: float,
                rows_per_micro_batch: int, sequence_tokens: int, sequences_per_call: int, generation: str,
                gradient_checkpointing: bool, reference_model: bool, lora_r: int | None = None,
                lora_target_modules: Any = None, quant_bits: int | None = None, nested_quant: bool = False,
                vllm_gpu_memory_utilization: float = 0.0, vllm_tensor_parallel_size: int = 1,
                vllm_max_model_length: int | None = None, gpu_gib: float | None = None,
                lora_dropout: float = 0.0) -> MemoryPlan:
    """The memory of one GPU, by term and phase, and whether the launch fits.

    Args:
        shape: the model.
        processes: ranks over which ZeRO / FSDP shard.
        sharding: `Sharding`.
        weight_bytes: bytes per weight as loaded (``dtype``: 2 for bfloat16, 4 for float32).
        act_bytes: bytes per activation (2 under bf16 / fp16 autocast).
        rows_per_micro_batch: rows of one micro-batch (sampled rows and replay slots), per rank.
        sequence_tokens: prompt + completion tokens of one row at the cap.
        sequences_per_call: sequences one rank samples in one generation call.
        generation: ``generate`` (transformers), ``colocate`` or ``server`` (vLLM).
        gradient_checkpointing: as the config.
        reference_model: TRL loads a reference model (``beta > 0`` without PEFT; with PEFT the reference is the
            adapter-disabled model).
        lora_r, lora_target_modules: LoRA (PEFT) when ``lora_r`` is given: only adapters train (fp32, as PEFT keeps
            them), the base stays frozen.
        lora_dropout: PEFT's dropout before ``lora_A``; above 0 each adapted layer keeps a dropped copy of its input
            and the mask for the backward (`ModelShape.lora_dropout_values_per_token`).
        quant_bits: 4 or 8 (bitsandbytes) for the base's linear weights, or None.
        nested_quant: bitsandbytes' nested quantization of the 4-bit constants.
        vllm_gpu_memory_utilization, vllm_tensor_parallel_size, vllm_max_model_length: the colocated engine's.
        gpu_gib: the GPU's memory in GiB, or None (no verdict).

    Returns:
        A `MemoryPlan`. Phases: ``state`` (weights, gradients, optimizer state, reference model: all run long),
        ``training`` (state + activations + ZeRO-3's gathered layers), ``generation`` (state + the KV cache of one
        transformers ``generate`` call + under ZeRO-3 / FSDP the full weights TRL gathers for it), ``vllm`` (the
        colocated engine's share: its weights and KV cache, which must hold one sequence of ``max_model_len``).
    """
    parameters = shape.parameters()
    sharded = processes if sharding.kind != "none" else 1
    stage = sharding.stage if sharding.kind != "none" else 0
    terms: list[Term] = []
    notes: list[str] = []
    cpu = 0.0
    full_weights = parameters * weight_bytes
    if lora_r:
        adapters = shape.lora_parameters(lora_r, lora_target_modules)
        if quant_bits:
            linear = shape.linear_parameters()
            per_weight = QUANT_4BIT_BYTES[bool(nested_quant)] if quant_bits == 4 else 1.0
            base = linear * per_weight + (parameters - linear) * weight_bytes
            what = f"base weights ({linear / 1e9:.2f}B linear in {quant_bits} bits, the rest at {weight_bytes:g} B)"
            fix = "QLoRA already; a smaller model"
        else:
            base, what, fix = full_weights, f"base weights (frozen, {weight_bytes:g} B each)", "load_in_4bit true (QLoRA)"
        terms.append(Term(what, base / (sharded if stage == 3 else 1), "state", fix))
        terms.append(Term(f"LoRA adapters, gradients and AdamW state ({adapters / 1e6:.1f}M parameters x 16 B)",
                          adapters * 16, "state", "a smaller lora_r"))
    else:
        w, g, o = state_bytes_per_parameter(weight_bytes, sharding)
        weights = parameters * w / (sharded if stage == 3 else 1)
        if sharding.offload_params and stage == 3:
            cpu += weights
            weights = 0.0
        terms.append(Term(f"weights ({_count(parameters)} x {w:g} B{' / ' + str(sharded) if stage == 3 else ''})",
                          weights, "state", "ZeRO-3 over more GPUs, or LoRA / QLoRA (use_peft true)"))
        grads = parameters * g / (sharded if stage >= 2 else 1)
        opt = parameters * o / (sharded if stage >= 1 else 1)
        if sharding.offload_optimizer:
            cpu += opt + grads
            grads = opt = 0.0
        terms.append(Term(f"gradients ({g:g} B per parameter{' / ' + str(sharded) if stage >= 2 else ''})",
                          grads, "state", "ZeRO-2/3 (zero3.yaml) or LoRA (use_peft true)"))
        terms.append(Term(f"optimizer state (AdamW, {o:g} B per parameter{' / ' + str(sharded) if stage >= 1 else ''})",
                          opt, "state", "ZeRO-3 (zero3.yaml), optimizer offload (zero3_offload.yaml), or LoRA "
                          "(use_peft true)"))
    if reference_model:
        terms.append(Term(f"reference model (beta > 0{', / ' + str(sharded) if stage == 3 else ''})",
                          full_weights / (sharded if stage == 3 else 1), "state", "beta 0, or LoRA (use_peft true: "
                          "the reference is the adapter-disabled model)"))
    if stage == 3 and not lora_r:
        terms.append(Term("ZeRO-3 / FSDP gathered layers (2 layers)", 2 * shape.layer_parameters() * weight_bytes,
                          "training", "fewer prefetched layers"))
    tokens = rows_per_micro_batch * sequence_tokens
    per_token = activation_bytes_per_token(shape, act_bytes, gradient_checkpointing)
    if lora_r and lora_dropout > 0:  # one layer's copies with checkpointing (recomputed one layer at a time)
        per_layer_copies = shape.lora_dropout_values_per_token(lora_target_modules) * (act_bytes + 1)
        per_token += per_layer_copies * (1 if gradient_checkpointing else shape.layers)
    dropout = ", LoRA dropout copies" if lora_r and lora_dropout > 0 else ""
    terms.append(Term(f"activations ({rows_per_micro_batch} rows x {sequence_tokens} tokens, checkpointing "
                      f"{'on' if gradient_checkpointing else 'off'}{dropout})", tokens * per_token, "training",
                      "gradient_checkpointing true, or fewer rows per micro-batch (lower "
                      "per_device_train_batch_size, raise gradient_accumulation_steps), or a lower "
                      "max_completion_length"))
    kv_token = shape.kv_bytes_per_token(act_bytes if quant_bits else weight_bytes)
    vllm_sequences = None
    share = 0.0
    if generation == "generate":
        terms.append(Term(f"KV cache of one generate call ({sequences_per_call} sequences x {sequence_tokens} "
                          "tokens)", sequences_per_call * sequence_tokens * kv_token, "generation",
                          "fewer sequences per call (lower steps_per_generation: a call samples "
                          "per_device_train_batch_size x steps_per_generation), a lower max_completion_length, or "
                          "vLLM"))
        if stage == 3 and not lora_r:
            gathered = full_weights - full_weights / sharded
            terms.append(Term("weights gathered for generate (ZeRO-3 / FSDP: TRL's ds3_gather_for_generation)",
                              gathered, "generation", "use_vllm true (colocate), or ds3_gather_for_generation false"))
    elif generation == "colocate":
        tp = max(1, vllm_tensor_parallel_size)
        share = (gpu_gib or 0) * GIB * vllm_gpu_memory_utilization
        vllm_weights = parameters * 2 / tp  # vLLM serves bf16 (its dtype "auto" runs a float32 checkpoint in bf16)
        kv_room = share - vllm_weights - VLLM_OVERHEAD_BYTES
        kv_token_vllm = shape.kv_bytes_per_token(2) / tp
        max_len = vllm_max_model_length or shape.max_positions or sequence_tokens
        terms.append(Term(f"vLLM share (vllm_gpu_memory_utilization {vllm_gpu_memory_utilization:g}): weights "
                          f"{vllm_weights / GIB:.1f} GiB + overhead {VLLM_OVERHEAD_BYTES / GIB:.0f} GiB + KV cache",
                          share, "vllm", "a lower vllm_gpu_memory_utilization (if its KV cache still holds a "
                          "sequence), vllm_enable_sleep_mode true, or vllm_mode server"))
        if gpu_gib:
            vllm_sequences = int(max(kv_room, 0) // (kv_token_vllm * sequence_tokens))
            if kv_room < kv_token_vllm * max_len:
                notes.append(f"vLLM's KV cache room ({max(kv_room, 0) / GIB:.1f} GiB) cannot hold one sequence of "
                             f"max_model_len {max_len} ({kv_token_vllm * max_len / GIB:.2f} GiB): vLLM refuses to "
                             "start; raise vllm_gpu_memory_utilization or lower vllm_max_model_length")
            elif vllm_sequences < sequences_per_call * tp:
                notes.append(f"vLLM's KV cache holds {vllm_sequences} sequences at the cap, the call has "
                             f"{sequences_per_call * tp}: vLLM runs it in waves (slower, not an error)")
    else:
        notes.append("vLLM server mode: generation and its KV cache are on the server's GPUs, not these")
    peaks: dict[str, float] = {}
    state = sum(t.bytes for t in terms if t.phase == "state")
    peaks["training"] = state + sum(t.bytes for t in terms if t.phase == "training")
    if generation == "generate":
        peaks["generation"] = state + sum(t.bytes for t in terms if t.phase == "generation")
    budget = (gpu_gib or 0) * GIB * USABLE_FRACTION - share
    fits, breaking = None, None
    if gpu_gib:
        fits = max(peaks.values()) <= budget and not any("refuses to start" in n for n in notes)
        if not fits:
            phase = max(peaks, key=peaks.get)
            if max(peaks.values()) <= budget:  # the vLLM share itself is what breaks
                breaking = next(t for t in terms if t.phase == "vllm")
            else:
                breaking = max((t for t in terms if t.phase in ("state", phase)), key=lambda t: t.bytes)
    return MemoryPlan(terms=terms, peaks=peaks, budget=budget, gpu_bytes=gpu_gib * GIB if gpu_gib else None,
                      fits=fits, breaking=breaking, cpu_bytes=cpu, notes=notes, vllm_sequences=vllm_sequences)


# -------------------------------------------------------------------------------------------------------- judge


@dataclass(frozen=True)
class JudgePlan:
    """The judge's load: requests per optimizer step (sampled rows only, and at most with supplementary samples and
    re-judged replays), the concurrency across ranks, tokens per request, and per hour / cost when given."""

    soft_per_row: float | None
    soft_share: float | None
    requests_per_step: float | None
    requests_per_step_max: float | None
    concurrency: int
    input_tokens: int
    output_tokens: int
    requests_per_hour: float | None
    cost_per_step: float | None
    cost_per_hour: float | None


def judge_plan(*, sampled_per_step: float, replay_slots_per_step: float, resample: bool, rejudge: bool,
               soft_constraints: int | None, constraints: int | None, rows: int | None, judge_max_concurrency: int,
               processes: int, template_chars: int, prompt_tokens: int, max_completion_length: int,
               output_tokens: int, step_seconds: float | None = None, price_input: float | None = None,
               price_output: float | None = None) -> JudgePlan:
    """The judge's requests: one per (completion, soft constraint) (`hir_trl.judge.judge_batch`), before the cache.

    Args:
        sampled_per_step, replay_slots_per_step: from `BatchPlan`.
        resample: supplementary samples (at most one per replay slot) are judged too.
        rejudge: ``rejudge_replays``: a replay's kept soft constraints are judged again (at most one per slot).
        soft_constraints, constraints, rows: counts of the training data, or None when unknown.
        judge_max_concurrency: requests in flight per rank; each rank has its own judge client.
        template_chars: characters of the judge prompt's fixed text; tokens at `CHARS_PER_TOKEN`.
        prompt_tokens, max_completion_length: the instruction and the completion the judge reads (at the cap).
        output_tokens: the answer's cap (1 with ``judge_logprobs``, else ``judge_max_tokens``).
        step_seconds: an assumed time per optimizer step, for requests per hour.
        price_input, price_output: the judge's price per million input / output tokens, as the user gives it.
    """
    per_row = soft_constraints / rows if soft_constraints is not None and rows else None
    share = soft_constraints / constraints if soft_constraints is not None and constraints else None
    requests = requests_max = None
    if per_row is not None:
        requests = sampled_per_step * per_row
        requests_max = requests + replay_slots_per_step * per_row * ((1 if resample else 0) + (1 if rejudge else 0))
    input_tokens = template_chars // CHARS_PER_TOKEN + 32 + prompt_tokens + max_completion_length
    per_hour = requests_max * 3600 / step_seconds if requests_max is not None and step_seconds else None
    cost_step = cost_hour = None
    if requests_max is not None and price_input is not None:
        cost_step = requests_max * (input_tokens * price_input + output_tokens * (price_output or 0)) / 1e6
        cost_hour = cost_step * 3600 / step_seconds if step_seconds else None
    return JudgePlan(soft_per_row=per_row, soft_share=share, requests_per_step=requests,
                     requests_per_step_max=requests_max, concurrency=judge_max_concurrency * processes,
                     input_tokens=input_tokens, output_tokens=output_tokens, requests_per_hour=per_hour,
                     cost_per_step=cost_step, cost_per_hour=cost_hour)


# --------------------------------------------------------------------------------------------------------- disk


def disk_plan(*, parameters: int, weight_bytes: float, sharding: Sharding, lora_parameters: int | None,
              save_only_model: bool, save_total_limit: int | None, saves: int | None,
              tied_parameters: int = 0) -> dict[str, Any]:
    """Disk of one checkpoint and of the checkpoints kept, in bytes.

    A full fine-tune saves the model (``weight_bytes`` per parameter; ZeRO-3 with ``zero3_save_16bit_model`` gathers
    it in 16 bits) and, unless ``save_only_model``, the optimizer state: DeepSpeed's fp32 master weights and AdamW
    moments (12 B per parameter, over all ranks' files; below ZeRO-3 DeepSpeed's own checkpoint holds the 16-bit
    module once more, ``weight_bytes``), torch's AdamW moments in the weights' dtype (2 x ``weight_bytes``; FSDP2
    under mixed precision saves its fp32 weights and moments: 4 + 8, and its sharded state dict holds tied embeddings
    twice: ``tied_parameters``). LoRA saves the adapter (fp32) and its optimizer state (8 B per parameter). Checked
    against real checkpoints at tiny size (benchmarks/experiments/plan-engines).

    Returns:
        ``{"per_checkpoint", "kept" (checkpoints on disk at most, or None: unbounded), "total" (or None)}``.
    """
    if lora_parameters:
        model, optimizer = lora_parameters * 4, lora_parameters * 8
    else:
        trained = 4 if sharding.upcast_trainable else weight_bytes
        model = (parameters + (tied_parameters if sharding.kind == "fsdp" else 0)) * trained
        optimizer = parameters * (12 if sharding.kind == "deepspeed" else 2 * trained)
        if sharding.kind == "deepspeed" and sharding.stage < 3:
            optimizer += parameters * weight_bytes
    per_checkpoint = model + (0 if save_only_model else optimizer)
    kept = save_total_limit
    if saves is not None:
        kept = saves if kept is None else min(kept, saves)
    return {"per_checkpoint": per_checkpoint, "kept": kept, "total": per_checkpoint * kept if kept is not None else None}


# ------------------------------------------------------------------------------------------------- the command


@dataclass
class PlanArguments:
    """The launch shape `hir-trl plan` takes besides the recipe's keys and flags (which are ``hir-trl train``'s)."""

    gpu_memory_gb: float | None = field(
        default=None, metadata={"help": "Memory of one GPU in GiB, as sold (80 for an A100/H100 80GB, 24 for an RTX "
                                "4090); without it the plan prints the figures and no verdict."})
    num_processes: int | None = field(
        default=None, metadata={"help": "Processes (GPUs) in all, over every machine (accelerate's meaning); default: "
                                "the accelerate config file's num_processes, else 1."})
    config_file: str | None = field(
        default=None, metadata={"help": "The accelerate config file of the launch (recipes/accelerate_configs/...): "
                                "its num_processes, DeepSpeed ZeRO stage and offload, or FSDP sharding."})
    zero_stage: int | None = field(
        default=None, metadata={"help": "DeepSpeed ZeRO stage (0-3), overriding the config file's.",
                                "choices": [0, 1, 2, 3]})
    model_config: str | None = field(
        default=None, metadata={"help": "A config.json (or a folder holding one) of the model, when "
                                "model_name_or_path is neither a local folder nor in recipes/model_shapes.yaml."})
    prompt_tokens: int = field(
        default=512, metadata={"help": "Tokens of a prompt, for the KV cache, activations and judge requests."})
    step_seconds: float | None = field(
        default=None, metadata={"help": "An assumed wall time of one optimizer step, in seconds: the judge's "
                                "requests per hour and cost per hour come from it."})
    judge_price_input: float | None = field(
        default=None, metadata={"help": "The judge's price per million input tokens, in your currency (nothing is "
                                "assumed: the judge's cost is printed only when you give it)."})
    judge_price_output: float | None = field(
        default=None, metadata={"help": "The judge's price per million output tokens."})


PLAN_USAGE = ("usage: hir-trl plan --config recipe.yaml [--gpu_memory_gb G] [--num_processes N] [--config_file "
              "accelerate.yaml | --accelerate_config NAME|FILE] [--zero_stage S] [any hir-trl train flag or launcher "
              "option ...]\n"
              "       hir-trl plan [--gpu_memory_gb G] -- <the launch command: accelerate launch ... -m hir_trl.cli "
              "train ..., torchrun ..., hir-trl train ...>")


def launch_command_args(command: str | Sequence[str]) -> tuple[dict[str, Any], list[str]] | None:
    """The launch shape and the ``train`` arguments of a launch command (``accelerate launch [opts] -m hir_trl.cli
    train ...``, ``torchrun [opts] -m hir_trl.cli train ...``, ``hir-trl train ...``, ``python -m hir_trl.cli
    train ...``; leading ``VAR=value`` words and backslash line continuations are skipped), or None for a command
    that trains nothing (``trl vllm-serve ...``).

    Returns:
        ``({"num_processes", "num_machines", "config_file", "zero_stage", "cpu"} given on the launcher, train
        argv)``.

    Raises:
        ValueError: a launcher hir-trl does not know, or no ``train`` command.
    """
    import argparse

    words = shlex.split(command.replace("\\\n", " ")) if isinstance(command, str) else list(command)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    if not words:
        raise ValueError("the launch command after -- is empty")
    launcher = Path(words[0]).name
    if "train" not in words:
        if launcher == "trl" or (len(words) > 1 and words[1] == "vllm-serve"):
            return None
        raise ValueError(f"no train command in {' '.join(words)!r}")
    head, train_argv = words[:words.index("train")], words[words.index("train") + 1:]
    options = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    shape: dict[str, Any] = {}
    if launcher == "accelerate":
        for name in ("--config_file", "--num_processes", "--num_machines", "--zero_stage"):
            options.add_argument(name)
        for name in ("--cpu", "--use_cpu"):
            options.add_argument(name, action="store_true")
        known, _ = options.parse_known_args(head[2:])
        shape = {key: value for key, value in vars(known).items() if value not in (None, False)}
        if shape.pop("use_cpu", False):
            shape["cpu"] = True
    elif launcher == "torchrun":
        options.add_argument("--nproc_per_node", "--nproc-per-node", default="1")
        options.add_argument("--nnodes", default="1")
        known, _ = options.parse_known_args(head[1:])
        shape = {"num_processes": int(known.nproc_per_node) * int(str(known.nnodes).split(":")[-1])}
    elif launcher not in ("hir-trl", "python", "python3") and not launcher.startswith("python"):
        raise ValueError(f"unknown launcher {launcher!r}: give an accelerate launch, torchrun or hir-trl train "
                         "command")
    for key in ("num_processes", "num_machines", "zero_stage"):
        if key in shape:
            shape[key] = int(shape[key])
    return shape, train_argv


def sharding_from_files(config_file: str | None, deepspeed: Any,
                        mixed_precision: bool = False) -> tuple[Sharding, dict[str, Any]]:
    """The sharding of an accelerate config file (``distributed_type`` DEEPSPEED with ``zero_stage`` and offload,
    or a ``deepspeed_config_file``; FSDP with its sharding strategy or FSDP2's ``fsdp_reshard_after_forward``) or of
    TrainingArguments' ``deepspeed`` (a JSON file or dict), and the accelerate file's parsed YAML. FSDP2 under mixed
    precision (``mixed_precision``: the recipe's bf16 / fp16, or the file's ``mixed_precision``) upcasts the trainable
    weights to fp32 (accelerate's ``fsdp2_prepare_model``).

    Raises:
        OSError, ValueError: a file that cannot be read or parsed (named).
    """
    from .recipes import load_recipe

    accelerate: dict[str, Any] = {}
    if config_file:
        accelerate = load_recipe(config_file) or {}
        if not isinstance(accelerate, dict):
            raise ValueError(f"{config_file} is no accelerate config (a YAML mapping)")
    kind = str(accelerate.get("distributed_type", "NO")).upper()
    if kind == "DEEPSPEED" or deepspeed:
        ds = accelerate.get("deepspeed_config") or {}
        source = deepspeed or ds.get("deepspeed_config_file")
        if source:
            data = source if isinstance(source, dict) else json.loads(Path(str(source)).read_text(encoding="utf-8"))
            zero = data.get("zero_optimization", {})
            device = lambda key: (zero.get(key) or {}).get("device", "none")  # noqa: E731
            return Sharding("deepspeed", int(zero.get("stage", 0)), device("offload_optimizer") == "cpu",
                            device("offload_param") == "cpu"), accelerate
        return Sharding("deepspeed", int(ds.get("zero_stage", 0)), ds.get("offload_optimizer_device") == "cpu",
                        ds.get("offload_param_device") == "cpu"), accelerate
    if kind == "FSDP":
        fsdp = accelerate.get("fsdp_config") or {}
        strategy = str(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        if str(fsdp.get("fsdp_version", 1)) == "2":
            strategy = "FULL_SHARD" if fsdp.get("fsdp_reshard_after_forward", True) else "SHARD_GRAD_OP"
        stage = {"FULL_SHARD": 3, "HYBRID_SHARD": 3, "SHARD_GRAD_OP": 2, "_HYBRID_SHARD_ZERO2": 2}.get(strategy, 0)
        offload = bool(fsdp.get("fsdp_offload_params", False))
        half = mixed_precision or str(accelerate.get("mixed_precision", "no")).lower() in ("bf16", "fp16")
        upcast = str(fsdp.get("fsdp_version", 1)) == "2" and half
        return Sharding("fsdp", stage, offload, offload and stage == 3, upcast), accelerate
    return Sharding(), accelerate


def model_shape(model_name_or_path: str, build_model: str | None = None, model_config: str | None = None) -> ModelShape:
    """The model's shape, without loading weights: ``model_config`` (a config.json or its folder), else the local
    folder's config.json, else the published shapes shipped with the recipes (``recipes/model_shapes.yaml``), else
    the model ``build_model`` builds (``tiny``: `hir_trl.models.tiny.build_tiny_model`'s defaults; ``smollm2``).

    Raises:
        ValueError: none of them gives a config (naming the model and ``--model_config``).
    """
    import yaml

    from .recipes import recipes_root

    for candidate in (model_config, model_name_or_path):
        if not candidate:
            continue
        path = Path(candidate).expanduser()
        path = path / "config.json" if path.is_dir() else path
        if path.is_file() and path.suffix == ".json":
            return ModelShape.from_config(json.loads(path.read_text(encoding="utf-8")), name=str(path))
        if candidate is model_config:
            raise ValueError(f"model_config {model_config}: no config.json there")
    table = yaml.safe_load((recipes_root() / "model_shapes.yaml").read_text(encoding="utf-8"))
    if model_name_or_path in table:
        return ModelShape.from_config(table[model_name_or_path], name=model_name_or_path)
    if build_model == "smollm2":
        return ModelShape.from_config(table["HuggingFaceTB/SmolLM2-135M-Instruct"], name="SmolLM2-135M-Instruct")
    if build_model == "tiny":
        import inspect

        from ..models.tiny import build_tiny_model

        defaults = {n: p.default for n, p in inspect.signature(build_tiny_model).parameters.items()
                    if p.default is not inspect.Parameter.empty}
        config = {key: defaults[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                  "num_attention_heads", "num_key_value_heads", "intermediate_size",
                                                  "max_position_embeddings")}
        config.update(model_type=defaults["architecture"], tie_word_embeddings=True, torch_dtype="float32")
        return ModelShape.from_config(config, name="tiny (build_model: tiny, vocabulary at most 2048)")
    raise ValueError(f"model_name_or_path {model_name_or_path}: no local config.json and not one of the published "
                     f"shapes in recipes/model_shapes.yaml ({', '.join(table)}); pass --model_config "
                     "path/to/config.json")


def _requested(argv: Sequence[str], recipe: Mapping[str, Any], name: str) -> Any:
    """The value of ``name`` as the command line (last wins) or else the recipe gives it, or None."""
    value = None
    for i, word in enumerate(argv):
        if word in (f"--{name}", f"--{name.replace('_', '-')}") and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(f"--{name}="):
            value = word.split("=", 1)[1]
    if value is not None:
        return value
    return recipe.get(name)


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes")


def data_counts(script_args: Any) -> tuple[dict[str, int] | None, str | None]:
    """``{"rows", "constraints", "soft"}`` of the training split when ``dataset_name`` is a local file or folder
    (read as ``hir-trl train`` reads it), else None and why (a Hub id is not fetched: plan reads nothing from the
    network)."""
    from ..data.loading import _looks_local, load_rows

    source = str(script_args.dataset_name or "")
    if not source:
        return None, "no dataset_name"
    if not Path(source).expanduser().exists():
        if _looks_local(source):
            raise FileNotFoundError(f"dataset_name {source}: no such file or folder")
        return None, f"{source} is a Hub id: plan reads nothing from the network; pass --dataset_name PATH (a local copy)"
    rows = load_rows(source, split=script_args.dataset_train_split, name=script_args.dataset_config,
                     on_unverifiable=script_args.dataset_on_unverifiable)
    if script_args.dataset_max_rows:
        rows = rows[:script_args.dataset_max_rows]
    constraints = [row["constraints"] for row in rows]
    return {"rows": len(rows), "constraints": sum(len(c) for c in constraints),
            "soft": sum(1 for cs in constraints for c in cs if c.get("kind") == "soft")}, None


def _gib(value: float) -> str:
    return f"{value / GIB:,.1f} GiB" if value >= GIB / 10 or value == 0 else f"{value / 2**20:,.1f} MiB"


def _count(value: float) -> str:
    return f"{value / 1e9:.2f}B" if value >= 1e9 else f"{value / 1e6:.1f}M"


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "unknown"
    return f"{value:,.{digits}f}" if digits or value != int(value) else f"{int(value):,}"


def make_plan(plan_args: PlanArguments, train_argv: Sequence[str], parse_train_args) -> tuple[str, bool | None]:
    """The plan of a launch as text, and the verdict (True: fits; False: does not; None: no ``gpu_memory_gb``).

    ``train_argv`` is parsed by ``parse_train_args``, ``hir-trl train``'s own parser
    (`hir_trl.cli.train.parse_train_args`: the recipe's keys and flags); ``bf16`` / ``fp16`` are read as requested and parsed off, so that a GPU
    recipe plans on a machine without one.

    Raises:
        ValueError, OSError: a bad recipe, flag or file, a `PlanArguments` number out of range (one line).
    """
    from ..judge.prompt import JUDGE_PROMPT_TEMPLATE
    from .recipes import load_recipe

    problem = plan_args_problem(plan_args)
    if problem is not None:
        raise ValueError(problem)
    train_argv = list(train_argv)
    recipe: Mapping[str, Any] = {}
    if "--config" in train_argv and train_argv.index("--config") + 1 < len(train_argv):
        recipe = load_recipe(train_argv[train_argv.index("--config") + 1]) or {}
    half = _truthy(_requested(train_argv, recipe, "bf16")) or _truthy(_requested(train_argv, recipe, "fp16"))
    script_args, args, model_args = parse_train_args([*train_argv, "--bf16", "false", "--fp16", "false"])
    sharding, accelerate = sharding_from_files(plan_args.config_file, args.deepspeed, mixed_precision=half)
    if plan_args.zero_stage is not None:
        sharding = dataclasses.replace(sharding, kind="deepspeed", stage=plan_args.zero_stage)
    processes = int(plan_args.num_processes if plan_args.num_processes is not None else
                    accelerate.get("num_processes") or 1)
    if processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {processes}")
    cpu = bool(accelerate.get("use_cpu")) or bool(args.use_cpu)
    per_device, ga = args.per_device_train_batch_size, args.gradient_accumulation_steps
    if _requested(train_argv, recipe, "generation_batch_size") is not None:
        gbs = int(_requested(train_argv, recipe, "generation_batch_size"))
        if gbs % (per_device * processes):
            raise ValueError(f"generation_batch_size ({gbs}) must be divisible by per_device_train_batch_size x "
                             f"processes ({per_device * processes})")
        spg = gbs // (per_device * processes)
    else:
        spg = args.steps_per_generation or ga
    counts, data_note = data_counts(script_args)
    if args.soft_constraints == "skip" and counts:
        counts = {**counts, "constraints": counts["constraints"] - counts["soft"], "soft": 0}
    resample = args.replay_shortfall == "resample" and args.num_replays > 0
    batch = batch_plan(per_device_train_batch_size=per_device, gradient_accumulation_steps=ga,
                       steps_per_generation=spg, num_generations=args.num_generations, num_replays=args.num_replays,
                       processes=processes, max_completion_length=args.max_completion_length, resample=resample,
                       num_iterations=args.num_iterations, dataset_rows=counts["rows"] if counts else None)
    shape = model_shape(model_args.model_name_or_path, script_args.build_model, plan_args.model_config)
    dtype = model_args.dtype if model_args.dtype not in (None, "auto") else shape.dtype
    weight_bytes = DTYPE_BYTES.get(str(dtype).replace("torch.", ""), 4)
    act_bytes = 2 if half else weight_bytes
    prompt_tokens = getattr(args, "max_prompt_length", None) or plan_args.prompt_tokens
    seq_tokens = prompt_tokens + args.max_completion_length
    generation = (args.vllm_mode if args.use_vllm else "generate")
    peft = bool(model_args.use_peft)
    quant = 4 if model_args.load_in_4bit else 8 if model_args.load_in_8bit else None
    memory = memory_plan(
        shape, processes=processes, sharding=sharding, weight_bytes=weight_bytes, act_bytes=act_bytes,
        rows_per_micro_batch=batch.rows_per_micro_batch, sequence_tokens=seq_tokens,
        sequences_per_call=batch.sequences_per_call_per_rank, generation=generation,
        gradient_checkpointing=bool(args.gradient_checkpointing), reference_model=args.beta > 0 and not peft,
        lora_r=model_args.lora_r if peft else None, lora_target_modules=model_args.lora_target_modules,
        quant_bits=quant if peft else None, nested_quant=bool(model_args.use_bnb_nested_quant),
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=args.vllm_tensor_parallel_size, vllm_max_model_length=args.vllm_max_model_length,
        gpu_gib=None if cpu else plan_args.gpu_memory_gb, lora_dropout=float(model_args.lora_dropout or 0.0))
    judging = bool(args.judge_model) and args.soft_constraints != "skip"
    judge = judge_plan(
        sampled_per_step=batch.sampled_per_step, replay_slots_per_step=batch.replay_slots_per_step,
        resample=resample, rejudge=bool(args.rejudge_replays), soft_constraints=counts["soft"] if counts else None,
        constraints=counts["constraints"] if counts else None, rows=counts["rows"] if counts else None,
        judge_max_concurrency=args.judge_max_concurrency, processes=processes,
        template_chars=len(JUDGE_PROMPT_TEMPLATE.format(input_text="", generated_text="", criteria_item="")),
        prompt_tokens=prompt_tokens, max_completion_length=args.max_completion_length,
        output_tokens=1 if args.judge_logprobs else args.judge_max_tokens, step_seconds=plan_args.step_seconds,
        price_input=plan_args.judge_price_input, price_output=plan_args.judge_price_output)
    total_steps = args.max_steps if args.max_steps > 0 else (
        math.ceil(batch.steps_per_epoch * args.num_train_epochs) if batch.steps_per_epoch is not None else None)
    saves = None
    strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
    if strategy == "no":
        saves = 0
    elif strategy == "epoch":
        saves = math.ceil(args.num_train_epochs)
    elif total_steps is not None:
        every = args.save_steps if args.save_steps >= 1 else math.ceil(total_steps * args.save_steps)
        saves = int(total_steps // max(1, every))
    lora_params = shape.lora_parameters(model_args.lora_r, model_args.lora_target_modules) if peft else None
    disk = disk_plan(parameters=shape.parameters(), weight_bytes=weight_bytes, sharding=sharding,
                     lora_parameters=lora_params, save_only_model=bool(args.save_only_model),
                     save_total_limit=args.save_total_limit, saves=saves,
                     tied_parameters=shape.vocab * shape.hidden if shape.tied else 0)

    out = []
    say = out.append
    say(f"hir-trl plan: {shape.name}, {_count(shape.parameters())} parameters ({shape.layers} layers, hidden "
        f"{shape.hidden}, {shape.heads} heads / {shape.kv_heads} KV heads x {shape.head_dim}, vocabulary "
        f"{shape.vocab}), weights {dtype} ({weight_bytes:g} B){', LoRA r=' + str(model_args.lora_r) if peft else ''}"
        f"{f', base in {quant} bits' if peft and quant else ''}")
    say(f"launch: {processes} process(es){' on CPU' if cpu else ''}, {sharding.describe()}, generation: "
        f"{'vLLM ' + generation if args.use_vllm else 'transformers generate'}")
    say("")
    say("batch (all ranks)                      per generation call   per optimizer step")
    rows = [("prompts (groups)", batch.prompts_per_generation, batch.prompts_per_step),
            ("sampled rows (m per prompt)", batch.sampled_per_generation, batch.sampled_per_step),
            ("replay slots (k per prompt)", batch.replay_slots_per_generation, batch.replay_slots_per_step),
            ("trained rows", batch.trained_rows_per_generation, batch.trained_rows_per_step)]
    for name, per_call, per_step in rows:
        say(f"  {name:<37}{_num(per_call):>20}{_num(per_step):>21}")
    say(f"  generation calls per optimizer step: {_num(batch.generations_per_step, 2)}; sequences per call per rank: "
        f"{batch.sequences_per_call_per_rank}; rows per micro-batch per rank: {batch.rows_per_micro_batch}")
    say(f"  generated tokens per optimizer step at the cap ({args.max_completion_length}): "
        f"{_num(batch.generated_tokens_per_step)}{' (supplementary samples included, at most)' if resample else ''}")
    epochs = (f"{_num(batch.steps_per_epoch)} ({counts['rows']:,} rows); " if counts else
              f"unknown ({data_note}); ")
    say(f"  optimizer steps per epoch: {epochs}"
        f"run: {_num(total_steps)} steps{' (max_steps)' if args.max_steps > 0 else ''}")
    say("")
    gpu = f" of {plan_args.gpu_memory_gb:g} GiB" if plan_args.gpu_memory_gb and not cpu else ""
    say(f"memory per GPU{gpu} (prompt {prompt_tokens} + completion {args.max_completion_length} = {seq_tokens} tokens "
        "per row)")
    for term in memory.terms:
        say(f"  {term.phase:<11}{_gib(term.bytes):>12}  {term.name}")
    peaks = ", ".join(f"{phase} {_gib(value)}" for phase, value in memory.peaks.items())
    say(f"  peak: {peaks}; budget {_gib(memory.budget) if memory.gpu_bytes else 'unknown'} "
        f"({USABLE_FRACTION:.0%} of the GPU{' less the vLLM share' if generation == 'colocate' else ''})")
    if memory.cpu_bytes:
        say(f"  offloaded to CPU memory: {_gib(memory.cpu_bytes)} over all ranks' shards of this GPU's share x "
            f"{processes}: {_gib(memory.cpu_bytes * processes)} in all")
    if memory.vllm_sequences is not None:
        say(f"  vLLM's KV cache holds {memory.vllm_sequences} sequences of {seq_tokens} tokens; a call has "
            f"{batch.sequences_per_call_per_rank * max(1, args.vllm_tensor_parallel_size)} per engine")
    for note in memory.notes:
        say(f"  note: {note}")
    say("")
    if judging:
        share = (f"{judge.soft_share:.0%} of the constraints are soft, {judge.soft_per_row:.2f} per row"
                 if judge.soft_per_row is not None else f"soft-constraint share unknown ({data_note})")
        say(f"judge ({args.judge_model}): {share}")
        say(f"  requests per optimizer step (one per completion and soft constraint, before the cache): "
            f"{_num(judge.requests_per_step)} for the sampled rows"
            f"{', at most ' + _num(judge.requests_per_step_max) + ' with supplementary samples / re-judged replays' if (resample or args.rejudge_replays) and judge.requests_per_step is not None else ''}")
        say(f"  concurrency: judge_max_concurrency {args.judge_max_concurrency} x {processes} rank(s) = "
            f"{judge.concurrency} requests in flight at most")
        say(f"  tokens per request: about {judge.input_tokens:,} in (the prompt template, the instruction and a "
            f"completion at the cap), at most {judge.output_tokens} out")
        if plan_args.step_seconds:
            say(f"  at {plan_args.step_seconds:g} s per step: {_num(judge.requests_per_hour)} requests per hour, at "
                "most")
        if judge.cost_per_step is not None:
            hour = f", {judge.cost_per_hour:,.2f} per hour" if judge.cost_per_hour is not None else ""
            say(f"  cost at your prices: {judge.cost_per_step:,.2f} per step{hour}, at most (before the cache)")
    else:
        say("judge: none (no judge_model, or soft_constraints: skip)")
    say(step_cost_line(batch.sequences_per_call_per_rank, args.max_completion_length, counts,
                       args.judge_max_concurrency, judging))
    say("")
    kept = (f"x {disk['kept']} kept = {_gib(disk['total'])}" if disk["kept"] is not None
            else "x every save (save_total_limit unset and the number of saves unknown: unbounded)")
    limit = f"save_total_limit {args.save_total_limit}" if args.save_total_limit else "no save_total_limit"
    say(f"disk: {_gib(disk['per_checkpoint'])} per checkpoint {kept} ({limit}), plus the final model")
    say("")
    if cpu:
        verdict = "verdict: a CPU launch: no GPU memory to check"
    elif memory.fits is None:
        verdict = "verdict: none (give --gpu_memory_gb)"
    elif memory.fits:
        verdict = (f"verdict: fits on one GPU of {plan_args.gpu_memory_gb:g} GiB (peak {_gib(max(memory.peaks.values()))} "
                   f"of {_gib(memory.budget)})")
    else:
        breaking = memory.breaking
        verdict = (f"verdict: does not fit on one GPU of {plan_args.gpu_memory_gb:g} GiB (peak "
                   f"{_gib(max(memory.peaks.values()))} of {_gib(memory.budget)}): the largest term is "
                   f"{breaking.name} at {_gib(breaking.bytes)}; fix: {breaking.fix}")
        refusal = next((n for n in memory.notes if "refuses to start" in n), None)
        if refusal:
            verdict = f"verdict: does not fit on one GPU of {plan_args.gpu_memory_gb:g} GiB: {refusal}"
    say(verdict)
    return "\n".join(out) + "\n", memory.fits


#: ``(field, allowed, why)`` of the `PlanArguments` numbers: a value outside ``allowed`` (NaN and inf included) is
#: refused, naming the flag (`plan_args_problem`).
_PLAN_RANGES: tuple[tuple[str, Any, str], ...] = (
    ("gpu_memory_gb", lambda v: v > 0, "a number > 0 (GiB of one GPU, e.g. 80)"),
    ("num_processes", lambda v: v >= 1, "an integer >= 1 (processes, GPUs in all)"),
    ("prompt_tokens", lambda v: v >= 1, "an integer >= 1 (tokens of a prompt)"),
    ("step_seconds", lambda v: v > 0, "a number > 0 (seconds of one optimizer step)"),
    ("judge_price_input", lambda v: v >= 0, "a number >= 0 (price per million input tokens)"),
    ("judge_price_output", lambda v: v >= 0, "a number >= 0 (price per million output tokens)"),
)


def plan_args_problem(plan_args: PlanArguments) -> str | None:
    """The first `PlanArguments` number out of its range (`_PLAN_RANGES`: memory <= 0, 0 processes, a negative
    price, NaN or inf anywhere), as one line naming the flag; None when all are in range (or unset)."""
    for name, allowed, why in _PLAN_RANGES:
        value = getattr(plan_args, name)
        if value is None:
            continue
        try:
            ok = math.isfinite(value) and bool(allowed(value))
        except TypeError:
            ok = False
        if not ok:
            return f"--{name} must be {why}, got {value!r}"
    return None


def parse_plan_args(argv: Sequence[str]) -> tuple[PlanArguments, list[str]]:
    """Split ``hir-trl plan``'s arguments into `PlanArguments` and the ``train`` arguments; a launch command after
    ``--`` (`launch_command_args`) gives the launch shape the plan flags leave unset.

    Raises:
        ValueError: a bad plan flag, a number out of its range (`plan_args_problem`), or a launch command that trains
            nothing.
    """
    from transformers import HfArgumentParser

    argv = list(argv)
    launch: list[str] | None = None
    if "--" in argv:
        argv, launch = argv[:argv.index("--")], argv[argv.index("--") + 1:]

    class PlanParser(HfArgumentParser):
        def error(self, message):
            raise ValueError(f"{message} (hir-trl plan --help lists the options)")

    from .launch import split_launch_args, train_options

    parser = PlanParser(PlanArguments, prog="hir-trl plan", allow_abbrev=False)
    trains = train_options()
    # hir-trl train's launcher options (--accelerate_config NAME|FILE, --num_processes, accelerate launch's others)
    launch_args, argv = split_launch_args(argv, trains | set(parser._option_string_actions))
    plan_args, rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    shapes = [launch_shape(launch_args)]
    if launch is not None:
        parsed = launch_command_args(launch)
        if parsed is None:
            raise ValueError(f"{' '.join(launch)} trains nothing (a vLLM server?): plan the training command")
        shape, train_argv = parsed
        launched_args, train_argv = split_launch_args(train_argv, trains)  # hir-trl train --num_processes N ...
        shapes += [shape, launch_shape(launched_args)]
        rest = [*rest, *train_argv]
    for shape in shapes:  # the plan's own flags first, then the launcher's
        for key in ("num_processes", "config_file", "zero_stage"):
            if getattr(plan_args, key) is None and key in shape:
                setattr(plan_args, key, shape[key])
    problem = plan_args_problem(plan_args)
    if problem is not None:
        raise ValueError(problem)
    return plan_args, rest


def launch_shape(launch_args: Sequence[str]) -> dict[str, Any]:
    """The launch shape (`launch_command_args`) of ``accelerate launch``'s options, as `split_launch_args` gives
    them ({} for none)."""
    if not launch_args:
        return {}
    return launch_command_args(["accelerate", "launch", *launch_args, "-m", "hir_trl.cli", "train"])[0]


def main(argv: Sequence[str] | None = None, parse_train_args=None, quiet_warnings: Sequence[str] | None = None) -> int:
    """``hir-trl plan``: print the plan; exit 0 when it fits (or no verdict was asked), 1 when it does not fit, 2 on
    a user error (one line: a bad flag, recipe value or file).

    ``parse_train_args`` (default: ``hir-trl train``'s parser, `hir_trl.cli.train.parse_train_args`) and
    ``quiet_warnings`` (FutureWarning messages to hide; default: those ``hir-trl train`` hides) come from
    `hir_trl.cli.train` unless given."""
    import yaml

    from ..errors import one_line

    argv = list(sys.argv[1:] if argv is None else argv)
    if parse_train_args is None or quiet_warnings is None:
        from . import train

        parse_train_args = train.parse_train_args if parse_train_args is None else parse_train_args
        quiet_warnings = train._UNACTIONABLE_WARNINGS if quiet_warnings is None else quiet_warnings
    if argv[:1] in (["-h"], ["--help"]):
        from transformers import HfArgumentParser

        print(PLAN_USAGE + "\n")
        HfArgumentParser(PlanArguments, prog="hir-trl plan").print_help()
        print("\nThe recipe's keys and every hir-trl train flag are taken as hir-trl train takes them.")
        return 0
    import warnings

    try:
        with warnings.catch_warnings():
            for pattern in quiet_warnings:
                warnings.filterwarnings("ignore", message=pattern, category=FutureWarning)
            plan_args, train_argv = parse_plan_args(argv)
            text, fits = make_plan(plan_args, train_argv, parse_train_args)
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"hir-trl plan: error: {one_line(exc)}", file=sys.stderr)
        return 2
    print(text, end="")
    return 1 if fits is False else 0
