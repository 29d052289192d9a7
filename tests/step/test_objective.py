"""Every paper/code variant of the objective, one config field away, tested on CPU with a tiny model."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from hir_trl import ConstraintReward, HiRTrainer
from hir_trl.step.replay import allocate_shortfall, select_replays

from ..testing_utils import make_args, spy_generation

M, K = 6, 2


def run(tmp_path, tiny_model_path, dataset, own_logps=True, **overrides):
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, **overrides), train_dataset=dataset)
    calls = spy_generation(trainer, own_logps=own_logps)
    trainer.train()
    return trainer, calls


# ---------------------------------------------------------------- 1. importance ratio of replayed rows


# "original" (a replay's old log-probs are its source's) is tests/step/test_step.py's
# test_a_replay_row_is_q_prime_with_its_sources_completion_and_old_logps; this keeps the real model's pass under q'
@pytest.mark.parametrize("mode", ["hindsight"])
def test_replay_old_logps_with_iterations_and_accumulation(tmp_path, tiny_model_path, sample_dataset, mode):
    """num_iterations=2 and gradient accumulation 2: the old log-probs stay those computed at generation."""
    trainer, calls = run(tmp_path, tiny_model_path, sample_dataset, replay_old_logps=mode, num_iterations=2,
                         gradient_accumulation_steps=2, per_device_train_batch_size=6, max_steps=2)
    assert len(calls) == 1  # 2 optimizer steps x 2 micro-batches = 4 micro-steps = 2 iterations of one generation
    inputs, out, replay = calls[0]
    B = len(inputs)
    replays = [i for i, new_row in enumerate(replay.new_rows) if new_row.kind == "replay"]
    assert replays
    for i in replays:
        row, src = B + i, replay.new_rows[i].source
        mask = out["completion_mask"][row].bool()
        expected = out["own_logps"][src] if mode == "original" else out["own_logps"][row]  # under q or under q'
        assert torch.allclose(out["old_per_token_logps"][row][mask], expected[mask], atol=1e-4)
    # the originals' old log-probs are theirs under q in both modes
    mask = out["completion_mask"][:B].bool()
    assert torch.allclose(out["old_per_token_logps"][:B][mask], out["own_logps"][:B][mask], atol=1e-4)


# ---------------------------------------------------------------- 2. supplementary samples


def spy_generate_calls(trainer):
    """The completions (token lists) each `_generate_single_turn` call returned, one list per call."""
    returned = []
    original_generate = trainer._generate_single_turn

    def recording(prompt_ids, *args, **kwargs):
        completion_ids, logprobs = original_generate(prompt_ids, *args, **kwargs)
        returned.append([list(ids) for ids in completion_ids])
        return completion_ids, logprobs

    trainer._generate_single_turn = recording
    return returned


def completion_tokens(out, row):
    return out["completion_ids"][row][out["completion_mask"][row].bool()].tolist()


def test_allocate_shortfall():
    assert allocate_shortfall([2, 1, 0], 2) == [0, 1, 2]
    assert allocate_shortfall([4, 0, 0], 2) == [0, 1, 1]  # batch scope: the batch is short by 2, not 4
    assert allocate_shortfall([3, 1], 2) == [0, 0]
    assert allocate_shortfall([0, 0], 0) == [0, 0]
    # one row short, two groups equally short: the lower index takes it (not the higher one)
    assert allocate_shortfall([5, 0, 0], 2) == [0, 1, 0]
    assert allocate_shortfall([3, 1, 1], 2) == [0, 1, 0]
    # one row short: the group with the largest deficit takes it, whatever its index
    assert allocate_shortfall([4, 1, 0], 2) == [0, 0, 1]


# ---------------------------------------------------------------- 3. selection


def test_selection_functions_hand_computed():
    verdicts = [[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 0],  # group 0
                [1, 1, 0], [0, 0, 1], [1, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1]]  # group 1
    diversity = [5.0, 1.0, 9.0, 2.0, 0.0, 4.0, 0.5, 0.2, 0.1, 9.0, 0.0, 0.0]
    by_group = select_replays(verdicts, diversity, 6, 2, 2.0)
    # group 0 candidates 0,1,3,5: F = 5.67, 2.33, 3.33, 4.67 -> 0, 5 ; group 1 candidates 6,7,8: 1.83, 0.87, 0.77
    assert [[c.index for c in g] for g in by_group] == [[0, 5], [0, 1]]
    by_batch = select_replays(verdicts, diversity, 6, 2, 2.0, scope="batch")
    assert [[c.index for c in g] for g in by_batch] == [[0, 5, 3, 1], []]
    integrity = select_replays(verdicts, diversity, 6, 2, 2.0, selection="integrity")
    assert [[c.index for c in g] for g in integrity] == [[1, 3], [0, 1]]
    diversity_only = select_replays(verdicts, diversity, 6, 2, 2.0, selection="diversity")
    assert [[c.index for c in g] for g in diversity_only] == [[0, 5], [0, 1]]
    rng_a, rng_b = random.Random(7), random.Random(7)
    rand_a = select_replays(verdicts, diversity, 6, 2, 2.0, selection="random", rng=rng_a)
    rand_b = select_replays(verdicts, diversity, 6, 2, 2.0, selection="random", rng=rng_b)
    assert rand_a == rand_b  # seeded
    assert all(c.index in (0, 1, 3, 5) for c in rand_a[0]) and all(c.index in (0, 1, 2) for c in rand_a[1])
    seen = {tuple(c.index for c in select_replays(verdicts, diversity, 6, 2, 2.0, selection="random",
                                                    rng=random.Random(s))[0]) for s in range(40)}
    assert len(seen) > 3  # really random among the candidates
    with pytest.raises(ValueError, match="rng"):
        select_replays(verdicts, diversity, 6, 2, 2.0, selection="random")


# ---------------------------------------------------------------- 4. advantage estimators


def test_replay_advantage_validation(tmp_path):
    with pytest.raises(ValueError, match="replay_advantage"):
        make_args(tmp_path, replay_advantage="both")
    with pytest.raises(ValueError, match="replay_weight"):
        make_args(tmp_path, replay_weight=-1.0)


def test_kl_in_reward(tmp_path, tiny_model_path, sample_dataset):
    """The trainer takes beta as the KL-in-reward coefficient and turns TRL's KL loss term off; the advantages it
    gives (the KL return-to-go subtracted per token) are tests/step/test_step.py's
    test_kl_in_reward_subtracts_beta_times_the_kl_still_to_come."""
    trainer, calls = run(tmp_path, tiny_model_path, sample_dataset, advantage_estimator="reinforce_pp",
                         kl_in_reward=True, beta=0.5, own_logps=False)
    assert trainer.kl_coef == 0.5 and trainer.beta == 0.0  # KL in the reward, none in the loss
    assert "kl" not in trainer.state.log_history[0]
    inputs, out, replay = calls[0]
    assert out["advantages"].shape == out["completion_ids"].shape  # the step's token-level advantages
    with pytest.raises(ValueError, match="kl_in_reward"):
        make_args(tmp_path, kl_in_reward=True, beta=0.0, advantage_estimator="reinforce_pp")
    with pytest.raises(ValueError, match="kl_in_reward"):
        make_args(tmp_path, kl_in_reward=True, beta=0.1)


# ---------------------------------------------------------------- 5. reward modes / replay off


def test_rl_cr_uses_cla_and_rl_ir_replays_nothing(tmp_path, tiny_model_path, sample_dataset):
    trainer, calls = run(tmp_path, tiny_model_path, sample_dataset, reward_mode="cla", num_replays=0,
                         advantage_estimator="reinforce_pp")
    inputs, out, replay = calls[0]
    assert out["completion_ids"].shape[0] == len(inputs) and [r.kind for r in replay.new_rows] == []
    cla = trainer.constraint_reward.last_verdicts.cla()
    assert replay.rewards == cla and len(set(cla)) > 1  # dense reward


# ---------------------------------------------------------------- 6. invariance


@pytest.fixture(scope="module")
def varied_dataset():
    """Constraints that random text meets some of the time (letter counts, commas, length): reward variance."""
    import datasets

    from hir_trl.data.loading import normalize_row

    rows = []
    for i, letter in enumerate("etaoinshrdlu"):
        rows.append(normalize_row({"task": f"Write note {i}.", "constraints": [
            {"text": f"Use the letter {letter} at least twice.", "family": "ifeval",
             "instruction_id": "keywords:letter_frequency",
             "kwargs": {"letter": letter, "let_frequency": 2, "let_relation": "at least"}},
            {"text": "Do not use any commas.", "family": "ifeval", "instruction_id": "punctuation:no_comma"},
            {"text": "Use fewer than 6 words.", "family": "ifeval", "instruction_id": "length_constraints:number_words",
             "kwargs": {"relation": "less than", "num_words": 6}},
        ]}, i))
    return datasets.Dataset.from_list(rows)


def test_num_replays_zero_reproduces_grpo_trainer(tmp_path, tiny_model_path, varied_dataset):
    common = dict(per_device_train_batch_size=12, max_steps=3, max_completion_length=12, bf16=False, use_cpu=True,
                  gradient_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no", seed=0,
                  learning_rate=1e-2, num_generations=6)
    # CLA rewards (RL-CR) so that a random model gets a learning signal and the comparison is not vacuous
    hir = HiRTrainer(model=str(tiny_model_path),
                     args=make_args(tmp_path / "hir", num_replays=0, reward_mode="cla", **common),
                     train_dataset=varied_dataset)
    hir.train()
    grpo = GRPOTrainer(model=str(tiny_model_path), reward_funcs=[ConstraintReward(reward_mode="cla")],
                       args=GRPOConfig(output_dir=str(tmp_path / "grpo"), **common), train_dataset=varied_dataset)
    grpo.train()
    hir_steps = [h for h in hir.state.log_history if "loss" in h]
    grpo_steps = [h for h in grpo.state.log_history if "loss" in h]
    assert len(hir_steps) == len(grpo_steps) == 3
    for a, b in zip(hir_steps, grpo_steps):
        assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]
    assert any(h["grad_norm"] > 0 for h in hir_steps)
    for (name, p), (_, q) in zip(hir.model.named_parameters(), grpo.model.named_parameters()):
        assert torch.equal(p, q), name


# ---------------------------------------------------------------- 7. resume


def test_resume_continues_lambda_rng_and_steps_exactly(tmp_path, tiny_model_path, sample_dataset):
    common = dict(max_steps=4, save_strategy="steps", save_steps=2, replay_selection="random", eta=0.5,
                  learning_rate=1e-2)
    straight = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path / "a", **common),
                          train_dataset=sample_dataset)
    straight.train()

    class StopAfterTwo(TrainerCallback):  # an interruption after checkpoint-2 of the 4-step schedule
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                control.should_training_stop = True
            return control

    first = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path / "b", **common),
                       train_dataset=sample_dataset, callbacks=[StopAfterTwo()])
    first.train()
    assert first.state.global_step == 2
    assert (tmp_path / "b" / "out" / "checkpoint-2" / "hir_state.json").exists()
    resumed = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path / "b", **common),
                         train_dataset=sample_dataset)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-2"))

    a = [h for h in straight.state.log_history if "loss" in h]
    b = [h for h in resumed.state.log_history if "loss" in h]
    assert [h["step"] for h in b] == [1, 2, 3, 4]  # steps 1-2 come from the checkpoint's trainer state
    for x, y in zip(a[2:], b[2:]):
        assert x["hir/lambda"] == y["hir/lambda"] == 2.0 * 1.5 ** (x["step"] - 1)
        assert x["loss"] == pytest.approx(y["loss"], abs=1e-6)
        assert x["hir/replay_integrity_mean"] == y["hir/replay_integrity_mean"]
    assert straight.hir_passes.replay_rng.getstate() == resumed.hir_passes.replay_rng.getstate()
    for (name, p), (_, q) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


# ---------------------------------------------------------------- LoRA


def test_lora_reference_is_the_adapter_disabled_model_under_q_prime(tmp_path, tiny_model_path, sample_dataset):
    from peft import LoraConfig

    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, beta=0.04, max_steps=2,
                                                                    learning_rate=5e-2),
                         train_dataset=sample_dataset,
                         peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    assert trainer.ref_model is None  # PEFT: the reference is the base model
    seen = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        with torch.no_grad():
            policy, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask,
                                                                      out["completion_ids"].size(1))
            with trainer.model.disable_adapter():
                base, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask,
                                                                        out["completion_ids"].size(1))
        seen.append((len(inputs), out, trainer.last_replay, policy, base))
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    B, out, replay, policy, base = seen[1]  # second step: the adapters have moved the policy
    replays = [B + i for i, new_row in enumerate(replay.new_rows) if new_row.kind == "replay"]
    assert replays
    for row in replays:
        mask = out["completion_mask"][row].bool()
        assert torch.allclose(out["ref_per_token_logps"][row][mask], base[row][mask], atol=1e-4)
        assert (out["ref_per_token_logps"][row][mask] - policy[row][mask]).abs().max() > 1e-4


# ---------------------------------------------------------------- judge integration


def _soft_dataset(tmp_path):
    import json as _json

    from hir_trl import load_hir_dataset

    row = {"task": "Write a short note about the sea.", "template": "type3", "constraints": [
        {"text": "Answer with at least 500 words.", "family": "ifeval",
         "instruction_id": "length_constraints:number_words", "kwargs": {"relation": "at least", "num_words": 500}},
        {"text": "The tone must be calm.", "kind": "soft"}]}
    path = tmp_path / "soft.jsonl"
    path.write_text("\n".join(_json.dumps({**row, "id": f"s{i}"}) for i in range(4)) + "\n")
    return load_hir_dataset(path)


def test_the_reward_functions_judge_re_judges_the_replays(tmp_path, tiny_model_path):
    """The judge of the trainer's `ConstraintReward` is the one the step re-judges replays with
    (``rejudge_replays``): it says YES only while the instruction still states the 500-word rule, so under q' (which
    dropped it) the replay's reward is 0. The arithmetic of re-judging, with and without it, is
    tests/step/test_step.py's test_rejudged_replays_ask_the_judge_again_under_q_prime."""
    import threading

    from hir_trl.verifiers import Verdict

    calls, threads = [], []

    def judge(triples):
        calls.append(list(triples))
        threads.append(threading.current_thread().name)
        return [Verdict("at least 500 words" in instruction, source="judge") for instruction, _, _ in triples]

    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, rejudge_replays=True,
                                                                    per_device_train_batch_size=6,
                                                                    hindsight_relabel="drop"),
                         train_dataset=_soft_dataset(tmp_path), reward_funcs=ConstraintReward(judge=judge))
    trainer.train()
    replay = trainer.last_replay
    replays = [6 + i for i, new_row in enumerate(replay.new_rows) if new_row.kind == "replay"]
    assert len(replays) == 2  # every completion failed the 500-word rule and met the soft one
    assert [replay.rewards[r] for r in replays] == [0.0, 0.0]
    assert len(calls) == 2  # the batch's soft constraints, then the replays' kept ones
    assert all("500 words" not in instruction for instruction, _, _ in calls[1])
    # the batch's went to the judge as soon as TRL had generated (on the judge's own thread), once
    assert threads == ["hir-judge-batch", "MainThread"]
    assert "hir/seconds_judge" in trainer.state.log_history[0]


def test_trainer_builds_the_judge_from_the_config(tmp_path, tiny_model_path, monkeypatch):
    from hir_trl.judge import LiteLLMJudge

    dataset = _soft_dataset(tmp_path)
    monkeypatch.delenv("HIR_TEST_MISSING_KEY", raising=False)
    with pytest.raises(KeyError, match="HIR_TEST_MISSING_KEY"):
        HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, judge_model="openai/x",
                                                              judge_api_key_env="HIR_TEST_MISSING_KEY"),
                   train_dataset=dataset)
    monkeypatch.setenv("HIR_TEST_MISSING_KEY", "k")
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, judge_model="openai/x",
                                                                    judge_api_key_env="HIR_TEST_MISSING_KEY",
                                                                    judge_api_base="http://127.0.0.1:9/v1"),
                         train_dataset=dataset)
    assert isinstance(trainer.constraint_reward.judge, LiteLLMJudge)
    trainer.constraint_reward.judge.close()
    # no judge: refused by default (soft_constraints: judge, tests/judge/test_soft_constraints.py); 'fail' keeps none
    with pytest.raises(ValueError, match="no judge is configured"):
        HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, judge_model=""), train_dataset=dataset)
    no_judge = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, judge_model="", soft_constraints="fail"),
                          train_dataset=dataset)
    assert no_judge.constraint_reward.judge is None


# ---------------------------------------------------------------- vLLM keys of replay rows, simulated on CPU


@pytest.mark.parametrize("value,rows", [(0.1, 3), (0.7, 12), (0.9, 5), (1.1, 3)])
def test_whitening_equal_returns_gives_zero_advantages(value, rows):
    """Equal returns (e.g. a Reinforce++ step of pads and replays only) whiten to about 0 (float32 rounding of the
    mean, over the 1e-8 floor): the float variance, which falls just below 0 for these values, is clamped instead of
    giving a complex std."""
    from hir_trl.step.advantages import _whiten

    returns, mask = torch.full((rows, 4), value), torch.ones(rows, 4)
    whitened = _whiten(returns, mask, lambda t: t)
    assert not whitened.is_complex() and bool(torch.isfinite(whitened).all())
    assert whitened.abs().max().item() < 1e-2
