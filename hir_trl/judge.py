"""The LLM judge for soft constraints: the paper's YES/NO prompt through litellm, async, cached and bounded.

A soft constraint (style, coherence, ...) has no rule checker; the paper judges it with an LLM that
answers YES or NO to the prompt of its Appendix "Evaluation Prompt" (`JUDGE_PROMPT_TEMPLATE`), using
DeepSeek-V3.1 in non-thinking mode. `LiteLLMJudge` is that judge as a `hir_trl.rewards.Judge`: it is
called once per generation batch with every soft (instruction, response, constraint) triple and
returns one `Verdict` per triple, in order, so each verdict lands in its own (row, constraint) cell.

How a batch is judged (`LiteLLMJudge.__call__`):

1. Each triple becomes the paper's prompt; its cache key is the SHA-256 of (model, prompt, temperature,
   answer mode). Identical keys in the batch are asked once (``judge/deduplicated``), keys already in
   the cache are not asked at all (``judge/cache_hits``).
2. The remaining prompts are sent with ``litellm.acompletion`` on the process's judge event loop, which
   runs in a daemon thread (`judge_event_loop`, the "equivalent" of TRL's reward loop; the synchronous
   call from TRL's reward function waits for it): at most ``max_concurrency`` requests of a judge are
   in flight, each attempt has a finite ``timeout``, and failed attempts (timeouts,
   connection errors, 5xx, 429, malformed or empty answers) are retried ``max_retries`` times with
   exponential backoff and jitter (tenacity). Authentication, bad-request and not-found errors are not
   retried, nor is an answer that is neither YES nor NO (the same prompt would get it again). The
   caller's thread waits only for this batch.
3. An answer is parsed strictly (`parse_yes_no`) or, in log-prob mode, decided by P(YES) vs P(NO)
   (`verdict_from_logprobs`). Parsed verdicts are written to the cache; failures never are.
4. A call that still fails is a failure: with ``failure_policy="unsatisfied"`` (default) its verdict is
   ``Verdict(False, error=..., source="judge")`` and ``judge/failures`` counts it; with ``"raise"`` the
   batch raises `JudgeError` (after every other call has finished and been cached).

The API key is read from the environment variable named by ``api_key_env`` at each request and is
never stored on the judge or the config; error texts are redacted (the current key, bearer tokens and
anything shaped like a credential become ``***``). No judge setting may hold a credential
(`judge_settings_problem`): a key pasted into a field is refused without being shown.

litellm is imported lazily (first request), with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no network
fetch of the price map at import) and ``LITELLM_MODE=PRODUCTION`` (no ``.env`` loading) set first
unless the user set them.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .verifiers import Verdict

if TYPE_CHECKING:
    from .configs import HiRConfig

logger = logging.getLogger(__name__)

# docstyle-ignore
#: The paper's soft-constraint prompt (Appendix "Evaluation Prompt", box "Soft Constraints Evaluation
#: Prompt Template"), rendered from its LaTeX source: ```YES'`` quotes as ``'YES'``, bold labels as plain
#: text, ``\\`` as a line break and paragraph breaks as blank lines. The wording is the paper's, verbatim
#: (including "satisfiy" and "do NOT affect by"). Fields: ``input_text`` (the instruction the policy was
#: given), ``generated_text`` (its response), ``criteria_item`` (the soft constraint).
JUDGE_PROMPT_TEMPLATE = """\
Based on the provided Input (if any) and Generated Text, judge whether the generated text fulfills the Criteria Item with either a YES or NO choice. Your selection should be based on your judgment as well as the following rules:

- YES: Select 'YES' if the generated text entirely fulfills the condition specified in the Criteria Item. However, note that even minor inaccuracies exclude the text from receiving a 'YES' rating. As an illustration, consider a Criteria Item "Each sentence in the generated text uses a second person". If even one sentence does not use the second person, the answer should NOT be 'YES'. To qualify for a 'YES' rating, the generated text must be entirely accurate and satisfy the criteria.

- NO: Opt for 'NO' if the generated text fails to meet the criteria or provides no information that could be utilized to judge. For instance, the Criteria Item asks "Is the second sentence in the generated text a compound sentence?" and the generated text only has one sentence. It offers no relevant information to judge whether this criteria is met. Consequently, the answer should be 'NO'.

Input:
{input_text}

Generated Text:
{generated_text}

Criteria Item:
{criteria_item}

You only need to judge whether the generated text satisfiy the given Criteria Item and do NOT affect by other requirements in Input (if any). Return either a 'YES' or 'NO' choice without any additional text in your response."""

#: The paper's judge (DeepSeek-V3.1, non-thinking) through its provider: DeepSeek's ``deepseek-chat``.
DEFAULT_JUDGE_MODEL = "deepseek/deepseek-chat"
DEFAULT_JUDGE_API_KEY_ENV = "DEEPSEEK_API_KEY"
FAILURE_POLICIES = ("unsatisfied", "raise")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>", re.S | re.I)
# Leading decoration a model may put before its answer: whitespace, quotes, brackets, markdown.
_LEADING_NOISE = re.compile(r"^[\s\"'`*_#>\[\]{}()~.:-]+")
# YES/NO as a whole word: followed by the end, whitespace or punctuation (not a letter, digit or hyphen).
_YES_NO = re.compile(r"(yes|no)(?![\w-])", re.I)
_SECRET_PATTERNS = (re.compile(r"(Bearer\s+)\S+", re.I), re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"))
#: Shapes of credentials, as they appear in a value: provider prefixes (OpenAI/DeepSeek/Anthropic ``sk-``,
#: Hugging Face ``hf_``, GitHub, GitLab, Slack, AWS, Google, Groq, Replicate, Perplexity, NVIDIA, xAI), JWTs, and
#: hexadecimal strings of 32 or more digits (API keys of many providers).
_CREDENTIAL_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-[A-Za-z0-9_\-]{8,}|sk_(?:live|test)_[A-Za-z0-9]{8,}|hf_[A-Za-z0-9]{16,}|api_org_[A-Za-z0-9]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{30,}|gsk_[A-Za-z0-9]{20,}|r8_[A-Za-z0-9]{20,}"
    r"|pplx-[A-Za-z0-9]{20,}|nvapi-[A-Za-z0-9_\-]{20,}|xai-[A-Za-z0-9]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
    r"|[0-9a-fA-F]{32,}"
    r")(?![A-Za-z0-9])")
_COMMIT_HASH = re.compile(r"[0-9a-f]{40}")
#: Parameter names that carry a credential in a URL's query or fragment (``?api_key=...``, ``#token=...``).
_CREDENTIAL_PARAMS = re.compile(r"(?:api[_-]?key|key|token|access[_-]?token|auth|authorization|secret|password|passwd"
                                r"|pwd|sig|signature|credential|credentials|session)$", re.I)


class MissingJudgeKeyError(KeyError):
    """The environment variable named by ``api_key_env`` is not set (a `KeyError`; ``args[0]`` is the message)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class JudgeError(RuntimeError):
    """The judge could not produce a verdict and ``failure_policy`` is ``"raise"``.

    Attributes:
        failures: ``(index, error)`` for every triple of the batch that failed (index into the batch).
    """

    def __init__(self, message: str, failures: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(message)
        self.failures = list(failures)


# ---------------------------------------------------------------------------------------------- prompt & parsing


def format_judge_prompt(input_text: str, generated_text: str, criteria_item: str) -> str:
    """The paper's judge prompt for one (instruction, response, constraint) triple."""
    return JUDGE_PROMPT_TEMPLATE.format(input_text=input_text, generated_text=generated_text,
                                        criteria_item=criteria_item)


def parse_yes_no(answer: str | None) -> bool | None:
    """Parse a judge answer strictly: True for YES, False for NO, None when it is neither.

    The answer's first word decides, case-insensitively, once leading whitespace, quotes, brackets and
    markdown (``**``, ``#``, ``>``) are skipped and a leading ``<think>...</think>`` block is dropped. The
    word must be exactly ``yes`` or ``no``, followed by the end or by whitespace or punctuation:
    ``"YES"``, ``"yes."``, ``" No!"``, ``"**YES**"``, ``"'NO'"``, ``"Yes, because ..."`` (YES: the answer
    starts with a verdict, the explanation is ignored). ``"maybe"``, ``""``, ``"Yesterday"``,
    ``"No-one"`` and ``"The answer is YES"`` are None (not a verdict: the caller records a failure).
    """
    if not answer:
        return None
    text = _LEADING_NOISE.sub("", _THINK_BLOCK.sub("", answer))
    match = _YES_NO.match(text)
    if match is None:
        return None
    return match.group(1).lower() == "yes"


def _token_word(token: str) -> str | None:
    word = _LEADING_NOISE.sub("", token).rstrip(" \t\n\"'`*_.,!:;)]}").lower()
    return word if word in ("yes", "no") else None


def verdict_from_logprobs(top_logprobs: Iterable[Any]) -> tuple[bool, float] | None:
    """Decide from the first answer token's top log-probs: YES when P(YES) > P(NO).

    Args:
        top_logprobs: the first token's alternatives, objects or dicts with ``token`` and ``logprob``.
            Tokens that read ``yes`` or ``no`` after case folding and stripping spaces, quotes and
            punctuation (``"YES"``, ``" Yes"``, ``"no"``) add their probability to that side.

    Returns:
        ``(passed, p_yes)`` with p_yes = P(YES) / (P(YES) + P(NO)), or None when neither side appears.
    """
    mass = {"yes": 0.0, "no": 0.0}
    for item in top_logprobs or ():
        token = item.get("token") if isinstance(item, Mapping) else getattr(item, "token", None)
        logprob = item.get("logprob") if isinstance(item, Mapping) else getattr(item, "logprob", None)
        word = _token_word(token or "")
        if word is not None and logprob is not None and math.isfinite(logprob):
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    if total <= 0.0:
        return None
    p_yes = mass["yes"] / total
    return p_yes > 0.5, p_yes


# ---------------------------------------------------------------------------------------------- litellm


def import_litellm() -> Any:
    """Import litellm with its import-time network fetch and ``.env`` loading turned off (design §5).

    Sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` and ``LITELLM_MODE=PRODUCTION`` unless already set, then
    imports (about 2-4 s the first time), silences litellm's debug banners and sets its loggers to WARNING
    unless they have a level already.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
    import litellm

    litellm.suppress_debug_info = True
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):  # one INFO line per request otherwise
        if logging.getLogger(name).level == logging.NOTSET:
            logging.getLogger(name).setLevel(logging.WARNING)
    return litellm


def _non_retryable(litellm: Any) -> tuple[type[BaseException], ...]:
    names = ("AuthenticationError", "BadRequestError", "NotFoundError", "PermissionDeniedError",
             "UnprocessableEntityError")
    return tuple(getattr(litellm, name) for name in names if hasattr(litellm, name))


class EmptyJudgeAnswer(Exception):
    """The judge returned no content (retried: providers do this under load)."""


class MissingLogprobs(Exception):
    """Log-prob mode, but the response carries no log-probs for the first token (not retried)."""


# ---------------------------------------------------------------------------------------------- cache


class VerdictCache:
    """Parsed judge verdicts by cache key: an in-memory LRU, backed by SQLite when a directory is given.

    The in-memory layer keeps the ``memory_entries`` most recently used verdicts (about 200 bytes each);
    without a directory it is the whole cache, so older verdicts may be asked again. The database is ``<cache_dir>/judge_cache.sqlite3`` in WAL mode with a 30 s busy timeout, so several
    processes (torchrun ranks) may read and write it at once. It stores the key (a SHA-256 hex digest),
    the verdict, the raw answer, P(YES) in log-prob mode, the model and a timestamp; never a key or header.
    The directory must be on a local filesystem (SQLite WAL does not work over NFS).
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None, memory_entries: int = 200_000) -> None:
        self.path = None if cache_dir is None else Path(cache_dir) / "judge_cache.sqlite3"
        self.memory_entries = memory_entries
        self._memory: OrderedDict[str, tuple[bool, str | None, float | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            with self._conn:
                self._conn.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, passed INTEGER NOT NULL, "
                                   "answer TEXT, p_yes REAL, model TEXT, created REAL)")

    def get_many(self, keys: Iterable[str]) -> dict[str, tuple[bool, str | None, float | None]]:
        """The cached ``(passed, answer, p_yes)`` of every key that has one."""
        found: dict[str, tuple[bool, str | None, float | None]] = {}
        missing = []
        with self._lock:
            for key in keys:
                if key in self._memory:
                    found[key] = self._memory[key]
                    self._memory.move_to_end(key)
                else:
                    missing.append(key)
            if self._conn is not None:
                for start in range(0, len(missing), 500):
                    chunk = missing[start:start + 500]
                    rows = self._conn.execute(f"SELECT key, passed, answer, p_yes FROM verdicts WHERE key IN "
                                              f"({','.join('?' * len(chunk))})", chunk).fetchall()
                    for key, passed, answer, p_yes in rows:
                        found[key] = (bool(passed), answer, p_yes)
                self._remember({key: found[key] for key in missing if key in found})
        return found

    def _remember(self, entries: Mapping[str, tuple[bool, str | None, float | None]]) -> None:
        self._memory.update(entries)
        while len(self._memory) > self.memory_entries:
            self._memory.popitem(last=False)

    def put_many(self, entries: Mapping[str, tuple[bool, str | None, float | None]], model: str) -> None:
        """Store parsed verdicts (never failures)."""
        if not entries:
            return
        with self._lock:
            self._remember(entries)
            if self._conn is not None:
                now = time.time()
                with self._conn:
                    self._conn.executemany("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?)",
                                           [(k, int(p), a, py, model, now) for k, (p, a, py) in entries.items()])

    def __len__(self) -> int:
        with self._lock:
            if self._conn is None:
                return len(self._memory)
            return self._conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# ---------------------------------------------------------------------------------------------- metrics


@dataclass
class _Outcome:
    passed: bool | None = None
    answer: str | None = None
    p_yes: float | None = None
    error: str | None = None


@dataclass
class _Stats:
    counts: dict[str, float] = field(default_factory=dict)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))

    def add(self, name: str, value: float = 1.0) -> None:
        self.counts[name] = self.counts.get(name, 0.0) + value


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# ---------------------------------------------------------------------------------------------- event loop

_LOOP_LOCK = threading.Lock()
_LOOP: tuple[int, asyncio.AbstractEventLoop, threading.Thread] | None = None  # (pid, loop, thread)


def judge_event_loop() -> asyncio.AbstractEventLoop:
    """The process's judge event loop, running in the daemon thread ``hir-judge-loop`` (started on first use).

    Every `LiteLLMJudge` of the process sends its requests on this one loop, so litellm's per-loop HTTP
    clients and logging worker are created once and never bound to a closed loop. After a fork the child
    starts its own. The loop stops at interpreter exit, after its pending tasks are cancelled.
    """
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is not None and _LOOP[0] == os.getpid() and _LOOP[2].is_alive():
            return _LOOP[1]
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_run_loop, args=(loop,), name="hir-judge-loop", daemon=True)
        thread.start()
        _LOOP = (os.getpid(), loop, thread)
        return loop


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


async def _cancel_pending() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@atexit.register
def _stop_judge_event_loop() -> None:
    if _LOOP is None or _LOOP[0] != os.getpid() or not _LOOP[2].is_alive():
        return
    _, loop, thread = _LOOP
    try:
        asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(5)
    except Exception:  # noqa: BLE001 - best effort at exit
        pass
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


# ---------------------------------------------------------------------------------------------- the judge


class LiteLLMJudge:
    """The paper's YES/NO soft-constraint judge (Appendix "Evaluation Prompt") through litellm.

    A `hir_trl.rewards.Judge`: ``judge(triples) -> list[Verdict]`` with triples ``(input_text,
    generated_text, criteria_item)``, one verdict per triple, in order. Use it as
    ``ConstraintReward(judge=LiteLLMJudge(...))`` or build it from a config with `build_judge`. See the
    module docstring for how a batch is judged.

    Args:
        model: any litellm model string (``deepseek/deepseek-chat``, ``openai/gpt-4o-mini``,
            ``hosted_vllm/<name>`` for a ``vllm serve`` endpoint).
        api_base: the endpoint, e.g. ``http://host:8000/v1``; None for the provider's default.
        api_key_env: NAME of the environment variable holding the API key, read at each request; None or
            ``""`` sends no key (a local server without auth).
        max_concurrency: most requests of this judge in flight at once.
        timeout: seconds one request attempt may take, passed to litellm (which enforces it); as a safety
            net the attempt is also cancelled after ``max(2 * timeout, timeout + 5)`` seconds.
        max_retries: retries after the first attempt, so at most ``max_retries + 1`` requests per prompt.
        temperature: sampling temperature of the judge (the paper's evaluation: 0).
        failure_policy: ``"unsatisfied"`` (a failed call is a recorded, not-satisfied verdict) or
            ``"raise"`` (`JudgeError`).
        cache_dir: directory of the on-disk `VerdictCache` (shared by runs and processes); None keeps
            verdicts in memory for the judge's lifetime only.
        logprobs: decide by P(YES) vs P(NO) of the first answer token (``logprobs=True``,
            ``top_logprobs``, ``max_tokens=1``) instead of parsing the answer text.
        top_logprobs: alternatives requested per token in log-prob mode.
        max_tokens: answer length limit in text mode (YES/NO needs 1-2 tokens; a thinking judge needs more).
        retry_backoff: seconds before the first retry; doubles each retry (plus up to as much jitter),
            capped at ``retry_backoff_max``.
        retry_backoff_max: cap on one backoff wait, in seconds.
        extra_kwargs: further keyword arguments for ``litellm.acompletion`` (never a key: use
            ``api_key_env``).

    Raises:
        ValueError: a setting out of range, an unknown ``failure_policy``, an ``api_key_env`` that is not
            an environment variable name, or credentials in ``api_base`` or ``extra_kwargs``.
        MissingJudgeKeyError: (a `KeyError`) ``api_key_env`` names a variable that is not set (checked at
            construction).
    """

    def __init__(self, model: str = DEFAULT_JUDGE_MODEL, *, api_base: str | None = None,
                 api_key_env: str | None = DEFAULT_JUDGE_API_KEY_ENV, max_concurrency: int = 64,
                 timeout: float = 60.0, max_retries: int = 3, temperature: float = 0.0,
                 failure_policy: str = "unsatisfied", cache_dir: str | os.PathLike | None = None,
                 logprobs: bool = False, top_logprobs: int = 5, max_tokens: int = 16, retry_backoff: float = 1.0,
                 retry_backoff_max: float = 30.0, extra_kwargs: Mapping[str, Any] | None = None) -> None:
        problem = judge_settings_problem(model=model, api_key_env=api_key_env, max_concurrency=max_concurrency,
                                         timeout=timeout, max_retries=max_retries, temperature=temperature,
                                         failure_policy=failure_policy, retry_backoff=retry_backoff,
                                         api_base=api_base, cache_dir=None if cache_dir is None else str(cache_dir))
        if problem:
            raise ValueError(problem)
        if extra_kwargs and {"api_key", "headers", "extra_headers"} & set(extra_kwargs):
            raise ValueError("extra_kwargs must not carry credentials; name the key's variable in api_key_env")
        if api_key_env and api_key_env not in os.environ:
            raise MissingJudgeKeyError(f"the judge's API key variable {api_key_env!r} is not set; export it, or set "
                                       "judge_api_key_env to '' for a server without authentication")
        self.model, self.api_base, self.api_key_env = model, api_base, api_key_env or None
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, float(timeout), max_retries
        self.temperature, self.failure_policy = float(temperature), failure_policy
        self.logprobs, self.top_logprobs, self.max_tokens = logprobs, top_logprobs, max_tokens
        self.retry_backoff, self.retry_backoff_max = retry_backoff, retry_backoff_max
        self.extra_kwargs = dict(extra_kwargs or {})
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self._stats_lock = threading.Lock()
        self._stats = _Stats()
        self._start_lock = threading.Lock()
        self._reset_runtime()

    # -------------------------------------------------------------- public API

    def __call__(self, triples: Sequence[tuple[str, str, str]]) -> list[Verdict]:
        """Judge ``(input_text, generated_text, criteria_item)`` triples; one `Verdict` each, in order.

        Blocks the calling thread until the batch is judged: about ``(max_retries + 1) * timeout`` plus the
        backoff waits for a prompt that always times out, with ``max_concurrency`` prompts in parallel.

        Raises:
            JudgeError: ``failure_policy="raise"`` and at least one triple has no verdict.
        """
        return self._judge(triples, rejudge=False)

    def rejudge(self, triples: Sequence[tuple[str, str, str]]) -> list[Verdict]:
        """As `__call__`, for re-judging a replay's kept soft constraints under its hindsight instruction q'.

        Counted in the totals and also under ``judge/rejudge_verdicts``, ``judge/rejudge_calls`` and
        ``judge/rejudge_failures``; cached like any call.
        """
        return self._judge(triples, rejudge=True)

    def pop_metrics(self) -> dict[str, float]:
        """The ``judge/*`` metrics accumulated since the previous call, then reset.

        Counters (always present): ``judge/verdicts`` (triples judged), ``judge/calls`` (distinct prompts
        sent to the server), ``judge/cache_hits`` (triples answered from the cache),
        ``judge/deduplicated`` (triples sharing a prompt with another triple of the same batch),
        ``judge/failures`` (triples whose verdict is a failure), ``judge/retries`` (extra request
        attempts), ``judge/seconds_per_step`` (wall seconds the caller waited for the judge), and the
        ``judge/rejudge_*`` subset. Latencies (present when a request was made): ``judge/latency_p50`` and
        ``judge/latency_p95``, seconds of one request attempt. verdicts = calls + cache_hits + deduplicated.
        """
        with self._stats_lock:
            stats, self._stats = self._stats, _Stats()
        names = ("verdicts", "calls", "cache_hits", "deduplicated", "failures", "retries", "seconds_per_step",
                 "rejudge_verdicts", "rejudge_calls", "rejudge_failures")
        metrics = {f"judge/{name}": float(stats.counts.get(name, 0.0)) for name in names}
        if stats.latencies:
            metrics["judge/latency_p50"] = _percentile(stats.latencies, 0.50)
            metrics["judge/latency_p95"] = _percentile(stats.latencies, 0.95)
        return metrics

    def close(self) -> None:
        """Close the on-disk cache (reopened if the judge is called again); the shared event loop keeps running."""
        with self._start_lock:
            if self._cache is not None and self._pid == os.getpid():
                self._cache.close()
            self._reset_runtime()

    def __repr__(self) -> str:  # never shows a key: only the variable's name
        return (f"{type(self).__name__}(model={self.model!r}, api_base={self.api_base!r}, "
                f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, "
                f"failure_policy={self.failure_policy!r}, cache_dir={self.cache_dir!r}, logprobs={self.logprobs})")

    def __getstate__(self) -> dict[str, Any]:  # picklable: the runtime state (cache, semaphore) is rebuilt
        runtime = ("_semaphore", "_cache", "_litellm", "_stats_lock", "_start_lock", "_stats", "_pid")
        return {k: v for k, v in self.__dict__.items() if k not in runtime}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stats_lock, self._start_lock, self._stats = threading.Lock(), threading.Lock(), _Stats()
        self._reset_runtime()

    # -------------------------------------------------------------- internals

    def _reset_runtime(self) -> None:
        self._semaphore: asyncio.Semaphore | None = None  # created on the judge loop
        self._cache: VerdictCache | None = None
        self._litellm: Any = None
        self._pid = os.getpid()

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        """Import litellm and open the cache (again after a fork); return the judge event loop."""
        with self._start_lock:
            if self._pid != os.getpid():  # forked: the parent's database connection is not ours
                self._reset_runtime()
            if self._cache is None:
                self._litellm = import_litellm()
                self._cache = VerdictCache(self.cache_dir)
        return judge_event_loop()

    @property
    def _hard_timeout(self) -> float:
        return max(2.0 * self.timeout, self.timeout + 5.0)

    def _key(self, prompt: str) -> str:
        payload = json.dumps([self.model, prompt, self.temperature, "logprobs" if self.logprobs else "text"])
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def _judge(self, triples: Sequence[tuple[str, str, str]], rejudge: bool) -> list[Verdict]:
        if not triples:
            return []
        started = time.perf_counter()
        loop = self._ensure_started()
        prompts = [format_judge_prompt(*triple) for triple in triples]
        keys = [self._key(prompt) for prompt in prompts]
        unique = dict(zip(keys, prompts))  # first prompt of each key, in order
        cached = self._cache.get_many(unique)
        to_ask = {key: prompt for key, prompt in unique.items() if key not in cached}
        future = asyncio.run_coroutine_threadsafe(self._ask_all(to_ask), loop)
        answered, retries, latencies = future.result()
        self._cache.put_many({k: (o.passed, o.answer, o.p_yes) for k, o in answered.items() if o.error is None},
                             self.model)

        verdicts, failures = [], []
        for index, key in enumerate(keys):
            if key in cached:
                verdicts.append(Verdict(cached[key][0], None, "judge"))
                continue
            outcome = answered[key]
            if outcome.error is not None:
                failures.append((index, outcome.error))
            verdicts.append(Verdict(bool(outcome.passed), outcome.error, "judge"))

        with self._stats_lock:
            stats = self._stats
            for prefix in ("", "rejudge_") if rejudge else ("",):
                stats.add(f"{prefix}verdicts", len(triples))
                stats.add(f"{prefix}calls", len(to_ask))
                stats.add(f"{prefix}failures", len(failures))
            hits = sum(key in cached for key in keys)
            stats.add("cache_hits", hits)
            stats.add("deduplicated", len(keys) - hits - len(to_ask))
            stats.add("retries", retries)
            stats.latencies.extend(latencies)
            stats.add("seconds_per_step", time.perf_counter() - started)

        if failures:
            first = failures[0][1]
            if self.failure_policy == "raise":
                raise JudgeError(f"the judge ({self.model}) failed on {len(failures)} of {len(triples)} soft "
                                 f"constraints (judge_max_retries={self.max_retries}); first error: {first}", failures)
            logger.warning("judge (%s): %d of %d soft-constraint verdicts failed and count as not satisfied; "
                           "first error: %s", self.model, len(failures), len(triples), first)
        return verdicts

    async def _ask_all(self, prompts: Mapping[str, str]) -> tuple[dict[str, _Outcome], int, list[float]]:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        attempts: list[int] = []
        latencies: list[float] = []
        keys = list(prompts)
        outcomes = await asyncio.gather(*(self._ask(prompts[key], attempts, latencies) for key in keys))
        return dict(zip(keys, outcomes)), len(attempts) - len(keys), latencies

    async def _ask(self, prompt: str, attempts: list[int], latencies: list[float]) -> _Outcome:
        """One prompt: request with retries, then parse. Never raises (except cancellation)."""
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

        non_retryable = _non_retryable(self._litellm)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.retry_backoff, max=self.retry_backoff_max)
            + wait_random(0, self.retry_backoff),
            retry=retry_if_exception(lambda exc: not isinstance(exc, (*non_retryable, MissingLogprobs))),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts.append(1)
                    async with self._semaphore:
                        start = time.perf_counter()
                        try:
                            response = await asyncio.wait_for(self._request(prompt), self._hard_timeout)
                        finally:
                            latencies.append(time.perf_counter() - start)
                    return self._parse(response)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded verdict
            text = str(exc)  # litellm's messages already read "litellm.<Type>: ..."
            return _Outcome(error=self._redact(text if text.startswith("litellm.") else f"{type(exc).__name__}: {text}"))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _request(self, prompt: str) -> Any:
        kwargs: dict[str, Any] = {
            **self.extra_kwargs,
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.temperature,
            "max_tokens": 1 if self.logprobs else self.max_tokens,
            "timeout": self.timeout,
            "max_retries": 0,  # the OpenAI client's own retries: off, tenacity retries instead
        }
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key_env:
            kwargs["api_key"] = os.environ.get(self.api_key_env) or None
        if self.logprobs:
            kwargs.update(logprobs=True, top_logprobs=self.top_logprobs)
        return await self._litellm.acompletion(**kwargs)

    def _parse(self, response: Any) -> _Outcome:
        """A verdict from a response; raises `EmptyJudgeAnswer` (retried) or `MissingLogprobs` (not retried)."""
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise EmptyJudgeAnswer("the judge returned no choices")
        choice = choices[0]
        content = getattr(getattr(choice, "message", None), "content", None) or ""
        if self.logprobs:
            logprobs = getattr(choice, "logprobs", None)
            tokens = logprobs.get("content") if isinstance(logprobs, Mapping) else getattr(logprobs, "content", None)
            if not tokens:
                raise MissingLogprobs("log-prob mode, but the response has no log-probs (does the server support "
                                      "logprobs/top_logprobs?)")
            first = tokens[0]
            top = first.get("top_logprobs") if isinstance(first, Mapping) else getattr(first, "top_logprobs", None)
            decided = verdict_from_logprobs(top or [first])
            if decided is None:
                return _Outcome(answer=content, error=f"JudgeParseError: neither YES nor NO among the top log-probs "
                                                      f"(answer {content[:80]!r})")
            return _Outcome(passed=decided[0], answer=content, p_yes=decided[1])
        if not content.strip():
            raise EmptyJudgeAnswer("the judge returned an empty answer")
        passed = parse_yes_no(content)
        if passed is None:
            return _Outcome(answer=content, error=f"JudgeParseError: answer is neither YES nor NO: {content[:200]!r}")
        return _Outcome(passed=passed, answer=content)

    def _redact(self, text: str) -> str:
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if len(key) >= 4:
            text = text.replace(key, "***")
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "sk-") + "***", text)
        return _CREDENTIAL_SHAPES.sub("***", text)[:500]


# ---------------------------------------------------------------------------------------------- config


def _high_entropy(text: str, hex_keys: bool = True) -> bool:
    """A run of 20+ letters and digits (no separators) that mixes digits and letters or both letter cases, with
    at least 3.5 bits of entropy per character: the shape of a random key, not of a name such as
    ``DEEPSEEK_API_KEY``, ``Qwen3-30B-A3B-Instruct-2507`` or ``MyJudgeApiKeyVariable``. Without ``hex_keys``,
    a git commit hash (exactly 40 hex digits, as in Hugging Face cache paths) does not count."""
    for run in re.findall(r"[A-Za-z0-9]{20,}", text):
        if not hex_keys and _COMMIT_HASH.fullmatch(run):
            continue
        digits, lower, upper = (any(f(c) for c in run) for f in (str.isdigit, str.islower, str.isupper))
        if not (digits and (lower or upper)) and not (len(run) >= 32 and lower and upper):
            continue
        counts = [run.count(c) for c in set(run)]
        entropy = -sum(n / len(run) * math.log2(n / len(run)) for n in counts)
        if entropy >= 3.5:
            return True
    return False


def looks_like_credential(value: str, hex_keys: bool = True) -> bool:
    """True when ``value`` holds something shaped like a credential: a known key prefix (``sk-``, ``hf_``,
    ``ghp_``, ``AKIA``, ``AIza``, ...), a JWT, a long random-looking string (see `_high_entropy`) or, with
    hexadecimal string of 32 or more digits (without ``hex_keys``: except a 40-digit commit hash, for paths).
    Used to refuse keys pasted into judge fields, without echoing them."""
    for match in _CREDENTIAL_SHAPES.finditer(value):
        if hex_keys or not _COMMIT_HASH.fullmatch(match.group(0)):
            return True
    return _high_entropy(value, hex_keys)


def _url_credential(url: str) -> str | None:
    """Which part of ``url`` holds a credential (``"user:password@"``, ``"query parameter 'api_key'"``, ...), or None."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "the user:password@ part"
    for where, text in (("query", parts.query), ("fragment", parts.fragment)):
        for item in re.split(r"[&;]", text):
            name, _, value = item.partition("=")
            if value and _CREDENTIAL_PARAMS.search(name.strip()):
                return f"the {where} parameter {name.strip()!r}"
            if looks_like_credential(item):
                return f"the {where}"
    if looks_like_credential(parts.netloc) or looks_like_credential(parts.path):
        return "the host or path"
    return None


def judge_settings_problem(*, model: str | None, api_key_env: str | None, max_concurrency: int, timeout: float,
                           max_retries: int, temperature: float, failure_policy: str, retry_backoff: float,
                           api_base: str | None = None, cache_dir: str | None = None) -> str | None:
    """What is wrong with these judge settings (a message naming the field), or None.

    No judge field may hold a credential (see `looks_like_credential`): the config is saved into every checkpoint
    (``training_args.bin``), which a Hub push uploads. ``api_key_env`` must be the NAME of an environment
    variable, and ``api_base`` may carry no credential anywhere (``user:pw@``, ``?api_key=...``, a key in the
    path). Messages never echo a value that looks like a credential.
    """
    if model is not None and not isinstance(model, str):
        return f"judge_model must be a litellm model string, got {type(model).__name__}"
    fix = "put the key in an environment variable and give its NAME in judge_api_key_env; the value is not shown"
    if api_key_env and (not isinstance(api_key_env, str) or not _ENV_NAME.fullmatch(api_key_env)
                        or looks_like_credential(api_key_env)):
        # Do not echo the value: a user may have pasted the key itself here.
        return ("judge_api_key_env must be the NAME of an environment variable (letters, digits, '_', e.g. "
                "DEEPSEEK_API_KEY), not the key itself; the value given is not shown")
    if api_base:
        where = _url_credential(api_base) if isinstance(api_base, str) else None
        if where is not None:
            return f"judge_api_base must not contain credentials (found in {where}); {fix}"
    for name, value in (("judge_model", model), ("judge_cache_dir", cache_dir)):
        if isinstance(value, str) and looks_like_credential(value, hex_keys=False):  # a path may hold a commit hash
            return f"{name} looks like it contains a credential; {fix}"
    if not isinstance(max_concurrency, int) or max_concurrency < 1:
        return f"judge_max_concurrency must be an integer >= 1, got {max_concurrency!r}"
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        return f"judge_timeout must be a finite number of seconds > 0, got {timeout!r}"
    if not isinstance(max_retries, int) or max_retries < 0:
        return f"judge_max_retries must be an integer >= 0, got {max_retries!r}"
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        return f"judge_temperature must be >= 0, got {temperature!r}"
    if failure_policy not in FAILURE_POLICIES:
        return f"judge_failure_policy must be one of {FAILURE_POLICIES}, got {failure_policy!r}"
    if not (isinstance(retry_backoff, (int, float)) and math.isfinite(retry_backoff) and retry_backoff >= 0):
        return f"judge_retry_backoff must be a finite number of seconds >= 0, got {retry_backoff!r}"
    return None


def build_judge(args: HiRConfig) -> LiteLLMJudge | None:
    """The `LiteLLMJudge` configured by ``args.judge_*``, or None when ``args.judge_model`` is empty.

    Whether a judge is needed at all (the dataset has soft constraints, see `has_soft_constraints`) is
    the caller's decision.

    Raises:
        MissingJudgeKeyError: (a `KeyError`) ``args.judge_api_key_env`` names an environment variable that is not set.
    """
    if not args.judge_model:
        return None
    return LiteLLMJudge(
        args.judge_model, api_base=args.judge_api_base or None, api_key_env=args.judge_api_key_env or None,
        max_concurrency=args.judge_max_concurrency, timeout=args.judge_timeout, max_retries=args.judge_max_retries,
        temperature=args.judge_temperature, failure_policy=args.judge_failure_policy,
        cache_dir=args.judge_cache_dir or None, logprobs=args.judge_logprobs, max_tokens=args.judge_max_tokens,
        retry_backoff=args.judge_retry_backoff)


def has_soft_constraints(dataset: Any) -> bool:
    """True when some row of a normalized dataset (`hir_trl.load_hir_dataset`) has a ``soft`` constraint.

    Accepts what `hir_trl.data.count_soft_constraints` accepts; a streaming ``IterableDataset``, whose column
    cannot be read without iterating it, is assumed to have some.
    """
    from .data import count_soft_constraints

    counts = count_soft_constraints(dataset)
    return counts is None or counts[0] > 0
