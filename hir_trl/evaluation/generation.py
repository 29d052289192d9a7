"""Sampling responses for ``hir-trl eval generate``: vLLM on a GPU when installed, else transformers ``generate``.

Both backends render each prompt with the model's own chat template (``add_generation_prompt=True``) and
sample with exactly the settings given — ``temperature``, ``top_p``, ``top_k`` (0: off), ``max_tokens``,
``seed`` — rather than the sampling defaults of the checkpoint's ``generation_config.json``, so the two
backends sample from the same distribution. The paper evaluates with vLLM at temperature 0.6, at most
4,096 new tokens, five samples per prompt.

A LoRA output (an adapter-only folder, as the SmolLM2 and QLoRA recipes save) is merged into its base with peft
first (`merge_lora`): vLLM then loads the merged copy, saved in a temporary folder; one line says which was done,
into which base and why (`choose_lora_base`: the exact base trained on while it is here, else the recorded one).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BACKENDS: tuple[str, ...] = ("auto", "vllm", "transformers")
#: ``dtype`` choices: the model's own (``auto``) or one torch dtype, as TRL's ``ModelConfig.dtype``.
DTYPES: tuple[str, ...] = ("auto", "bfloat16", "float16", "float32")
#: The file that marks a folder as a LoRA adapter (peft's ``save_pretrained``), and its field naming the base.
ADAPTER_CONFIG = "adapter_config.json"

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
        base_model: for a LoRA adapter folder, the base to merge it into instead of the one its
            ``adapter_config.json`` names (a local copy of a Hub base, e.g. offline); None: the recorded one.
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
    base_model: str | None = None

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
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")

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


def lora_base(model: str, base_model: str | None = None) -> str | None:
    """The base model a LoRA adapter folder is merged into (`choose_lora_base`), or None when ``model`` is no adapter
    folder (a full checkpoint or a Hub id).

    Raises:
        ValueError: see `choose_lora_base`.
    """
    chosen = choose_lora_base(model, base_model)
    return None if chosen is None else chosen[0]


def choose_lora_base(model: str, base_model: str | None = None) -> tuple[str, str] | None:
    """The base model a LoRA adapter folder is merged into, and why; None when ``model`` is no adapter folder (no
    ``adapter_config.json``, or a full checkpoint beside one).

    In this order: ``base_model`` (``--base_model_name_or_path``) when given; else the exact base the adapter was
    trained on, the folder its ``_hir_adapter_base.json`` names (`hir_trl.models.adapter_base`), while that folder
    still holds the weight files trained on (the machine it was trained on); else the base its
    ``adapter_config.json`` records (``base_model_name_or_path``; a relative folder is found from the current
    directory, else from the adapter folder): a local folder, or a Hub id (the Hub's weights, which may differ from
    a local copy trained on; offline it must be in the local Hub cache).

    Returns:
        ``(base, why)``: the folder or Hub id, and the reason in words, for the one line that says what was merged.

    Raises:
        ValueError: one line naming the file and the fix: the adapter names no base; its base is a local folder that
            does not exist; offline (``HF_HUB_OFFLINE``), its base is a Hub id not in the local cache (naming the
            base trained on and why it is not used); ``base_model`` for a ``model`` that is no adapter folder, or a
            local path that does not exist.
    """
    from ..data.loading import _looks_local

    folder = Path(model).expanduser()
    config_path = folder / ADAPTER_CONFIG
    if not config_path.is_file() or (folder / "config.json").is_file():
        if base_model is not None:
            raise ValueError(f"--base_model_name_or_path {base_model} is for a LoRA adapter folder, and {model} is none "
                             f"(no {ADAPTER_CONFIG}, or a full model): leave it out")
        return None
    if base_model is not None:
        if not Path(base_model).expanduser().is_dir() and _looks_local(base_model):
            raise ValueError(f"--base_model_name_or_path {base_model}: no such model folder")
        return base_model, "--base_model_name_or_path"
    try:
        base = json.loads(config_path.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{config_path} cannot be read as a LoRA adapter config: {exc}") from None
    if not isinstance(base, str) or not base:
        raise ValueError(f"{config_path} names no base_model_name_or_path: set it to the base model's Hub id or folder")
    from ..models.adapter_base import ADAPTER_BASE_RECORD, local_base_problem, read_adapter_base_record

    record, unread = read_adapter_base_record(folder)
    not_exact = unread if record is None and (folder / ADAPTER_BASE_RECORD).exists() else ""
    if record is not None and record.get("trained_on"):
        problem = local_base_problem(record)
        if problem is None:
            return record["trained_on"], f"the exact base it was trained on, named by its {ADAPTER_BASE_RECORD}"
        not_exact = f"the base it was trained on, {record['trained_on']}, {problem} ({ADAPTER_BASE_RECORD})"
    for candidate in (Path(base).expanduser(), folder / base):
        if candidate.is_dir():
            return str(candidate), _joined(f"the base its {ADAPTER_CONFIG} records", not_exact)
    if Path(base).is_absolute() or _looks_local(base):
        raise ValueError(_joined(f"{config_path}: its base model {base} is no folder here", not_exact)
                         + ": pass --base_model_name_or_path (the base model's folder or Hub id), or set "
                         "base_model_name_or_path in that file")
    if _hub_offline() and not _hub_cached(base):
        lead = f"{model}: {not_exact}, and" if not_exact else f"{model}:"
        raise ValueError(f"{lead} its recorded base {base} ({ADAPTER_CONFIG}) is not in the local Hub cache and "
                         f"HF_HUB_OFFLINE is set: pass --base_model_name_or_path (a local copy of {base}, or the "
                         "weights trained on)")
    return base, _joined(f"the Hub model its {ADAPTER_CONFIG} records",
                         f"{not_exact}; the Hub's weights may differ from those trained on" if not_exact else "")


def _joined(first: str, second: str) -> str:
    return f"{first}; {second}" if second else first


def _hub_offline() -> bool:
    """Whether the Hub client is offline (``HF_HUB_OFFLINE``, read when `huggingface_hub` is imported)."""
    from huggingface_hub import is_offline_mode

    return is_offline_mode()


def _hub_cached(repo_id: str) -> bool:
    """Whether the local Hub cache holds a model's ``config.json`` (what loading it offline needs first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a repo id
        return False


def merge_lora(adapter: str, dtype: str = "auto", base_model: str | None = None):
    """The base model of the LoRA adapter folder ``adapter`` (`lora_base`; ``base_model`` overrides the recorded one)
    with the adapter merged into its weights (peft's ``PeftModel.from_pretrained(base, adapter).merge_and_unload()``):
    an ordinary transformers model.

    Raises:
        ValueError: see `lora_base`.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = lora_base(adapter, base_model)
    if base is None:
        raise ValueError(f"{adapter} is no LoRA adapter folder (no {ADAPTER_CONFIG})")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    return PeftModel.from_pretrained(model, adapter).merge_and_unload()


def save_merged_lora(adapter: str, folder: str | os.PathLike, dtype: str = "auto",
                     base_model: str | None = None) -> Path:
    """`merge_lora`, saved as a full checkpoint in ``folder`` with the tokenizer (the adapter's, else the base's),
    which vLLM loads as any model.

    Returns:
        ``Path`` of ``folder``.
    """
    from transformers import AutoTokenizer

    path = Path(folder)
    merge_lora(adapter, dtype, base_model).save_pretrained(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(adapter)
    except (OSError, ValueError):
        tokenizer = AutoTokenizer.from_pretrained(lora_base(adapter, base_model))
    tokenizer.save_pretrained(path)
    return path


def generate_responses(prompts: Sequence[Messages], settings: GenerationSettings, progress: bool = True,
                       workdir: str | os.PathLike | None = None,
                       announce: Callable[[str], None] | None = None) -> tuple[list[list[str]], str]:
    """Sample ``settings.num_samples`` responses for each chat prompt.

    A LoRA adapter folder (`lora_base`) is merged into its base first (`merge_lora`): in memory for transformers;
    for vLLM saved in a temporary folder under ``workdir`` (removed afterwards), which vLLM loads. ``announce``
    receives one line saying which was done.

    Args:
        prompts: chat conversations ending with the user turn to answer.
        settings: see `GenerationSettings`.
        progress: show a progress bar.
        workdir: where the merged model of a LoRA adapter goes for vLLM (default: the system's temporary folder).
        announce: called with one line when a LoRA adapter is merged (default: printed to stderr).

    Returns:
        ``(responses, backend)``: ``responses[i]`` holds the samples of ``prompts[i]``, and the backend used.

    Raises:
        ValueError: a LoRA adapter whose base cannot be found (`lora_base`).
        ImportError: ``backend="vllm"`` without vLLM installed.
    """
    backend = choose_backend(settings.backend)
    announce = announce or (lambda line: print(line, file=sys.stderr))
    base, why = choose_lora_base(settings.model, settings.base_model) or (None, "")
    if not prompts:
        return [], backend
    if backend == "vllm":
        if base is None:
            return _generate_vllm(prompts, settings, progress, settings.model), backend
        if workdir is not None:
            Path(workdir).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=workdir, prefix=".merged-lora-") as merged:
            announce(f"{settings.model} is a LoRA adapter of {base} ({why}): merged into the base with peft in "
                     f"{merged} (removed afterwards), which vLLM loads")
            save_merged_lora(settings.model, merged, settings.dtype, settings.base_model)
            return _generate_vllm(prompts, settings, progress, merged), backend
    if base is not None:
        announce(f"{settings.model} is a LoRA adapter of {base} ({why}): merged into the base with peft in memory "
                 "(transformers)")
    return _generate_transformers(prompts, settings, progress, base), backend


def _generate_vllm(prompts: Sequence[Messages], settings: GenerationSettings, progress: bool,
                   model: str) -> list[list[str]]:
    from vllm import LLM, SamplingParams

    engine_kwargs: dict[str, Any] = {"model": model, "seed": settings.seed, "dtype": settings.dtype,
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
                           progress: bool, lora_of: str | None = None) -> list[list[str]]:
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(settings.model)
    except (OSError, ValueError) as exc:
        if lora_of is None and not Path(settings.model).expanduser().exists():  # a Hub id, or a folder mistyped
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise OSError(f"--model_name_or_path {settings.model}: no such local folder "
                          f"({Path(settings.model).absolute()}), and loading it as a Hub model failed ({reason})"
                          ) from exc
        if lora_of is None:
            raise
        tokenizer = AutoTokenizer.from_pretrained(lora_of)  # an adapter saved without its tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"the tokenizer of {settings.model} has no chat template; the evaluation uses the model's "
                         "own chat template (add one to tokenizer_config.json or chat_template.jinja)")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = (merge_lora(settings.model, settings.dtype, settings.base_model) if lora_of is not None
             else AutoModelForCausalLM.from_pretrained(settings.model, dtype=settings.dtype)).to(device).eval()

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


__all__ = ["BACKENDS", "DTYPES", "GenerationSettings", "choose_backend", "choose_lora_base", "generate_responses",
           "lora_base", "merge_lora", "save_merged_lora", "vllm_available"]
