"""The one reading of chat messages (`hir_trl.data.chat`), and the one judge call shared by training and evaluation."""

from __future__ import annotations

import ast

import pytest

from hir_trl import ConstraintReward
from hir_trl.data.chat import completion_text, instruction_text, last_user_text, message_text, prompt_text
from hir_trl.data.synth import prompt_of
from hir_trl.evaluation import evaluate, load_benchmark
from hir_trl.judge import JudgeError, judge_batch
from hir_trl.step.batch import NewRow
from hir_trl.step.replay import ReplayChoice
from hir_trl.step.rewards import rejudge_replays
from hir_trl.verifiers import Verdict

from ..testing_utils import REPO_ROOT

PARTS = [{"type": "text", "text": "Write a poem."}, {"type": "image_url", "image_url": {"url": "x"}},
         {"type": "text", "text": " No commas."}]


def test_message_text_reads_strings_parts_and_nothing_else():
    assert message_text({"role": "user", "content": "hi"}) == "hi"
    assert message_text({"role": "user", "content": PARTS}) == "Write a poem. No commas."
    assert message_text({"role": "user", "content": ["a", {"text": "b"}, 7]}) == "ab"
    assert message_text({"role": "user", "content": None}) == message_text({"role": "user"}) == ""
    assert message_text({"role": "user", "content": 3}) is None
    assert message_text("hi") is None


def test_last_user_text_takes_the_final_user_turn():
    turns = [{"role": "system", "content": "s"}, {"role": "user", "content": "first"},
             {"role": "assistant", "content": "a"}, {"role": "user", "content": PARTS},
             {"role": "assistant", "content": "reference answer"}]
    assert last_user_text(turns) == "Write a poem. No commas."
    assert last_user_text(turns[:3]) == "first"
    assert last_user_text([{"role": "system", "content": "s"}]) is None
    assert last_user_text("a string") is None and last_user_text(None) is None
    assert prompt_text("plain") == "plain" and prompt_text(turns) == "Write a poem. No commas."
    assert prompt_text({"role": "user"}) is None


def test_instruction_and_completion_text():
    assert instruction_text("q") == "q"
    assert instruction_text([{"role": "user", "content": PARTS}]) == "Write a poem. No commas."
    for prompt in ([{"role": "assistant", "content": "a"}], [], [{"role": "user", "content": 5}]):
        with pytest.raises(ValueError, match="no user turn"):
            instruction_text(prompt)
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": None},
                            {"role": "assistant", "content": "b"}]) == "ab"
    with pytest.raises(TypeError, match="int"):
        completion_text(3)


def test_training_evaluation_and_synth_read_the_same_instruction(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PARTS}]
    assert prompt_of({"messages": messages}) == "Write a poem. No commas."
    seen = []

    def judge(triples):
        seen.extend(triples)
        return [Verdict(True, source="judge") for _ in triples]

    soft = {"kind": "soft", "text": "Be kind.", "family": None, "instruction_id": None, "kwargs": "{}"}
    ConstraintReward(judge=judge).verify([messages], ["ok"], [[soft]])
    path = tmp_path / "mdi.json"
    path.write_text('[{"id": "1", "constraint_pattern": "Example", "difficulty": "Level 1", "conversations": '
                    '[{"role": "user", "content": [{"type": "text", "text": "Write a poem."}, '
                    '{"type": "text", "text": " No commas."}]}, {"role": "assistant", "content": "ref"}], '
                    '"constraints": [["Length", "Words", "The response must contain no more than 5 words"]]}]')
    assert load_benchmark(path).rows[0].prompt == seen[0][0] == "Write a poem. No commas."


def test_no_module_keeps_its_own_last_user_turn_helper():
    # the chat reading lives in hir_trl.data.chat only: no other module compares a message role to "user" in a loop
    # over reversed messages (trainer.py and replay.py are outside this refactor)
    offenders = []
    for path in (REPO_ROOT / "hir_trl").rglob("*.py"):
        if path.name in ("chat.py", "trainer.py", "replay.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                    and getattr(node.iter.func, "id", None) == "reversed" and "'user'" in ast.unparse(node.body[0])):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


# ------------------------------------------------------------------------------------------ judge_batch


@pytest.mark.parametrize("judge, message", [
    (None, "no judge is configured"),
    (lambda triples: 1 / 0, "ZeroDivisionError: division by zero"),
    (lambda triples: [Verdict(True)], "judge returned 1 verdicts for 2 constraints"),
])
def test_judge_batch_records_failures_in_every_cell(judge, message):
    verdicts = judge_batch(judge, [("q", "r", "c1"), ("q", "r", "c2")])
    assert [(v.passed, v.source) for v in verdicts] == [(False, "judge")] * 2
    assert all(v.error.endswith(message) for v in verdicts)


def test_judge_error_stops_training_and_evaluation_alike(tmp_path):
    def raising(triples):
        raise JudgeError("the judge failed on 1 of 1 soft constraints", [(0, "boom")])

    soft = {"kind": "soft", "text": "Be kind.", "family": None, "instruction_id": None, "kwargs": "{}"}
    with pytest.raises(JudgeError, match="failed on 1 of 1"):
        ConstraintReward(judge=raising).verify(["q"], ["r"], [[soft]])
    path = tmp_path / "rows.jsonl"
    path.write_text('{"task": "Say hi.", "constraints": [{"text": "Be kind.", "kind": "soft"}]}\n')
    bench = load_benchmark(path, format="hir")
    with pytest.raises(JudgeError, match="failed on 1 of 1"):
        evaluate(bench, {bench.rows[0].prompt: "hi"}, judge=raising)


def test_judge_config_imports_nothing_of_the_package():
    # hir_trl.configs imports hir_trl.judge.config at module level; that module must not import hir_trl back
    tree = ast.parse((REPO_ROOT / "hir_trl" / "judge" / "config.py").read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    relative = [ast.unparse(n) for n in imports if isinstance(n, ast.ImportFrom) and (n.level or "hir_trl" in
                                                                                        (n.module or ""))]
    assert relative == [] and len(imports) >= 3
    configs = ast.parse((REPO_ROOT / "hir_trl" / "configs.py").read_text())
    assert any(isinstance(n, ast.ImportFrom) and n.level == 1 and n.module == "judge.config" for n in configs.body)


def test_rejudging_replays_goes_through_the_same_judge_call():
    # a judge that raises (or miscounts) during the re-judging of replays gives failed verdicts, never a crash
    inputs = [{"constraints": [{"kind": "soft", "text": "Be kind."}, {"kind": "hard", "text": "No commas."}]}]
    replay = NewRow("replay", 0, 0, ReplayChoice(0, 1.0, 0.0, 1.0, (True, True), "q'"))
    rows = [NewRow("supplementary", 0, 0), replay]
    assert rejudge_replays(lambda triples: 1 / 0, "cla", inputs, ["resp"], rows) == {1: 0.5}
    assert rejudge_replays(lambda triples: [], "ila", inputs, ["resp"], rows) == {1: 0.0}
    assert rejudge_replays(lambda triples: [Verdict(True)] * len(triples), "ila", inputs, ["resp"], rows) == {1: 1.0}

    def stop(triples):
        raise JudgeError("stop")

    with pytest.raises(JudgeError, match="stop"):  # failure_policy="raise" still stops
        rejudge_replays(stop, "ila", inputs, ["resp"], rows)
