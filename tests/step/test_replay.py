"""The replay core (paper Algorithm 1) against hand-computed cases, plus a property test of the rewrite."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hir_trl.data.templates import TEMPLATES, join_instruction
from hir_trl.step.replay import (
    LAMBDA_MAX,
    constraint_integrity,
    curriculum_lambda,
    curriculum_scores,
    hindsight_instruction,
    hindsight_messages,
    replay_candidates,
    select_group_replays,
    select_top_k,
)


def test_curriculum_lambda_matches_paper_schedule():
    # lambda_s = lambda_0 * (1 + eta)^s with the paper's lambda_0 = 2, eta = 0.05
    assert curriculum_lambda(0, 2.0, 0.05) == 2.0
    assert curriculum_lambda(1, 2.0, 0.05) == pytest.approx(2.1)
    assert curriculum_lambda(2, 2.0, 0.05) == pytest.approx(2.205)
    assert curriculum_lambda(100, 2.0, 0.05) == pytest.approx(263.0, rel=1e-3)  # design §2: ~263 by step 100
    assert curriculum_lambda(7, 1.5, 0.0) == 1.5


@pytest.mark.parametrize(("lambda_0", "eta", "step"), [(2.0, 0.05, 14_548), (2.0, 0.05, 10**9), (2.0, 5.0, 397),
                                                      (2.0, 1.0, 10**12), (0.0, 0.5, 10**6)])
def test_curriculum_lambda_is_finite_and_capped_for_any_step(lambda_0, eta, step):
    # uncapped, lambda_0 * (1 + eta) ** step raises OverflowError at these steps
    lam = curriculum_lambda(step, lambda_0, eta)
    assert math.isfinite(lam)
    assert lam == (LAMBDA_MAX if lambda_0 > 0 else 0.0)


def test_curriculum_lambda_cap_boundary_and_monotone():
    # the paper's schedule reaches the cap between steps 268 and 269, and never decreases
    assert curriculum_lambda(268, 2.0, 0.05) < LAMBDA_MAX == curriculum_lambda(269, 2.0, 0.05)
    values = [curriculum_lambda(s, 2.0, 0.05) for s in range(0, 400)]
    assert values == sorted(values)
    assert curriculum_lambda(268, 2.0, 0.05) == pytest.approx(2.0 * 1.05 ** 268)
    # a lambda_0 above the cap is kept as given (the cap never lowers the user's starting weight)
    assert curriculum_lambda(50, 2e6, 0.05) == 2e6


def test_capped_lambda_ranks_like_integrity_then_entropy():
    # past the cap, selection is integrity first, entropy as the tie-break: what the uncapped formula does in exact
    # arithmetic (in floats, 1e300 + H == 1e300 would lose the tie-break)
    integrity = [0.5, 0.75, 0.75, 0.25]
    entropy = [11.0, 0.1, 0.2, 11.5]
    lam = curriculum_lambda(10**6, 2.0, 0.05)
    scores = curriculum_scores(entropy, integrity, lam)
    assert sorted(range(4), key=lambda i: -scores[i]) == [2, 1, 0, 3]
    with pytest.raises(ValueError, match="step"):
        curriculum_lambda(-1, 2.0, 0.05)
    with pytest.raises(ValueError, match="eta"):
        curriculum_lambda(1, 2.0, -0.1)


def test_constraint_integrity_is_fraction_met():
    assert constraint_integrity([True, False, True, True]) == 0.75
    assert constraint_integrity([False]) == 0.0
    with pytest.raises(ValueError):
        constraint_integrity([])


def test_replay_candidates_are_failed_with_enough_satisfied():
    verdicts = [[True, True], [True, False], [False, False], [False, True], [True, True, False]]
    assert replay_candidates(verdicts) == [1, 3, 4]  # row 0 succeeded, row 2 met nothing
    assert replay_candidates(verdicts, min_satisfied=0) == [1, 2, 3, 4]
    assert replay_candidates(verdicts, min_satisfied=2) == [4]
    with pytest.raises(ValueError):
        replay_candidates(verdicts, min_satisfied=-1)


def test_curriculum_scores_and_top_k():
    scores = curriculum_scores([1.0, 3.0, 0.5], [0.5, 0.25, 1.0], 2.0)
    assert scores == [2.0, 3.5, 2.5]
    assert select_top_k(scores, [0, 1, 2], 2) == [1, 2]
    assert select_top_k(scores, [0, 2], 5) == [2, 0]  # fewer candidates than k
    assert select_top_k([1.0, 1.0, 1.0], [2, 0, 1], 2) == [0, 1]  # ties: lower index first
    assert select_top_k([math.nan, 0.0], [0, 1], 1) == [1]  # NaN ranks last
    assert select_top_k(scores, [0, 1, 2], 0) == []
    with pytest.raises(ValueError):
        curriculum_scores([1.0], [0.5, 0.5], 1.0)


def test_algorithm1_early_prefers_diversity_late_prefers_integrity():
    # A group of m = 6 responses to an instruction with 4 constraints.
    verdicts = [
        [True, True, True, True],     # 0: success, never a candidate
        [True, False, False, False],  # 1: F_int 0.25, high entropy
        [True, True, True, False],    # 2: F_int 0.75, low entropy
        [False, False, False, False], # 3: met nothing: not a candidate
        [True, True, False, False],   # 4: F_int 0.5
        [True, True, True, False],    # 5: F_int 0.75, mid entropy
    ]
    entropy = [9.0, 6.0, 1.0, 9.0, 3.0, 2.0]
    # step 0, lambda = 2: F = [-, 6.5, 2.5, -, 4.0, 3.5] -> rows 1 and 4
    early = select_group_replays(verdicts, entropy, k=2, lam=curriculum_lambda(0, 2.0, 0.05))
    assert [c.index for c in early] == [1, 4]
    assert early[0].score == pytest.approx(6.5) and early[1].score == pytest.approx(4.0)
    assert early[0].satisfied == (True, False, False, False)
    # step 60, lambda = 2 * 1.05^60 = 37.36: F = [-, 15.34, 29.02, -, 21.68, 30.02] -> rows 5 and 2
    late = select_group_replays(verdicts, entropy, k=2, lam=curriculum_lambda(60, 2.0, 0.05))
    assert [c.index for c in late] == [5, 2]
    assert late[0].integrity == 0.75 and late[0].diversity == 2.0
    # k larger than the candidates: every candidate, best first
    assert [c.index for c in select_group_replays(verdicts, entropy, k=6, lam=2.0)] == [1, 4, 5, 2]


def test_templates_join_hand_computed():
    x, cs = "Describe Paris", ["Use 3 bullets", "No commas.", "End with 'Bye'?"]
    assert join_instruction(x, cs, "type1") == "Describe Paris Use 3 bullets. No commas. End with 'Bye'?"
    assert join_instruction(x, cs, "type2") == "Describe Paris\nUse 3 bullets.\nNo commas.\nEnd with 'Bye'?"
    assert join_instruction(x, cs, "type3") == (
        "Describe Paris\n\nThe output must follow the following rules:\n1. Use 3 bullets\n2. No commas.\n"
        "3. End with 'Bye'?")
    assert join_instruction(x, cs, "type4") == "Describe Paris\n\n- Use 3 bullets\n- No commas.\n- End with 'Bye'?"
    assert join_instruction(x, cs, "type5") == "Use 3 bullets\nNo commas.\nEnd with 'Bye'?\n\nDescribe Paris"
    assert join_instruction(x, cs, "type6") == "Describe Paris\n\nUse 3 bullets\nNo commas.\nEnd with 'Bye'?"
    assert join_instruction(x, cs, "plain") == "Describe Paris\n\nUse 3 bullets. No commas. End with 'Bye'?"
    for name in TEMPLATES:
        assert join_instruction(x, [], name) == x
    with pytest.raises(KeyError, match="type9"):
        join_instruction(x, cs, "type9")


def test_hindsight_instruction_drops_unmet_constraints():
    q_prime = hindsight_instruction("Write a poem", ["Rhyme", "Use 4 lines", "No commas"], [True, False, True], "type3")
    assert q_prime == "Write a poem\n\nThe output must follow the following rules:\n1. Rhyme\n2. No commas"
    with pytest.raises(ValueError):
        hindsight_instruction("x", ["a", "b"], [True], "type3")


def test_hindsight_messages_change_only_final_user_turn():
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "original q"},
    ]
    out = hindsight_messages(messages, "q prime")
    assert out[:3] == messages[:3]
    assert out[3] == {"role": "user", "content": "q prime"}
    assert messages[3]["content"] == "original q"  # input untouched
    with pytest.raises(ValueError, match="user turn"):
        hindsight_messages(messages[:3], "q prime")


_constraint_sets = st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=8, unique=True).flatmap(
    lambda ids: st.tuples(st.just([f"Constraint K{i}Z must hold" for i in ids]),
                          st.lists(st.booleans(), min_size=len(ids), max_size=len(ids))))


@settings(max_examples=200, deadline=None)
@given(data=_constraint_sets, template=st.sampled_from(sorted(TEMPLATES)), task=st.sampled_from(
    ["Summarize the article", "Write a cover letter for a barista job", "Explain recursion"]))
def test_property_q_prime_keeps_exactly_satisfied_in_order(data, template, task):
    constraints, verdicts = data
    q_prime = hindsight_instruction(task, constraints, verdicts, template)
    kept_markers = re.findall(r"K(\d+)Z", q_prime)
    expected = [re.search(r"K(\d+)Z", c).group(1) for c, ok in zip(constraints, verdicts) if ok]
    assert kept_markers == expected  # exactly the satisfied constraints, in their original order
    assert task in q_prime
    assert q_prime == join_instruction(task, [c for c, ok in zip(constraints, verdicts) if ok], template)


def test_replay_candidates_respect_eligibility():
    from hir_trl.step.replay import replay_candidates, select_replays

    verdicts = [[1, 0], [1, 0], [1, 1], [0, 1]]
    assert replay_candidates(verdicts, 1) == [0, 1, 3]
    assert replay_candidates(verdicts, 1, [True, False, True, True]) == [0, 3]
    picked = select_replays(verdicts, [0.0, 9.0, 0.0, 1.0], 4, 2, 1.0, eligible=[True, False, True, True])
    assert [c.index for c in picked[0]] == [3, 0]  # the highest-scoring row 1 is not eligible
    with pytest.raises(ValueError, match="eligibility"):
        replay_candidates(verdicts, 1, [True])
