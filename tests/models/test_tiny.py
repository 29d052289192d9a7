"""Tests for hir_trl.models.tiny: the locally built tiny tokenizer + random-init model."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hir_trl.models import tiny
from hir_trl.models.tiny import build_tiny_model, build_tokenizer, ensure_tiny_model

TEXTS = [
    "Write a 300+ word summary of the wikipedia page about the Battle of Hastings.",
    "Do not use any commas in your response.",
    "Your entire response should be in English, and in all lowercase letters.",
    "Highlight at least 3 sections in your answer with markdown, i.e. *highlighted section*.",
    "Finish your response with this exact phrase: Is there anything else I can help with?",
    "Wrap your entire response with double quotation marks.",
    "Your response should contain at least 5 sentences.",
    "Include the keywords 'river' and 'bridge' in the response.",
    "Write a limerick about a cat who loves to sleep in the sun.",
    "Answer with at most 50 words.",
    "There should be 2 paragraphs. Paragraphs are separated with the markdown divider: ***",
    "Write a letter to a friend describing your last vacation in Portugal.",
    "Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.",
    "At the end of your response, please explicitly add a postscript starting with P.S.",
    "Write an email to your manager asking for a day off next Friday.",
    "The response must contain at least 2 placeholders represented by square brackets, such as [address].",
    "Explain how photosynthesis works to a ten-year-old child.",
    "Your ENTIRE response should be in JSON format.",
    "Write a short story about a robot that learns to paint.",
    "In your response, the letter q should appear at least 4 times.",
    "Give two different responses separated by 6 asterisk symbols: ******",
    "Describe the history of the printing press in three bullet points.",
    "Your response must have 3 sections. Mark the beginning of each section with SECTION X.",
    "Write a product description for a new pair of running shoes.",
    "First repeat the request word for word without change, then give your answer.",
    "Compose a haiku about autumn leaves falling on a quiet street.",
    "In your entire response, refrain from the use of any exclamation marks.",
    "Summarize the plot of Romeo and Juliet in under 100 words.",
    "Write a blog post about the benefits of drinking water every day.",
    "Answer with one of the following options: My answer is yes., My answer is no., My answer is maybe.",
    "List 5 tips for learning a new programming language quickly.",
    "Your response should contain 4 paragraphs separated by two new lines.",
    "Write a rap song about the importance of recycling plastic bottles.",
    "Use words with all capital letters at least 3 times to highlight key points.",
    "Translate the following sentence into French: The weather is nice today.",
    "Write a cover letter for a junior data scientist position at a startup.",
]

CHAT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Write a haiku about rain."},
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small model per architecture, shared by the read-only tests below."""
    root = tmp_path_factory.mktemp("tiny")
    return {arch: build_tiny_model(root / arch, TEXTS, architecture=arch) for arch in tiny.ARCHITECTURES}


@pytest.fixture(scope="module")
def loaded(built: dict[str, Path]) -> dict[str, tuple]:
    return {
        arch: (AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path))
        for arch, path in built.items()
    }


@pytest.mark.parametrize(
    "architecture,class_name", [("qwen2", "Qwen2ForCausalLM"), ("llama", "LlamaForCausalLM")]
)
def test_reload_architecture_and_vocab(built, loaded, architecture, class_name):
    path = built[architecture]
    assert (path / "config.json").is_file()
    assert (path / "model.safetensors").is_file()
    assert (path / "tokenizer.json").is_file()
    tokenizer, model = loaded[architecture]
    assert type(model).__name__ == class_name
    assert model.config.model_type == architecture
    vocab = len(tokenizer)
    assert 259 < vocab <= 2048  # merges were learnt, target not exceeded
    assert model.config.vocab_size == vocab
    assert model.get_input_embeddings().weight.shape == (vocab, 64)
    assert model.get_output_embeddings().weight.shape == (vocab, 64)
    assert model.config.hidden_size == 64
    assert model.config.num_hidden_layers == 2
    assert model.config.num_attention_heads == 4
    assert model.config.num_key_value_heads == 2
    assert model.config.intermediate_size == 128
    assert model.config.max_position_embeddings == 2048
    assert model.dtype == torch.float32


@pytest.mark.parametrize("architecture", tiny.ARCHITECTURES)
def test_special_tokens_and_ids(loaded, architecture):
    tokenizer, model = loaded[architecture]
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    ids = tokenizer.convert_tokens_to_ids(list(tiny.SPECIAL_TOKENS))
    assert ids == [0, 1, 2]
    # Special tokens are single, unsplit tokens in running text.
    assert tokenizer.encode("<|im_start|>user\n", add_special_tokens=False)[0] == 1
    for config in (model.config, model.generation_config):
        assert config.eos_token_id == tokenizer.eos_token_id
        assert config.pad_token_id == tokenizer.pad_token_id
        assert config.bos_token_id == tokenizer.pad_token_id


@pytest.mark.parametrize("architecture", tiny.ARCHITECTURES)
def test_chat_template(loaded, architecture):
    tokenizer, _ = loaded[architecture]
    user_only = [{"role": "user", "content": "Hello there"}]
    text = tokenizer.apply_chat_template(user_only, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
    assert text.endswith("<|im_start|>assistant\n")
    no_prompt = tokenizer.apply_chat_template(user_only, add_generation_prompt=False, tokenize=False)
    assert no_prompt == "<|im_start|>user\nHello there<|im_end|>\n"

    full = [*CHAT, {"role": "assistant", "content": "Grey clouds gather."}]
    assert tokenizer.apply_chat_template(full, tokenize=False) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWrite a haiku about rain.<|im_end|>\n"
        "<|im_start|>assistant\nGrey clouds gather.<|im_end|>\n"
    )
    # Structured (list-of-parts) content renders like a plain string.
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]
    assert tokenizer.apply_chat_template(parts, add_generation_prompt=True, tokenize=False) == text

    # Single conversation, tokenized, as a dict.
    single = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True, return_dict=True)
    assert single["input_ids"][0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.decode(single["input_ids"]).endswith("<|im_start|>assistant\n")
    assert len(single["attention_mask"]) == len(single["input_ids"])

    # TRL GRPOTrainer's call: a batch of conversations.
    batch = tokenizer.apply_chat_template(
        conversation=[user_only, CHAT], add_generation_prompt=True, tokenize=True, return_dict=True
    )
    assert len(batch["input_ids"]) == 2
    assert tokenizer.decode(batch["input_ids"][0]) == text
    assert tokenizer.decode(batch["input_ids"][1]).startswith("<|im_start|>system\nYou are a helpful")
    assert tokenizer.decode(batch["input_ids"][1], skip_special_tokens=True) == (
        "system\nYou are a helpful assistant.\nuser\nWrite a haiku about rain.\nassistant\n"
    )


@pytest.mark.parametrize("architecture", tiny.ARCHITECTURES)
def test_tokenizer_round_trip(loaded, architecture):
    tokenizer, _ = loaded[architecture]
    fresh = build_tokenizer(TEXTS)
    samples = [
        *TEXTS[:5],
        "Unseen words: zyxwvut qqq 1234567890 {'json': [1, 2.5, null]}",
        "  leading spaces,\ttabs\r\nand\n\n\nnewlines  ",
        "Symbols ~!@#$%^&*()_+-=[]\\{}|;':\",./<>? and don't I'LL you'd",
        "",
    ]
    for text in samples:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
        # The reloaded tokenizer (Qwen2Tokenizer / TokenizersBackend) splits exactly like the trained one.
        assert ids == fresh.encode(text, add_special_tokens=False)
    assert tokenizer.encode("", add_special_tokens=False) == []
    # Non-ASCII (NFC) text also survives via the byte-level alphabet.
    text = "Ünïcode café — 東京 😀"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    # Training actually learnt merges: a common word is shorter than its byte count.
    assert len(tokenizer.encode(" response", add_special_tokens=False)) < len(" response")


@pytest.mark.parametrize("architecture", tiny.ARCHITECTURES)
def test_generate(loaded, architecture):
    tokenizer, model = loaded[architecture]
    batch = tokenizer.apply_chat_template(
        [CHAT, [{"role": "user", "content": "Hi"}]],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        padding=True,
    )
    assert tokenizer.padding_side == "left"
    assert batch["input_ids"][1, 0].item() == tokenizer.pad_token_id
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=8, do_sample=True, top_k=0, top_p=1.0)
    prompt_len = batch["input_ids"].shape[1]
    assert out.shape[0] == 2
    assert prompt_len < out.shape[1] <= prompt_len + 8
    assert torch.equal(out[:, :prompt_len], batch["input_ids"])
    assert ((out[:, prompt_len:] >= 0) & (out[:, prompt_len:] < len(tokenizer))).all()
    assert isinstance(tokenizer.batch_decode(out[:, prompt_len:], skip_special_tokens=True)[0], str)


def test_deterministic(tmp_path):
    first = build_tiny_model(tmp_path / "a", TEXTS, seed=3)
    second = build_tiny_model(tmp_path / "b", iter(TEXTS), seed=3)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    state_a = AutoModelForCausalLM.from_pretrained(first).state_dict()
    state_b = AutoModelForCausalLM.from_pretrained(second).state_dict()
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        assert torch.equal(state_a[key], state_b[key]), key

    other_seed = build_tiny_model(tmp_path / "c", TEXTS, seed=4)
    assert (other_seed / "tokenizer.json").read_bytes() == (first / "tokenizer.json").read_bytes()
    state_c = AutoModelForCausalLM.from_pretrained(other_seed).state_dict()
    assert any(not torch.equal(state_a[key], state_c[key]) for key in state_a)


def test_build_leaves_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", TEXTS[:10])
    assert torch.equal(torch.rand(3), expected)


def test_custom_sizes_and_vocab_cap(tmp_path):
    path = build_tiny_model(
        tmp_path / "m",
        TEXTS,
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=48,
        max_position_embeddings=256,
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert len(tokenizer) == 300 == model.config.vocab_size
    assert model.config.hidden_size == 32
    assert model.config.num_hidden_layers == 1
    assert model.config.num_key_value_heads == 1
    assert model.config.max_position_embeddings == 256


def test_build_errors(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        build_tiny_model(tmp_path / "m", [])
    with pytest.raises(ValueError, match="empty"):
        build_tiny_model(tmp_path / "m", ["", ""])
    with pytest.raises(ValueError, match="architecture"):
        build_tiny_model(tmp_path / "m", TEXTS, architecture="gpt2")
    with pytest.raises(ValueError, match="vocab_size"):
        build_tiny_model(tmp_path / "m", TEXTS, vocab_size=100)
    with pytest.raises(ValueError, match="divisible"):
        build_tiny_model(tmp_path / "m", TEXTS, hidden_size=66)
    with pytest.raises(ValueError, match="divisible"):
        build_tiny_model(tmp_path / "m", TEXTS, num_key_value_heads=3)
    with pytest.raises(TypeError):
        build_tiny_model(tmp_path / "m", "a single string")
    with pytest.raises(TypeError):
        build_tiny_model(tmp_path / "m", ["ok", 3])
    assert not (tmp_path / "m" / "config.json").exists()


def test_ensure_builds_once(tmp_path):
    target = tmp_path / "models" / "tiny"
    path = ensure_tiny_model(target, TEXTS, architecture="llama")
    assert path == target
    config = target / "config.json"
    assert config.is_file()
    assert AutoModelForCausalLM.from_pretrained(path).config.model_type == "llama"
    # No temporary directories are left beside the target.
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny", "tiny.lock"]

    before = {p.name: p.stat().st_mtime_ns for p in target.iterdir()}
    old = time.time() - 1000
    os.utime(config, (old, old))
    before["config.json"] = config.stat().st_mtime_ns

    def texts_factory():
        raise AssertionError("texts must not be loaded when the model exists")

    # Existing model: nothing is rebuilt, the callable is not called, even empty texts are accepted.
    assert ensure_tiny_model(target, texts_factory) == target
    assert ensure_tiny_model(str(target), [], architecture="qwen2") == target
    assert {p.name: p.stat().st_mtime_ns for p in target.iterdir()} == before


def test_ensure_callable_and_errors(tmp_path):
    calls = []

    def texts_factory():
        calls.append(1)
        return TEXTS

    path = ensure_tiny_model(tmp_path / "m", texts_factory, seed=5)
    assert calls == [1]
    assert (path / "config.json").is_file()

    with pytest.raises(ValueError, match="empty"):
        ensure_tiny_model(tmp_path / "empty", [])
    with pytest.raises(ValueError, match="empty"):
        ensure_tiny_model(tmp_path / "empty", lambda: [])
    with pytest.raises(ValueError, match="architecture"):
        ensure_tiny_model(tmp_path / "empty", TEXTS, architecture="t5")
    # A failed build leaves no config.json (so a later call retries) and no temporary directory.
    assert not (tmp_path / "empty" / "config.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".empty.tmp-")]


def test_ensure_concurrent_callers_build_once(tmp_path, monkeypatch):
    real_build = tiny.build_tiny_model
    builds = []

    def slow_build(*args, **kwargs):
        builds.append(1)
        time.sleep(0.2)  # widen the race window
        return real_build(*args, **kwargs)

    monkeypatch.setattr(tiny, "build_tiny_model", slow_build)
    target = tmp_path / "shared"
    results, errors = [], []

    def worker():
        try:
            results.append(ensure_tiny_model(target, TEXTS))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results == [target] * 4
    assert builds == [1]
    assert AutoTokenizer.from_pretrained(target).eos_token == "<|im_end|>"
