"""F_div and a replay's old log-probs without HiR's extra no-grad pass (recorded while sampling)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from hir_trl import HiRTrainer
from hir_trl.step.sampling import SamplingRecorder, record_sampling, sampling_changes_policy

from ..testing_utils import make_args, spy_generation


def _forward_logps_and_entropies(model, sequences, attention_mask, prompt_width, temperature):
    """Per-token log-probs and entropies of softmax(logits / T) from one full forward (the no-grad pass)."""
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=sequences, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, prompt_width - 1: -1].float() / temperature
    logp = logits.log_softmax(-1)
    token_logps = logp.gather(-1, sequences[:, prompt_width:].unsqueeze(-1)).squeeze(-1)
    entropies = -(logp.exp() * logp).sum(-1)
    return token_logps, entropies


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 0, 1.0), (0.7, 20, 0.8)])
def test_recorder_matches_a_full_forward(tiny_model_path, temperature, top_k, top_p):
    """The recorded entropy and sampled-token log-prob of every completion token equal a full forward's under
    softmax(logits / T), for a left-padded batch of prompts of different lengths, also when top-k / top-p truncate
    the sampling distribution (transformers runs the recorder before its warpers); generate is restored after."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    batch = tokenizer(["Write a list.", "Answer in three short sentences about the weather today please.", "Hi"],
                      return_tensors="pt", padding=True)
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=14,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    recorder = SamplingRecorder(temperature)
    torch.manual_seed(0)
    with record_sampling(model, recorder):
        sequences = model.generate(**batch, generation_config=config)
    assert "generate" not in vars(model)  # the instance wrapper is gone
    width = batch["input_ids"].size(1)
    completions = []
    for row in sequences[:, width:].tolist():
        cut = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        completions.append(row[:cut])
    assert recorder.steps == sequences.size(1) - width
    recorded = recorder.per_row(completions)
    attention = torch.cat([batch["attention_mask"], torch.ones_like(sequences[:, width:])], 1)
    token_logps, entropies = _forward_logps_and_entropies(model, sequences, attention, width, temperature)
    for i, ids in enumerate(completions):
        assert recorded["logps"][i].shape == (len(ids),)
        assert torch.allclose(recorded["logps"][i], token_logps[i, : len(ids)], atol=1e-4)
        assert torch.allclose(recorded["entropies"][i], entropies[i, : len(ids)], atol=1e-4)
        assert (recorded["entropies"][i] > 0).all() and (recorded["logps"][i] <= 0).all()


def test_recorder_checks_what_generate_returned():
    with pytest.raises(ValueError, match="temperature"):
        SamplingRecorder(0.0)
    recorder = SamplingRecorder()
    assert recorder.per_row([[1, 2]]) is None  # nothing recorded: the caller falls back to a pass
    recorder(torch.tensor([[5, 1]]), torch.zeros(1, 4))
    with pytest.raises(RuntimeError, match="2 tokens but only 1 decoding steps"):
        recorder.per_row([[1, 2]])
    recorder(torch.tensor([[5, 1]]), torch.zeros(1, 4))
    with pytest.raises(RuntimeError, match="1 sequences but generate returned 2"):
        recorder.per_row([[1], [2]])


def test_sampling_changes_policy_names_the_setting():
    # warpers run after the recorder: temperature, top-k, top-p and min-p leave its view of the logits alone
    plain = GenerationConfig(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, min_p=0.05)
    assert sampling_changes_policy(plain, None) is None
    assert sampling_changes_policy(GenerationConfig(do_sample=True, repetition_penalty=1.2), None) == \
        "repetition_penalty=1.2"
    assert sampling_changes_policy(GenerationConfig(do_sample=True, suppress_tokens=[3]), None) == \
        "suppress_tokens=[3]"
    assert sampling_changes_policy(GenerationConfig(do_sample=False), None) == "do_sample is off"
    # an unset field takes the model's generation config, as generate does; a set one keeps its value
    assert sampling_changes_policy(plain, SimpleNamespace(no_repeat_ngram_size=3)) == "no_repeat_ngram_size=3"
    assert sampling_changes_policy(GenerationConfig(do_sample=True, repetition_penalty=1.0),
                                   SimpleNamespace(repetition_penalty=1.1)) is None


def _count_policy_passes(trainer):
    passes = []
    original = trainer.hir_passes.policy_pass

    def counting(model, prompt_ids, *args, **kwargs):
        passes.append(prompt_ids.size(0))
        return original(model, prompt_ids, *args, **kwargs)

    trainer.hir_passes.policy_pass = counting
    return passes


def _own_entropies(trainer, out):
    with torch.no_grad():
        _, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
            torch.cat([out["prompt_mask"], out["completion_mask"]], 1), out["completion_ids"].size(1),
            compute_entropy=True)
    return entropies


def _f_div(values, mask):
    mask = mask.float()
    return ((values * mask).sum() / mask.sum()).item()


def test_default_step_runs_no_extra_pass(tmp_path, tiny_model_path, sample_dataset):
    """Aligned steps, transformers generation (the default): F_div from the recorded exact entropies and the
    replays' pi_old(y | q) from the recorded log-probs; no no-grad pass at all; timings logged."""
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path), train_dataset=sample_dataset)
    assert trainer.hir_passes.no_recording_reason is None
    calls = spy_generation(trainer)
    passes = _count_policy_passes(trainer)
    trainer.train()
    assert passes == []
    inputs, out, replay = calls[0]
    B = len(inputs)
    entropies = _own_entropies(trainer, out)
    mask = out["completion_mask"].bool()
    # every row's old log-probs are its own under q: originals (recorded == the pass) and replays (their source's)
    assert torch.allclose(out["old_per_token_logps"][:B][mask[:B]], out["own_logps"][:B][mask[:B]], atol=1e-4)
    replays = [i for i, new_row in enumerate(replay.new_rows) if new_row.kind == "replay"]
    assert replays
    for i in replays:
        row, src = B + i, replay.new_rows[i].source
        assert torch.allclose(out["old_per_token_logps"][row][mask[row]], out["own_logps"][src][mask[src]],
                              atol=1e-4)
        assert replay.new_rows[i].choice.diversity == pytest.approx(_f_div(entropies[src], mask[src]), abs=1e-4)
    logged = trainer.state.log_history[0]
    assert logged["hir/seconds_extra_pass"] == 0.0 and logged["hir/seconds_replay_passes"] == 0.0
    assert logged["hir/seconds_recording"] > 0 and logged["hir/seconds_selection"] > 0
    assert logged["hir/seconds_total"] >= logged["hir/seconds_selection"] + logged["hir/seconds_assembly"]


def test_a_logit_processor_before_the_recorder_falls_back_to_the_pass(tmp_path, tiny_model_path, sample_dataset):
    """A repetition penalty changes the logits before the recorder sees them, so the recorder stays off and one
    no-grad pass under q gives the policy's entropies and old log-probs, as before."""
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, repetition_penalty=1.1),
                         train_dataset=sample_dataset)
    assert "repetition_penalty=1.1" in trainer.hir_passes.no_recording_reason
    calls = spy_generation(trainer)
    passes = _count_policy_passes(trainer)
    trainer.train()
    inputs, out, replay = calls[0]
    assert passes == [len(inputs)]
    assert trainer.state.log_history[0]["hir/seconds_extra_pass"] > 0
    entropies = _own_entropies(trainer, out)
    mask = out["completion_mask"].bool()
    for new_row in replay.new_rows:
        if new_row.kind == "replay":
            choice, src = new_row.choice, new_row.source
            assert choice.diversity == pytest.approx(_f_div(entropies[src], mask[src]), abs=1e-4)


def test_supplementary_samples_take_their_recorded_logps(tmp_path, tiny_model_path, sample_dataset):
    """No candidates (min_satisfied too high): every group gets k supplementary samples, whose old log-probs come
    from their own recording, like the originals'; still no no-grad pass."""
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, replay_min_satisfied=100),
                         train_dataset=sample_dataset)
    calls = spy_generation(trainer)
    passes = _count_policy_passes(trainer)
    trainer.train()
    inputs, out, replay = calls[0]
    B = len(inputs)
    assert replay.new_rows and {r.kind for r in replay.new_rows} == {"supplementary"}
    assert passes == []
    mask = out["completion_mask"][B:].bool()
    assert torch.allclose(out["old_per_token_logps"][B:][mask], out["own_logps"][B:][mask], atol=1e-4)
