"""A tiny, randomly initialised chat model built locally, for tests and the default CPU recipe.

No model weights can be downloaded in an offline setting, so the CPU recipe and the test suite train
a small byte-level BPE tokenizer on the training texts (prompts and constraint texts) and pair it with
a random-init ``Qwen2ForCausalLM`` (or ``LlamaForCausalLM``). The result is an ordinary Hugging Face
checkpoint directory (``config.json``, ``generation_config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``) that
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` and TRL's
``GRPOTrainer`` load like any hub model.

The tokenizer uses Qwen's ChatML conventions: special tokens ``<|endoftext|>`` (padding),
``<|im_start|>`` and ``<|im_end|>`` (end of turn, the EOS token), no BOS token, and a ChatML chat
template with ``add_generation_prompt`` support.

- `build_tiny_model` always builds (and overwrites files in) the output directory.
- `ensure_tiny_model` builds only when the directory has no ``config.json``; it is safe to call from
  several processes at once (e.g. torchrun ranks): a file lock serialises the builders and the
  files are written to a temporary directory and moved in with ``config.json`` last.

Both are deterministic: the same texts, sizes and seed give byte-identical tokenizer files and
identical weights.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .workarounds import saved_by_this_process

#: ChatML special tokens, in id order (ids 0, 1, 2 of the trained vocabulary).
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)

#: Supported ``architecture`` values.
ARCHITECTURES: tuple[str, ...] = ("qwen2", "llama")

#: Qwen-style ChatML template (no default system prompt, no tool support). A message's ``content``
#: may be a string or a list of ``{"type": "text", "text": ...}`` parts; any role name is rendered
#: verbatim (``system``, ``user``, ``assistant`` in practice).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- elif message['content'] is not none -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# Qwen2's pre-tokenisation regex (transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX).
_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# The byte-level alphabet (256 symbols) plus the special tokens: the smallest usable vocabulary.
_MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)


def _collect_texts(texts: Iterable[str]) -> list[str]:
    """Materialise ``texts`` into a list, checking types and that something is left to train on."""
    if isinstance(texts, str):
        raise TypeError("texts must be an iterable of strings, not a single string")
    collected = list(texts)
    for index, text in enumerate(collected):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is {type(text).__name__}, expected str")
    if not any(text for text in collected):
        raise ValueError("texts is empty: the tokenizer needs at least one non-empty training text")
    return collected


def _check_vocab_size(vocab_size: int) -> None:
    if vocab_size < _MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be at least {_MIN_VOCAB_SIZE} (256 bytes + special tokens), got {vocab_size}"
        )


def _check_sizes(
    architecture: str,
    vocab_size: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
) -> None:
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {architecture!r}; expected one of {', '.join(ARCHITECTURES)}")
    _check_vocab_size(vocab_size)
    if hidden_size % num_attention_heads:
        raise ValueError(
            f"hidden_size ({hidden_size}) must be divisible by num_attention_heads ({num_attention_heads})"
        )
    if num_attention_heads % num_key_value_heads:
        raise ValueError(
            f"num_attention_heads ({num_attention_heads}) must be divisible by "
            f"num_key_value_heads ({num_key_value_heads})"
        )


def build_tokenizer(texts: Iterable[str], vocab_size: int = 2048) -> Any:
    """Train a byte-level BPE tokenizer with ChatML special tokens and chat template.

    Args:
        texts: Training texts (prompts, constraint texts). Every byte is in the base alphabet, so
            any text, seen or not, encodes without unknown tokens and decodes back to its NFC
            normal form (unchanged for ASCII and already-NFC text).
        vocab_size: Target vocabulary size including the 256 byte symbols and the 3 special tokens.
            The trained vocabulary can be smaller when the texts are too few to support that many
            merges; ``len(tokenizer)`` is the actual size.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token="<|im_end|>"``,
        ``pad_token="<|endoftext|>"``, no BOS token and `CHAT_TEMPLATE`.

    Raises:
        ValueError: ``texts`` holds no non-empty string, or ``vocab_size`` is below 259.
        TypeError: ``texts`` is a single string or holds a non-string.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    collected = _collect_texts(texts)
    _check_vocab_size(vocab_size)

    backend = Tokenizer(models.BPE())
    # Qwen2's exact normalizer and pre-tokenizer: `AutoTokenizer` loads a qwen2 checkpoint as
    # `Qwen2Tokenizer`, which rebuilds this pipeline around the saved vocab and merges, so any other
    # choice here would make the reloaded tokenizer split text differently from the trained one.
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(collected, trainer=trainer, length=len(collected))

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START, IM_END],
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    output_dir: str | os.PathLike[str],
    texts: Iterable[str],
    *,
    architecture: str = "qwen2",
    vocab_size: int = 2048,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 2048,
    seed: int = 0,
) -> Path:
    """Train a tokenizer on ``texts``, build a random-init causal LM and save both to ``output_dir``.

    The model's vocabulary is the tokenizer's actual length; ``bos_token_id`` (``<|endoftext|>``,
    as in Qwen2), ``eos_token_id`` (``<|im_end|>``) and ``pad_token_id`` (``<|endoftext|>``) are set
    in the config and the generation config. Weights are float32 with tied input/output embeddings,
    initialised under ``torch.manual_seed(seed)`` inside a forked RNG (the caller's torch RNG state
    is left untouched). Existing files of the same names in ``output_dir`` are overwritten; use
    `ensure_tiny_model` for build-once semantics.

    Args:
        output_dir: Directory to write to (created with parents when missing).
        texts: Iterable of training strings for the tokenizer (consumed once).
        architecture: ``"qwen2"`` (``Qwen2ForCausalLM``) or ``"llama"`` (``LlamaForCausalLM``).
        vocab_size: Target tokenizer vocabulary size (see `build_tokenizer`).
        hidden_size: Model width; must be divisible by ``num_attention_heads``.
        num_hidden_layers: Number of decoder layers.
        num_attention_heads: Number of query heads; must be divisible by ``num_key_value_heads``.
        num_key_value_heads: Number of key/value heads (grouped-query attention).
        intermediate_size: MLP inner width.
        max_position_embeddings: Longest sequence the rotary embeddings are configured for.
        seed: Seed for the weight initialisation.

    Returns:
        ``Path`` of ``output_dir``.

    Raises:
        ValueError: ``texts`` is empty (or only empty strings), ``architecture`` is unknown,
            ``vocab_size`` is below 259, or the head counts do not divide evenly.
        TypeError: ``texts`` is a single string or holds a non-string.
    """
    _check_sizes(architecture, vocab_size, hidden_size, num_attention_heads, num_key_value_heads)
    tokenizer = build_tokenizer(texts, vocab_size=vocab_size)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    config_cls, model_cls = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[architecture]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model = model.to(torch.float32).eval()
    generation_config = model.generation_config
    generation_config.bos_token_id = pad_id
    generation_config.eos_token_id = eos_id
    generation_config.pad_token_id = pad_id

    path = Path(output_dir)
    path.mkdir(parents=True, exist_ok=True)
    with saved_by_this_process(model):  # built on whichever rank took build_once's lock
        model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def ensure_tiny_model(
    output_dir: str | os.PathLike[str],
    texts_or_callable: Iterable[str] | Callable[[], Iterable[str]],
    **kwargs: Any,
) -> Path:
    """Build the tiny model in ``output_dir`` unless it already holds one; return its path.

    "Already holds one" means ``output_dir/config.json`` exists; nothing is then read, checked or
    rewritten, so a recipe can point ``model_name_or_path`` at a local path created on first use.
    Concurrent callers (e.g. every torchrun rank) are safe: a file lock ``<output_dir>.lock`` beside
    the directory serialises them, the first one builds into a temporary sibling directory and moves
    the files in with ``config.json`` last, and the others find ``config.json`` and return.

    Args:
        output_dir: Target directory.
        texts_or_callable: Training texts, or a zero-argument callable returning them (called only
            when a build is needed, so loading a dataset can be skipped when the model exists).
        **kwargs: Keyword arguments for `build_tiny_model` (``architecture``, sizes, ``seed``).

    Returns:
        ``Path`` of ``output_dir``.

    Raises:
        ValueError: A build is needed and the texts are empty, or ``kwargs`` are invalid (see
            `build_tiny_model`).
        TypeError: Unknown keyword arguments, or bad ``texts``.
    """
    from .smollm2 import build_once

    def build(tmp: Path) -> None:
        texts = texts_or_callable() if callable(texts_or_callable) else texts_or_callable
        build_tiny_model(tmp, texts, **kwargs)

    return build_once(output_dir, build)


__all__ = [
    "ARCHITECTURES",
    "CHAT_TEMPLATE",
    "IM_END",
    "IM_START",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "build_tiny_model",
    "build_tokenizer",
    "ensure_tiny_model",
]
