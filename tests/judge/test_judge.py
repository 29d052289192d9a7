"""The LLM judge for soft constraints, against a real OpenAI-compatible HTTP server on loopback with faults.

The server (`tests.judge_server.FakeJudgeServer`) decides each answer from markers in the Criteria Item,
so every test knows exactly which (row, constraint) cell gets which fault.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import threading
import time

import pytest

from hir_trl import ConstraintReward, HiRConfig, HiRTrainer, load_hir_dataset
from hir_trl.data.loading import has_soft_constraints
from hir_trl.judge import (
    JUDGE_PROMPT_TEMPLATE,
    NO_KEY,
    JudgeCacheError,
    JudgeError,
    JudgeUnavailableError,
    LiteLLMJudge,
    VerdictCache,
    build_judge,
    format_judge_prompt,
    judge_batch,
    parse_yes_no,
    verdict_from_logprobs,
)
from hir_trl.verifiers import Verdict

from ..judge_server import FakeJudgeServer
from ..testing_utils import REPO_ROOT

KEY_ENV = "HIR_TEST_JUDGE_KEY"
KEY = "hirtest-Zq8x3KpL0vW7-secret-9f2c41d0"  # distinctive: any occurrence in an output is a leak
PAPER = REPO_ROOT.parent / "shared" / "paper" / "000_06a7110fcc8b7c25.txt"
#: Per-attempt timeout of the fault tests: far above FAULT:slow's 0.15 s and litellm's first-call imports even on a
#: loaded 2-core machine (0.5 s and 2 s timed calls out there), far below FAULT:timeout's 20 s hang.
TIMEOUT = 5.0
FAULTS = ["FAULT:500", "FAULT:timeout", "FAULT:slow", "FAULT:malformed", "FAULT:empty", "FAULT:reset",
          "FAULT:flaky500:1"]
#: Faults after which no verdict exists (every attempt fails) vs those a retry or patience survives.
FAILING = {"FAULT:500", "FAULT:timeout", "FAULT:malformed", "FAULT:empty", "FAULT:reset"}


@pytest.fixture(scope="module")
def server():
    with FakeJudgeServer(slow_seconds=0.15, hang_seconds=20.0) as srv:
        yield srv


@pytest.fixture
def fresh_server(server):
    server.reset_counts()
    return server


@pytest.fixture
def make_judge(fresh_server, monkeypatch):
    """LiteLLMJudge factory with short timeouts against the loopback server; closes them afterwards."""
    monkeypatch.setenv(KEY_ENV, KEY)
    judges = []

    def make(**overrides):
        settings = dict(api_base=fresh_server.base_url, api_key_env=KEY_ENV, timeout=TIMEOUT, max_retries=1,
                        retry_backoff=0.01, max_concurrency=16)
        settings.update(overrides)
        judge = LiteLLMJudge(settings.pop("model", "openai/test"), **settings)
        judges.append(judge)
        return judge

    yield make
    for judge in judges:
        judge.close()


def triple(criteria, instruction="Write a poem about rain.", response="Rain falls softly."):
    return instruction, response, criteria


def soft(text):
    return {"text": text, "kind": "soft", "family": None, "instruction_id": None, "kwargs": "{}"}


NO_COMMA = {"text": "Do not use any commas.", "kind": "hard", "family": "ifeval",
            "instruction_id": "punctuation:no_comma", "kwargs": "{}"}


# ------------------------------------------------------------------------------------------ prompt and parsing


def _render_paper_box(latex: str) -> str:
    box = latex.split("label={box:scaffolding_template}\n]", 1)[1].split(r"\end{tcolorbox}", 1)[0]
    box = box.replace(r"\_", "_")
    box = re.sub(r"\\\{\\textcolor\{blue\}\{(\w+)\}\\\}", r"{\1}", box)
    box = re.sub(r"\\textbf\{([^}]*)\}", r"\1", box)
    return box.replace("\\\\", "\n").replace("`", "'")


def test_template_is_the_papers_evaluation_prompt():
    assert all(f"{{{name}}}" in JUDGE_PROMPT_TEMPLATE for name in ("input_text", "generated_text", "criteria_item"))
    if PAPER.exists():  # word for word (LaTeX line breaks aside) with the paper's Appendix box
        assert JUDGE_PROMPT_TEMPLATE.split() == _render_paper_box(PAPER.read_text()).split()
    prompt = format_judge_prompt("THE INSTRUCTION {x}", "THE RESPONSE", "THE CRITERIA")
    assert prompt.index("Input:\nTHE INSTRUCTION {x}") < prompt.index("Generated Text:\nTHE RESPONSE") < prompt.index(
        "Criteria Item:\nTHE CRITERIA") < prompt.index("Return either a 'YES' or 'NO' choice")


@pytest.mark.parametrize("answer, expected", [
    ("YES", True), ("NO", False), ("yes.", True), (" No!", False), ("**YES**", True), ("'NO'", False),
    ("\"Yes\"", True), ("YES\n", True), ("[NO]", False), ("Yes, because the text is formal.", True),
    ("No. It uses the first person.", False), ("<think>It might be NO.</think>\nYES", True),
    ("maybe", None), ("", None), (None, None), ("   ", None), ("Yesterday", None), ("No-one knows", None),
    ("The answer is YES", None), ("Y", None), ("NOPE", None),
])
def test_parse_yes_no(answer, expected):
    assert parse_yes_no(answer) is expected


def test_verdict_from_logprobs():
    passed, p_yes = verdict_from_logprobs([{"token": "YES", "logprob": -0.1}, {"token": " no", "logprob": -2.5},
                                           {"token": "Yes", "logprob": -4.0}, {"token": "The", "logprob": -1.0}])
    assert passed is True and 0.9 < p_yes < 1.0
    assert verdict_from_logprobs([{"token": "NO", "logprob": -0.2}, {"token": "YES", "logprob": -1.9}])[0] is False
    assert verdict_from_logprobs([{"token": "The", "logprob": -0.1}]) is None
    assert verdict_from_logprobs([]) is None


# ------------------------------------------------------------------------------------------ against the server


def test_answers_and_every_fault_are_aligned_and_counted(make_judge, fresh_server):
    judge = make_judge()
    criteria = ["plain", "ANSWER:NO", "ANSWER:yes.", "ANSWER:maybe", *FAULTS]
    start = time.perf_counter()
    verdicts = judge([triple(c) for c in criteria])
    elapsed = time.perf_counter() - start
    by_criteria = dict(zip(criteria, verdicts))

    assert by_criteria["plain"] == Verdict(True, None, "judge")
    assert by_criteria["ANSWER:NO"] == Verdict(False, None, "judge")
    assert by_criteria["ANSWER:yes."] == Verdict(True, None, "judge")
    assert by_criteria["ANSWER:maybe"].passed is False and "neither YES nor NO" in by_criteria["ANSWER:maybe"].error
    assert by_criteria["FAULT:slow"] == Verdict(True, None, "judge")
    assert by_criteria["FAULT:flaky500:1"] == Verdict(True, None, "judge")  # recovered on its retry
    for fault in FAILING:
        assert by_criteria[fault].passed is False and by_criteria[fault].error, fault
    assert "Timeout" in by_criteria["FAULT:timeout"].error

    # requests: one per plain prompt; failing ones tried max_retries + 1 = 2 times; an unparseable answer
    # is not retried; connection resets may be resent once more by the HTTP client itself
    counts = {c: fresh_server.prompt_counts[format_judge_prompt(*triple(c))] for c in criteria}
    assert counts["plain"] == counts["ANSWER:maybe"] == counts["FAULT:slow"] == 1
    assert counts["FAULT:flaky500:1"] == 2
    assert all(counts[f] == 2 for f in FAILING - {"FAULT:reset"}) and counts["FAULT:reset"] >= 2

    metrics = judge.pop_metrics()
    assert metrics["judge/verdicts"] == len(criteria) and metrics["judge/calls"] == len(criteria)
    assert metrics["judge/failures"] == len(FAILING) + 1  # + the unparseable answer
    assert metrics["judge/retries"] == len(FAILING) + 1  # one retry each for the failing and the flaky prompts
    assert 0 < metrics["judge/latency_p50"] <= metrics["judge/latency_p95"]
    assert metrics["judge/seconds_per_step"] >= TIMEOUT  # the timeout fault waited
    assert elapsed < 300  # a hang guard, not a speed target (2 attempts x TIMEOUT; 24 s seen under load)
    assert judge.pop_metrics()["judge/calls"] == 0  # popped


def test_identical_triples_make_one_request(make_judge, fresh_server):
    judge = make_judge()
    verdicts = judge([triple("ANSWER:NO"), triple("plain"), triple("ANSWER:NO"), triple("ANSWER:NO")])
    assert [v.passed for v in verdicts] == [False, True, False, False]
    assert fresh_server.requests == 2
    metrics = judge.pop_metrics()
    assert (metrics["judge/calls"], metrics["judge/deduplicated"], metrics["judge/cache_hits"]) == (2, 2, 0)


def test_cache_across_instances_makes_zero_calls(make_judge, fresh_server, tmp_path):
    batch = [triple(c, response=f"response {i}") for i, c in enumerate(["plain", "ANSWER:NO", "FAULT:500", "plain"])]
    first = make_judge(cache_dir=tmp_path / "cache", max_retries=0)(batch)
    assert fresh_server.requests == 4
    assert len(VerdictCache(tmp_path / "cache")) == 3  # the failure is not cached

    fresh_server.reset_counts()
    rerun = make_judge(cache_dir=tmp_path / "cache", max_retries=0)
    again = rerun([b for b in batch if "FAULT" not in b[2]])
    assert fresh_server.requests == 0
    assert again == [first[0], first[1], first[3]]
    metrics = rerun.pop_metrics()
    assert metrics["judge/calls"] == 0 and metrics["judge/cache_hits"] == 3 and "judge/latency_p50" not in metrics

    rerun(batch)  # the failed verdict is asked again, nothing else
    assert fresh_server.requests == 1
    # a different model, temperature or answer mode is a different cache entry
    fresh_server.reset_counts()
    make_judge(model="openai/other", cache_dir=tmp_path / "cache")(batch[:1])
    make_judge(temperature=0.5, cache_dir=tmp_path / "cache")(batch[:1])
    make_judge(logprobs=True, cache_dir=tmp_path / "cache")(batch[:1])
    assert fresh_server.requests == 3


def test_cache_is_safe_for_concurrent_writers(tmp_path):
    """Several connections (as several torchrun ranks would hold) write and read one cache at once."""
    errors = []

    def worker(rank):
        try:
            cache = VerdictCache(tmp_path / "shared")
            for batch in range(20):
                entries = {f"{rank}-{batch}-{i}": (i % 2 == 0, "YES" if i % 2 == 0 else "NO", None) for i in range(10)}
                cache.put_many(entries, "m")
                assert cache.get_many(list(entries)) == entries
            cache.close()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(rank,)) for rank in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    fresh = VerdictCache(tmp_path / "shared")
    assert len(fresh) == 4 * 20 * 10 and fresh.get_many(["3-19-9"]) == {"3-19-9": (False, "NO", None)}


def test_failure_policy_raise(make_judge, fresh_server, tmp_path):
    judge = make_judge(failure_policy="raise", cache_dir=tmp_path / "cache", max_retries=2)
    with pytest.raises(JudgeError, match="failed on 1 of 2") as info:
        judge([triple("plain"), triple("FAULT:500")])
    assert info.value.failures[0][0] == 1 and "scripted server error" in info.value.failures[0][1]
    assert fresh_server.requests == 1 + 3  # the error came after 2 retries
    assert judge.pop_metrics()["judge/failures"] == 1
    assert len(VerdictCache(tmp_path / "cache")) == 1  # the success was cached before raising

    # ConstraintReward lets JudgeError through (other judge exceptions stay recorded verdicts)
    reward = ConstraintReward(judge=judge)
    with pytest.raises(JudgeError):
        reward([[{"role": "user", "content": "q"}]], ["text"], constraints=[[NO_COMMA, soft("FAULT:500")]])
    recorded = ConstraintReward(judge=make_judge())
    recorded([[{"role": "user", "content": "q"}]], ["text"], constraints=[[NO_COMMA, soft("FAULT:500")]])
    assert recorded.last_verdicts.passed(0) == [True, False] and recorded.last_verdicts.num_errors() == 1


def test_logprob_mode(make_judge, fresh_server):
    judge = make_judge(logprobs=True)
    verdicts = judge([triple("plain"), triple("LOGPROBS:yes=-2.0,no=-0.2"), triple("LOGPROBS:yes=-0.3,no=-1.4"),
                      triple("LOGPROBS:yes=-50,no=-60 ANSWER:The")])
    assert [v.passed for v in verdicts] == [True, False, True, True]
    body = fresh_server.bodies[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["max_tokens"] == 1
    assert body["temperature"] == 0.0


def test_concurrency_is_bounded_and_calls_overlap(make_judge, monkeypatch):
    with FakeJudgeServer(latency=0.1) as slow:
        judge = make_judge(api_base=slow.base_url, max_concurrency=4, timeout=5.0)
        judge([triple("plain", response=f"r{i}") for i in range(12)])  # warm-up: litellm's first-call imports
        judge([triple("plain", response=f"s{i}") for i in range(16)])
        assert slow.max_in_flight == 4  # the calls overlapped, never more than max_concurrency at once


def test_rejudge_is_counted_and_cached(make_judge, fresh_server):
    judge = make_judge()
    judge([triple("plain")])
    verdicts = judge.rejudge([triple("plain"), triple("ANSWER:NO", instruction="q' with kept constraints")])
    assert [v.passed for v in verdicts] == [True, False]
    metrics = judge.pop_metrics()
    assert metrics["judge/rejudge_verdicts"] == 2 and metrics["judge/rejudge_calls"] == 1
    assert metrics["judge/calls"] == 2 and metrics["judge/cache_hits"] == 1


def test_key_comes_from_the_environment_and_is_never_shown(make_judge, fresh_server, monkeypatch, tmp_path):
    judge = make_judge(cache_dir=tmp_path / "cache")
    judge([triple("plain")])
    assert fresh_server.authorizations == [f"Bearer {KEY}"]
    assert KEY not in repr(judge) and KEY not in pickle.dumps(judge).decode("latin-1")
    assert judge._redact(f"401 Incorrect API key provided: {KEY}") == "401 Incorrect API key provided: ***"
    assert "abcdefgh" not in judge._redact("Authorization: Bearer abcdefgh")
    monkeypatch.setenv(KEY_ENV, "rotated-key-0001")  # read at each request
    judge([triple("plain", response="other")])
    assert fresh_server.authorizations[-1] == "Bearer rotated-key-0001"

    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(KeyError, match=KEY_ENV):
        make_judge()
    # a local server without auth (hosted_vllm/ sends a placeholder when no key is given)
    assert make_judge(model="hosted_vllm/test", api_key_env=None)([triple("plain")])[0].passed
    assert KEY not in fresh_server.authorizations[-1]


def test_judge_survives_pickling(make_judge):
    judge = make_judge()
    judge([triple("plain")])
    clone = pickle.loads(pickle.dumps(judge))
    assert clone([triple("ANSWER:NO")])[0] == Verdict(False, None, "judge")
    clone.close()


def test_litellm_is_imported_lazily_without_network_or_dotenv(tmp_path):
    # no module of the package imports litellm at import time (only inside functions)
    for path in (REPO_ROOT / "hir_trl").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "litellm" for n in names), path
    # import_litellm turns off the price-map fetch and .env loading (unless the user set them), in a fresh
    # process; the package is stubbed so that only hir_trl.judge and its verifiers load (torch stays out)
    code = ("import os, sys, types; pkg = types.ModuleType('hir_trl'); pkg.__path__ = [sys.argv[1]]; "
            "sys.modules['hir_trl'] = pkg; import hir_trl.judge as j; assert 'litellm' not in sys.modules; "
            "j.import_litellm(); print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'], os.environ['LITELLM_MODE'], "
            "os.environ.get('HIR_FROM_DOTENV'))")
    (tmp_path / ".env").write_text("HIR_FROM_DOTENV=1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITELLM_")}
    out = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT / "hir_trl")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "PRODUCTION", "None"]


# ------------------------------------------------------------------------------------------ config


def _args(tmp_path, **overrides):
    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=6, max_steps=1,
                  max_completion_length=8, bf16=False, use_cpu=True, gradient_checkpointing=False,
                  report_to="none", save_strategy="no", logging_steps=1, seed=0, num_replays=2,
                  replay_truncated_completions=True)  # the random tiny model never emits EOS
    values.update(overrides)
    return HiRConfig(**values)


def test_config_fields_validation_and_build_judge(tmp_path, monkeypatch):
    args = _args(tmp_path)
    assert (args.judge_model, args.judge_api_key_env, args.judge_failure_policy) == (
        "deepseek/deepseek-chat", "DEEPSEEK_API_KEY", "unsatisfied")
    assert args.rejudge_replays is False and args.judge_cache_dir is None
    for bad, message in [(dict(judge_max_concurrency=0), "judge_max_concurrency"),
                         (dict(judge_timeout=0), "judge_timeout"), (dict(judge_timeout=float("inf")), "judge_timeout"),
                         (dict(judge_max_retries=-1), "judge_max_retries"),
                         (dict(judge_temperature=-0.1), "judge_temperature"),
                         (dict(judge_failure_policy="ignore"), "judge_failure_policy"),
                         (dict(judge_max_tokens=0), "judge_max_tokens"),
                         (dict(judge_api_base="http://user:pw@host:8000/v1"), "judge_api_base")]:
        with pytest.raises(ValueError, match=message):
            _args(tmp_path, **bad)
    with pytest.raises(ValueError, match="NAME of an environment variable") as info:
        _args(tmp_path, judge_api_key_env=KEY)  # the key pasted in the wrong field is refused, never echoed
    assert KEY not in str(info.value)

    assert build_judge(_args(tmp_path, judge_model="")) is None
    monkeypatch.setenv(KEY_ENV, KEY)
    judge = build_judge(_args(tmp_path, judge_model="hosted_vllm/m", judge_api_base="http://127.0.0.1:9/v1",
                              judge_api_key_env=KEY_ENV, judge_max_concurrency=8, judge_timeout=3.0,
                              judge_max_retries=5, judge_temperature=0.2, judge_failure_policy="raise",
                              judge_cache_dir=str(tmp_path / "c"), judge_logprobs=True, judge_retry_backoff=0.5))
    assert (judge.model, judge.api_base, judge.api_key_env, judge.max_concurrency, judge.timeout, judge.max_retries,
            judge.temperature, judge.failure_policy, judge.cache_dir, judge.logprobs, judge.retry_backoff) == (
        "hosted_vllm/m", "http://127.0.0.1:9/v1", KEY_ENV, 8, 3.0, 5, 0.2, "raise", str(tmp_path / "c"), True, 0.5)


#: Credential shapes a user may paste into a judge field (all made up): OpenAI/DeepSeek project and legacy keys,
#: a Hugging Face token, 32 hex digits, an AWS access key id, a Google API key, a GitHub token, a Groq key, a JWT,
#: and a mixed-case random key with no prefix.
KEY_SHAPES = {
    "sk_proj": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1w",
    "sk_hex": "sk-0123456789abcdef0123456789abcdef",
    "hf_token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "hex32": "a1b2c3d4e5f60718293a4b5c6d7e8f90",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "google": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "github": "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "groq": "gsk_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5zA7bC9dE",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
    "random": "Zq8x3KpL0vW7nR5tY2uB9cD4eF6gH1jK",
}


@pytest.mark.parametrize("shape", sorted(KEY_SHAPES))
def test_credential_shapes_are_refused_in_every_judge_field_and_never_shown(tmp_path, shape):
    key = KEY_SHAPES[shape]
    cases = [("judge_api_key_env", dict(judge_api_key_env=key)),
             ("judge_api_base", dict(judge_api_base=f"http://host:8000/v1?api_key={key}")),
             ("judge_api_base", dict(judge_api_base=f"http://host:8000/v1?x=1&k={key}")),
             ("judge_api_base", dict(judge_api_base=f"https://host/v1#{key}")),
             ("judge_api_base", dict(judge_api_base=f"https://host/{key}/v1")),
             ("judge_api_base", dict(judge_api_base=f"https://user:{key}@host/v1")),
             ("judge_model", dict(judge_model=f"openai/{key}")),
             ("judge_cache_dir", dict(judge_cache_dir=f"/tmp/{key}/cache"))]
    for field_name, overrides in cases:
        with pytest.raises(ValueError, match=field_name) as info:
            _args(tmp_path, **overrides)
        assert key not in str(info.value), overrides
        with pytest.raises(ValueError) as info:  # the judge itself, as `hir-trl eval --judge-*` builds it
            LiteLLMJudge(**{{"judge_api_key_env": "api_key_env", "judge_api_base": "api_base", "judge_model": "model",
                              "judge_cache_dir": "cache_dir"}[k]: v for k, v in overrides.items()})
        assert key not in str(info.value)


def test_credential_shapes_are_refused_by_hir_trl_train_without_echo(tmp_path, capsys):
    from hir_trl.cli.main import main

    for flag, value in [("--judge_api_key_env", KEY_SHAPES["hf_token"]),
                        ("--judge_api_base", f"http://h:8000/v1?api_key={KEY_SHAPES['hex32']}")]:
        code = main(["train", "--config", str(REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu.yaml"),
                     "--output_dir", str(tmp_path / "out"), "--model_name_or_path", str(tmp_path / "m"), flag, value])
        _, err = capsys.readouterr()
        assert code == 2 and err.startswith("hir-trl train: error: ") and err.count("\n") == 1
        assert flag.lstrip("-") in err and value not in err and KEY_SHAPES["hex32"] not in err
    assert not (tmp_path / "out").exists()  # refused before anything (training_args.bin) is written


def test_hub_token_is_refused_because_training_args_bin_would_hold_it(tmp_path):
    with pytest.raises(ValueError, match="hub_token would be saved in clear in training_args.bin") as info:
        _args(tmp_path, hub_token=KEY_SHAPES["hf_token"])
    assert KEY_SHAPES["hf_token"] not in str(info.value) and "HF_TOKEN" in str(info.value)


def test_names_urls_and_paths_are_not_mistaken_for_credentials(tmp_path):
    from hir_trl.judge import looks_like_credential

    for name in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY_2024", "HF_TOKEN", "hf_token",
                 "MyJudgeApiKeyVariable", "HIR_TEST_JUDGE_KEY"):
        assert _args(tmp_path, judge_api_key_env=name).judge_api_key_env == name
    for model in ("deepseek/deepseek-chat", "hosted_vllm/Qwen/Qwen3-30B-A3B-Instruct-2507", "deepseek-ai/DeepSeek-V3.1",
                  "anthropic/claude-3-5-sonnet-20241022", "bedrock/anthropic.claude-3-sonnet-20240229-v1:0",
                  "hosted_vllm//hub/models--Qwen--Qwen3/snapshots/5f0b02c75b57c5855da9ae460ce51323ea669d8a"):
        assert _args(tmp_path, judge_model=model).judge_model == model
    for url in ("http://judge-host:8000/v1", "https://api.deepseek.com/v1", "http://127.0.0.1:9/v1",
                "https://x.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-02-01"):
        assert _args(tmp_path, judge_api_base=url).judge_api_base == url
    assert all(looks_like_credential(k) for k in KEY_SHAPES.values())


def test_has_soft_constraints():
    assert has_soft_constraints([{"constraints": [NO_COMMA, soft("Be formal.")]}])
    assert not has_soft_constraints([{"constraints": [NO_COMMA]}])
    assert not has_soft_constraints(None)
    assert has_soft_constraints({"a": [{"constraints": [NO_COMMA]}], "b": [{"constraints": [soft("Be formal.")]}]})


# ------------------------------------------------------------------------------------------ in a batch and a training step


def test_constraint_reward_alignment_with_hard_constraints_and_every_fault(make_judge, fresh_server):
    judge = make_judge()
    reward = ConstraintReward(judge=judge)
    prompt = [{"role": "user", "content": "Write about rain."}]
    soft_texts = ["plain", "ANSWER:NO", *FAULTS]
    rows = [[NO_COMMA, *(soft(t) for t in soft_texts)],
            [soft("ANSWER:NO"), NO_COMMA, soft("plain")],
            [NO_COMMA],
            [soft(t) for t in reversed(soft_texts)]]
    completions = ["no commas here", "a, b", "fine text", "x"]
    out = reward([prompt] * 4, completions, constraints=rows)
    matrix = reward.last_verdicts

    expected_soft = {"plain": True, "ANSWER:NO": False, "FAULT:slow": True, "FAULT:flaky500:1": True,
                     **{f: False for f in FAILING}}
    for r, items in enumerate(rows):
        for j, c in enumerate(items):
            verdict = matrix[r, j]
            if c["kind"] == "hard":
                assert verdict.source == "rule" and verdict.passed is (r != 1), (r, j)
            else:
                assert verdict.source == "judge" and verdict.passed is expected_soft[c["text"]], (r, j, c["text"])
                assert (verdict.error is not None) is (c["text"] in FAILING), (r, j, c["text"])
    assert out == [0.0, 0.0, 1.0, 0.0]
    assert matrix.num_errors() == 2 * len(FAILING)
    metrics = judge.pop_metrics()
    assert metrics["judge/verdicts"] == len(soft_texts) * 2 + 2 and metrics["judge/failures"] == 2 * len(FAILING)


def _write_dataset(tmp_path, soft_texts):
    row = {"id": "r0", "task": "Write a short note about the sea.",
           "constraints": [{"text": "Do not use any commas.", "family": "ifeval",
                            "instruction_id": "punctuation:no_comma", "kwargs": {}},
                           *({"text": t, "kind": "soft"} for t in soft_texts)]}
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps({**row, "id": f"r{i}"}) for i in range(2)) + "\n")
    return load_hir_dataset(path)


def test_training_step_completes_under_every_fault(tmp_path, tiny_model_path, fresh_server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    soft_texts = [f"The note is calm. {m}" for m in ["ANSWER:YES", "ANSWER:NO", *FAULTS]]
    dataset = _write_dataset(tmp_path, soft_texts)
    args = _args(tmp_path, judge_model="openai/test", judge_api_base=fresh_server.base_url,
                 judge_api_key_env=KEY_ENV, judge_timeout=TIMEOUT, judge_max_retries=1, judge_retry_backoff=0.01)
    judge = build_judge(args)
    args.log_completions = True
    trainer = HiRTrainer(model=str(tiny_model_path), args=args, train_dataset=dataset,
                         reward_funcs=ConstraintReward(judge=judge))
    try:
        trainer.train()
    finally:
        judge.close()
    assert trainer.state.global_step == 1
    # the completion log holds every rule verdict, judge verdict and judge error beside each other, row by row
    import pandas as pd

    table = pd.read_parquet(tmp_path / "out" / "completions" / "completions_00001.parquet")
    assert len(table) >= 6 and table["verdicts"].notna().sum() == len(table) - table["hindsight"].sum()
    for _, logged in table[table["verdicts"].notna()].iterrows():
        entries = json.loads(logged["verdicts"])
        assert len(entries) == 1 + len(soft_texts)
        assert entries[0] == {"constraint": "punctuation:no_comma", "kind": "hard", "source": "rule",
                              "passed": "," not in logged["completion"][-1]["content"]}
        for text, entry in zip(soft_texts, entries[1:]):
            assert (entry["constraint"], entry["kind"], entry["source"]) == (text, "soft", "judge")
            assert ("error" in entry) is (text.split(". ", 1)[1] in FAILING), entry
            assert KEY not in entry.get("error", "")
    matrix = trainer.constraint_reward.last_verdicts
    assert len(matrix) == 6
    for r in range(6):
        assert matrix[r, 0].source == "rule" and matrix[r, 0].error is None
        cells = dict(zip(soft_texts, (matrix[r, j] for j in range(1, len(soft_texts) + 1))))
        for text, verdict in cells.items():
            marker = text.split(". ", 1)[1]
            assert verdict.source == "judge", (r, text)
            assert (verdict.error is not None) is (marker in FAILING), (r, text, verdict)
            assert verdict.passed is (marker in ("ANSWER:YES", "FAULT:slow", "FAULT:flaky500:1")), (r, text)
    # the trainer logged the judge's metrics for the step (and drained them)
    logged = trainer.state.log_history[0]
    assert logged["judge/failures"] == 6 * len(FAILING)
    assert logged["judge/verdicts"] == 6 * len(soft_texts)
    assert logged["judge/calls"] + logged["judge/cache_hits"] + logged["judge/deduplicated"] == 6 * len(soft_texts)
    assert "judge/latency_p50" in logged and "judge/seconds_per_step" in logged
    assert judge.pop_metrics()["judge/verdicts"] == 0


@pytest.mark.parametrize("key", [KEY, KEY_SHAPES["sk_proj"], KEY_SHAPES["hf_token"], KEY_SHAPES["hex32"]],
                         ids=["plain", "sk_proj", "hf_token", "hex32"])
def test_api_key_never_written_anywhere(tmp_path, tiny_model_path, fresh_server, monkeypatch, caplog, capsys, key):
    caplog.set_level(logging.DEBUG)
    litellm_logger = logging.getLogger("LiteLLM")  # litellm's own debug logging on, too
    monkeypatch.setattr(litellm_logger, "level", logging.DEBUG)
    monkeypatch.setenv(KEY_ENV, key)
    dataset = _write_dataset(tmp_path, ["The note is calm.", "ANSWER:NO formal", "FAULT:500 vivid"])
    out = tmp_path / "out"
    args = _args(tmp_path, judge_model="openai/test", judge_api_base=fresh_server.base_url,
                 judge_api_key_env=KEY_ENV, judge_timeout=10.0, judge_max_retries=1, judge_retry_backoff=0.01,
                 judge_cache_dir=str(out / "judge_cache"), save_strategy="steps", save_steps=1,
                 log_completions=True, logging_steps=1)
    judge = build_judge(args)
    trainer = HiRTrainer(model=str(tiny_model_path), args=args, train_dataset=dataset,
                         reward_funcs=ConstraintReward(judge=judge))
    try:
        trainer.train()
        trainer.create_model_card()
        logging.getLogger("hir_trl.test").info("judge: %r; config: %s", judge, args.to_json_string())
    finally:
        judge.close()

    # not vacuous: the key did travel, as a bearer token, to the judge server
    assert fresh_server.authorizations and set(fresh_server.authorizations) == {f"Bearer {key}"}
    files = [p for p in out.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"training_args.bin", "README.md", "judge_cache.sqlite3"} <= names, names
    needle = key.encode()
    for path in files:
        assert needle not in path.read_bytes(), f"the API key leaked into {path}"
    captured = capsys.readouterr()
    assert key not in captured.out and key not in captured.err
    assert any(r.name == "LiteLLM" and r.levelno == logging.DEBUG for r in caplog.records)
    assert key not in caplog.text
    assert all(key not in str(v) for v in args.to_dict().values())


# ------------------------------------------------------------------------------------------ errors no retry can fix

#: Per-attempt timeout of the tests that count requests: no fault here hangs, and on a 2-core machine under heavy load
#: (load average 11) an attempt took up to 12 s, so `TIMEOUT` would add attempts the counts do not expect.
SLOW_TIMEOUT = 120.0


def _asked(server, text):
    """How many requests the server got for the judge prompt whose Criteria Item is ``text``."""
    return sum(n for prompt, n in server.prompt_counts.items() if f"Criteria Item:\n{text}\n" in prompt)


def test_errors_no_retry_can_fix_are_asked_once(make_judge, fresh_server):
    judge = make_judge(max_retries=2, timeout=SLOW_TIMEOUT)
    texts = ["plain", "FAULT:400", "FAULT:401", "FAULT:404", "FAULT:429"]
    verdicts = judge([triple(t) for t in texts])
    assert [v.passed for v in verdicts] == [True, False, False, False, False]
    assert verdicts[0].error is None and all("scripted error" in v.error for v in verdicts[1:])
    assert {t: _asked(fresh_server, t) for t in texts} == {"plain": 1, "FAULT:400": 1, "FAULT:401": 1,
                                                           "FAULT:404": 1, "FAULT:429": 3}  # 429: rate limit, retried
    assert judge.pop_metrics()["judge/retries"] == 2


@pytest.mark.parametrize("policy", ["unsatisfied", "raise"])
def test_a_batch_whose_every_request_fails_for_good_stops_whatever_the_policy(make_judge, fresh_server, policy):
    judge = make_judge(failure_policy=policy, max_retries=2, timeout=SLOW_TIMEOUT)
    prompt = [{"role": "user", "content": "q"}]
    with pytest.raises(JudgeUnavailableError, match="failed on all 2 requests with an error no retry can fix") as info:
        ConstraintReward(judge=judge)([prompt] * 2, ["a", "b"], constraints=[[NO_COMMA, soft("FAULT:401")],
                                                                            [soft("FAULT:404")]])
    assert fresh_server.requests == 2 and "scripted error 401" in str(info.value)
    if policy == "unsatisfied":  # what a retry may fix, or a batch with one verdict, stays a recorded failure
        assert [v.passed for v in judge([triple("FAULT:500"), triple("FAULT:500 again")])] == [False, False]
        assert [v.passed for v in judge([triple("plain"), triple("FAULT:401 b")])] == [True, False]
        # so does a prompt too long for the judge: asked once, about that prompt, not the judge's set-up
        verdict = judge([triple("FAULT:context")])[0]
        assert not verdict.passed and "ContextWindowExceeded" in verdict.error
        assert _asked(fresh_server, "FAULT:context") == 1


def test_wrong_key_on_every_request_stops_training(make_judge, monkeypatch):
    with FakeJudgeServer(api_key="the-right-key-0001") as locked:
        judge = make_judge(api_base=locked.base_url, max_retries=3, timeout=SLOW_TIMEOUT)  # sends KEY: 401 each time
        with pytest.raises(JudgeUnavailableError, match="AuthenticationError") as info:
            judge([triple("plain"), triple("plain", response="other")])
        assert locked.requests == 2 and KEY not in str(info.value)
        monkeypatch.setenv(KEY_ENV, "the-right-key-0001")
        assert judge([triple("plain")])[0].passed


def test_an_openai_model_on_a_local_server_needs_no_key(make_judge, fresh_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    judge = make_judge(model="openai/test", api_key_env="", timeout=SLOW_TIMEOUT)
    assert judge([triple("plain")]) == [Verdict(True, None, "judge")]
    assert fresh_server.authorizations == [f"Bearer {NO_KEY}"]  # not "Missing credentials", not retried


def test_an_answer_that_echoes_the_key_is_redacted(make_judge, fresh_server, caplog):
    judge = make_judge(timeout=SLOW_TIMEOUT)
    with caplog.at_level(logging.WARNING):
        verdict = judge([triple("FAULT:echo_auth")])[0]
    assert fresh_server.authorizations == [f"Bearer {KEY}"]  # the server did see (and echo) the key
    assert not verdict.passed and verdict.error.startswith("JudgeParseError: answer is neither YES nor NO")
    assert "***" in verdict.error and KEY not in verdict.error and KEY not in caplog.text


def test_judge_batch_warns_when_a_judge_raises(caplog):
    def broken(triples):
        raise RuntimeError("boom")

    with caplog.at_level(logging.WARNING, logger="hir_trl.judge.protocol"):
        verdicts = judge_batch(broken, [("q", "r", "c")] * 2)
    assert verdicts == [Verdict(False, "RuntimeError: boom", "judge")] * 2
    assert "boom" in caplog.text and "2 soft constraints" in caplog.text


def test_a_judge_cache_that_cannot_be_read_stops_before_any_request(make_judge, fresh_server, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "judge_cache.sqlite3").write_bytes(b"this is not an SQLite database" * 200)
    for cache_dir in (a_file, corrupt):
        for policy in ("unsatisfied", "raise"):
            with pytest.raises(JudgeCacheError, match="judge_cache_dir: cannot") as info:
                make_judge(cache_dir=cache_dir, failure_policy=policy)
            assert str(cache_dir) in str(info.value)
    assert fresh_server.requests == 0
    judge = make_judge(cache_dir=tmp_path / "fine")
    assert judge([triple("plain")])[0].passed
    judge._cache._conn.close()  # the database goes away in the middle of a run
    with pytest.raises(JudgeCacheError, match="cannot read"):
        judge([triple("plain", response="new")])


def test_password_like_key_variable_names_are_not_echoed(monkeypatch):
    monkeypatch.delenv("Tr0ub4dor3", raising=False)
    with pytest.raises(KeyError) as info:
        LiteLLMJudge("openai/test", api_key_env="Tr0ub4dor3")
    assert "Tr0ub4dor3" not in str(info.value) and "judge_api_key_env" in str(info.value)
    monkeypatch.delenv("MY_JUDGE_KEY", raising=False)
    with pytest.raises(KeyError, match="'MY_JUDGE_KEY' is not set"):  # a variable name is shown
        LiteLLMJudge("openai/test", api_key_env="MY_JUDGE_KEY")


@pytest.mark.parametrize("url", [
    "https://judge.azurewebsites.net/api/v1?code=abc123",  # Azure Functions' key parameter
    "https://h/v1?sig=abc", "https://h/v1?X-Amz-Signature=abc", "https://h/v1?X-Amz-Credential=abc",
    "https://h/v1?subscription-key=abc", "https://h/v1?apiKey=abc", "https://h/v1?client_secret=abc",
    "https://h/v1?authToken=abc", "https://h/v1?sessionid=abc", "https://h/v1?pwd=abc", "https://h/v1#access_token=abc",
    "https://h/v1?api-version=2024-02-01&x-functions-key=abc", "https://h/v1?PHPSESSID=abc",
    "https://h/v1?private_token=abc", "https://h/v1?passphrase=abc"])
def test_credential_query_parameters_are_refused_by_name(tmp_path, url):
    with pytest.raises(ValueError, match="judge_api_base must not contain credentials") as info:
        _args(tmp_path, judge_api_base=url)
    assert "abc" not in str(info.value).replace("judge_api_base", "")


def test_judge_extra_kwargs_from_a_recipe_reach_the_server(make_judge, fresh_server, tmp_path):
    args = _args(tmp_path, judge_extra_kwargs='{"logit_bias": {"31": 100, "32": 100}, "seed": 0}')
    assert args.judge_extra_kwargs == {"logit_bias": {"31": 100, "32": 100}, "seed": 0}
    judge = make_judge(extra_kwargs=args.judge_extra_kwargs)
    assert judge([triple("plain")])[0].passed
    body = fresh_server.bodies[-1]
    assert body["logit_bias"] == {"31": 100.0, "32": 100.0} and isinstance(body["logit_bias"]["31"], float)
    assert body["seed"] == 0
    for bad, message in [({"temperature": 1.0}, "from judge_temperature"), ({"max_tokens": 1}, "judge_max_tokens"),
                         ({"api_key": "x"}, "judge_api_key_env"), ({"extra_headers": {"a": "b"}}, "credentials"),
                         ({"access_token": "x"}, "credentials"),
                         ({"extra_body": {"x": KEY_SHAPES["hf_token"]}}, "looks like it contains a credential"),
                         ("{not json", "not valid JSON"), ("plain", "must be a JSON object")]:
        with pytest.raises(ValueError, match=message) as info:
            _args(tmp_path, judge_extra_kwargs=bad)
        assert KEY_SHAPES["hf_token"] not in str(info.value)


# ------------------------------------------------------------------------------------------ hir-trl train: one line


def _train_cli(tmp_path, model, data, *flags):
    from hir_trl.cli.main import main

    return main(["train", "--config", str(REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu.yaml"),
                 "--dataset_name", str(data), "--model_name_or_path", str(model), "--output_dir", str(tmp_path / "out"),
                 "--max_steps", "2", "--per_device_train_batch_size", "6", "--max_completion_length", "8",
                 "--soft_constraints", "judge", "--save_strategy", "no", "--log_completions", "false",
                 "--judge_model", "openai/test", "--judge_timeout", str(SLOW_TIMEOUT), "--judge_retry_backoff", "0.01",
                 *flags])


def _one_error_line(err):
    lines = [line for line in err.splitlines() if "hir-trl train: error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.mark.parametrize("case", ["wrong_key", "policy_raise", "file_cache", "corrupt_cache", "password_env"])
def test_hir_trl_train_stops_with_one_line_when_the_judge_cannot_work(tmp_path, tiny_model_path, monkeypatch, capsys,
                                                                      case):
    monkeypatch.setenv(KEY_ENV, KEY)
    _write_dataset(tmp_path, ["The note is calm.", "FAULT:500 vivid" if case == "policy_raise" else "Be formal."])
    broken = tmp_path / "cache"
    if case == "file_cache":
        broken.write_text("x")
    elif case == "corrupt_cache":
        broken.mkdir()
        (broken / "judge_cache.sqlite3").write_bytes(b"garbage" * 500)
    with FakeJudgeServer(api_key="the-right-key-0001" if case == "wrong_key" else None) as srv:
        flags = {"wrong_key": ["--judge_api_key_env", KEY_ENV],
                 "policy_raise": ["--judge_api_key_env", KEY_ENV, "--judge_failure_policy", "raise",
                                  "--judge_max_retries", "0"],
                 "file_cache": ["--judge_api_key_env", "", "--judge_cache_dir", str(broken)],
                 "corrupt_cache": ["--judge_api_key_env", "", "--judge_cache_dir", str(broken)],
                 "password_env": ["--judge_api_key_env", "Tr0ub4dor3"]}[case]
        code = _train_cli(tmp_path, tiny_model_path, tmp_path / "data.jsonl", "--judge_api_base", srv.base_url,
                          "--judge_max_retries", "3", *flags)
        out, err = capsys.readouterr()
        assert code == 2
        line = _one_error_line(err)
        requests = srv.requests
    assert KEY not in out + err and "Tr0ub4dor3" not in out + err
    if case == "wrong_key":  # 12 soft constraints (6 completions x 2), each asked once: no retry of a 401
        assert line.startswith("hir-trl train: error: stopped at step 0: the judge (openai/test) failed on all")
        assert "no retry can fix" in line and requests <= 12
    elif case == "policy_raise":
        assert line.startswith("hir-trl train: error: stopped at step 0: the judge (openai/test) failed on 6 of 12")
    elif case == "password_env":
        assert "judge_api_key_env" in line and requests == 0
    else:  # refused before the first step, naming the path
        assert f"judge_cache_dir: cannot open {broken}" in line and requests == 0
        assert not (tmp_path / "out" / "completions").exists()
