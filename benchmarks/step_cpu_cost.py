"""HiR's own work per rank-step at the paper's shape, beside a model of the GPU step's time.

What runs on one rank's CPU (or waits on the network) in a HiR step, measured on real constraint mixes:

- **rule verification**: every (completion, hard constraint) of the rank's sampled rows, through
  `hir_trl.rewards.ConstraintReward.verify` (the path TRL's reward call takes), each check also timed alone for
  the slowest ones and their cause (the function of the verifier that took most of the check's time, by cProfile);
- **judge wait**: the soft constraints of the sampled rows (inside the reward call), then the replays' kept soft
  constraints re-judged under q' (``rejudge_replays``), against a local OpenAI-compatible server on 127.0.0.1
  (`LatencyJudgeServer`: log-normal latency, median ~3 s, long tail, some 429s; it stops by itself);
- **selection and rewrite**: Algorithm 1 (`hir_trl.step.replay.select_rewrite`) on the verdicts.

Shape: 48 rows per rank (the paper: 64 prompts x 6 samples over 8 GPUs; 8 groups of m = 6, k = 2 replays per group),
completions of 512, 2,048 and 4,096 tokens. Mixes: IFEval, IFBench, MulDimIF and HIR-16K-format rows from
``../shared/data`` (skipped, with the reason, when absent), each row given soft constraints so that soft : hard is
HIR-16K's 46,536 : 76,456 (paper, Appendix "HIR-16K"). Completions: real English prose, sentences of the paper's text
and of the benchmarks' own instructions, assembled to the token length (about 0.75 words a token) with paragraphs,
some bullet lists and a title, every row's text different.

The reward call is measured as the step makes it: the judge's batch sent when generation ends
(`ConstraintReward.judge_ahead`), then TRL's old-log-prob and reference passes (a sleep of their modelled GPU time:
the CPU is free meanwhile, as on a GPU node), then the reward call (rule verifiers, then the wait for whatever the
judge has not answered). ``--compare`` also measures, in the same run and on the same rows, the call as it was
(``serial``: rules, then the judge) and with the judge overlapped with the rule verifiers only (``overlapped``), each
with a fresh judge (no shared cache) that the server answers with the same latencies; it checks that the verdicts of
the three are identical and in the same order.

The GPU model (`gpu_step_seconds`) prices the paper's step on one A100-80GB per rank (Qwen2.5-7B-Instruct, bf16);
its assumptions are in its docstring. Every figure is recorded with the load average at the time: other processes
share this machine's cores, so compare only ratios measured in one run.

Usage (from the repository root)::

    python -m benchmarks.step_cpu_cost --output benchmarks/experiments/step-cpu-cost/results.json
    python -m benchmarks.step_cpu_cost --mixes ifeval --tokens 4096 --compare
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The shared data folder: ``$HIR_SHARED_DATA``, else ``../shared/data`` from the repository root (``--data``
#: overrides both).
DATA = Path(os.environ.get("HIR_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data")
#: Each mix's file inside the data folder.
MIXES = {
    "ifeval": "ifeval/input_data.jsonl",
    "ifbench": "ifbench/IFBench_test.jsonl",
    "muldimif": "muldimif/test.json",
    "hir16k_format": "hir16k_format/muldimif_listing_type3.jsonl",
}
#: HIR-16K's soft : hard constraints (paper: 46,536 soft and 76,456 hard constraints).
SOFT_PER_HARD = 46_536 / 76_456
#: Soft constraints of the kind HIR-16K's are (style, tone, content; judged by the LLM).
SOFT_TEXTS = [
    "The response should maintain a formal and professional tone throughout.",
    "The explanation should be accessible to a reader without a technical background.",
    "The answer must stay focused on the question and avoid unrelated digressions.",
    "The response should present arguments in a logical order, each building on the previous one.",
    "The writing should sound persuasive and confident.",
    "Include at least one concrete example to illustrate the main point.",
    "The response should end with a clear recommendation.",
    "Avoid jargon; where a technical term is needed, explain it.",
    "The response should acknowledge at least one limitation or counterargument.",
    "Use a friendly, encouraging voice suitable for beginners.",
    "The content must be factually accurate and not speculative.",
    "The response should be written from the perspective of an experienced practitioner.",
]
ROWS_PER_RANK, GROUP_SIZE, NUM_REPLAYS = 48, 6, 2
WORDS_PER_TOKEN = 0.75


# ------------------------------------------------------------------------------------------------ machine and load

def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), "0")
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(int(mem) / 2**20, 1),
            "python": platform.python_version(), "platform": platform.platform()}


# ------------------------------------------------------------------------------------------------ the judge server

SERVER = r'''
import asyncio, hashlib, json, math, random, sys, time
from aiohttp import web
median, sigma, cap, p429, lifetime = (float(x) for x in sys.argv[1:6])
seen = {}
last = [time.monotonic()]

def draw(prompt, attempt):
    seed = int(hashlib.sha256(f"{prompt}|{attempt}".encode()).hexdigest()[:12], 16)
    rng = random.Random(seed)
    return min(cap, median * math.exp(sigma * rng.gauss(0, 1))), rng.random() < p429, rng.random() < 0.5

async def handle(request):
    last[0] = time.monotonic()
    body = await request.json()
    prompt = body["messages"][-1]["content"]
    key = (body.get("model"), prompt)  # each judge (model name) counts its own attempts
    attempt = seen.get(key, 0)
    seen[key] = attempt + 1
    latency, limited, yes = draw(prompt, attempt)
    if limited:
        await asyncio.sleep(0.2)
        return web.json_response({"error": {"message": "rate limited", "type": "rate_limit_error",
                                            "code": "429"}}, status=429)
    await asyncio.sleep(latency)
    _, _, yes = draw(prompt, 0)  # the verdict depends on the prompt only
    last[0] = time.monotonic()
    return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "YES" if yes else "NO"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

async def main():
    app = web.Application(client_max_size=2**26)
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(json.dumps({"base_url": f"http://127.0.0.1:{port}/v1"}), flush=True)
    start = time.monotonic()
    while time.monotonic() - start < lifetime and time.monotonic() - last[0] < 300:
        await asyncio.sleep(1)  # stops by itself: after its lifetime, or 5 minutes without a request

asyncio.run(main())
'''


class LatencyJudgeServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, in its own process: each request waits a
    log-normal latency (``median`` seconds, ``sigma``, at most ``cap``) drawn from the prompt and its attempt number
    (so two runs over the same prompts see the same latencies), or is refused with 429 (probability ``p429`` per
    attempt, after 0.2 s); it answers YES or NO, a function of the prompt. It exits after ``lifetime`` seconds, or 5
    minutes without a request."""

    def __init__(self, median: float = 3.0, sigma: float = 0.6, cap: float = 30.0, p429: float = 0.03,
                 lifetime: float = 3600.0) -> None:
        self.settings = {"median_s": median, "sigma": sigma, "cap_s": cap, "p429": p429, "lifetime_s": lifetime}
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, str(median), str(sigma), str(cap), str(p429),
                                         str(lifetime)], stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line:
            self.process.kill()
            raise RuntimeError("the judge server did not start")
        self.base_url = json.loads(line)["base_url"]

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()


def make_judge(base_url: str, name: str = "judge") -> Any:
    """A `LiteLLMJudge` on the server, with the defaults of ``hir-trl train`` (64 in flight, 3 retries); its own
    in-memory cache. ``name`` (its model) keys the server's attempt counts, so each arm sees the same latencies."""
    from hir_trl.judge import LiteLLMJudge

    return LiteLLMJudge(f"openai/step-cost-{name}", api_base=base_url, api_key_env="", max_concurrency=64,
                        timeout=60.0, max_retries=3)


def warm_up(base_url: str) -> float:
    """litellm's import and first requests (connection set-up), once, before anything is timed."""
    start = time.perf_counter()
    judge = make_judge(base_url, "warm-up")
    judge([(f"Warm-up {i}.", "A response.", "Be brief.") for i in range(16)])
    judge.close()
    return round(time.perf_counter() - start, 2)


# ------------------------------------------------------------------------------------------------ rows and prose

def split_sentences_simple(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 40 <= len(s.strip()) <= 400]


def sentence_pool(records: list[str], data: Path) -> list[str]:
    """Real English sentences: the paper's prose (``<data>/../paper/*.txt``, no LaTeX commands, no tables) and the
    benchmarks' instructions."""
    paper = next((data.parent / "paper").glob("*.txt"), None)
    pool = []
    if paper is not None:
        for line in paper.read_text(encoding="utf-8").splitlines():
            if "\\" in line or "&" in line or "$" in line or "{" in line:
                continue
            pool += split_sentences_simple(line)
    for text in records:
        pool += [s for s in split_sentences_simple(text) if "\n" not in s]
    return sorted(set(pool))


def completion(pool: list[str], tokens: int, rng: random.Random) -> str:
    """About ``tokens`` tokens of prose: a title, paragraphs of 3-7 sentences, now and then a bullet list."""
    words_target = int(tokens * WORDS_PER_TOKEN)
    parts = [f"<<{' '.join(rng.choice(pool).split()[:5]).rstrip('.,;:')}>>"]
    words = 0
    while words < words_target:
        if rng.random() < 0.15:
            items = [f"* {rng.choice(pool)}" for _ in range(rng.randint(3, 6))]
            block = "\n".join(items)
        else:
            block = " ".join(rng.choice(pool) for _ in range(rng.randint(3, 7)))
        parts.append(block)
        words += len(block.split())
    text = "\n\n".join(parts)
    return " ".join(text.split(" ")[:words_target + 1]) if words > words_target * 1.1 else text


def mix_rows(path: Path, mix: str, n_groups: int, rng: random.Random) -> tuple[list[dict[str, Any]], list[str]]:
    """``n_groups`` normalized rows of the mix (hard constraints kept, unverifiable ones soft), each given soft
    constraints to HIR-16K's share, and the instructions' texts (for the prose pool)."""
    from hir_trl.data.loading import normalize_native_row
    from hir_trl.evaluation.benchmarks import load_benchmark

    bench = load_benchmark(path, format="hir" if mix == "hir16k_format" else "auto")
    chosen = rng.sample(bench.rows, n_groups)
    rows = []
    for index, row in enumerate(chosen):
        items = []
        for c in row.constraints:
            if c.status == "unknown":
                continue
            kind = "soft" if c.needs_judge else "hard"
            items.append({"text": c.text or c.instruction_id, "kind": kind, "family": c.family,
                          "instruction_id": c.instruction_id, "kwargs": dict(c.kwargs)})
        hard = sum(item["kind"] == "hard" for item in items)
        soft_now = len(items) - hard
        want = max(0, round(hard * SOFT_PER_HARD) - soft_now)
        items += [{"text": text, "kind": "soft"} for text in rng.sample(SOFT_TEXTS, min(want, len(SOFT_TEXTS)))]
        instruction = row.prompt if isinstance(row.prompt, str) else row.prompt[-1]["content"]
        rows.append(normalize_native_row({"task": instruction, "constraints": items,
                                          "prompt": instruction + "\n" + "\n".join(
                                              i["text"] for i in items if i["kind"] == "soft"),
                                          "id": f"{mix}-{index}"}, index))
    texts = [r.prompt if isinstance(r.prompt, str) else r.prompt[-1]["content"] for r in bench.rows]
    return rows, texts


# ------------------------------------------------------------------------------------------------ measurements

def slowest_checks(inputs: list[dict[str, Any]], completions: list[str], top: int = 10) -> list[dict[str, Any]]:
    """Each hard check of the batch timed alone; the ``top`` slowest, each with its cause: the verifier function
    (outside hir_trl's dispatch) with the most cumulative time when the check is run again under cProfile."""
    from hir_trl.verifiers import verify_constraint

    timed = []
    for r, (row, text) in enumerate(zip(inputs, completions)):
        for c in row["constraints"]:
            if c["kind"] != "hard":
                continue
            kwargs = json.loads(c["kwargs"]) if isinstance(c["kwargs"], str) else c["kwargs"]
            start = time.perf_counter()
            verify_constraint(c["family"], c["instruction_id"], kwargs, text, row["task"])
            timed.append((time.perf_counter() - start, r, c, kwargs))
    timed.sort(key=lambda t: -t[0])
    out = []
    for seconds, r, c, kwargs in timed[:top]:
        profile = cProfile.Profile()
        profile.enable()
        verify_constraint(c["family"], c["instruction_id"], kwargs, completions[r], inputs[r]["task"])
        profile.disable()
        stats = pstats.Stats(profile).stats
        skip = ("verify_constraint", "check", "<built-in method builtins.exec>", "disable")
        ranked = sorted(((v[3], f"{Path(k[0]).name}:{k[2]}") for k, v in stats.items()
                         if k[2] not in skip and not k[2].startswith("<")), reverse=True)
        # the deepest function that still holds most of the time: the first whose cumulative time is > 60% of the
        # check's, going down the ranking
        total = ranked[0][0] if ranked else 0.0
        cause = ranked[0][1] if ranked else "?"
        for cum, name in ranked:
            if cum >= 0.6 * total:
                cause = name
        out.append({"seconds": round(seconds, 4), "row": r, "check": f"{c['family']}:{c['instruction_id']}",
                    "kwargs": {k: (v if len(str(v)) < 60 else str(v)[:57] + "...") for k, v in kwargs.items()},
                    "cause": cause, "completion_words": len(completions[r].split())})
    return out


def reward_call(reward: Any, prompts: list, completions: list, constraints: list, arm: str,
                gpu_passes_s: float) -> tuple[Any, dict]:
    """One reward call as the step makes it: ``serial`` (rules, then the judge: as before), ``overlapped`` (the
    judge's requests in flight while the rules run) or ``ahead`` (sent when generation ends, `ConstraintReward.
    judge_ahead`, then TRL's old-log-prob and reference passes, here a sleep of their modelled GPU time, then the
    reward call). ``wall_s`` is the reward call's own time, the passes excluded."""
    reward.overlap_judge = arm != "serial"
    reward.pop_seconds()
    if arm == "ahead":
        reward.judge_ahead(prompts, completions, constraints)
        time.sleep(gpu_passes_s)
    start = time.perf_counter()
    matrix = reward.verify(prompts, completions, constraints)
    wall = time.perf_counter() - start
    return matrix, {"wall_s": round(wall, 3), **{k: round(v, 3) for k, v in reward.pop_seconds().items()}}


def replay_step(inputs: list[dict[str, Any]], completions: list[str], matrix: Any, judge: Any) -> dict[str, Any]:
    """Algorithm 1 on the verdicts (timed), then the replays' kept soft constraints re-judged under q' (timed)."""
    from hir_trl.step.batch import plan_new_rows
    from hir_trl.step.replay import select_rewrite
    from hir_trl.step.rewards import rejudge_replays

    B = len(inputs)
    start = time.perf_counter()
    picked = select_rewrite([matrix.passed(r) for r in range(B)], [float("nan")] * B, GROUP_SIZE, NUM_REPLAYS, 2.0,
                            prompts=[row["prompt"] for row in inputs], inputs=inputs, scope="group",
                            selection="integrity", min_satisfied=1, rng=random.Random(0), eligible=None)
    new_rows = plan_new_rows(picked, [0] * (B // GROUP_SIZE), [NUM_REPLAYS - len(p) for p in picked], GROUP_SIZE)
    selection = time.perf_counter() - start
    start = time.perf_counter()
    rewards = rejudge_replays(judge, "ila", inputs, [[{"role": "assistant", "content": t}] for t in completions],
                              new_rows)
    rejudge = time.perf_counter() - start
    replays = sum(row.kind == "replay" for row in new_rows)
    return {"selection_s": round(selection, 4), "rejudge_s": round(rejudge, 3), "replays": replays,
            "rejudged_replays": len(rewards)}


def gpu_step_seconds(tokens: int, *, params: float = 7.62e9, layers: int = 28, hidden: int = 3584,
                     kv_bytes_per_token: int = 57_344, prompt_tokens: int = 256, sampled: int = ROWS_PER_RANK,
                     rows: int = ROWS_PER_RANK + ROWS_PER_RANK // GROUP_SIZE * NUM_REPLAYS,
                     peak_flops: float = 312e12, mfu: float = 0.40, hbm_bytes_per_s: float = 2.0e12,
                     bandwidth_use: float = 0.6) -> dict[str, float]:
    """A model of one rank's GPU time per step at the paper's settings (Appendix A, RL; verl on 8 x A100-80GB).

    Assumptions: Qwen2.5-7B-Instruct (7.62e9 parameters, 28 layers, hidden 3,584, 4 KV heads of 128: 57,344 bytes of
    bf16 KV cache a token); every completion runs to ``tokens`` (the cap: generation time is set by the longest);
    prompts of ``prompt_tokens``. Generation (vLLM, one engine per GPU, 48 sequences decoded together) is
    memory-bound: each decoding step reads the bf16 weights once and the batch's KV cache (mean context prompt +
    tokens / 2) at ``bandwidth_use`` of the HBM bandwidth; prefill is neglected. Training passes over the 64 rows
    (48 sampled + 16 replays): old log-probs (1 forward), reference log-probs (1 forward, ``kl_loss_coef`` > 0), the
    update (forward + backward = 3 forwards, plus 1 recomputed forward under gradient checkpointing): 6 forwards of
    2 x parameters FLOPs a token plus causal attention (2 x layers x hidden x length^2 a row), at ``mfu`` of the
    bf16 peak. Not counted (each would make the step longer, the 5% budget larger): parameter offload transfers,
    weight sync to vLLM, the optimizer step, communication.
    """
    context = prompt_tokens + tokens / 2
    decode_step = (2 * params + sampled * context * kv_bytes_per_token) / (hbm_bytes_per_s * bandwidth_use)
    generation = tokens * decode_step
    length = prompt_tokens + tokens
    row_forward = 2 * params * length + 2 * layers * hidden * length ** 2
    training = 6 * rows * row_forward / (peak_flops * mfu)
    # TRL's old-log-prob and reference passes over the sampled rows, between generation and the reward call: the
    # window the judge's wait can hide in (`ConstraintReward.judge_ahead`)
    old_ref = 2 * sampled * row_forward / (peak_flops * mfu)
    return {"generation_s": round(generation, 1), "training_s": round(training, 1),
            "old_ref_passes_s": round(old_ref, 1), "step_s": round(generation + training, 1)}


def run_case(data: Path, mix: str, tokens: int, server: LatencyJudgeServer, compare: bool,
             seed: int) -> dict[str, Any]:
    from hir_trl.rewards import ConstraintReward

    rng = random.Random(f"{seed}-{mix}")  # the same rows at every length of a mix
    rows, texts = mix_rows(data / MIXES[mix], mix, ROWS_PER_RANK // GROUP_SIZE, rng)
    pool = sentence_pool(texts, data)
    rng = random.Random(f"{seed}-{mix}-{tokens}")
    inputs = [row for row in rows for _ in range(GROUP_SIZE)]
    completions = [completion(pool, tokens, rng) for _ in inputs]
    prompts = [row["prompt"] for row in inputs]
    constraints = [row["constraints"] for row in inputs]
    messages = [[{"role": "assistant", "content": t}] for t in completions]
    hard = sum(c["kind"] == "hard" for cs in constraints for c in cs)
    soft = sum(c["kind"] == "soft" for cs in constraints for c in cs)
    case: dict[str, Any] = {"mix": mix, "tokens": tokens, "rows": len(inputs), "hard_checks": hard,
                            "soft_checks": soft, "mean_completion_words": round(sum(len(t.split())
                                                                                   for t in completions) / len(inputs))}
    gpu = gpu_step_seconds(tokens)
    case["gpu_model"] = gpu
    # the verifiers' one-time loading (language profiles, sentence splitter, ...) is not a step's cost: once, untimed
    start = time.perf_counter()
    ConstraintReward().verify(prompts, messages, [[c for c in cs if c["kind"] == "hard"] for cs in constraints])
    case["rules_first_pass_s"] = round(time.perf_counter() - start, 3)
    arms = ["serial", "overlapped", "ahead"] if compare else ["ahead"]
    verdicts = {}
    for arm in arms:
        judge = make_judge(server.base_url, f"{arm}-{mix}-{tokens}")
        reward = ConstraintReward(judge=judge)
        before = load()
        matrix, seconds = reward_call(reward, prompts, messages, constraints, arm, gpu["old_ref_passes_s"])
        judge_metrics = judge.pop_metrics()
        verdicts[arm] = [[(v.passed, v.error, v.source) for v in row] for row in matrix.verdicts]
        case[arm] = {**seconds, "load_before": before, "load_after": load(),
                     "judge_calls": judge_metrics.get("judge/calls"), "judge_retries": judge_metrics.get(
                         "judge/retries"), "judge_seconds": round(judge_metrics.get("judge/seconds_per_step", 0), 2),
                     "judge_latency_p50": judge_metrics.get("judge/latency_p50"),
                     "judge_latency_p95": judge_metrics.get("judge/latency_p95"),
                     "judge_failures": judge_metrics.get("judge/failures")}
        if arm == arms[-1]:  # Algorithm 1 and (``rejudge_replays: true`` only) the replays re-judged, once
            case["replays"] = {**replay_step(inputs, completions, matrix, judge), "load_after": load()}
        judge.close()
    if compare:
        case["verdicts_identical"] = all(verdicts[arm] == verdicts["serial"] for arm in arms)
    case["slowest_checks"] = slowest_checks(inputs, completions)
    last = case[arms[-1]]
    own = last["verification"] + last["judge"] + case["replays"]["selection_s"]
    case["hir_own_s"] = round(own, 3)  # per rank-step, rejudge_replays off (the paper's)
    case["hir_own_share_of_gpu_step"] = round(own / gpu["step_s"], 4)
    with_rejudge = own + case["replays"]["rejudge_s"]
    case["hir_own_share_with_rejudge"] = round(with_rejudge / gpu["step_s"], 4)
    return case


def report(result: dict[str, Any]) -> str:
    """A markdown summary of a results file: one row per case, then the 10 slowest checks of each 4,096-token case."""
    lines = ["| mix | tokens | hard / soft checks | rules s | judge wait s (sent ahead) | selection s | HiR's own s "
             "| modelled GPU step s | own / GPU step | + rejudge / GPU step | reward call s: serial / overlapped / "
             "ahead | verdicts identical | load (1 min) |", "|" + "---|" * 13]
    for c in result["cases"]:
        a, r = c.get("ahead") or c["overlapped"], c["replays"]
        calls = " / ".join(f"{c[arm]['wall_s']:.2f}" for arm in ("serial", "overlapped", "ahead") if arm in c)
        lines.append(f"| {c['mix']} | {c['tokens']} | {c['hard_checks']} / {c['soft_checks']} | "
                     f"{a['verification']:.2f} | {a['judge']:.2f} | {r['selection_s']:.4f} | {c['hir_own_s']:.2f} | "
                     f"{c['gpu_model']['step_s']:.0f} | {100 * c['hir_own_share_of_gpu_step']:.1f}% | "
                     f"{100 * c['hir_own_share_with_rejudge']:.1f}% | {calls} | {c.get('verdicts_identical', '-')} | "
                     f"{a['load_after'][0]} |")
    for c in result["cases"]:
        if c["tokens"] != max(x["tokens"] for x in result["cases"]):
            continue
        lines += ["", f"Slowest checks, {c['mix']} at {c['tokens']} tokens (seconds, check, cause):", ""]
        lines += [f"- {x['seconds']:.4f} s `{x['check']}` ({x['completion_words']} words): `{x['cause']}`"
                  for x in c["slowest_checks"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixes", nargs="+", default=list(MIXES), choices=list(MIXES))
    parser.add_argument("--tokens", nargs="+", type=int, default=[512, 2048, 4096])
    parser.add_argument("--compare", action="store_true", help="also the reward call as it was (judge after rules)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: ../shared/data)")
    parser.add_argument("--output", type=Path, help="write the JSON results here")
    parser.add_argument("--report", type=Path, help="print the markdown summary of a results file, and exit")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(args.report.read_text())), end="")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(REPO_ROOT))
    started = time.perf_counter()
    result: dict[str, Any] = {"command": "python -m benchmarks.step_cpu_cost " + " ".join(argv or sys.argv[1:]),
                              "machine": machine(), "load_start": load(), "skipped": {}, "cases": []}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its server (finally)
    server = LatencyJudgeServer()
    result["judge_server"] = server.settings
    try:
        result["judge_warm_up_s"] = warm_up(server.base_url)
        for mix in args.mixes:
            if not (args.data / MIXES[mix]).exists():
                result["skipped"][mix] = f"{args.data / MIXES[mix]} is absent (give the shared data folder: --data)"
                print(f"{mix}: skipped, {result['skipped'][mix]}", file=sys.stderr)
                continue
            for tokens in args.tokens:
                case = run_case(args.data, mix, tokens, server, args.compare, args.seed)
                result["cases"].append(case)
                a, r = case["ahead" if "ahead" in case else "overlapped"], case["replays"]
                line = (f"{mix:14s} {tokens:5d} tok: rules {a['verification']:.2f} s, judge wait {a['judge']:.2f} s "
                        f"(judge sent ahead), selection {r['selection_s']:.3f} s: own {case['hir_own_s']:.2f} s = "
                        f"{100 * case['hir_own_share_of_gpu_step']:.1f}% of the modelled GPU step "
                        f"{case['gpu_model']['step_s']:.0f} s (rejudge {r['rejudge_s']:.2f} s more when on); load "
                        f"{a['load_after']}")
                if args.compare:
                    line += (f" | reward call: serial {case['serial']['wall_s']:.2f} s, overlapped "
                             f"{case['overlapped']['wall_s']:.2f} s, ahead {a['wall_s']:.2f} s; verdicts identical: "
                             f"{case['verdicts_identical']}")
                print(line, flush=True)
    finally:
        server.close()
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["load_end"] = load()
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
