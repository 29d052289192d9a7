"""HiRTrainer on a real batch: m + k rows per group, replay reward 1, replay completion and old log-probs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import hir_trl.rewards as rewards_module
from hir_trl import ConstraintReward, HiRConfig, HiRTrainer
from hir_trl.data.templates import join_instruction
from hir_trl.trainer import check_batch_layout

from ..testing_utils import make_args, spy_generation


@pytest.fixture
def counted_checks(monkeypatch):
    counter = {"n": 0}
    original = rewards_module.verify_constraint

    def counting(*args, **kwargs):
        counter["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(rewards_module, "verify_constraint", counting)
    return counter


def test_real_batch_has_m_plus_k_rows_per_group(tmp_path, tiny_model_path, sample_dataset, counted_checks):
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path), train_dataset=sample_dataset)
    calls = spy_generation(trainer)
    trainer.train()
    assert len(calls) == 1
    inputs, out, replay = calls[0]
    m, k, B = 6, 2, len(inputs)
    groups = B // m
    R = groups * k

    # Every (row, constraint) was verified exactly once: replays reuse the verdicts.
    assert counted_checks["n"] == sum(len(row["constraints"]) for row in inputs)
    assert trainer.constraint_reward.num_checks == counted_checks["n"]

    # m + k rows per group; every per-row key extended.
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "old_per_token_logps"):
        assert out[key].shape[0] == B + R, key
    assert len(replay.new_rows) == R
    assert [[r.group for r in replay.new_rows].count(g) for g in range(groups)] == [k] * groups
    for new_row in replay.new_rows:
        if new_row.kind == "replay":
            g = new_row.group
            assert g * m <= new_row.source < (g + 1) * m  # the replay belongs to its source's group

    real = [i for i, new_row in enumerate(replay.new_rows) if new_row.kind == "replay"]
    assert real, "a random-init model should leave replay candidates (met some, failed some)"
    tokenizer = trainer.processing_class
    checker = ConstraintReward()
    for i in real:
        src, row = replay.new_rows[i].source, B + i
        assert replay.rewards[row] == 1.0  # replay reward 1
        # the replay completion is its source's completion
        assert torch.equal(out["completion_ids"][row], out["completion_ids"][src])
        assert torch.equal(out["completion_mask"][row], out["completion_mask"][src])
        # paper ratio: old log-probs of the replay are the source's, i.e. of y under the ORIGINAL q
        assert torch.equal(out["old_per_token_logps"][row], out["old_per_token_logps"][src])
        mask = out["completion_mask"][src].bool()
        under_q, under_q_prime = out["own_logps"][src][mask], out["own_logps"][row][mask]
        assert torch.allclose(out["old_per_token_logps"][row][mask], under_q, atol=1e-4)
        assert (under_q_prime - under_q).abs().max() > 1e-3  # pi(y|q') really differs from pi(y|q)
        # the replay prompt is the chat-templated q', which keeps exactly the satisfied constraints
        source = inputs[src]
        completion = tokenizer.decode(out["completion_ids"][src][mask])
        verdicts = checker.verify([source["prompt"]], [completion], [source["constraints"]]).passed(0)
        assert verdicts == list(replay.new_rows[i].choice.satisfied)
        kept = [c["text"] for c, ok in zip(source["constraints"], verdicts) if ok]
        assert 0 < len(kept) < len(verdicts)
        q_prime = join_instruction(source["task"], kept, source["template"])
        assert replay.new_rows[i].q_prime == source["prompt"][:-1] + [{"role": "user", "content": q_prime}]
        prompt_text = tokenizer.decode(out["prompt_ids"][row][out["prompt_mask"][row].bool()])
        assert prompt_text == tokenizer.apply_chat_template(replay.new_rows[i].q_prime, add_generation_prompt=True,
                                                            tokenize=False)

    # advantages: TRL's group baseline and scaling over the m + k rows of each group
    assert_group_advantages(out, replay, B, m)

    # num_items_in_batch counts the loss tokens of the extended batch
    assert out["num_items_in_batch"].item() == out["completion_mask"].sum().item()
    logged = trainer.state.log_history[0]
    assert logged["hir/replayed_rows"] == len(real)
    assert logged["hir/lambda"] == 2.0
    for key in ("hir/replayed_fraction", "hir/groups_all_failed", "hir/replay_integrity_mean",
                "hir/replay_entropy_mean", "reward/ila", "reward/cla"):
        assert key in logged
    # the replays' and the sampled rows' mean completion lengths, from the batch's own masks (one rank, one step)
    lengths = out["completion_mask"].sum(1)
    sources = [replay.new_rows[i].source for i in real]
    assert logged["hir/replay_mean_length"] == pytest.approx(lengths[sources].float().mean().item())
    assert logged["hir/sampled_mean_length"] == pytest.approx(lengths[:B].float().mean().item())


def assert_group_advantages(out, replay, B, m):
    """Each group's advantages are (r - mean) / (std + 1e-4) over its non-padding rows (TRL's GRPO formula)."""
    rewards = torch.tensor(replay.rewards)
    for g in range(B // m):
        rows = list(range(g * m, (g + 1) * m)) + [B + i for i, r in enumerate(replay.new_rows) if r.group == g]
        rows = [r for r in rows if not torch.isnan(rewards[r])]
        values = rewards[rows]
        expected = (values - values.mean()) / (values.std() + 1e-4)
        assert torch.allclose(out["advantages"][rows], expected, atol=1e-5)


def test_shared_old_logp_pass_gives_entropies(tmp_path, tiny_model_path, sample_dataset):
    """With num_iterations=2 TRL computes old log-probs itself; HiR takes entropies from that same pass."""
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, num_iterations=2, max_steps=2),
                         train_dataset=sample_dataset)
    calls = spy_generation(trainer, own_logps=False)
    passes = []
    original = trainer._get_per_token_logps_and_entropies

    def counting(model, input_ids, *args, **kwargs):
        passes.append((trainer.model.training, torch.is_grad_enabled(), input_ids.shape[0]))
        return original(model, input_ids, *args, **kwargs)

    trainer._get_per_token_logps_and_entropies = counting
    trainer.train()
    assert len(calls) == 1  # one generation, reused for 2 iterations
    inputs, out, replay = calls[0]
    no_grad_passes = [p for p in passes if not p[1]]
    assert len(no_grad_passes) == 1 and no_grad_passes[0][2] == len(inputs)  # one pass over the B originals
    for i, (kind, src) in enumerate(zip([r.kind for r in replay.new_rows], [r.source for r in replay.new_rows])):
        if kind == "replay":
            assert torch.equal(out["old_per_token_logps"][len(inputs) + i], out["old_per_token_logps"][src])


def test_model_card_tagged_hir(tmp_path, tiny_model_path, sample_dataset):
    trainer = HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path, save_strategy="steps", save_steps=1),
                         train_dataset=sample_dataset)
    trainer.train()
    card = (tmp_path / "out" / "checkpoint-1" / "README.md").read_text()
    assert "- hir" in card and "2512.23457" in card and "HiR" in card


def test_reward_funcs_are_functions_beside_one_constraint_reward(tmp_path, tiny_model_path, sample_dataset):
    # reward functions and reward models are accepted beside the constraint reward
    # (tests/verifiers/test_custom_constraints.py, tests/trainer/test_reward_models.py); anything else is not
    with pytest.raises(TypeError, match="got int 7"):
        HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path), train_dataset=sample_dataset,
                   reward_funcs=[ConstraintReward(), 7])
    with pytest.raises(TypeError, match="HiRConfig"):
        from trl import GRPOConfig

        HiRTrainer(model=str(tiny_model_path), args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False), train_dataset=sample_dataset)


def test_batch_layout_errors():
    with pytest.raises(ValueError, match="whole groups on every rank"):
        check_batch_layout(SimpleNamespace(num_generations=6, num_replays=2, steps_per_generation=1,
                                           per_device_train_batch_size=3))
    with pytest.raises(ValueError, match="does not split"):
        check_batch_layout(SimpleNamespace(num_generations=6, num_replays=2, steps_per_generation=3,
                                           per_device_train_batch_size=4))
    check_batch_layout(SimpleNamespace(num_generations=6, num_replays=2, steps_per_generation=2,
                                       per_device_train_batch_size=6))


def test_config_validation_and_paper_defaults(tmp_path):
    args = HiRConfig(output_dir=str(tmp_path), bf16=False, per_device_train_batch_size=6)
    assert (args.num_generations, args.num_replays, args.lambda_0, args.eta) == (6, 2, 2.0, 0.05)
    # hir-trl's measured defaults where it departs from the paper (docs/faithfulness.md)
    assert (args.replay_advantage, args.replay_weight, args.replay_truncated_completions, args.reward_mode) == (
        "positive", 1.0, False, "cla")
    # one generation call per step: a group short of candidates gets padding rows (the paper: a second call)
    assert args.replay_shortfall == "pad"
    for field, value in [("num_replays", -1), ("eta", -0.5), ("diversity_aggregation", "max"),
                         ("reward_mode", "dense"), ("replay_min_satisfied", -2), ("replay_shortfall", "some")]:
        with pytest.raises(ValueError, match=field):
            HiRConfig(output_dir=str(tmp_path), bf16=False, per_device_train_batch_size=6, **{field: value})
    from dataclasses import fields

    for f in fields(HiRConfig):
        if f.name in ("num_replays", "lambda_0", "eta", "replay_min_satisfied", "diversity_aggregation",
                      "reward_mode", "num_generations", "replay_shortfall"):
            assert f.metadata.get("help"), f.name
    json.dumps(args.to_dict())  # serialisable for the Hub / checkpoints


def test_evaluation_during_hir_training_keeps_the_completion_log_aligned(tmp_path, tiny_model_path, sample_dataset):
    """Eval batches have no replays; the completion table (written at every log, the evaluation's included) keeps
    equal columns and only the training step's rows."""
    trainer = HiRTrainer(model=str(tiny_model_path),
                         args=make_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1,
                                        per_device_eval_batch_size=6, log_completions=True,
                                        num_completions_to_print=0),
                         train_dataset=sample_dataset, eval_dataset=sample_dataset.select(range(2)))
    trainer.train()
    import pandas as pd

    # the eval log of step 1 rewrites the training table of step 1: it still holds that step's training rows only
    # (its sampled rows, then its replays and supplementary samples), the evaluation rows kept out
    table = pd.read_parquet(tmp_path / "out" / "completions" / "completions_00001.parquet")
    step1 = next(h for h in trainer.state.log_history if h.get("step") == 1 and "hir/replayed_rows" in h)
    sampled = table[~table["hindsight"] & ~table["supplementary"]]
    assert len(sampled) == trainer.args.generation_batch_size
    assert table["hindsight"].sum() == step1["hir/replayed_rows"]
    assert table["supplementary"].sum() == step1["hir/supplementary_samples"]
    assert table["row_id"].notna().all()
    assert any("eval_reward/ila" in h for h in trainer.state.log_history)
