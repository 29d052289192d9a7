"""ConstraintReward and VerdictMatrix: verdicts keyed by (row, constraint), failures recorded, never shifted."""

from __future__ import annotations

import json

import pytest

from hir_trl.rewards import ConstraintReward, VerdictMatrix, completion_text, instruction_text
from hir_trl.verifiers import Verdict


def hard(instruction_id, text="c", **kwargs):
    return {"text": text, "kind": "hard", "family": "ifeval", "instruction_id": instruction_id,
            "kwargs": json.dumps(kwargs)}


def soft(text):
    return {"text": text, "kind": "soft", "family": None, "instruction_id": None, "kwargs": "{}"}


NO_COMMA = hard("punctuation:no_comma")
LOWER = hard("change_case:english_lowercase")
BROKEN = hard("length_constraints:number_words", num_words=10)  # missing 'relation': the checker raises
PROMPT = [{"role": "user", "content": "Write something."}]


def test_ila_cla_and_alignment_after_a_checker_failure():
    reward = ConstraintReward(reward_mode="ila")
    completions = [
        [{"role": "assistant", "content": "this is a simple sentence written in plain english for the test"}],
        [{"role": "assistant", "content": "Has, A Comma"}],
        [{"role": "assistant", "content": "this sentence, written in plain english, has a few commas in it"}],
    ]
    constraints = [[NO_COMMA, LOWER], [BROKEN, NO_COMMA, LOWER], [NO_COMMA, LOWER]]
    out = reward([PROMPT] * 3, completions, constraints=constraints)
    matrix = reward.last_verdicts
    assert out == [1.0, 0.0, 0.0]
    assert matrix.passed(0) == [True, True]
    # row 1: the broken checker is a recorded failed verdict in ITS cell; the other cells are its own
    assert matrix[1, 0].passed is False and "relation" in matrix[1, 0].error
    assert matrix.passed(1) == [False, False, False]
    # row 2 is untouched by row 1's failure: comma fails, lowercase passes
    assert matrix.passed(2) == [False, True]
    assert matrix.cla() == [1.0, 0.0, 0.5]
    assert matrix.rewards("cla") == [1.0, 0.0, 0.5] and matrix.rewards("ila") == [1.0, 0.0, 0.0]
    assert matrix.num_errors() == 1
    assert reward.num_checks == 7

    cla = ConstraintReward(reward_mode="cla")
    assert cla([PROMPT] * 3, completions, constraints=constraints) == [1.0, 0.0, 0.5]


def _appender(logged):
    return lambda name, value: logged.append((name, value))


def test_metrics_go_through_trls_log_metric():
    """With TRL's ``log_metric`` hook, ILA and CLA are logged once per row (TRL's average is then the mean over the
    rows), and the failed checks once, as a count."""
    completions = [
        [{"role": "assistant", "content": "this is a simple sentence written in plain english for the test"}],
        [{"role": "assistant", "content": "Has, A Comma"}],
        [{"role": "assistant", "content": "this sentence, written in plain english, has a few commas in it"}],
    ]
    constraints = [[NO_COMMA, LOWER], [BROKEN, NO_COMMA, LOWER], [NO_COMMA, LOWER]]
    logged: list[tuple[str, float]] = []
    ConstraintReward(reward_mode="ila")([PROMPT] * 3, completions, constraints=constraints,
                                        log_metric=_appender(logged))
    assert [value for name, value in logged if name == "reward/ila"] == [1.0, 0.0, 0.0]
    assert [value for name, value in logged if name == "reward/cla"] == [1.0, 0.0, 0.5]
    assert [value for name, value in logged if name == "verify/errors"] == [1]  # row 1's broken checker


def test_unknown_family_is_a_recorded_verdict():
    bad = {"text": "x", "kind": "hard", "family": "nosuch", "instruction_id": "a", "kwargs": "{}"}
    matrix = ConstraintReward().verify([PROMPT], ["text"], [[bad, NO_COMMA]])
    assert matrix[0, 0].passed is False and "nosuch" in matrix[0, 0].error
    assert matrix.passed(0) == [False, True]


def test_soft_constraints_go_to_the_judge_in_the_right_cells():
    seen = []

    def judge(triples):
        seen.extend(triples)
        return [Verdict("polite" in response, source="judge") for _, response, _ in triples]

    reward = ConstraintReward(judge=judge)
    matrix = reward.verify([PROMPT, PROMPT], ["a polite note", "rude, note"],
                           [[soft("Be polite."), NO_COMMA], [NO_COMMA, soft("Be polite.")]])
    assert matrix.passed(0) == [True, True]
    assert matrix.passed(1) == [False, False]
    assert matrix[0, 0].source == "judge" and matrix[1, 1].source == "judge" and matrix[0, 1].source == "rule"
    assert seen == [("Write something.", "a polite note", "Be polite."), ("Write something.", "rude, note",
                                                                         "Be polite.")]


@pytest.mark.parametrize("judge, message", [
    (None, "no judge"),
    (lambda triples: 1 / 0, "ZeroDivisionError"),
    (lambda triples: [], "returned 0 verdicts"),
])
def test_judge_failures_are_recorded_verdicts(judge, message):
    matrix = ConstraintReward(judge=judge).verify([PROMPT], ["ok"], [[soft("Be nice."), NO_COMMA]])
    assert matrix[0, 0].passed is False and message in matrix[0, 0].error
    assert matrix[0, 1] == Verdict(True)


class ThreadRecordingJudge:
    """Passes a response that contains "polite"; records each call's triples and the thread that made it."""

    def __init__(self):
        self.calls = []

    def __call__(self, triples):
        import threading

        self.calls.append((list(triples), threading.current_thread().name))
        return [Verdict("polite" in response, source="judge") for _, response, _ in triples]


ROWS = ([PROMPT, PROMPT, PROMPT], ["a polite note", "rude, note", "polite, and lowercase"],
        [[soft("Be polite."), NO_COMMA], [NO_COMMA, soft("Be polite."), LOWER], [LOWER, soft("Be brief.")]])


def test_the_judge_overlapped_with_the_rules_gives_the_same_verdicts_in_the_same_cells():
    serial, overlapped = ThreadRecordingJudge(), ThreadRecordingJudge()
    reward = ConstraintReward(judge=serial)
    reward.overlap_judge = False
    expected = reward.verify(*ROWS).verdicts
    reward = ConstraintReward(judge=overlapped)
    assert reward.verify(*ROWS).verdicts == expected
    assert [t for t, _ in overlapped.calls] == [t for t, _ in serial.calls]  # one batch, the same triples in order
    assert serial.calls[0][1] == "MainThread" and overlapped.calls[0][1] == "hir-judge-batch"
    seconds = reward.pop_seconds()
    assert set(seconds) == {"verification", "judge"} and seconds["verification"] > 0
    assert reward.pop_seconds() == {"verification": 0.0, "judge": 0.0}


def test_judge_ahead_sends_the_rows_once_and_verify_collects_them():
    judge = ThreadRecordingJudge()
    reward = ConstraintReward(judge=judge)
    expected = ConstraintReward(judge=ThreadRecordingJudge()).verify(*ROWS).verdicts
    assert reward.judge_ahead(*ROWS) is True
    assert reward.verify(*ROWS).verdicts == expected
    assert len(judge.calls) == 1  # the verify call asked nothing more
    # rows other than those sent ahead (here: another response) are judged on their own; the early batch is dropped
    reward.judge_ahead(*ROWS)
    other = (ROWS[0], ["a polite note", "rude, note", "very polite"], ROWS[2])
    assert reward.verify(*other).passed(2) == [False, True]
    assert len(judge.calls) == 3 and judge.calls[-1][0][-1][1] == "very polite"
    assert reward.judge_ahead([PROMPT], ["ok"], [[NO_COMMA]]) is False  # nothing soft: nothing sent


def test_a_judge_error_raised_on_the_judges_thread_reaches_the_caller():
    from hir_trl.judge import JudgeError

    def judge(triples):
        raise JudgeError("the judge failed on 1 of 1 soft constraints")

    with pytest.raises(JudgeError, match="failed on 1 of 1"):
        ConstraintReward(judge=judge).verify([PROMPT], ["ok"], [[soft("Be nice."), NO_COMMA]])


def test_inputs_validation_and_text_helpers():
    with pytest.raises(ValueError, match="2 prompts"):
        ConstraintReward().verify([PROMPT, PROMPT], ["a"], [[NO_COMMA]])
    with pytest.raises(ValueError, match="constraints"):
        ConstraintReward(reward_mode="ila")([PROMPT], ["a"])
    with pytest.raises(ValueError):
        ConstraintReward(reward_mode="dense")
    unset = ConstraintReward()  # HiRTrainer sets HiRConfig's mode; outside it, an unset mode scores ILA
    assert unset.reward_mode is None and unset([PROMPT], ["a, b"], constraints=[[NO_COMMA, LOWER]]) == [0.0]
    with pytest.raises(ValueError, match="reward_mode"):
        VerdictMatrix([[Verdict(True)]]).rewards("dense")
    assert completion_text("x") == "x"
    assert instruction_text([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) == "u"
    assert VerdictMatrix([[Verdict(True), Verdict(False)]]).ila() == [0.0]


def test_extra_rewards_run_sync_functions_then_async_ones_together():
    """As `GRPOTrainer._calculate_rewards`: the synchronous functions one after another, then every ``async def``
    one together (their runs overlap: one ``asyncio.run`` of ``asyncio.gather`` without TRL's loop), each result in its
    own column; None is NaN."""
    import asyncio
    import math
    import time

    from hir_trl.step.rewards import extra_rewards

    runs = []

    def slow(value):
        async def reward(prompts, completions, **kwargs):
            start = time.monotonic()
            await asyncio.sleep(0.2)
            runs.append((value, start, time.monotonic()))
            return [value, None]

        return reward

    def sync(prompts, completions, **kwargs):
        runs.append(("sync", time.monotonic(), time.monotonic()))
        return [1.0, 2.0]

    table = extra_rewards([slow(0.1), sync, slow(0.2), slow(0.3)], ["q1", "q2"], ["y1", "y2"], [[1], [2]],
                          {"constraints": [[], []]})
    assert table[0] == [0.1, 1.0, 0.2, 0.3]
    assert table[1][1] == 2.0 and all(math.isnan(v) for i, v in enumerate(table[1]) if i != 1)
    assert runs[0][0] == "sync"  # called before any async function starts
    slow_runs = runs[1:]
    assert len(slow_runs) == 3 and max(s for _, s, _ in slow_runs) < min(e for _, _, e in slow_runs)


def test_extra_rewards_hand_the_awaitables_to_run_together():
    from hir_trl.step.rewards import extra_rewards

    async def reward(prompts, completions, **kwargs):
        return [0.5] * len(prompts)

    handed = []

    def run_together(awaitables):
        handed.append(len(awaitables))
        for awaitable in awaitables:
            awaitable.close()  # not awaited here
        return [[0.7], [0.9]]

    assert extra_rewards([reward, reward], ["q"], ["y"], [[1]], {}, run_together=run_together) == [[0.7, 0.9]]
    assert handed == [2]
