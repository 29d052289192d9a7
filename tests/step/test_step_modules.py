"""The modules a HiR step is made of, without a trainer: Select-Rewrite, new rows, batch assembly, advantages, logs."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from hir_trl.data.templates import join_instruction
from hir_trl.rewards import VerdictMatrix
from hir_trl.step.advantages import add_replay_advantages, group_advantages, hir_advantages, kl_in_reward_per_token
from hir_trl.step.batch import (
    NewRow,
    extend_batch,
    group_members,
    plan_new_rows,
    row_rewards,
    sequence_advantages,
)
from hir_trl.step.log import COUNTS, StepTimer, completion_log_rows, replay_counts, replay_metrics
from hir_trl.step.replay import (
    ReplayChoice,
    load_replay_rng,
    save_replay_rng,
    select_group_replays,
    select_replays,
    select_rewrite,
)
from hir_trl.step.sampling import completion_ended, diversity_scores
from hir_trl.step.state import SupplementarySamples
from hir_trl.verifiers import Verdict


def _rows(n_groups, m, n_constraints=3):
    rows = []
    for g in range(n_groups):
        row = {"task": f"Task {g}", "template": "type1", "row_id": f"r{g}",
               "constraints": [{"text": f"Rule {g}.{j}", "kind": "hard"} for j in range(n_constraints)]}
        rows += [row] * m
    return rows


def test_select_rewrite_is_select_then_rewrite():
    m, k = 3, 1
    verdicts = [[True, False, False], [True, True, False], [True, True, True],
                [False, False, False], [False, True, True], [True, False, True]]
    diversity = [1.0, 0.5, 2.0, 9.0, 0.1, 0.2]
    rows = _rows(2, m)
    prompts = [[{"role": "system", "content": "sys"}, {"role": "user", "content": "orig"}]] * 3 + ["plain"] * 3
    picked = select_rewrite(verdicts, diversity, m, k, 2.0, prompts=prompts, inputs=rows)
    selected = select_replays(verdicts, diversity, m, k, 2.0)
    assert [[c.index for c in g] for g in picked] == [[c.index for c in g] for g in selected] == [[1], [2]]  # F = 0.5 + 2 x 2/3 in group 0; 0.2 + 2 x 2/3 > 0.1 + 2 x 2/3 in group 1
    first, second = picked[0][0], picked[1][0]
    assert first.q_prime == [{"role": "system", "content": "sys"},
                             {"role": "user", "content": join_instruction("Task 0", ["Rule 0.0", "Rule 0.1"],
                                                                          "type1")}]
    assert second.q_prime == join_instruction("Task 1", ["Rule 1.0", "Rule 1.2"], "type1")
    # one group: the same path as the batch function
    assert select_group_replays(verdicts[:3], diversity[:3], k, 2.0) == selected[0]


def test_plan_new_rows_orders_supplementary_replay_pad():
    choice = ReplayChoice(2, 1.0, 0.5, 0.5, (True, False), q_prime="q'")
    rows = plan_new_rows([[choice], []], [1, 2], [0, 0], group_size=4)
    assert [(r.kind, r.source, r.group) for r in rows] == [
        ("supplementary", 0, 0), ("supplementary", 1, 1), ("supplementary", 2, 1), ("replay", 2, 0)]
    assert rows[-1].q_prime == "q'"
    padded = plan_new_rows([[choice], []], [0, 0], [1, 2], group_size=4)
    assert [(r.kind, r.source, r.group) for r in padded] == [("replay", 2, 0), ("pad", 0, 0), ("pad", 4, 1),
                                                             ("pad", 4, 1)]
    assert group_members(padded, 8, 4, replays_in_group=False) == [[0, 1, 2, 3, 9], [4, 5, 6, 7, 10, 11]]
    assert group_members(padded, 8, 4, replays_in_group=True) == [[0, 1, 2, 3, 8, 9], [4, 5, 6, 7, 10, 11]]
    assert math.isnan(row_rewards([0.0] * 8, padded, replays={})[-1])
    assert row_rewards([0.0] * 8, padded, replays={0: 0.5})[8] == 0.5
    assert [r.kind for r in padded] == ["replay", "pad", "pad", "pad"]
    assert [r.q_prime for r in padded] == ["q'", None, None, None]


def test_extend_batch_copies_sources_and_left_pads_prompts():
    output = {"prompt_ids": torch.tensor([[0, 5, 6], [7, 8, 9]]), "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
              "completion_ids": torch.tensor([[1, 2], [3, 0]]), "completion_mask": torch.tensor([[1, 1], [1, 0]]),
              "old_per_token_logps": torch.tensor([[-1.0, -2.0], [-3.0, 0.0]])}
    supplement = {"prompt_ids": torch.tensor([[4]]), "prompt_mask": torch.tensor([[1]]),
                  "completion_ids": torch.tensor([[5, 6, 7]]), "completion_mask": torch.tensor([[1, 1, 1]]),
                  "old_per_token_logps": torch.tensor([[-0.5, -0.5, -0.5]])}
    choice = ReplayChoice(1, 0.0, 0.0, 0.5, (True, False))
    rows = [NewRow("supplementary", 0, 0), NewRow("replay", 1, 0, choice), NewRow("pad", 0, 0)]
    out = extend_batch(output, rows, supplement, [[11, 12, 13, 14]], pad_token_id=0)
    assert out["prompt_ids"].tolist() == [[0, 0, 5, 6], [0, 7, 8, 9], [0, 0, 0, 4], [11, 12, 13, 14], [0, 0, 5, 6]]
    assert out["completion_ids"].tolist() == [[1, 2, 0], [3, 0, 0], [5, 6, 7], [3, 0, 0], [1, 2, 0]]
    assert out["completion_mask"].tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]]
    assert out["old_per_token_logps"][3].tolist() == [-3.0, 0.0, 0.0]
    assert "advantages" not in out
    with pytest.raises(RuntimeError, match="lack the batch key"):
        extend_batch(output, rows, {k: v for k, v in supplement.items() if k != "old_per_token_logps"},
                     [[11]], pad_token_id=0)


def test_grpo_advantages_match_trl_formula_and_replay_terms():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, float("nan")])
    adv = group_advantages(rewards, [[0, 1, 2, 3, 4]], torch.ones(5, 2))
    r = rewards[:4]
    expected = (r - r.mean()) / (r.std() + 1e-4)
    assert torch.allclose(adv[:4], expected) and adv[4] == 0
    # 'positive': the sampled rows' advantages are exactly those without the replay; the replay gets +w
    choice = ReplayChoice(1, 0.0, 0.0, 0.5, (True, False))
    rows = [NewRow("replay", 1, 0, choice)]
    full = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    positive = hir_advantages(full, rows, 4, 4, torch.ones(5, 2), replay_advantage="positive", replay_weight=0.5)
    assert torch.allclose(positive[:4], expected) and positive[4].item() == pytest.approx(0.5)
    paired = hir_advantages(full, rows, 4, 4, torch.ones(5, 2), replay_advantage="paired", replay_weight=0.5)
    assert paired[1].item() == pytest.approx(expected[1].item() - 0.5)
    grouped = hir_advantages(full, rows, 4, 4, torch.ones(5, 2), replay_advantage="group")
    assert torch.allclose(grouped, (full - full.mean()) / (full.std() + 1e-4))
    with pytest.raises(ValueError, match="replay_advantage"):
        hir_advantages(full, rows, 4, 4, torch.ones(5, 2), replay_advantage="both")
    token = torch.zeros(5, 2)
    add_replay_advantages(token, full, [(4, 1)], torch.tensor([[1, 1]] * 4 + [[1, 0]]), 2.0, paired=True)
    assert token[4].tolist() == [2.0, 0.0] and token[1].tolist() == [-2.0, -2.0]


def test_reinforce_pp_whitening_and_kl_copy():
    rewards = torch.tensor([1.0, 0.0, float("nan")])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1]])
    adv = group_advantages(rewards, [[0, 1, 2]], mask, estimator="reinforce_pp")
    returns = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0])  # the 5 valid tokens (the NaN row has none)
    z = (returns - returns.mean()) / returns.std()
    assert torch.allclose(adv[0, :2], z[:2], atol=1e-5) and torch.allclose(adv[1], z[2:], atol=1e-5)
    assert adv[2].abs().sum() == 0 and adv[0, 2] == 0
    batch = {"old_per_token_logps": torch.tensor([[-1.0, -2.0], [-3.0, -4.0]]), "completion_mask": torch.ones(2, 2)}
    kl = kl_in_reward_per_token(batch, torch.zeros(2, 2), [NewRow("replay", 0, 0)], 1)
    assert kl[1].tolist() == kl[0].tolist() == [-1.0, -2.0]


def test_batch_helpers():
    assert diversity_scores(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[1, 1, 0]])) == [2.0]
    assert diversity_scores(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[1, 1, 0]]), "sum") == [4.0]
    assert completion_ended(torch.tensor([[5, 2, 0], [5, 6, 7]]), torch.tensor([[1, 1, 0], [1, 1, 1]]), [2]) == [
        True, False]
    # only the completion's own tokens count: an EOS id in the padding after them (pad token = EOS) ends nothing
    assert completion_ended(torch.tensor([[5, 6, 2], [5, 2, 2]]), torch.tensor([[1, 1, 0], [1, 1, 0]]), [2]) == [
        False, True]
    batch = {"advantages": torch.tensor([[1.0, 3.0], [2.0, 0.0]]), "completion_mask": torch.tensor([[1, 1], [1, 0]])}
    assert sequence_advantages(batch).tolist() == [2.0, 2.0]


SOFT = {"text": "Be formal.", "kind": "soft", "instruction_id": None}


def test_step_log_counts_metrics_and_log_rows():
    choice = ReplayChoice(1, 0.0, 2.0, 0.5, (True, False), q_prime="q'")
    rows = [NewRow("supplementary", 0, 1), NewRow("replay", 1, 0, choice), NewRow("pad", 0, 0)]
    rewards = [0.0, 0.0, 1.0, 0.0, 1.0, 1.0, float("nan")]
    lengths = [10, 30, 5, 15]  # completion tokens of the 4 sampled rows; the replay's source is row 1
    counts = replay_counts(rows, rewards, 4, 2, 2, fillers=1, generated_tokens=40, sampled_lengths=lengths)
    assert dict(zip(COUNTS, counts)) == {"replayed": 1, "slots": 4, "groups_all_failed": 1, "groups": 2,
                                         "integrity": 0.5, "entropy": 2.0, "supplementary": 1, "padded": 1,
                                         "relabelled": 0, "fillers": 1, "generated_tokens": 40, "sampled": 4,
                                         "sampled_tokens": 60, "replay_tokens": 30}
    with pytest.raises(ValueError, match="3 entries for 4 sampled rows"):
        replay_counts(rows, rewards, 4, 2, 2, fillers=1, generated_tokens=40, sampled_lengths=lengths[:3])
    # graded (CLA) rewards: a group with partial successes but none at 1 has still failed
    graded = replay_counts(rows, [0.5, 0.25, 1.0, 0.75, 1.0, 1.0, float("nan")], 4, 2, 2, fillers=1,
                           generated_tokens=40, sampled_lengths=lengths)
    assert dict(zip(COUNTS, graded))["groups_all_failed"] == 1
    metrics = replay_metrics(counts, 3.0, 2)
    assert metrics["hir/replayed_fraction"] == 0.25 and metrics["hir/rows_per_group"] == 3.0
    assert metrics["hir/replay_mean_length"] == 30.0 and metrics["hir/sampled_mean_length"] == 15.0
    nothing = replay_metrics([0] * 3 + [1] + [0] * (len(COUNTS) - 4), 1.0, 2)
    assert math.isnan(nothing["hir/replay_integrity_mean"]) and math.isnan(nothing["hir/replay_mean_length"])
    rule = {"text": "No commas.", "kind": "hard", "instruction_id": "punctuation:no_comma"}
    inputs = [{"row_id": "a", "constraints": [rule]}] * 2 + [{"row_id": "b", "constraints": [rule, SOFT]}] * 2
    supplement = SupplementarySamples(tensors={}, prompts=["q_b"], completions=["s"], rewards_per_func=[[1.0]],
                                      verdicts=VerdictMatrix([[Verdict(True), Verdict(
                                          False, "litellm.Timeout: judge timed out", "judge")]]))
    entries = completion_log_rows(rows, inputs, ["y0", "y1", "y2", "y3"], supplement, rewards, 4, 2)
    verdicts = json.dumps([{"constraint": "punctuation:no_comma", "kind": "hard", "source": "rule", "passed": True},
                           {"constraint": "Be formal.", "kind": "soft", "source": "judge", "passed": False,
                            "error": "litellm.Timeout: judge timed out"}])
    assert [tuple(e) for e in entries] == [("q_b", "s", "b", False, True, None, 1.0, verdicts),
                                           ("q'", "y1", "a", True, False, "[0]", 1.0, None)]
    assert entries[1].hindsight and entries[0].supplementary
    timer = StepTimer()
    with timer.timed("total"), timer.timed("selection"):
        pass
    assert timer.seconds["total"] >= timer.seconds["selection"] >= 0


def test_replay_rng_round_trip(tmp_path):
    rng = random.Random(3)
    rng.random()
    path = str(tmp_path / "hir_state.json")
    save_replay_rng(path, rng)
    expected = rng.random()
    other = random.Random(0)
    assert load_replay_rng(path, other) and other.random() == expected
    assert not load_replay_rng(str(tmp_path / "missing.json"), other)
