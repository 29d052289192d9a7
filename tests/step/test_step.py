"""The HiR step (`hir_trl.step.complete_groups`) block by block of the paper's Algorithm 2, with no model.

The step reaches the trainer only through `hir_trl.step.StepPasses`; `tests.fakes.FakePasses` implements it
on CPU tensors (word tokens, log-probs and entropies from a formula of the token ids), and its ``generate_and_score``
stands in for TRL's generation and reward call (lines 7-10) with scripted completions judged by the real rule
verifiers. Every expected number below is computed in the test, by hand, from the table `MET` of which constraints
each completion meets: the rewards (line 9), Select-Rewrite (lines 12-13, Algorithm 1), the replay rows and r_k
(lines 14-17), the advantages (line 20), the batch TRL's update gets (line 21), lambda (line 22) and both
``replay_shortfall`` policies (paper §3.2).
"""

from __future__ import annotations

import inspect
import json
import math
import statistics
from types import SimpleNamespace

import pytest
import torch

from hir_trl import ConstraintReward, HiRConfig
from hir_trl.step import StepPasses, complete_groups
from hir_trl.step.shortfall import shortfall_policy
from hir_trl.verifiers import Verdict

from ..fakes import EOS, PAD, FakePasses, fake_entropy, fake_logp, fake_ref_logp
from .utils import dataset_row, ifeval_constraint

M, K, B = 6, 2, 12  # two groups of m = 6, k = 2

WORDS = ifeval_constraint("Use fewer than 6 words.", "length_constraints:number_words", relation="less than",
                          num_words=6)
COMMA = ifeval_constraint("Do not use any commas.", "punctuation:no_comma")
LANTERN = ifeval_constraint("Include the keyword lantern.", "keywords:existence", keywords=["lantern"])

# completions, and the constraints (WORDS, COMMA, LANTERN) each meets, by hand
ALL, ALL2 = "red lantern", "lantern glows softly"
WORDS_LANTERN = "a lantern, b"
COMMA_LANTERN = "the lantern is here now today ok"
COMMA_ONLY = "one two three four five six seven"
WORDS_ONLY = "one, two"
NONE = "one, two, three, four, five, six, seven"
MET = {ALL: (True, True, True), ALL2: (True, True, True), WORDS_LANTERN: (True, False, True),
       COMMA_LANTERN: (False, True, True), COMMA_ONLY: (False, True, False), WORDS_ONLY: (True, False, False),
       NONE: (False, False, False)}

# group 0: candidates (failed, at least one constraint met) are rows 1, 2, 4 and 5; group 1: only row 3 (z = 1 < k)
GROUP0 = [ALL, WORDS_LANTERN, COMMA_ONLY, NONE, COMMA_LANTERN, WORDS_ONLY]
GROUP1 = [ALL, ALL2, NONE, WORDS_ONLY, ALL, NONE]
# the entropy recorded at every token of each completion: F_div ("mean") of the row
ENTROPY0 = [0.1, 0.5, 3.0, 9.0, 0.45, 1.0]
ENTROPY1 = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]

ROWS = [dataset_row("Write a note.", [WORDS, COMMA, LANTERN], row_id="note"),
        dataset_row("Describe a kettle.", [WORDS, COMMA, LANTERN], template="type2", row_id="kettle",
                    messages=[{"role": "system", "content": "Be brief."}])]
# q' of each group-0 candidate and of group 1's (plain template: x, a blank line, the kept constraints; type2: one
# per line), exactly the satisfied constraints in their order
Q_PRIME = {
    (0, 1): [{"role": "user", "content": "Write a note.\n\nUse fewer than 6 words. Include the keyword lantern."}],
    (0, 2): [{"role": "user", "content": "Write a note.\n\nDo not use any commas."}],
    (0, 4): [{"role": "user", "content": "Write a note.\n\nDo not use any commas. Include the keyword lantern."}],
    (0, 5): [{"role": "user", "content": "Write a note.\n\nUse fewer than 6 words."}],
    (1, 3): [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "Describe a kettle.\nUse fewer than 6 words."}],
}


def length(text: str, ended: bool = True) -> int:
    """Loss tokens of a completion: one per word, plus EOS."""
    return len(text.split()) + ended


def ila(text: str) -> float:
    return float(all(MET[text]))


def cla(text: str) -> float:
    return sum(MET[text]) / 3


def config(tmp_path, **overrides) -> HiRConfig:
    values = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=B,
                  reward_mode="ila", hindsight_relabel="drop")
    return HiRConfig(**{**values, **overrides})


def run_step(tmp_path, groups=(GROUP0, GROUP1), rows=ROWS, *, entropies=(ENTROPY0, ENTROPY1), ended=True,
             record=True, old_logps=False, vllm=False, global_step=0, supplementary=None, extra_reward_funcs=(),
             judge=None, **overrides):
    """One HiR step (lines 7-20) on scripted completions: the fake's sampling and rewards, then `complete_groups`."""
    args = config(tmp_path, **overrides)
    passes = FakePasses(args, global_step=global_step, supplementary=supplementary,
                        extra_reward_funcs=extra_reward_funcs, judge=judge)
    inputs, output, capture = passes.generate_and_score(rows, [list(g) for g in groups], ended=ended,
                                                        entropies=entropies and [list(e) for e in entropies],
                                                        record=record, old_logps=old_logps, vllm=vllm)
    batch, step = complete_groups(passes, shortfall_policy(args.replay_shortfall, args.num_replays), inputs, output,
                                  capture)
    return SimpleNamespace(passes=passes, inputs=inputs, capture=capture, batch=batch, step=step,
                           texts=[t for g in groups for t in g])


def new_rows(step):
    """(kind, source, group) of every new row."""
    return [(row.kind, row.source, row.group) for row in step.new_rows]


def metric(run, name):
    (value,) = run.passes.metrics[name]
    return value


def tokens(batch, key, row):
    """A row's unpadded ``prompt`` or ``completion`` ids."""
    return batch[f"{key}_ids"][row][batch[f"{key}_mask"][row].bool()].tolist()


def fake_tokens(run, text, ended=True):
    return run.passes.tokenizer.encode(text) + ([EOS] if ended else [])


def prompt_length(run, prompt):
    return len(run.passes.tokenizer.prompt_ids(prompt))


# ---------------------------------------------------------------- the fake itself


def test_the_fake_implements_every_step_passes_member(tmp_path):
    """`FakePasses` holds every attribute of the protocol and each method with the protocol's parameters, so the
    step meets in these tests what it meets in the trainer (`hir_trl.trl_adapter.TRLPasses`)."""
    passes = FakePasses(config(tmp_path))
    members = set(StepPasses.__annotations__) | {name for name, value in vars(StepPasses).items()
                                                 if callable(value) and not name.startswith("_")}
    assert {"policy_pass", "supplementary_samples", "gather", "log_metric", "args", "global_step"} <= members
    for name in sorted(members):
        assert hasattr(passes, name), name
        protocol = vars(StepPasses).get(name)
        if callable(protocol):
            expected = list(inspect.signature(protocol).parameters)[1:]
            assert list(inspect.signature(getattr(passes, name)).parameters) == expected, name


def test_the_scripted_completions_meet_what_the_table_says(tmp_path):
    """The rule verifiers (`ConstraintReward`, as TRL's reward call runs it) agree with `MET`, so every verdict below
    is a real one."""
    run = run_step(tmp_path)
    assert [tuple(run.capture.verdicts.passed(i)) for i in range(B)] == [MET[t] for t in run.texts]


# ---------------------------------------------------------------- lines 7-10 and 16: rewards


@pytest.mark.parametrize("reward_mode", ["ila", "cla"])
def test_sampled_rows_get_ila_or_cla_and_replays_reward_1(tmp_path, reward_mode):
    run = run_step(tmp_path, reward_mode=reward_mode)
    expected = {"ila": [1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0],
                "cla": [1, 2 / 3, 1 / 3, 0, 2 / 3, 1 / 3, 1, 1, 0, 1 / 3, 1, 0]}[reward_mode]
    assert run.step.rewards[:B] == pytest.approx(expected)
    assert run.step.rewards[:B] == pytest.approx([ila(t) if reward_mode == "ila" else cla(t) for t in run.texts])
    assert new_rows(run.step) == [("replay", 2, 0), ("replay", 1, 0), ("replay", 9, 1), ("pad", 6, 1)]
    assert run.step.rewards[B:B + 3] == [1.0, 1.0, 1.0]  # r_k = 1 under either mode: q' keeps what y met
    assert math.isnan(run.step.rewards[B + 3])  # a pad has no reward
    # the m sampled rows of group 1 hold successes: no group failed entirely under either mode
    assert metric(run, "hir/groups_all_failed") == 0.0


def length_reward(prompts, completions, completion_ids, constraints, **kwargs):
    """An extra TRL-style reward: tokens / 16 plus 0.1 per constraint of the row."""
    return [len(ids) / 16 + 0.1 * len(kept) for ids, kept in zip(completion_ids, constraints, strict=True)]


def test_a_replays_extra_rewards_are_computed_on_its_own_q_prime(tmp_path):
    """Line 16 with a second reward function (``reward_weights`` [1, 0.5]): a sampled row's reward is TRL's weighted
    sum on (q, y); a replay's is 1 x 1 plus 0.5 x the function on (q', y), which keeps only the met constraints."""
    run = run_step(tmp_path, extra_reward_funcs=[length_reward], reward_weights=[1.0, 0.5])
    sampled = [ila(t) + 0.5 * (length(t) / 16 + 0.1 * 3) for t in run.texts]
    assert run.step.rewards[:B] == pytest.approx(sampled)
    replays = [(2, COMMA_ONLY, 1), (1, WORDS_LANTERN, 2), (9, WORDS_ONLY, 1)]  # (source, y, constraints q' keeps)
    assert run.step.rewards[B:B + 3] == pytest.approx([1 + 0.5 * (length(y) / 16 + 0.1 * kept)
                                                       for _, y, kept in replays])
    (call,) = run.passes.extra_reward_calls
    assert call["prompts"] == [Q_PRIME[0, 2], Q_PRIME[0, 1], Q_PRIME[1, 3]]
    assert [c[0]["content"] for c in call["completions"]] == [y for _, y, _ in replays]
    assert call["completion_ids"] == [fake_tokens(run, y) for _, y, _ in replays]
    assert [[c["text"] for c in row["constraints"]] for row in call["rows"]] == [
        [COMMA["text"]], [WORDS["text"], LANTERN["text"]], [WORDS["text"]]]
    assert [row["prompt"] for row in call["rows"]] == call["prompts"]


def soft_rows():
    """One instruction whose rule (at least 500 words) every short completion fails, beside a soft constraint."""
    return [dataset_row("Write a short note about the sea.", [
        ifeval_constraint("Answer with at least 500 words.", "length_constraints:number_words", relation="at least",
                          num_words=500),
        {"text": "The tone must be calm.", "kind": "soft"}], template="type3")]


@pytest.mark.parametrize("rejudge", [False, True])
def test_rejudged_replays_ask_the_judge_again_under_q_prime(tmp_path, rejudge):
    """The fake judge says YES only while the instruction still states the 500-word rule: under q' (which dropped
    it) the kept soft constraint fails, so a re-judged replay's reward is 0 instead of 1."""
    calls = []

    def judge(triples):
        calls.append(list(triples))
        return [Verdict("at least 500 words" in instruction, source="judge") for instruction, _, _ in triples]

    texts = ["calm sea", "waves", "blue water", "a quiet shore", "salt", "tides"]
    run = run_step(tmp_path, [texts], soft_rows(), entropies=[[0.1 * i for i in range(1, 7)]], judge=judge,
                   rejudge_replays=rejudge, per_device_train_batch_size=M)
    assert run.step.rewards[:M] == [0.0] * M  # the word rule failed everywhere
    # every row met 1 of 2 constraints: the top-2 by F = H + 2 x 1/2 are the two highest entropies
    assert new_rows(run.step) == [("replay", 5, 0), ("replay", 4, 0)]
    assert run.step.rewards[M:] == ([0.0, 0.0] if rejudge else [1.0, 1.0])
    assert len(calls) == (2 if rejudge else 1)  # the batch's soft constraints, then the replays' kept ones
    if rejudge:
        assert [(c, y) for _, y, c in calls[1]] == [("The tone must be calm.", "tides"), ("The tone must be calm.",
                                                                                        "salt")]
        assert all("500 words" not in instruction for instruction, _, _ in calls[1])


# ---------------------------------------------------------------- lines 12-13: Select-Rewrite (Algorithm 1)


def test_select_rewrite_replays_the_top_k_failures_by_entropy_plus_lambda_integrity(tmp_path):
    run = run_step(tmp_path)
    # lambda_0 = 2 at step 0. Group 0's candidates (rows 0 and 3: a success, a row that met nothing):
    # F(1) = 0.5 + 2 x 2/3 = 1.833, F(2) = 3.0 + 2 x 1/3 = 3.667, F(4) = 0.45 + 2 x 2/3 = 1.783,
    # F(5) = 1.0 + 2 x 1/3 = 1.667 -> rows 2, 1. Group 1: row 3 only, F = 0.4 + 2/3.
    choices = [row.choice for row in run.step.new_rows if row.kind == "replay"]
    assert [(row.group, c.index) for row, c in zip(run.step.new_rows, choices)] == [(0, 2), (0, 1), (1, 3)]
    assert [c.score for c in choices] == pytest.approx([3.0 + 2 / 3, 0.5 + 4 / 3, 0.4 + 2 / 3])
    assert [c.integrity for c in choices] == pytest.approx([1 / 3, 2 / 3, 1 / 3])
    assert [c.diversity for c in choices] == pytest.approx([3.0, 0.5, 0.4])
    assert [c.satisfied for c in choices] == [MET[COMMA_ONLY], MET[WORDS_LANTERN], MET[WORDS_ONLY]]
    # Rewrite: q' keeps exactly the satisfied constraints, in order; only the final user turn changes
    assert run.step.q_prime == [Q_PRIME[0, 2], Q_PRIME[0, 1], Q_PRIME[1, 3], None]
    assert [c.relabelled for c in choices] == [(), (), ()]


@pytest.mark.parametrize("overrides, ended, expected", [
    # 2 of 3 met: rows 1, 4 (F 1.833, 1.783); group 1 has none
    (dict(replay_min_satisfied=2), True, [("replay", 1, 0), ("replay", 4, 0), ("pad", 6, 1), ("pad", 6, 1)]),
    # row 2 cut off at the length limit (no EOS): not a candidate unless replay_truncated_completions
    (dict(), [[True, True, False, True, True, True], [True] * 6], [("replay", 1, 0), ("replay", 4, 0),
                                                                   ("replay", 9, 1), ("pad", 6, 1)]),
    (dict(replay_truncated_completions=True), [[True, True, False, True, True, True], [True] * 6],
     [("replay", 2, 0), ("replay", 1, 0), ("replay", 9, 1), ("pad", 6, 1)]),
], ids=["min_satisfied", "truncated", "truncated-allowed"])
def test_candidates_need_enough_satisfied_constraints_and_an_ended_completion(tmp_path, overrides, ended, expected):
    run = run_step(tmp_path, ended=ended, **overrides)
    assert new_rows(run.step) == expected


def test_batch_scope_takes_the_top_k_times_groups_of_the_whole_batch(tmp_path):
    """``replay_scope="batch"`` with ``replay_selection="integrity"``: the top-4 integrities of the batch's five
    candidates, ties to the lower row: rows 1, 4 (2/3), then 2, 5 (1/3, before group 1's row 9). Group 0 takes all
    four; the batch is not short (allocate_shortfall), so group 1 gets no padding."""
    run = run_step(tmp_path, replay_scope="batch", replay_selection="integrity")
    assert new_rows(run.step) == [("replay", 1, 0), ("replay", 4, 0), ("replay", 2, 0), ("replay", 5, 0)]
    assert [row.choice.score for row in run.step.new_rows] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert run.batch["completion_ids"].size(0) == B + 2 * K


@pytest.mark.parametrize("aggregation, sources, diversities", [
    # F_div = the recorded entropy: group 0's rows 2 (3.0) and 5 (1.0); group 1's row 9 (0.4)
    ("mean", [2, 5], [3.0, 1.0, 0.4]),
    # times the tokens: 24 (row 2), 3.6 (row 4, 8 tokens) > 3.0 (row 5, 3 tokens); row 9: 0.4 x 3
    ("sum", [2, 4], [24.0, 3.6, 1.2]),
])
def test_diversity_aggregation_scores_the_token_mean_or_sum_of_entropies(tmp_path, aggregation, sources,
                                                                         diversities):
    run = run_step(tmp_path, replay_selection="diversity", diversity_aggregation=aggregation)
    replays = [row for row in run.step.new_rows if row.kind == "replay"]
    assert [row.source for row in replays] == [*sources, 9]
    assert [row.choice.diversity for row in replays] == pytest.approx(diversities)
    assert metric(run, "hir/replay_entropy_mean") == pytest.approx(sum(diversities) / 3)


def test_achieved_relabelling_keeps_a_failed_count_with_the_bound_the_completion_reached(tmp_path):
    """``hindsight_relabel="achieved"``: row 2's 7 words fail "fewer than 6 words", so q' keeps it as "less than 8
    words" (met); the failed comma and keyword rules are no counts and are dropped as in the paper."""
    run = run_step(tmp_path, hindsight_relabel="achieved")
    first, second, third = (row.choice for row in run.step.new_rows[:3])
    assert (first.index, second.index, third.index) == (2, 1, 3)  # the selection does not change
    relabelled = first.relabelled[0]
    assert relabelled["text"] == "Answer with less than 8 words."
    assert json.loads(relabelled["kwargs"]) == {"num_words": 8, "relation": "less than"}
    assert first.relabelled[1:] == (None, None) and first.kept == (True, True, False)
    assert run.step.q_prime[0] == [
        {"role": "user", "content": "Write a note.\n\nAnswer with less than 8 words. Do not use any commas."}]
    assert second.relabelled == (None, None, None) and run.step.q_prime[1] == Q_PRIME[0, 1]
    assert third.relabelled == (None, None, None) and run.step.q_prime[2] == Q_PRIME[1, 3]
    # the completion meets every constraint its q' keeps
    verdicts = ConstraintReward().verify([run.step.q_prime[0]], [COMMA_ONLY],
                                         [[relabelled, ROWS[0]["constraints"][1]]])
    assert verdicts.passed(0) == [True, True]
    assert metric(run, "hir/relabelled_constraints") == pytest.approx(1 / 3)  # one relabelled over 3 replays
    assert run.passes.hindsight_rows[0]["entries"][0].kept_constraints == "[0, 1]"


# ---------------------------------------------------------------- lines 14-17: the replays in the buffer


@pytest.mark.parametrize("replay_old_logps", ["original", "hindsight"])
def test_a_replay_row_is_q_prime_with_its_sources_completion_and_old_logps(tmp_path, replay_old_logps):
    """TRL ran its own old-log-prob pass (e.g. ``num_iterations`` 2) and beta > 0 (reference log-probs): a replay
    row holds q', its source's completion and mask, old log-probs of y under q ("original", paper eq. 7-8) or
    under q' ("hindsight"), and reference log-probs under q'."""
    run = run_step(tmp_path, old_logps=True, replay_old_logps=replay_old_logps, beta=0.04)
    batch = run.batch
    q = {0: ROWS[0]["prompt"], 1: ROWS[1]["prompt"]}
    for offset, (source, group, q_prime) in enumerate([(2, 0, Q_PRIME[0, 2]), (1, 0, Q_PRIME[0, 1]),
                                                      (9, 1, Q_PRIME[1, 3])]):
        row, y = B + offset, run.texts[source]
        assert run.step.rewards[row] == 1.0
        assert tokens(batch, "prompt", row) == run.passes.tokenizer.prompt_ids(q_prime)
        assert tokens(batch, "completion", row) == tokens(batch, "completion", source) == fake_tokens(run, y)
        assert torch.equal(batch["completion_mask"][row], batch["completion_mask"][source])
        n, ids = length(y), fake_tokens(run, y)
        under = prompt_length(run, q_prime if replay_old_logps == "hindsight" else q[group])
        assert batch["old_per_token_logps"][row][:n].tolist() == pytest.approx([fake_logp(t, under) for t in ids])
        assert batch["ref_per_token_logps"][row][:n].tolist() == pytest.approx(
            [fake_ref_logp(t, prompt_length(run, q_prime)) for t in ids])
        # the source keeps its own values under q
        assert batch["old_per_token_logps"][source][:n].tolist() == pytest.approx(
            [fake_logp(t, prompt_length(run, q[group])) for t in ids])
    passes = [call for call in run.passes.calls if call[0] in ("policy_pass", "reference_logps")]
    # the passes under q' run over every new row (4, the same count on every rank); none over the sampled rows
    assert passes == ([("policy_pass", "policy", 4, False, "replay_passes")] if replay_old_logps == "hindsight"
                      else []) + [("reference_logps", 4)]


@pytest.mark.parametrize("replay_old_logps", ["original", "hindsight"])
def test_vllm_keys_of_a_replay_are_its_sources_or_set_for_q_prime(tmp_path, replay_old_logps):
    """vLLM with its importance-sampling correction: "original" gives a replay its source's
    ``sampling_per_token_logps`` and ``importance_sampling_ratio`` (the same (q, y)); "hindsight" makes it on-policy
    under q': sampling log-probs = old log-probs under q', ratio 1."""
    run = run_step(tmp_path, old_logps=True, vllm=True, record=False, replay_old_logps=replay_old_logps)
    assert [call for call in run.passes.calls if call[0] == "policy_pass"] == (
        [("policy_pass", "policy", 4, False, "replay_passes")] if replay_old_logps == "hindsight" else [])
    batch = run.batch
    for offset, (source, q_prime) in enumerate([(2, Q_PRIME[0, 2]), (1, Q_PRIME[0, 1]), (9, Q_PRIME[1, 3])]):
        row, n = B + offset, length(run.texts[source])
        if replay_old_logps == "original":
            assert torch.equal(batch["sampling_per_token_logps"][row], batch["sampling_per_token_logps"][source])
            assert torch.equal(batch["importance_sampling_ratio"][row], batch["importance_sampling_ratio"][source])
        else:
            expected = [fake_logp(t, prompt_length(run, q_prime)) for t in fake_tokens(run, run.texts[source])]
            assert batch["sampling_per_token_logps"][row][:n].tolist() == pytest.approx(expected)
            assert batch["old_per_token_logps"][row][:n].tolist() == pytest.approx(expected)
            assert batch["importance_sampling_ratio"][row].tolist() == [1.0] * batch["completion_ids"].size(1)
    # the sampled rows keep TRL's values: ratio 0.5 + 0.25 x (row % 3)
    assert batch["importance_sampling_ratio"][:B, 0].tolist() == [0.5 + 0.25 * (i % 3) for i in range(B)]


@pytest.mark.parametrize("replay_old_logps", ["original", "hindsight"])
def test_vllm_without_correction_reuses_its_sampling_logps(tmp_path, replay_old_logps):
    """vLLM without its correction on aligned steps: TRL stores no old log-probs and nothing is recorded. One pass
    over the B sampled rows gives F_div's exact entropies; "original" takes vLLM's sampling log-probs as pi_old(y | q)
    of every row, "hindsight" stores none and gives each replay the sampling log-probs of (q', y) from one pass over
    the new rows under q'."""
    run = run_step(tmp_path, vllm=True, record=False, entropies=None, replay_old_logps=replay_old_logps)
    batch = run.batch
    passes = [call[:4] for call in run.passes.calls if call[0] == "policy_pass"]
    if replay_old_logps == "original":
        assert passes == [("policy_pass", "policy", B, True)]
        assert torch.equal(batch["old_per_token_logps"][:B], batch["sampling_per_token_logps"][:B])
        for offset, source in enumerate([row.source for row in run.step.new_rows]):
            assert torch.equal(batch["old_per_token_logps"][B + offset], batch["sampling_per_token_logps"][source])
    else:
        assert "old_per_token_logps" not in batch
        assert passes == [("policy_pass", "policy", B, True), ("policy_pass", "policy", 4, False)]
        replays = [(offset, row) for offset, row in enumerate(run.step.new_rows) if row.kind == "replay"]
        assert replays
        for offset, row in replays:
            ids, n = fake_tokens(run, run.texts[row.source]), length(run.texts[row.source])
            assert batch["sampling_per_token_logps"][B + offset][:n].tolist() == pytest.approx(
                [fake_logp(t, prompt_length(run, row.q_prime)) for t in ids])


def mean_over_tokens(run, text, value):
    ids = fake_tokens(run, text)
    return sum(value(t) for t in ids) / len(ids)


def test_f_div_and_old_logps_come_from_what_sampling_recorded(tmp_path):
    """The default path (transformers generation, aligned steps): F_div is the recorded exact entropies, the
    replays' pi_old(y | q) their sources' recorded log-probs; no pass runs."""
    run = run_step(tmp_path, entropies=None)
    assert [call for call in run.passes.calls if call[0] != "tokenize_prompts"] == []
    for i, text in enumerate(run.texts):
        q = prompt_length(run, ROWS[i // M]["prompt"])
        assert run.batch["old_per_token_logps"][i][:length(text)].tolist() == pytest.approx(
            [fake_logp(t, q) for t in fake_tokens(run, text)])
    for offset, row in enumerate(run.step.new_rows):
        if row.kind == "replay":
            text = run.texts[row.source]
            assert row.choice.diversity == pytest.approx(mean_over_tokens(run, text, fake_entropy))
            old = run.batch["old_per_token_logps"]
            assert torch.equal(old[B + offset], old[row.source])


def test_the_sampled_entropy_estimate_is_minus_the_recorded_logps(tmp_path):
    """``diversity_entropy="sampled"``: F_div is the token mean of -log pi(y_t | q), from the recorded log-probs."""
    run = run_step(tmp_path, entropies=None, diversity_entropy="sampled")
    assert [call for call in run.passes.calls if call[0] != "tokenize_prompts"] == []
    replays = [row for row in run.step.new_rows if row.kind == "replay"]
    assert replays
    for row in replays:
        q = prompt_length(run, ROWS[row.group]["prompt"])
        assert row.choice.diversity == pytest.approx(
            mean_over_tokens(run, run.texts[row.source], lambda t, q=q: -fake_logp(t, q)))


def test_without_a_recording_one_pass_gives_the_entropies_and_old_logps(tmp_path):
    """Nothing recorded (a logit processor before the recorder): one no-grad pass over the B sampled rows, timed as
    ``extra_pass``, gives F_div's exact entropies and pi_old(y | q)."""
    run = run_step(tmp_path, entropies=None, record=False)
    assert [call for call in run.passes.calls if call[0] == "policy_pass"] == [
        ("policy_pass", "policy", B, True, "extra_pass")]
    assert run.passes.timer.seconds["extra_pass"] > 0
    for row in run.step.new_rows:
        if row.kind == "replay":
            assert row.choice.diversity == pytest.approx(mean_over_tokens(run, run.texts[row.source], fake_entropy))
    for i, text in enumerate(run.texts):
        q = prompt_length(run, ROWS[i // M]["prompt"])
        assert run.batch["old_per_token_logps"][i][:length(text)].tolist() == pytest.approx(
            [fake_logp(t, q) for t in fake_tokens(run, text)])


@pytest.mark.parametrize("record", [True, False])
def test_hindsight_replays_on_aligned_steps_need_no_pass_nor_old_logps(tmp_path, record):
    """``replay_old_logps="hindsight"`` with no old log-probs stored (aligned steps): the replay is on-policy under
    q', TRL's detached current log-probs are its old ones, so none are stored and no pass runs under q'; with random
    selection nothing needs F_div either, even with nothing recorded (``hir/replay_entropy_mean`` NaN)."""
    run = run_step(tmp_path, entropies=None, record=record, replay_old_logps="hindsight", replay_selection="random")
    assert "old_per_token_logps" not in run.batch
    assert [call for call in run.passes.calls if call[0] != "tokenize_prompts"] == []
    replays = [row for row in run.step.new_rows if row.kind == "replay"]
    assert [row.source for row in replays if row.group == 1] == [9]  # the only candidate of group 1
    assert {row.source for row in replays if row.group == 0} <= {1, 2, 4, 5} and len(replays) == 3
    entropy = metric(run, "hir/replay_entropy_mean")
    assert math.isnan(entropy) if not record else entropy > 0
    # the random draw is the replay RNG's (seeded, `HiRConfig.seed`): the same seed draws the same replays
    again = run_step(tmp_path, entropies=None, record=record, replay_old_logps="hindsight", replay_selection="random")
    assert new_rows(again.step) == new_rows(run.step)


# ---------------------------------------------------------------- line 20: advantages


def hand_advantages(rewards, kinds, groups, sources, lengths, estimator, mode, weight):
    """Every row's advantage, by hand: per row one value (``grpo``), or the value of each of its loss tokens
    (Reinforce++), from the rewards, the row kinds and the groups."""
    n = len(rewards)
    in_estimate = [kinds[i] != "pad" and (mode == "group" or kinds[i] != "replay") for i in range(n)]
    values = [0.0] * n
    if estimator == "grpo":
        for g in set(groups):
            rows = [i for i in range(n) if groups[i] == g and in_estimate[i]]
            r = [rewards[i] for i in rows]
            for i in rows:
                values[i] = (rewards[i] - statistics.mean(r)) / (statistics.stdev(r) + 1e-4)
    else:
        scores = list(rewards)
        if estimator == "reinforce_pp_baseline":
            for g in set(groups):
                rows = [i for i in range(n) if groups[i] == g and in_estimate[i]]
                mean = statistics.mean(rewards[i] for i in rows)
                for i in rows:
                    scores[i] = rewards[i] - mean
        tokens_ = [(scores[i], lengths[i]) for i in range(n) if in_estimate[i]]
        count = sum(c for _, c in tokens_)
        mean = sum(s * c for s, c in tokens_) / count
        var = sum(c * (s - mean) ** 2 for s, c in tokens_) / (count - 1)
        for i in range(n):
            if in_estimate[i]:
                values[i] = (scores[i] - mean) / math.sqrt(var + 1e-8)
    for i in range(n):
        if kinds[i] == "replay" and mode != "group":
            values[i] += weight * rewards[i]
            if mode == "paired":
                values[sources[i]] -= weight * rewards[i]
    return values


def assert_advantages(run, expected, lengths):
    advantages = run.batch["advantages"]
    if advantages.dim() == 1:
        assert advantages.tolist() == pytest.approx(expected, abs=1e-5)
        return
    mask = run.batch["completion_mask"]
    for i, value in enumerate(expected):
        assert mask[i].sum().item() == lengths[i]
        assert advantages[i].tolist() == pytest.approx([value] * lengths[i] + [0.0] * (mask.size(1) - lengths[i]),
                                                       abs=1e-5), i


@pytest.mark.parametrize("replay_advantage", ["group", "positive", "paired"])
@pytest.mark.parametrize("estimator", ["grpo", "reinforce_pp", "reinforce_pp_baseline"])
def test_advantages_of_every_estimator_and_replay_mode_match_a_hand_computation(tmp_path, estimator,
                                                                                replay_advantage):
    run = run_step(tmp_path, advantage_estimator=estimator, replay_advantage=replay_advantage, replay_weight=0.7)
    # rows 0-11 sampled, 12-14 replays of rows 2, 1 (group 0) and 9 (group 1), 15 a pad of group 1
    rewards = [ila(t) for t in run.texts] + [1.0, 1.0, 1.0, float("nan")]
    kinds = ["sampled"] * B + ["replay"] * 3 + ["pad"]
    groups = [0] * M + [1] * M + [0, 0, 1, 1]
    sources = list(range(B)) + [2, 1, 9, 6]
    lengths = [length(t) for t in run.texts] + [length(run.texts[s]) for s in (2, 1, 9)] + [0]
    expected = hand_advantages(rewards, kinds, groups, sources, lengths, estimator, replay_advantage, 0.7)
    if estimator == "grpo" and replay_advantage == "group":  # spelt out: group 0 is 1, 0 x 5 and the replays' 1, 1
        std = math.sqrt((3 * (1 - 3 / 8) ** 2 + 5 * (3 / 8) ** 2) / 7)
        assert expected[0] == pytest.approx((1 - 3 / 8) / (std + 1e-4))
        assert expected[12] == expected[13] == expected[0]
    if replay_advantage != "group":  # the sampled rows' advantages are those of a step without replays
        without = hand_advantages(rewards[:B], kinds[:B], groups[:B], sources[:B], lengths[:B], estimator, "group", 0)
        assert [a + (0.7 if i in (1, 2, 9) and replay_advantage == "paired" else 0) for i, a in
                enumerate(expected[:B])] == pytest.approx(without)
    assert expected[15] == 0.0
    assert_advantages(run, expected, lengths)


def test_an_all_failed_groups_paired_rows_sum_to_zero(tmp_path):
    """Group 1 fails everywhere (ILA 0 on its m rows): its sampled advantages are 0 (no spread), so under
    ``replay_advantage="paired"`` it contributes only through its pairs, +w on each replay and -w on its source."""
    failed = [NONE, WORDS_ONLY, NONE, COMMA_ONLY, NONE, NONE]  # candidates: rows 9 (F 0.4 + 2/3), 7 (0.2 + 2/3)
    run = run_step(tmp_path, (GROUP0, failed), replay_advantage="paired", replay_weight=0.7)
    assert new_rows(run.step)[2:] == [("replay", 9, 1), ("replay", 7, 1)]
    advantages = run.batch["advantages"].tolist()
    assert advantages[6:B] == pytest.approx([0.0, -0.7, 0.0, -0.7, 0.0, 0.0], abs=1e-6)
    assert advantages[B + 2:] == pytest.approx([0.7, 0.7])
    assert sum(advantages[6:B]) + sum(advantages[B + 2:]) == pytest.approx(0.0, abs=1e-6)
    assert metric(run, "hir/groups_all_failed") == 0.5


def test_kl_in_reward_subtracts_beta_times_the_kl_still_to_come(tmp_path):
    """``kl_in_reward`` (Reinforce++, beta 0.5): each token's return is the reward minus beta x the k1 KL
    log pi_old - log pi_ref summed from that token to the end, under q; a replay takes its source's; then whitened
    over the sampled rows' tokens (the replays add +w after, ``replay_advantage`` positive)."""
    run = run_step(tmp_path, advantage_estimator="reinforce_pp", kl_in_reward=True, beta=0.5)
    assert run.passes.kl_coef == 0.5
    returns, mask_rows = {}, {}
    for i, text in enumerate(run.texts):
        ids, q = fake_tokens(run, text), ROWS[i // M]["prompt"]
        kl = [fake_logp(t, prompt_length(run, q)) - fake_ref_logp(t, prompt_length(run, q)) for t in ids]
        returns[i] = [ila(text) - 0.5 * sum(kl[j:]) for j in range(len(ids))]
    flat = [x for values in returns.values() for x in values]
    mean = statistics.mean(flat)
    std = math.sqrt(statistics.variance(flat) + 1e-8)
    advantages = run.batch["advantages"]
    for i in range(B):
        assert advantages[i][:len(returns[i])].tolist() == pytest.approx([(x - mean) / std for x in returns[i]],
                                                                        abs=1e-5)
        mask_rows[i] = len(returns[i])
    assert any(len(set(round(v, 6) for v in advantages[i][:mask_rows[i]].tolist())) > 1 for i in range(B))
    assert advantages[B][:length(COMMA_ONLY)].tolist() == pytest.approx([1.0] * length(COMMA_ONLY))


def test_without_replays_the_sampled_rows_are_left_as_they_are(tmp_path):
    """``num_replays=0`` with Reinforce++ and CLA (RL-CR): no row is added; the rewards are the rows' CLA."""
    run = run_step(tmp_path, num_replays=0, reward_mode="cla", advantage_estimator="reinforce_pp")
    assert run.step.new_rows == [] and run.batch["completion_ids"].size(0) == B
    assert run.step.rewards == pytest.approx([cla(t) for t in run.texts])
    lengths = [length(t) for t in run.texts]
    expected = hand_advantages(run.step.rewards, ["sampled"] * B, [0] * M + [1] * M, list(range(B)), lengths,
                               "reinforce_pp", "group", 0.0)
    assert_advantages(run, expected, lengths)
    assert [call[0] for call in run.passes.calls] == []  # no pass, no tokenization: nothing to select or replay


# ---------------------------------------------------------------- line 21: the batch TRL's update gets


@pytest.mark.parametrize("weighting", ["token", "paper"])
def test_the_update_batch_holds_B_plus_groups_times_k_rows(tmp_path, weighting):
    run = run_step(tmp_path, replay_loss_weighting=weighting)
    batch, texts = run.batch, run.texts
    N = B + 2 * K
    sources = [2, 1, 9, 6]  # three replays, then group 1's pad (a copy of its first row)
    lengths = [length(t) for t in texts] + [length(texts[s]) for s in sources[:3]] + [0]
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "old_per_token_logps",
                "advantages", "replay_mask"):
        assert batch[key].size(0) == N, key
    assert batch["completion_ids"].size(1) == max(lengths)
    assert batch["completion_mask"].sum(1).tolist() == lengths  # the pad has no loss token
    assert batch["replay_mask"].tolist() == [False] * B + [True, True, True, False]
    assert batch["num_items_in_batch"].item() == sum(lengths)
    # prompts left-padded to one width: q for the sampled rows and the pad, q' for the replays
    prompts = [ROWS[i // M]["prompt"] for i in range(B)] + [Q_PRIME[0, 2], Q_PRIME[0, 1], Q_PRIME[1, 3],
                                                            ROWS[1]["prompt"]]
    width = batch["prompt_ids"].size(1)
    assert width == max(prompt_length(run, p) for p in prompts)
    for i, prompt in enumerate(prompts):
        n = prompt_length(run, prompt)
        assert batch["prompt_mask"][i].tolist() == [0] * (width - n) + [1] * n
        assert batch["prompt_ids"][i].tolist() == [PAD] * (width - n) + run.passes.tokenizer.prompt_ids(prompt)
    completions = texts + [texts[s] for s in sources]
    for i, text in enumerate(completions):
        ids = fake_tokens(run, text)
        assert batch["completion_ids"][i].tolist() == ids + [PAD] * (batch["completion_ids"].size(1) - len(ids))
    # advantages: positive (the default) under grpo, each replay +1; "paper" scales row i by w_i N / (G |y_i|),
    # w = 1/m for a sampled row, 1/k for a replay, 0 for the pad (eq. "hir" through TRL's dapo normaliser)
    rewards = [ila(t) for t in texts] + [1.0, 1.0, 1.0, float("nan")]
    unscaled = hand_advantages(rewards, ["sampled"] * B + ["replay"] * 3 + ["pad"], [0] * M + [1] * M + [0, 0, 1, 1],
                               list(range(B)) + sources, lengths, "grpo", "positive", 1.0)
    if weighting == "paper":
        weights = [1 / M] * B + [1 / K] * 3 + [0.0]
        unscaled = [a * w * sum(lengths) / (2 * n) if n else 0.0 for a, w, n in zip(unscaled, weights, lengths)]
    assert batch["advantages"].tolist() == pytest.approx(unscaled, abs=1e-5)


def test_the_step_logs_its_metrics_and_completion_log_rows(tmp_path):
    run = run_step(tmp_path)
    lengths = [length(t) for t in run.texts]
    replayed = [COMMA_ONLY, WORDS_LANTERN, WORDS_ONLY]
    assert {name: metric(run, name) for name in ("hir/lambda", "hir/replayed_rows", "hir/replayed_fraction",
                                                 "hir/supplementary_samples", "hir/padded_rows", "hir/rows_per_group",
                                                 "hir/generated_tokens", "hir/generate_calls")} == {
        "hir/lambda": 2.0, "hir/replayed_rows": 3, "hir/replayed_fraction": 3 / 4, "hir/supplementary_samples": 0,
        "hir/padded_rows": 1, "hir/rows_per_group": (B + 3) / 2, "hir/generated_tokens": sum(lengths),
        "hir/generate_calls": 1}
    assert metric(run, "hir/replay_integrity_mean") == pytest.approx((1 / 3 + 2 / 3 + 1 / 3) / 3)
    assert metric(run, "hir/replay_entropy_mean") == pytest.approx((3.0 + 0.5 + 0.4) / 3)
    assert metric(run, "hir/replay_mean_length") == pytest.approx(sum(map(length, replayed)) / 3)
    assert metric(run, "hir/sampled_mean_length") == pytest.approx(sum(lengths) / B)
    (logged,) = run.passes.hindsight_rows
    assert logged["row_ids"] == ["note"] * M + ["kettle"] * M
    assert logged["sampled_advantages"] == pytest.approx(run.batch["advantages"][:B].tolist())
    assert logged["new_advantages"] == pytest.approx([1.0, 1.0, 1.0])  # the pad is not logged
    assert [(e.prompt, e.completion[0]["content"], e.row_id, e.hindsight, e.supplementary, e.kept_constraints)
            for e in logged["entries"]] == [(Q_PRIME[0, 2], COMMA_ONLY, "note", True, False, "[1]"),
                                            (Q_PRIME[0, 1], WORDS_LANTERN, "note", True, False, "[0, 2]"),
                                            (Q_PRIME[1, 3], WORDS_ONLY, "kettle", True, False, "[0]")]


# ---------------------------------------------------------------- line 22: lambda


@pytest.mark.parametrize("lambda_0, eta, s, lam, group0", [
    (2.0, 0.05, 0, 2.0, [2, 1]),
    # lambda = 2 x 1.05^60 = 37.36: F(1) = 0.5 + 24.91, F(4) = 0.45 + 24.91, F(2) = 3.0 + 12.45 -> rows 1, 4
    (2.0, 0.05, 60, 2.0 * 1.05 ** 60, [1, 4]),
    (1.0, 0.5, 4, 5.0625, [2, 1]),  # 1.5^4; F(2) = 3.0 + 1.6875 > F(1) = 0.5 + 3.375 > F(4)
    (0.0, 0.05, 10, 0.0, [2, 5]),  # no integrity weight: the two highest entropies
])
def test_lambda_follows_the_curriculum_schedule_of_the_optimizer_step(tmp_path, lambda_0, eta, s, lam, group0):
    run = run_step(tmp_path, global_step=s, lambda_0=lambda_0, eta=eta)
    assert run.step.lam == pytest.approx(lam) and metric(run, "hir/lambda") == pytest.approx(lam)
    assert [row.source for row in run.step.new_rows if row.group == 0] == group0


# ---------------------------------------------------------------- §3.2: a group short of candidates


def test_pad_gives_a_group_short_of_candidates_zero_weight_rows(tmp_path):
    """Group 1 has z = 1 < k = 2 candidates: one pad, a copy of its first row with no loss token; no generation."""
    run = run_step(tmp_path, replay_shortfall="pad")
    assert new_rows(run.step)[-1] == ("pad", 6, 1)
    assert run.batch["completion_mask"][-1].sum() == 0 and run.batch["advantages"][-1] == 0.0
    assert tokens(run.batch, "prompt", B + 3) == tokens(run.batch, "prompt", 6)
    assert math.isnan(run.step.rewards[-1])
    assert not [call for call in run.passes.calls if call[0] == "supplementary_samples"]
    assert metric(run, "hir/padded_rows") == 1 and metric(run, "hir/generate_calls") == 1


def test_pad_without_any_candidate_adds_only_empty_rows(tmp_path):
    run = run_step(tmp_path, replay_shortfall="pad", replay_min_satisfied=100)
    assert new_rows(run.step) == [("pad", 0, 0), ("pad", 0, 0), ("pad", 6, 1), ("pad", 6, 1)]
    assert run.batch["completion_mask"][B:].sum() == 0 and run.batch["advantages"][B:].tolist() == [0.0] * 4
    assert run.batch["num_items_in_batch"].item() == sum(length(t) for t in run.texts)
    assert metric(run, "hir/replayed_fraction") == 0.0 and metric(run, "hir/rows_per_group") == M


def test_resample_gives_a_group_short_of_candidates_supplementary_samples_under_q(tmp_path):
    """``replay_shortfall="resample"`` (paper §3.2): group 1 gets k - z = 1 ordinary sample under q from one more
    generation call, rewarded by its own verdicts and part of its group's estimate."""
    run = run_step(tmp_path, replay_shortfall="resample", supplementary={1: [ALL2]})
    assert [call for call in run.passes.calls if call[0] == "supplementary_samples"] == [
        ("supplementary_samples", [0, 1], True)]  # old log-probs: the sampled rows have them (recorded)
    assert new_rows(run.step) == [("supplementary", 0, 1), ("replay", 2, 0), ("replay", 1, 0), ("replay", 9, 1)]
    row = B  # the supplementary sample
    assert tokens(run.batch, "prompt", row) == run.passes.tokenizer.prompt_ids(ROWS[1]["prompt"])
    assert tokens(run.batch, "completion", row) == fake_tokens(run, ALL2)
    assert run.step.rewards[row] == ila(ALL2) == 1.0
    assert run.step.supplementary_verdicts.passed(0) == list(MET[ALL2])
    assert run.batch["old_per_token_logps"][row][:length(ALL2)].tolist() == pytest.approx(
        [fake_logp(t, prompt_length(run, ROWS[1]["prompt"])) for t in fake_tokens(run, ALL2)])
    # advantages (positive, grpo): group 1's estimate spans its 6 samples and the supplementary one
    group1 = [ila(t) for t in GROUP1] + [1.0]
    mean, std = statistics.mean(group1), statistics.stdev(group1)
    assert run.batch["advantages"][[6, 7, 8, 9, 10, 11, row]].tolist() == pytest.approx(
        [(r - mean) / (std + 1e-4) for r in group1], abs=1e-5)
    assert metric(run, "hir/supplementary_samples") == 1 and metric(run, "hir/generate_calls") == 2
    assert metric(run, "hir/rows_per_group") == (B + 3 + 1) / 2 and metric(run, "hir/filler_samples") == 0
    assert metric(run, "hir/generated_tokens") == sum(length(t) for t in run.texts) + length(ALL2)
    entry = run.passes.hindsight_rows[0]["entries"][0]
    assert (entry.supplementary, entry.hindsight, entry.row_id, entry.reward) == (True, False, "kettle", 1.0)
    assert [v["passed"] for v in json.loads(entry.verdicts)] == [True, True, True]


def test_resample_without_any_candidate_fills_every_group_with_samples(tmp_path):
    texts = {0: [WORDS_ONLY, ALL], 1: [NONE, ALL2]}
    run = run_step(tmp_path, replay_shortfall="resample", replay_min_satisfied=100, supplementary=texts)
    assert new_rows(run.step) == [("supplementary", 0, 0), ("supplementary", 1, 0), ("supplementary", 2, 1),
                                  ("supplementary", 3, 1)]
    assert run.step.rewards[B:] == [ila(WORDS_ONLY), ila(ALL), ila(NONE), ila(ALL2)] == [0.0, 1.0, 0.0, 1.0]
    assert run.batch["completion_mask"][B:].sum(1).tolist() == [length(t) for t in (WORDS_ONLY, ALL, NONE, ALL2)]
    assert metric(run, "hir/supplementary_samples") == 4 and metric(run, "hir/rows_per_group") == M + K
