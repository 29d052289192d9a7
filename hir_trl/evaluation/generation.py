"""Sampling responses for ``hir-trl eval generate``: vLLM on a GPU when installed, else transformers ``generate``.

Both backends render each prompt with the model's own chat template (``add_generation_prompt=True``) and
sample with exactly the settings given — ``temperature``, ``top_p``, ``top_k`` (0: off), ``max_tokens``,
``seed`` — rather than the sampling defaults of the checkpoint's ``generation_config.json``, so the two
backends sample from the same distribution. The paper evaluates with vLLM at temperature 0.6, at most
4,096 new tokens, five samples per prompt.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

BACKENDS: tuple[str, ...] = ("auto", "vllm", "transformers")

Messages = list[dict[str, Any]]


@dataclass
class GenerationSettings:
    """How responses are sampled.

    Attributes:
        model: a local checkpoint directory or a Hub model id.
        num_samples: responses per prompt.
        temperature: sampling temperature; 0 means greedy decoding.
        top_p: nucleus sampling mass (1.0: off).
        top_k: top-k sampling (0: off).
        max_tokens: most new tokens per response.
        seed: random seed of the sampling.
        batch_size: sequences per ``generate`` call (transformers backend).
        backend: ``"auto"`` (vLLM when it is installed and a GPU is present, else transformers), ``"vllm"``
            or ``"transformers"``.
        dtype: model dtype (``"auto"``, ``"bfloat16"``, ``"float32"``...).
        tensor_parallel_size: GPUs per model (vLLM).
        gpu_memory_utilization: fraction of GPU memory vLLM may use.
        max_model_len: vLLM's context length; None: the model's.
    """

    model: str
    num_samples: int = 1
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 4096
    seed: int = 0
    batch_size: int = 16
    backend: str = "auto"
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def vllm_available() -> bool:
    """True when vLLM is importable and torch sees a GPU."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def choose_backend(requested: str = "auto") -> str:
    """The backend to use: ``requested``, or for ``"auto"`` vLLM when `vllm_available`, else transformers."""
    if requested == "auto":
        return "vllm" if vllm_available() else "transformers"
    if requested == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ImportError("backend 'vllm' needs vLLM: pip install 'hir-trl[vllm]'")
    return requested


def generate_responses(prompts: Sequence[Messages], settings: GenerationSettings,
                       progress: bool = True) -> tuple[list[list[str]], str]:
    """Sample ``settings.num_samples`` responses for each chat prompt.

    Args:
        prompts: chat conversations ending with the user turn to answer.
        settings: see `GenerationSettings`.
        progress: show a progress bar.

    Returns:
        ``(responses, backend)``: ``responses[i]`` holds the samples of ``prompts[i]``, and the backend used.
    """
    backend = choose_backend(settings.backend)
    if not prompts:
        return [], backend
    if backend == "vllm":
        return _generate_vllm(prompts, settings, progress), backend
    return _generate_transformers(prompts, settings, progress), backend


def _generate_vllm(prompts: Sequence[Messages], settings: GenerationSettings, progress: bool) -> list[list[str]]:
    from vllm import LLM, SamplingParams

    engine_kwargs: dict[str, Any] = {"model": settings.model, "seed": settings.seed, "dtype": settings.dtype,
                                     "tensor_parallel_size": settings.tensor_parallel_size,
                                     "gpu_memory_utilization": settings.gpu_memory_utilization}
    if settings.max_model_len is not None:
        engine_kwargs["max_model_len"] = settings.max_model_len
    llm = LLM(**engine_kwargs)
    sampling: dict[str, Any] = {"n": settings.num_samples, "temperature": settings.temperature,
                                "top_p": settings.top_p, "max_tokens": settings.max_tokens, "seed": settings.seed}
    if settings.top_k > 0:
        sampling["top_k"] = settings.top_k
    outputs = llm.chat([list(p) for p in prompts], SamplingParams(**sampling), use_tqdm=progress)
    return [[completion.text for completion in output.outputs] for output in outputs]


def _generate_transformers(prompts: Sequence[Messages], settings: GenerationSettings,
                           progress: bool) -> list[list[str]]:
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(settings.model)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"the tokenizer of {settings.model} has no chat template; the evaluation uses the model's "
                         "own chat template (add one to tokenizer_config.json or chat_template.jinja)")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(settings.model, dtype=settings.dtype).to(device).eval()

    texts = [tokenizer.apply_chat_template(list(p), add_generation_prompt=True, tokenize=False) for p in prompts]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])  # similar lengths together: less padding
    sample = settings.temperature > 0
    # Greedy decoding gives one answer per prompt (generate refuses several greedy sequences): it is repeated.
    sequences = settings.num_samples if sample else 1
    per_call = max(1, settings.batch_size // sequences)
    gen_kwargs: dict[str, Any] = {"max_new_tokens": settings.max_tokens, "do_sample": sample,
                                  "num_return_sequences": sequences, "pad_token_id": tokenizer.pad_token_id}
    if sample:
        gen_kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k)
    else:
        gen_kwargs.update(temperature=None, top_p=None, top_k=None)

    results: list[list[str]] = [[] for _ in prompts]
    devices = [torch.cuda.current_device()] if device.type == "cuda" else []
    bar = tqdm(total=len(prompts) * settings.num_samples, desc="Generating", unit="response", disable=not progress,
               file=sys.stderr)
    with torch.random.fork_rng(devices=devices), torch.inference_mode():
        torch.manual_seed(settings.seed)
        for start in range(0, len(order), per_call):
            batch = order[start:start + per_call]
            inputs = tokenizer([texts[i] for i in batch], add_special_tokens=False, padding=True,
                               return_tensors="pt").to(device)
            output = model.generate(**inputs, **gen_kwargs)
            new_tokens = output[:, inputs["input_ids"].shape[1]:]
            decoded = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            for k, i in enumerate(batch):
                results[i] = decoded[k * sequences:(k + 1) * sequences] * (settings.num_samples // sequences)
            bar.update(len(batch) * settings.num_samples)
    bar.close()
    return results


__all__ = ["BACKENDS", "GenerationSettings", "choose_backend", "generate_responses", "vllm_available"]
