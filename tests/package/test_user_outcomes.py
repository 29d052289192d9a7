"""What a run or a score tells the user is what happened, each tried in several variants.

1. No silent wrong number: two benchmarks scored together never swap responses with the same key; an unusable judge
   answer is a judge failure, not a NO; a reward function or verifier that changes its input changes nothing else.
2. No training that does nothing with exit 0: settings that cannot train are refused when the config is built; too
   few rows is refused before training; a run that trains no step does not end as if it had.
3. What the user is shown: the summary shows the q' trained on, says when replay is off and when the judge failed;
   a run whose constraints are all rule checks needs no judge key; install advice names the extra.
4. Config and data mistakes end in one line naming the fix.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import tomllib
import yaml

from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset, register_verifier
from hir_trl.cli.eval import main as eval_main
from hir_trl.cli.summary import training_summary
from hir_trl.evaluation.benchmarks import load_benchmark
from hir_trl.evaluation.scoring import ResponsesFormatError, read_responses, score
from hir_trl.guards import (
    NothingTrainedError,
    NothingTrainedGuard,
    check_enough_rows,
    checked_reward_function,
)
from hir_trl.judge import (
    DeferredJudge,
    JudgeError,
    JudgeUnavailableError,
    LiteLLMJudge,
    UnusableLogprobError,
    judge_batch,
    verdict_from_logprobs,
)
from hir_trl.step.rewards import extra_rewards
from hir_trl.trainer_setup import judge_for
from hir_trl.verifiers import Verdict, verify_constraint

from ..judge_server import FakeJudgeServer
from ..testing_utils import (
    REPO_ROOT,
    SAMPLE_DATA,
    TINY_RECIPE,
    assert_nothing_written,
    assert_one_line_error,
    train,
    write_rows,
)
from .utils import native

pytestmark = pytest.mark.usefixtures("clean_registry")  # registrations are process-wide (tests/conftest.py)


# ------------------------------------------------------------------------------ 1. scoring: a key with its benchmark


def _bench(tmp_path, name, prompts, keys=None):
    rows = [{"key": k, "prompt": p, "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
            for k, p in zip(keys or range(len(prompts)), prompts)]
    return write_rows(tmp_path / f"{name}.jsonl", rows)


A_PROMPTS = [f"Write line {i} of a poem about rain." for i in range(4)]
B_PROMPTS = [f"Describe city number {i} in one paragraph." for i in range(4)]


def _strict(report, name):
    return {row["key"]: [s["strict"] for s in row["samples"]] for row in report["benchmarks"][name]["rows"]}


def _two(tmp_path):
    return (load_benchmark(_bench(tmp_path, "a", A_PROMPTS), name="A"),
            load_benchmark(_bench(tmp_path, "b", B_PROMPTS), name="B"))


# A's answers meet "no comma", B's do not: a response scored against the other benchmark's row would show.
A_LINES = [{"key": i, "prompt": p, "response": "no comma here"} for i, p in enumerate(A_PROMPTS)]
B_LINES = [{"key": i, "prompt": p, "response": "one, two"} for i, p in enumerate(B_PROMPTS)]


@pytest.mark.parametrize("lines", [
    A_LINES + B_LINES,  # one file, keys without a benchmark, the same keys in both
    B_LINES[::-1] + A_LINES,  # another order
    [{**line, "benchmark": "A"} for line in A_LINES] + B_LINES,  # some lines name their benchmark
    [{**line, "sample": 0} for line in A_LINES + B_LINES],  # with sample numbers
], ids=["no_benchmark", "reversed", "half_named", "sampled"])
def test_two_benchmarks_scored_together_keep_each_response_on_its_own_row(tmp_path, lines):
    a, b = _two(tmp_path)
    report = score([a, b], read_responses(write_rows(tmp_path / "r.jsonl", lines)))
    assert _strict(report, "A") == {str(i): [[True]] for i in range(4)}
    assert _strict(report, "B") == {str(i): [[False]] for i in range(4)}
    for name in ("A", "B"):
        assert [row["num_responses"] for row in report["benchmarks"][name]["rows"]] == [1] * 4
    assert report["unmatched_responses"]["count"] == 0


def test_two_responses_files_of_two_benchmarks_through_the_cli(tmp_path, capsys):
    a, b = _bench(tmp_path, "a", A_PROMPTS), _bench(tmp_path, "b", B_PROMPTS)
    ra, rb = write_rows(tmp_path / "ra.jsonl", A_LINES), write_rows(tmp_path / "rb.jsonl", B_LINES)
    out = tmp_path / "report.json"
    code = eval_main(["score", "-b", f"A={a}", f"B={b}", "-r", str(ra), str(rb), "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["benchmarks"]["A"]["headline"]["mean"] == 1.0
    assert report["benchmarks"]["B"]["headline"]["mean"] == 0.0


def test_a_rewritten_prompt_joins_the_one_benchmark_with_its_key(tmp_path):
    a = load_benchmark(_bench(tmp_path, "a", A_PROMPTS, keys=[10, 11, 12, 13]), name="A")
    b = load_benchmark(_bench(tmp_path, "b", B_PROMPTS), name="B")
    lines = [{"key": 10 + i, "prompt": f"<s>{p}</s>", "response": "no comma"} for i, p in enumerate(A_PROMPTS)]
    lines += [{**line, "prompt": f"<s>{line['prompt']}</s>"} for line in B_LINES]
    report = score([a, b], read_responses(write_rows(tmp_path / "r.jsonl", lines)))
    assert _strict(report, "A") == {str(10 + i): [[True]] for i in range(4)}
    assert _strict(report, "B") == {str(i): [[False]] for i in range(4)}


@pytest.mark.parametrize("lines, fragments", [
    # the key is a row of both benchmarks and the (rewritten) prompt is neither row's: which one cannot be told
    ([{"key": 0, "prompt": "<s>rewritten</s>", "response": "x"}] + A_LINES[1:] + B_LINES[1:],
     ["r.jsonl, line 1", "key '0' names a row of each of A, B", '"benchmark": NAME']),
    # one key given to two prompts that are no row's
    (A_LINES[:3] + B_LINES + [{"key": 3, "prompt": "<s>one</s>", "response": "a", "benchmark": "A"},
                              {"key": 3, "prompt": "<s>two</s>", "response": "b", "benchmark": "A"}],
     ["r.jsonl, line 9", "key '3' of A was given to the prompt '<s>one</s>' at", "line 8"]),
    # two different responses for one sample of one key
    (A_LINES + B_LINES[:3] + [{"key": 3, "prompt": "<s>x</s>", "response": "a", "sample": 0, "benchmark": "B"},
                              {"key": 3, "prompt": "<s>x</s>", "response": "b", "sample": 0, "benchmark": "B"}],
     ["r.jsonl, line 9", "a different response for sample 0 of the prompt '<s>x</s>'"]),
], ids=["ambiguous_key", "one_key_two_prompts", "one_sample_two_responses"])
def test_a_key_that_cannot_be_joined_to_one_row_is_one_line(tmp_path, capsys, lines, fragments):
    a, b = _bench(tmp_path, "a", A_PROMPTS), _bench(tmp_path, "b", B_PROMPTS)
    responses = write_rows(tmp_path / "r.jsonl", lines)
    code = eval_main(["score", "-b", f"A={a}", f"B={b}", "-r", str(responses), "-o", str(tmp_path / "o.json")])
    out, err = capsys.readouterr()
    assert code == 2 and not out and err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert not (tmp_path / "o.json").exists()
    with pytest.raises(ResponsesFormatError):  # the same through the Python API
        score([load_benchmark(a, name="A"), load_benchmark(b, name="B")], read_responses(responses))


def test_rows_sharing_a_key_keep_their_own_responses(tmp_path):
    bench = load_benchmark(_bench(tmp_path, "dup", A_PROMPTS[:2], keys=["k", "k"]), name="A")
    lines = [{"key": "k", "prompt": A_PROMPTS[0], "response": "no comma"},
             {"key": "k", "prompt": A_PROMPTS[1], "response": "one, two"}]
    report = score([bench], read_responses(write_rows(tmp_path / "r.jsonl", lines)))
    rows = report["benchmarks"]["A"]["rows"]
    assert [(row["num_responses"], row["samples"][0]["strict"]) for row in rows] == [(1, [True]), (1, [False])]
    rewritten = [{**lines[0], "prompt": "<s>rewritten</s>"}, lines[1]]
    with pytest.raises(ResponsesFormatError, match="key 'k' names 2 rows of A .* none of theirs"):
        score([bench], read_responses(write_rows(tmp_path / "r2.jsonl", rewritten)))


def test_a_line_repeated_in_two_files_is_one_sample(tmp_path):
    a, b = _two(tmp_path)
    lines = [{**line, "sample": 0, "benchmark": "A"} for line in A_LINES]
    files = [write_rows(tmp_path / "r1.jsonl", lines + B_LINES), write_rows(tmp_path / "r2.jsonl", lines)]
    report = score([a, b], read_responses(files))
    assert [row["num_responses"] for row in report["benchmarks"]["A"]["rows"]] == [1] * 4


def test_a_verifier_that_changes_its_arguments_changes_nothing_else(tmp_path):
    @register_verifier("mine", "last_word_present")
    def last_word_present(response, words):
        return words.pop() in response  # takes the list apart while checking

    kwargs = {"words": ["alpha", "beta", "gamma"]}
    assert [verify_constraint("mine", "last_word_present", kwargs, "gamma").passed for _ in range(3)] == [True] * 3
    assert kwargs == {"words": ["alpha", "beta", "gamma"]}
    # in evaluation every sample (and the loose check) sees the benchmark row's own arguments
    bench = write_rows(tmp_path / "bench.jsonl", [{"key": 1, "prompt": "Say gamma.", "instruction_id_list":
                                                   ["mine:last_word_present"], "kwargs": [kwargs]}])
    responses = write_rows(tmp_path / "r.jsonl", [{"key": 1, "prompt": "Say gamma.", "response": "gamma",
                                                   "sample": s} for s in range(3)])
    report = score([load_benchmark(bench)], read_responses(responses))
    (row,) = next(iter(report["benchmarks"].values()))["rows"]
    assert [s["strict"] for s in row["samples"]] == [[True]] * 3


# ------------------------------------------------------------------------------ 1. judge: unusable answers


@pytest.mark.parametrize("top", [
    [{"token": "YES", "logprob": math.nan}, {"token": "NO", "logprob": -0.2}],
    [{"token": "YES", "logprob": -0.2}, {"token": "NO", "logprob": math.nan}],
    [{"token": "YES", "logprob": math.inf}, {"token": "NO", "logprob": -0.2}],
    [{"token": " yes", "logprob": 0.7}, {"token": "NO", "logprob": -0.2}],  # a probability above 1
    [{"token": "YES", "logprob": None}, {"token": "NO", "logprob": -0.2}],
    [{"token": "YES", "logprob": "-0.1"}, {"token": "NO", "logprob": -0.2}],
    [{"token": "NO", "logprob": True}],
])
def test_an_unusable_yes_or_no_log_prob_is_no_verdict(top):
    with pytest.raises(UnusableLogprobError, match="not a log-probability"):
        verdict_from_logprobs(top)


def test_usable_log_probs_still_decide():
    assert verdict_from_logprobs([{"token": "YES", "logprob": -math.inf}, {"token": "NO", "logprob": -0.2}])[0] is False
    assert verdict_from_logprobs([{"token": "The", "logprob": math.nan}, {"token": "YES", "logprob": -0.1}])[0] is True
    assert verdict_from_logprobs([{"token": "YES", "logprob": 1e-7}])[0] is True  # log(1), rounded above 0


@pytest.fixture(scope="module")
def judge_server():
    with FakeJudgeServer() as server:
        yield server


def _judge(server, **settings):
    return LiteLLMJudge("openai/test", api_base=server.base_url, api_key_env="", timeout=5.0, max_retries=0,
                        retry_backoff=0.01, logprobs=True, **settings)


@pytest.mark.parametrize("bad", ["nan", "inf", "0.5", "null"])
def test_a_judge_answer_with_an_unusable_log_prob_is_a_counted_failure(judge_server, bad):
    triples = [("Write a poem.", "Rain.", f"LOGPROBS:yes={bad},no=-0.2 case {bad}"),
               ("Write a poem.", "Rain.", "LOGPROBS:yes=-0.1,no=-3.0 a fine one")]
    judge = _judge(judge_server)
    try:
        unusable, fine = judge(triples)
        assert unusable.passed is False and unusable.error is not None  # a failure, never a NO
        assert "log-prob" in unusable.error or bad == "null"  # litellm itself refuses a null log-prob
        assert fine.passed is True and fine.error is None
        metrics = judge.pop_metrics()
        assert metrics["judge/failures"] == 1.0 and metrics["judge/verdicts"] == 2.0
    finally:
        judge.close()
    strict = _judge(judge_server, failure_policy="raise")
    try:
        with pytest.raises(JudgeError, match="failed on 1 of 2"):
            strict(triples)
    finally:
        strict.close()


@pytest.mark.parametrize("returned", [Verdict(None, source="judge"), Verdict(math.nan, source="judge"),
                                      Verdict("NO", source="judge"), None, True])
def test_a_judge_returning_no_verdict_is_a_failure_not_a_no(returned):
    verdicts = judge_batch(lambda triples: [Verdict(True, source="judge"), returned], [("q", "y", "c")] * 2)
    assert verdicts[0] == Verdict(True, source="judge")
    assert verdicts[1].passed is False and "not a Verdict whose passed is True or False" in verdicts[1].error


# ------------------------------------------------------------------------------ 1. reward functions get copies


def _rows():
    prompts = [[{"role": "user", "content": f"Write {i}."}] for i in range(3)]
    completions = [[{"role": "assistant", "content": f"answer {i}"}] for i in range(3)]
    kwargs = {"completion_ids": [[1, 2], [3], [4, 5, 6]], "constraints": [[{"text": "c"}] for _ in range(3)],
              "log_extra": print, "trainer_state": object()}
    return prompts, completions, kwargs


def _mutate(prompts, completions, completion_ids, constraints, **kwargs):
    n = len(completions)
    completions[0] = [{"role": "assistant", "content": "MUTATED"}]
    completions[1][0]["content"] += " MUTATED"
    completions.append(completions[0])
    prompts.clear()
    completion_ids[2].clear()
    constraints[0].clear()
    return [0.0] * n


async def _mutate_async(**kwargs):
    return _mutate(**kwargs)


@pytest.mark.parametrize("mutator", [_mutate, _mutate_async], ids=["sync", "async"])
def test_a_reward_function_that_changes_its_input_changes_nothing_else(mutator):
    prompts, completions, kwargs = _rows()
    before = json.dumps([prompts, completions, kwargs["completion_ids"], kwargs["constraints"]])
    seen = []

    def reader(prompts, completions, completion_ids, constraints, **kwargs):
        seen.append(json.dumps([prompts, completions, completion_ids, constraints]))
        assert kwargs["trainer_state"] is shared_state  # TRL's objects are shared, not copied
        return [1.0, 1.0, 1.0]

    shared_state = kwargs["trainer_state"]
    functions = [checked_reward_function(mutator), checked_reward_function(reader)]
    # as TRL's reward call runs them: one after another on the same lists
    for function in functions:
        output = function(prompts=prompts, completions=completions, **kwargs)
        if asyncio.iscoroutine(output):
            output = asyncio.run(output)
        assert len(output) == 3
    assert json.dumps([prompts, completions, kwargs["completion_ids"], kwargs["constraints"]]) == before
    assert seen == [before]
    # as a replay's extra rewards are computed
    table = extra_rewards(functions, prompts, completions, kwargs["completion_ids"],
                          {"constraints": kwargs["constraints"], "trainer_state": shared_state})
    assert [row[1] for row in table] == [1.0, 1.0, 1.0] and seen[-1] == before


def test_a_mutating_reward_function_leaves_the_completion_log_and_replays_alone(tmp_path, tiny_model_path):
    """TRL's own reward call and the replays' extra rewards, in one real step."""
    calls = []

    def reader(prompts, completions, constraints, **kwargs):
        calls.append((json.dumps(prompts), json.dumps(completions), json.dumps(constraints)))
        return [0.0] * len(completions)

    args = HiRConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none",
                     per_device_train_batch_size=12, num_generations=6, num_replays=2, max_steps=1,
                     max_completion_length=8, replay_truncated_completions=True, save_strategy="no",
                     logging_steps=1, log_completions=True, num_completions_to_print=0, reward_weights=[1, 0, 0])
    trainer = HiRTrainer(str(tiny_model_path), reward_funcs=[_mutate, reader], args=args,
                         train_dataset=load_hir_dataset(SAMPLE_DATA))
    trainer.train()
    logged = json.dumps(list(trainer._logs["completion"]))
    assert "MUTATED" not in logged and len(trainer._logs["prompt"]) == len(trainer._logs["completion"])
    assert len(calls) >= 2  # TRL's call on the sampled rows, then the replays' extra rewards
    for prompts, completions, constraints in calls:
        assert "MUTATED" not in completions and json.loads(prompts) and all(json.loads(constraints))


# ------------------------------------------------------------------------------ 2. settings that cannot train


@pytest.mark.parametrize("argv, fragment", [
    (["--epsilon=-0.2"], "epsilon must be >= 0"),
    (["--epsilon_high=-0.1"], "epsilon_high must be >= 0"),
    (["--beta=-0.04"], "beta must be >= 0"),
    (["--learning_rate", "0"], "learning_rate must be > 0"),
    (["--learning_rate=-1e-5"], "learning_rate must be > 0"),
    (["--num_generations", "1", "--num_replays", "0"], "num_generations must be >= 2"),
    (["--num_generations", "0", "--num_replays", "0"], "num_generations must be >= 2"),
    (["--top_p", "0"], "top_p must be in (0, 1]"),
    (["--top_k", "1"], "samples greedily"),
    (["--min_p", "1.0"], "min_p must be in [0, 1)"),
    (["--repetition_penalty", "0"], "repetition_penalty must be > 0"),
    (["--num_iterations", "0"], "num_iterations must be >= 1"),
    (["--gradient_accumulation_steps", "0"], "gradient_accumulation_steps must be >= 1"),
    (["--per_device_train_batch_size", "0"], "per_device_train_batch_size must be >= 1"),
    (["--delta", "0.9"], "delta must be > 1"),
    (["--top_entropy_quantile", "1.5"], "top_entropy_quantile must be in [0, 1]"),
    (["--adam_beta2", "1.0"], "adam_beta2 must be in [0, 1)"),
])
def test_settings_that_cannot_train_are_refused_when_the_config_is_built(tmp_path, capsys, argv, fragment):
    code, out, err = train(tmp_path, capsys, *argv)
    assert_one_line_error(code, out, err, fragment)
    assert_nothing_written(tmp_path)
    pairs = [a.split("=", 1) for a in argv if "=" in a] + [list(p) for p in zip(argv[::2], argv[1::2]) if
                                                           "=" not in p[0]]
    values = {name.removeprefix("--"): float(value) if "." in value or "e" in value else int(value)
              for name, value in pairs}
    with pytest.raises(ValueError, match=re.escape(fragment)):  # the same through the Python API
        HiRConfig(output_dir=str(tmp_path / "api"), use_cpu=True, report_to="none",
                  **{"per_device_train_batch_size": 12, "num_generations": 6, "num_replays": 2, **values})


def test_settings_at_the_edge_of_their_range_are_accepted(tmp_path):
    HiRConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=12,
              num_generations=6, epsilon=0.0, epsilon_high=0.0, beta=0.0, top_k=0, top_p=1.0, min_p=0.0,
              top_entropy_quantile=0.0, delta=1.5, num_generations_eval=None)


@pytest.mark.parametrize("rows, batch, needed", [(1, 12, 2), (3, 24, 4)])
def test_fewer_rows_than_one_steps_prompts_is_refused_before_training(tmp_path, capsys, tiny_model_path, rows, batch,
                                                                    needed):
    data = write_rows(tmp_path / "few.jsonl", [native(id=f"r-{i}") for i in range(rows)])
    code, out, err = train(tmp_path, capsys, "--dataset_name", data, "--model_name_or_path", tiny_model_path,
                           "--build_tiny_model", "false", "--per_device_train_batch_size", batch)
    assert_one_line_error(code, out, err, f"the training data has {rows} row(s), fewer than the {needed} prompts "
                          "one step samples", "per_device_train_batch_size")
    assert not (tmp_path / "out").exists()
    args = HiRConfig(output_dir=str(tmp_path / "api"), use_cpu=True, report_to="none",
                     per_device_train_batch_size=batch, num_generations=6)
    with pytest.raises(NothingTrainedError, match=f"has {rows} row"):
        check_enough_rows(args, load_hir_dataset(data))


def test_a_run_that_trained_no_step_is_an_error(tmp_path):
    guard = NothingTrainedGuard()
    args = HiRConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=12,
                     num_generations=6)
    state = type("State", (), {"global_step": 0, "max_steps": 5})()
    guard.on_train_begin(args, state, None)
    with pytest.raises(NothingTrainedError, match="trained no optimizer step .*stopped at step 0 of 5"):
        guard.on_train_end(args, state, None)
    guard.on_train_begin(args, state, None)
    guard.on_step_end(args, state, None)
    guard.on_train_end(args, state, None)  # a step was trained
    finished = type("State", (), {"global_step": 5, "max_steps": 5})()
    guard.on_train_begin(args, finished, None)
    guard.on_train_end(args, finished, None)  # resumed at max_steps: nothing to do, no error


# ------------------------------------------------------------------------------ 3. a streaming dataset, the judge key


def _rule_rows(count):
    rows = load_hir_dataset(SAMPLE_DATA)
    return rows.select(range(count))


def test_rule_checked_streaming_data_needs_no_judge_key(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    args = HiRConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none",
                     per_device_train_batch_size=12, num_generations=6, max_steps=1, max_completion_length=8,
                     save_strategy="no")
    assert args.judge_model and args.judge_api_key_env == "DEEPSEEK_API_KEY"  # the defaults
    from datasets import IterableDataset

    features = _rule_rows(1).features
    empty = IterableDataset.from_generator(lambda: iter(()), features=features)  # a stream that ends at once
    trainer = HiRTrainer(str(tiny_model_path), args=args, train_dataset=empty)
    assert isinstance(trainer.constraint_reward.judge, DeferredJudge)
    with pytest.raises(NothingTrainedError, match="trained no optimizer step"):
        trainer.train()
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_the_judge_is_decided_from_a_streaming_datasets_first_rows(tmp_path, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    args = HiRConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=12,
                     num_generations=6)
    rules = _rule_rows(4)
    judge = judge_for(args, rules.to_iterable_dataset())
    assert isinstance(judge, DeferredJudge)
    assert judge.pop_metrics()["judge/failures"] == 0.0 and judge([]) == []  # nothing asked, nothing built
    with pytest.raises(JudgeUnavailableError, match="a soft constraint needs the judge, but .*DEEPSEEK_API_KEY"):
        judge([("q", "y", "Sound cheerful.")])
    assert judge_for(args, rules) is None  # countable rule-only data: no judge at all
    soft = [{**row, "constraints": [*row["constraints"], {**row["constraints"][0], "kind": "soft", "family": None,
                                                         "instruction_id": None, "text": "Sound cheerful."}]}
            for row in rules]
    from datasets import Dataset

    with pytest.raises(KeyError, match="DEEPSEEK_API_KEY"):  # a soft constraint in the first rows: the key now
        judge_for(args, Dataset.from_list(soft).to_iterable_dataset())


# ------------------------------------------------------------------------------ 3. the end-of-run summary


def _completion_log(folder: Path, q_prime: str):
    rows = [{"step": 1, "row_id": "r-0", "prompt": [{"role": "user", "content": "Write a list. Use at least 3 "
                                                     "placeholders such as [name]."}],
             "completion": [{"role": "assistant", "content": "- [name] is here"}], "hindsight": False,
             "supplementary": False, "kept_constraints": None},
            {"step": 1, "row_id": "r-0", "prompt": [{"role": "user", "content": q_prime}],
             "completion": [{"role": "assistant", "content": "- [name] is here"}], "hindsight": True,
             "supplementary": False, "kept_constraints": "[0]"}]
    (folder / "completions").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "completions" / "completions_00001.parquet")


STEP = {"step": 1, "reward/ila": 0.0, "reward/cla": 0.5, "hir/replayed_rows": 2, "hir/supplementary_samples": 0,
        "hir/padded_rows": 0}


def test_the_summary_shows_the_q_prime_that_was_trained_on(tmp_path):
    q_prime = "Write a list. Use at least 1 placeholders such as [name]."  # relabelled to what y achieved
    _completion_log(tmp_path, q_prime)
    source = {"row_id": "r-0", "prompt": [{"role": "user", "content": "Write a list. Use at least 3 placeholders "
                                          "such as [name]."}],
              "constraints": [{"text": "Use at least 3 placeholders such as [name]."}]}
    text = training_summary(tmp_path, [STEP], [source], num_replays=2)
    assert f"q': {q_prime}" in text
    assert "at least 3" not in text.split("q': ")[1].splitlines()[0]


@pytest.mark.parametrize("log_completions", [True, False])
def test_an_rl_ir_summary_says_replay_is_off(tmp_path, log_completions):
    text = training_summary(tmp_path, [{**STEP, "hir/replayed_rows": 0}], log_completions=log_completions,
                            num_replays=0)
    assert "replay is off: num_replays is 0" in text
    assert "no failed completion met any constraint" not in text


@pytest.mark.parametrize("failures, verdicts, shown", [(8, 8, "8 of 8 soft-constraint verdicts failed (100.0%)"),
                                                      (1, 40, "1 of 40 soft-constraint verdicts failed (2.5%)"),
                                                      (0, 40, None)])
def test_the_summary_names_judge_failures(tmp_path, failures, verdicts, shown):
    history = [{**STEP, "judge/failures": failures / 2, "judge/verdicts": verdicts / 2},
               {**STEP, "step": 2, "judge/failures": failures / 2, "judge/verdicts": verdicts / 2}]
    text = training_summary(tmp_path, history, log_completions=False, num_replays=2)
    if shown is None:
        assert "Judge:" not in text
        return
    assert shown in text
    assert ("never gave a verdict" in text) == (failures == verdicts)


# ------------------------------------------------------------------------------ 3. install advice names the extra


def _extra_packages() -> dict[str, str]:
    """package name -> the extra that installs it (pyproject's optional dependencies, the dev extra aside)."""
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    packages = {}
    for extra, requirements in extras.items():
        if extra == "dev":
            continue
        for requirement in requirements:
            name = re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower()
            packages.setdefault(name, extra)
            if "[" in requirement:  # trl[vllm]: the extra's own package too
                packages.setdefault(requirement.split("[")[1].split("]")[0].lower(), extra)
    return packages


def test_install_advice_for_an_extras_package_names_the_extra():
    packages = _extra_packages()
    assert packages["vllm"] == "vllm" and packages["matplotlib"] == "plot"
    bare = []
    texts = [*(REPO_ROOT / "hir_trl").rglob("*.py"), REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")]
    for path in sorted(texts):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for name in re.findall(r"pip install ([A-Za-z0-9_.-]+)", line):
                if name.lower() in packages:
                    bare.append(f"{path.relative_to(REPO_ROOT)}:{number}: pip install {name} (extra: "
                                f"{packages[name.lower()]})")
    assert not bare, bare


def test_use_vllm_without_vllm_advises_the_extra(tmp_path, capsys, monkeypatch, tiny_model_path):
    from hir_trl.trl_adapter import TRLPasses

    monkeypatch.setattr(TRLPasses, "vllm_available", lambda self: False)
    args = HiRConfig(output_dir=str(tmp_path / "api"), use_cpu=True, report_to="none", per_device_train_batch_size=12,
                     num_generations=6, use_vllm=True)
    with pytest.raises(ImportError, match=re.escape("pip install 'hir-trl[vllm]'")):
        HiRTrainer("unused-model", args=args, train_dataset=load_hir_dataset(SAMPLE_DATA))
    code, out, err = train(tmp_path, capsys, "--use_vllm", "true", "--model_name_or_path", tiny_model_path,
                           "--build_tiny_model", "false")
    assert_one_line_error(code, out, err, "pip install 'hir-trl[vllm]'")
    assert "pip install vllm" not in err


# ------------------------------------------------------------------------------ 4. one line naming the fix


def _recipe(tmp_path, **changes):
    values = yaml.safe_load(TINY_RECIPE.read_text())
    values.update({"max_steps": 1, "save_strategy": "no", **changes})  # a case that is not refused trains briefly
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


@pytest.mark.parametrize("changes, fragments", [
    ({"num_generations": None}, ["num_generations must be an integer, got None", "default (6)"]),
    ({"max_steps": None}, ["max_steps must be an integer, got None", "default (-1)"]),
    ({"learning_rate": None}, ["learning_rate must be a number, got None"]),
    ({"seed": None}, ["seed must be an integer, got None", "default (42)"]),
    ({"num_replays": None}, ["num_replays must be an integer, got None", "default (2)"]),
    ({"max_completion_length": None}, ["max_completion_length must be an integer, got None"]),
    ({"top_k": -1}, ["top_k must be >= 2, or 0", "vLLM's 'off'"]),
    ({"reward_weights": "1,2"}, ["reward_weights", "'1,2'"]),
])
def test_a_config_value_of_the_wrong_kind_is_one_line(tmp_path, capsys, changes, fragments):
    code, out, err = train(tmp_path, capsys, recipe=_recipe(tmp_path, **changes))
    assert_one_line_error(code, out, err, *fragments)
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("cls, changes, fragment", [
    ("config", {"reward_weights": "1,2"}, "reward_weights must be a list"),
    ("config", {"reward_weights": 1.0}, "reward_weights must be a list"),
    ("config", {"label_names": "labels"}, "label_names must be a list"),
    ("script", {"reward_funcs": "my_rewards.length"}, "reward_funcs must be a list"),
    ("config", {"num_generations": None}, "num_generations must be an integer, got None (null): leave it out"),
    ("config", {"beta": None}, "beta must be a number, got None (null): leave it out to use the default (0.0)"),
    ("script", {"dataset_max_rows": "ten"}, "dataset_max_rows must be an integer, got 'ten'"),
])
def test_a_value_of_the_wrong_kind_through_the_python_api(tmp_path, cls, changes, fragment):
    from hir_trl.configs import HiRScriptArguments

    with pytest.raises(ValueError, match=re.escape(fragment)):
        if cls == "config":
            HiRConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **changes)
        else:
            HiRScriptArguments(dataset_name="x", **changes)
    if cls == "script":  # one module for verifier_modules stays accepted
        HiRScriptArguments(dataset_name="x", verifier_modules="my_constraints")


def test_a_number_yaml_reads_as_text_names_the_fix(tmp_path):
    with pytest.raises(ValueError, match=re.escape("learning_rate must be a number, got '1e-5' (str): write it as a "
                                                   "number (YAML reads 1e-5 as text; write 1.0e-5)")):
        HiRConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", learning_rate="1e-5")


def test_top_k_minus_one_on_the_command_line_is_one_line(tmp_path, capsys):
    code, out, err = train(tmp_path, capsys, "--top_k", "-1")
    assert_one_line_error(code, out, err, "top_k must be >= 2, or 0 for no top-k filtering")


@pytest.mark.parametrize("row, field", [
    (native(task="Write a haiku \ud800 about rain."), "task"),
    (native(constraints=[{**native()["constraints"][0], "text": "No commas \udfff."}]), "constraints[0].text"),
    ({"id": "x", "prompt": [{"role": "user", "content": "Hi \ud83d"}], "constraints": []}, "prompt[0].content"),
])
def test_a_lone_surrogate_escape_in_a_data_file_names_file_line_and_field(tmp_path, capsys, row, field):
    text = json.dumps(row)  # json.dumps writes the lone surrogate as its escape, as a broken exporter does
    assert "\\ud8" in text or "\\udf" in text
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(native(id="ok")) + "\n" + text + "\n", encoding="utf-8")
    code, out, err = train(tmp_path, capsys, "--dataset_name", data)
    assert_one_line_error(code, out, err, f"{data}, line 2: field '{field}' holds a lone surrogate escape")
    assert_nothing_written(tmp_path)
    with pytest.raises(ValueError, match=re.escape(f"line 2: field '{field}'")):
        load_hir_dataset(data)


def test_hir_trl_train_that_trains_no_step_exits_2_and_saves_nothing(tmp_path, capsys, tiny_model_path, monkeypatch):
    """The guard behind the row check: with the check out of the way, the run itself refuses to end as a success."""
    import hir_trl.trainer_setup

    monkeypatch.setattr(hir_trl.trainer_setup, "check_enough_rows", lambda args, dataset: None)
    data = write_rows(tmp_path / "one.jsonl", [native(id="only")])  # 1 row; a step samples 2 prompts
    code, out, err = train(tmp_path, capsys, "--dataset_name", data, "--model_name_or_path", tiny_model_path,
                           "--build_tiny_model", "false", "--max_steps", "1", "--save_strategy", "no")
    last = err.strip().splitlines()[-1]
    assert code == 2, err
    assert last.startswith("hir-trl train: error: stopped at step 0: trained no optimizer step"), err
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "model.safetensors").exists() and not (tmp_path / "out" / "README.md").exists()
