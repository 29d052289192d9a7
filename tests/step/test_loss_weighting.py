"""``replay_loss_weighting``: TRL's loss against the paper's written objective (eq. "hir"), computed by hand; the
``hir/replay_ratio_*`` metrics; the warning for settings that silence replays."""

from __future__ import annotations

import logging

import pytest
import torch

from hir_trl import HiRConfig, HiRTrainer
from hir_trl.step.advantages import hir_advantages
from hir_trl.step.batch import NewRow, loss_mask
from hir_trl.step.log import replay_ratio_counts
from hir_trl.step.loss_weighting import REPLAY_MASK, paper_advantage_scale, paper_row_weights, prepare_loss_batch

from ..testing_utils import make_args, spy_generation

M, K = 6, 2


def paper_objective(advantages, mask, new_rows, B, m, k):
    """Eq. "hir" at ratio 1 (min(rho A, clip(rho) A) = A), by hand: per group, the mean over the rows sampled under q
    (its m samples and supplementary samples) of each row's token mean of A, plus 1/k times the sum over its
    replays of the same, averaged over the groups. Returns the loss, minus that."""
    advantages = advantages if advantages.dim() == 2 else advantages.unsqueeze(1).expand_as(mask)
    mask = mask.to(torch.float64)
    per_row = [float((advantages[i].double() * mask[i]).sum() / mask[i].sum()) if mask[i].sum() else 0.0
               for i in range(mask.size(0))]
    total = 0.0
    for g in range(B // m):
        under_q = list(range(g * m, (g + 1) * m)) + [B + i for i, r in enumerate(new_rows)
                                                     if r.group == g and r.kind == "supplementary"]
        replays = [B + i for i, r in enumerate(new_rows) if r.group == g and r.kind == "replay"]
        total += sum(per_row[i] for i in under_q) / len(under_q) + sum(per_row[i] for i in replays) / k
    return -total / (B // m)


def unscaled_advantages(trainer, out, replay, B):
    """The batch's advantages before the weighting, recomputed from its rewards (`hir_advantages`)."""
    args = trainer.args
    return hir_advantages(torch.tensor(replay.rewards, dtype=torch.float32), replay.new_rows, B, M, loss_mask(out),
                          replay_advantage=args.replay_advantage, replay_weight=args.replay_weight,
                          estimator=args.advantage_estimator, scale_rewards=trainer.scale_rewards)


def trl_loss(trainer, batch):
    with torch.no_grad():
        return trainer._compute_loss(trainer.model, batch).item()


# ---------------------------------------------------------------- the weights themselves


def test_paper_row_weights_by_kind():
    """Group 0: 1 replay + 1 supplementary sample; group 1: 2 replays; group 2: 1 replay + 1 pad."""
    rows = [NewRow("supplementary", 0, 0), NewRow("replay", 1, 0), NewRow("replay", 7, 1), NewRow("replay", 8, 1),
            NewRow("replay", 13, 2), NewRow("pad", 12, 2)]
    w = paper_row_weights(rows, 18, M, K).tolist()
    assert w[:6] == [1 / 7] * 6 and w[6:18] == [1 / 6] * 12  # the supplementary sample joins its group's mean under q
    assert w[18:] == [1 / 7, 1 / 2, 1 / 2, 1 / 2, 1 / 2, 0.0]
    scale = paper_advantage_scale(torch.tensor([0.5, 0.25, 1.0]), torch.tensor([4, 2, 0]), 12.0, 3)
    assert scale.tolist() == [0.5 * 12 / (3 * 4), 0.25 * 12 / (3 * 2), 0.0]  # w N / (G |y|); 0 for an empty row
    with pytest.raises(ValueError, match="num_replays >= 1"):
        paper_row_weights(rows, 18, M, 0)


def test_token_weighting_leaves_the_batch_as_it_is():
    advantages = torch.randn(8, 5)
    batch = {"advantages": advantages, "completion_mask": torch.ones(8, 5, dtype=torch.long),
             "num_items_in_batch": torch.tensor(40)}
    rows = [NewRow("replay", 0, 0), NewRow("pad", 1, 0)]
    prepare_loss_batch(batch, rows, 6, M, weighting="token", num_replays=K)
    assert batch["advantages"] is advantages  # the same tensor, untouched: TRL's dapo token mean as before
    assert batch[REPLAY_MASK].tolist() == [False] * 6 + [True, False]
    with pytest.raises(ValueError, match="replay_loss_weighting"):
        prepare_loss_batch(batch, rows, 6, M, weighting="sequence", num_replays=K)


@pytest.mark.parametrize("token_level", [False, True])
def test_dapo_sum_over_num_items_is_eq_hir_for_any_lengths(token_level):
    """Responses of different lengths (the trainer tests' tiny model always runs to the limit): TRL's dapo loss at
    ratio 1, -sum(A' mask) / N, on the scaled advantages A' is eq. "hir", and any split of the rows adds up to it."""
    gen = torch.Generator().manual_seed(0)
    B, T = 12, 9
    rows = [NewRow("supplementary", 0, 0), NewRow("replay", 1, 0), NewRow("replay", 7, 1), NewRow("replay", 9, 1)]
    N = B + len(rows)
    lengths = torch.randint(1, T + 1, (N,), generator=gen)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()
    advantages = torch.randn((N, T) if token_level else (N,), generator=gen)
    batch = {"advantages": advantages.clone(), "completion_mask": mask, "num_items_in_batch": mask.sum()}
    prepare_loss_batch(batch, rows, B, M, weighting="paper", num_replays=K)
    scaled = batch["advantages"] if token_level else batch["advantages"].unsqueeze(1)
    dapo = -(scaled * mask).sum() / mask.sum()
    assert dapo.item() == pytest.approx(paper_objective(advantages, mask, rows, B, M, K), rel=1e-5)
    halves = [-(scaled[part] * mask[part]).sum() / mask.sum() for part in (slice(0, 7), slice(7, N))]
    assert sum(h.item() for h in halves) == pytest.approx(dapo.item(), rel=1e-5)


# ---------------------------------------------------------------- TRL's loss is eq. "hir"


# TRL's loss on both advantage shapes ((N,) grpo, (N, T) Reinforce++) and both shortfall rows (pads,
# supplementary samples); the weights of the other two pairings are checked model-free by
# test_dapo_sum_over_num_items_is_eq_hir_for_any_lengths and tests/step/test_step.py's
# test_the_update_batch_holds_B_plus_groups_times_k_rows[paper]
@pytest.mark.parametrize("shortfall, estimator", [
    pytest.param("pad", "grpo", id="pad-grpo"),
    pytest.param("resample", "reinforce_pp", id="resample-reinforce_pp"),
])
def test_trl_loss_is_the_papers_objective(tmp_path, tiny_model_path, sample_dataset, estimator, shortfall):
    """With replay_old_logps 'hindsight' on aligned steps no old log-probs are stored, so every ratio is exactly 1
    and eq. "hir" is the weighted mean of the advantages: TRL's loss on the paper-weighted batch must equal it.
    replay_min_satisfied 2 leaves some groups short of candidates (supplementary samples or pads)."""
    trainer = HiRTrainer(model=str(tiny_model_path), train_dataset=sample_dataset, args=make_args(
        tmp_path, replay_loss_weighting="paper", replay_old_logps="hindsight", advantage_estimator=estimator,
        replay_shortfall=shortfall, replay_min_satisfied=2, per_device_train_batch_size=24))
    calls = spy_generation(trainer, own_logps=False)
    trainer.train()
    inputs, out, replay = calls[0]
    B = len(inputs)
    kinds = {r.kind for r in replay.new_rows}
    assert "replay" in kinds and ({"supplementary"} if shortfall == "resample" else {"pad"}) <= kinds, kinds
    assert "old_per_token_logps" not in out  # ratio exactly 1
    unscaled = unscaled_advantages(trainer, out, replay, B)
    mask = loss_mask(out)
    expected = paper_objective(unscaled, mask, replay.new_rows, B, M, K)
    assert trl_loss(trainer, out) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    # and it is not TRL's token mean over the m + k rows
    token_mean = -float((unscaled.unsqueeze(1) if unscaled.dim() == 1 else unscaled).mul(mask).sum() / mask.sum())
    assert expected != pytest.approx(token_mean, rel=1e-3)


def test_micro_batches_add_up_to_the_whole_batch(tmp_path, tiny_model_path, sample_dataset):
    """steps_per_generation 2 and gradient accumulation 2: the two micro-batches' losses (TRL shuffles and splits
    the generation batch) sum to the whole batch's eq. "hir"."""
    trainer = HiRTrainer(model=str(tiny_model_path), train_dataset=sample_dataset, args=make_args(
        tmp_path, replay_loss_weighting="paper", replay_old_logps="hindsight", advantage_estimator="reinforce_pp",
        per_device_train_batch_size=6, steps_per_generation=2, gradient_accumulation_steps=2))
    calls = spy_generation(trainer, own_logps=False)
    losses = []
    original = trainer._compute_loss

    def recording(model, inputs):
        loss = original(model, inputs)
        losses.append((loss.item(), inputs["completion_ids"].size(0)))
        return loss

    trainer._compute_loss = recording
    trainer.train()
    inputs, out, replay = calls[0]
    B = len(inputs)
    assert [n for _, n in losses] == [(B + len(replay.new_rows)) // 2] * 2
    expected = paper_objective(unscaled_advantages(trainer, out, replay, B), loss_mask(out), replay.new_rows, B, M, K)
    assert sum(loss for loss, _ in losses) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert trl_loss(trainer, out) == pytest.approx(expected, rel=1e-5, abs=1e-7)  # the whole batch at once


def test_token_weighting_is_trls_token_mean(tmp_path, tiny_model_path, sample_dataset):
    """The default: the advantages are the estimator's, unscaled, and TRL's loss is their token mean over all rows."""
    trainer = HiRTrainer(model=str(tiny_model_path), train_dataset=sample_dataset,
                         args=make_args(tmp_path, replay_old_logps="hindsight"))
    assert trainer.args.replay_loss_weighting == "token"
    calls = spy_generation(trainer, own_logps=False)
    trainer.train()
    inputs, out, replay = calls[0]
    unscaled = unscaled_advantages(trainer, out, replay, len(inputs))
    assert torch.equal(out["advantages"], unscaled)
    mask = loss_mask(out)
    assert trl_loss(trainer, out) == pytest.approx(-float((unscaled.unsqueeze(1) * mask).sum() / mask.sum()),
                                                   rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("overrides", [dict(loss_type="grpo"), dict(loss_type="bnpo"), dict(num_replays=0)])
def test_paper_weighting_refuses_other_losses_and_no_replay(tmp_path, overrides):
    with pytest.raises(ValueError, match="replay_loss_weighting: paper needs loss_type: dapo and num_replays >= 1"):
        make_args(tmp_path, replay_loss_weighting="paper", **overrides)


# ---------------------------------------------------------------- hir/replay_ratio_mean, hir/replay_clip_ratio


def test_replay_ratio_counts_hand_computed():
    logps = torch.zeros(3, 2)
    # ratios 1, 1 | 3, 0.9 | 1, 1: an inverted ratio (old / new) would read 1/3 and 1.11, not the same two swapped
    old = torch.log(torch.tensor([[1.0, 1.0], [1 / 3, 1 / 0.9], [1.0, 1.0]]))
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    replay = torch.tensor([False, True, True])
    out = replay_ratio_counts(logps, old, mask, replay, torch.tensor([1.0, 1.0, -1.0]), epsilon_low=0.2,
                              epsilon_high=0.2)
    # replay tokens: 3 (clipped: A > 0, ratio > 1.2), 0.9 (not: A > 0 keeps the low side), 1
    assert out.tolist() == pytest.approx([4.9, 1.0, 3.0])
    out = replay_ratio_counts(logps, old, mask, replay, torch.tensor([1.0, -1.0, -1.0]), epsilon_low=0.2,
                              epsilon_high=0.2)
    assert out.tolist() == pytest.approx([4.9, 0.0, 3.0])  # A < 0: 3 is not clipped, nor 0.9 (>= 1 - 0.2)
    low = torch.log(torch.tensor([[1.0, 1.0], [1 / 0.5, 1.0], [1.0, 1.0]]))  # ratios 0.5, 1 on row 1
    out = replay_ratio_counts(logps, low, mask, replay, torch.tensor([1.0, -1.0, -1.0]), epsilon_low=0.2,
                              epsilon_high=0.2)
    assert out.tolist() == pytest.approx([2.5, 1.0, 3.0])  # A < 0: 0.5 < 1 - 0.2 is clipped
    seq = replay_ratio_counts(logps, old, mask, replay, torch.tensor([1.0, 1.0, 1.0]), epsilon_low=0.2,
                              epsilon_high=0.2, level="sequence")
    # per row: exp(mean(log 3, log 0.9)) = sqrt(2.7) (clipped: A > 0, > 1.2), and 1
    assert seq.tolist() == pytest.approx([2.7 ** 0.5 + 1.0, 1.0, 2.0])
    assert replay_ratio_counts(logps, None, mask, replay, torch.ones(3), epsilon_low=0.2,
                               epsilon_high=0.2).tolist() == pytest.approx([3.0, 0.0, 3.0])  # no old: ratio 1


@pytest.mark.parametrize("mode", ["hindsight", "original"])
def test_replay_ratio_metrics_from_the_loss_pass(tmp_path, tiny_model_path, sample_dataset, mode):
    trainer = HiRTrainer(model=str(tiny_model_path), train_dataset=sample_dataset,
                         args=make_args(tmp_path, replay_old_logps=mode, max_steps=2))
    passes = []
    original = trainer._get_per_token_logps_and_entropies

    def counting(*args, **kwargs):
        passes.append(torch.is_grad_enabled())
        return original(*args, **kwargs)

    trainer._get_per_token_logps_and_entropies = counting
    trainer.train()
    assert passes.count(True) == 2  # the loss's own forward, one per micro-batch: no pass added for the metrics
    logged = [e for e in trainer.state.log_history if "hir/replay_ratio_mean" in e]
    assert len(logged) == 2
    for entry in logged:
        if mode == "hindsight":  # pi_theta(y | q') / pi_old(y | q') at the first iteration: exactly 1
            assert entry["hir/replay_ratio_mean"] == 1.0 and entry["hir/replay_clip_ratio"] == 0.0
        else:  # pi_theta(y | q') / pi_old(y | q)
            assert entry["hir/replay_ratio_mean"] != pytest.approx(1.0, abs=1e-3)
            assert 0.0 <= entry["hir/replay_clip_ratio"] <= 1.0
    assert "hir/replay_clip_ratio" in logged[0]


# ---------------------------------------------------------------- the warning


@pytest.mark.parametrize("settings", [dict(importance_sampling_level="sequence"), dict(loss_type="vespo"),
                                      dict(importance_sampling_level="sequence", loss_type="vespo"),
                                      dict(importance_sampling_level="sequence", replay_old_logps="original")])
def test_settings_that_silence_replays_warn_once(tmp_path, caplog, settings):
    with caplog.at_level(logging.WARNING, logger="hir_trl.configs"):
        HiRConfig(output_dir=str(tmp_path), use_cpu=True, **settings)
    lines = [r.getMessage() for r in caplog.records if r.name == "hir_trl.configs"]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "replay_old_logps: hindsight" in lines[0]
    for setting in ("importance_sampling_level: sequence", "loss_type: vespo"):
        assert (setting in lines[0]) == (setting.split(": ")[0] in settings), lines[0]


@pytest.mark.parametrize("settings", [dict(importance_sampling_level="sequence", replay_old_logps="hindsight"),
                                      dict(loss_type="vespo", replay_old_logps="hindsight"),
                                      dict(importance_sampling_level="sequence", num_replays=0), dict()])
def test_no_warning_otherwise(tmp_path, caplog, settings):
    with caplog.at_level(logging.WARNING, logger="hir_trl.configs"):
        HiRConfig(output_dir=str(tmp_path), use_cpu=True, **settings)
    assert not [r for r in caplog.records if r.name == "hir_trl.configs"]
