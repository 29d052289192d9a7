"""The judge client: `LiteLLMJudge`, the paper's YES/NO judge through litellm (async, cached, bounded, retried).

See `hir_trl.judge` for how a batch is judged. The prompt and answer parsing live in `hir_trl.judge.prompt`,
the verdict cache in `hir_trl.judge.cache`, the event loop in `hir_trl.judge.loop` and the validation of the
settings in `hir_trl.judge.config`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from filelock import Timeout

from ..verifiers import Verdict
from .cache import VerdictCache
from .config import (
    DEFAULT_JUDGE_API_KEY_ENV,
    DEFAULT_JUDGE_MODEL,
    env_name_for_message,
    extra_kwargs_problem,
    judge_settings_problem,
    redact,
)
from .loop import judge_event_loop
from .prompt import UnusableLogprobError, format_judge_prompt, parse_yes_no, verdict_from_logprobs

if TYPE_CHECKING:
    from ..configs import HiRConfig
    from .arguments import JudgeArguments

logger = logging.getLogger(__name__)

#: The API key sent to an ``api_base`` when ``api_key_env`` is empty (a local server without authentication):
#: OpenAI's client, which litellm uses for ``openai/...`` models, fails with "Missing credentials" when given none.
NO_KEY = "no-key"


#: The counters `LiteLLMJudge.pop_metrics` always returns, as ``judge/<name>``.
COUNTERS = ("verdicts", "calls", "cache_hits", "deduplicated", "failures", "retries", "seconds_per_step",
            "rejudge_verdicts", "rejudge_calls", "rejudge_failures")


class MissingJudgeKeyError(KeyError):
    """The environment variable named by ``api_key_env`` is not set (a `KeyError`; ``args[0]`` is the message)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class JudgeError(RuntimeError):
    """The judge could not produce a verdict and ``failure_policy`` is ``"raise"`` (or a subclass: the judge cannot
    work at all).

    Attributes:
        failures: ``(index, error)`` for every triple of the batch that failed (index into the batch).
    """

    def __init__(self, message: str, failures: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(message)
        self.failures = list(failures)


class JudgeUnavailableError(JudgeError):
    """Every request of a batch failed with an error no retry can fix (missing or wrong credentials, a 4xx other than
    408, 409 and 429, a server without log-probs in log-prob mode), none of them about its own prompt (too long,
    refused), or every answer of a batch of two or more was neither YES nor NO (a model that does not follow the judge
    prompt): raised whatever ``failure_policy`` says, since every soft constraint of every step would count as
    unmet."""


class MissingJudgePackageError(JudgeError):
    """The LLM judge's packages (litellm, tenacity: the ``[judge]`` extra) are not installed; the message is one line
    naming the extra."""


def check_judge_packages(model: str) -> None:
    """Refuse a judge when litellm or tenacity is not installed (both come with ``pip install 'hir-trl[judge]'``).

    Raises:
        MissingJudgePackageError: one line naming the missing package(s), the judge model and the extra.
    """
    import importlib.util

    missing = [name for name in ("litellm", "tenacity") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingJudgePackageError(
            f"the LLM judge (judge_model {model}) needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: pip install 'hir-trl[judge]'")


class JudgeCacheError(JudgeError):
    """The on-disk verdict cache (``cache_dir``) cannot be opened, read or written; the message names its path."""



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


class EmptyJudgeAnswer(Exception):
    """The judge returned no content (retried: providers do this under load)."""


class MissingLogprobs(Exception):
    """Log-prob mode, but the response carries no log-probs for the first token (not retried)."""


#: litellm's exception types that no retry can fix.
_PERMANENT_ERRORS = ("AuthenticationError", "BadRequestError", "NotFoundError", "PermissionDeniedError",
                     "UnprocessableEntityError", "ContentPolicyViolationError", "ContextWindowExceededError",
                     "UnsupportedParamsError")
#: Of those, the ones about one prompt (too long for the judge, refused by its content policy), not about the judge's
#: set-up: they never make a batch's failure `JudgeUnavailableError`.
_PROMPT_SPECIFIC_ERRORS = ("ContextWindowExceededError", "ContentPolicyViolationError")
#: HTTP statuses of a client error that a retry may fix: request timeout, conflict, rate limit.
_RETRYABLE_4XX = (408, 409, 429)


def is_permanent_error(exc: BaseException, litellm: Any = None) -> bool:
    """True when no retry of the same request can succeed: one of litellm's authentication, permission, bad-request,
    not-found or unprocessable errors, any error carrying an HTTP status 400-499 other than 408, 409 and 429, a
    client that has no API key to send ("Missing credentials"), or `MissingLogprobs`."""
    if isinstance(exc, MissingLogprobs):
        return True
    if litellm is not None:
        types = tuple(getattr(litellm, name) for name in _PERMANENT_ERRORS if hasattr(litellm, name))
        rate_limit = getattr(litellm, "RateLimitError", ())
        if isinstance(exc, types) and not isinstance(exc, rate_limit):
            return True
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status not in _RETRYABLE_4XX:
        return True
    text = str(exc)
    return "Missing credentials" in text or "api_key client option must be set" in text


@dataclass
class _Outcome:
    passed: bool | None = None
    answer: str | None = None
    p_yes: float | None = None
    error: str | None = None
    permanent: bool = False  # the error is one no retry can fix (`is_permanent_error`)
    prompt_specific: bool = False  # ... and it is this prompt's (too long, refused), not the judge's set-up


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


class LiteLLMJudge:
    """The paper's YES/NO soft-constraint judge (Appendix "Evaluation Prompt") through litellm.

    A `hir_trl.judge.Judge`: ``judge(triples) -> list[Verdict]`` with triples ``(input_text,
    generated_text, criteria_item)``, one verdict per triple, in order. Use it as
    ``ConstraintReward(judge=LiteLLMJudge(...))`` or build it from a config with `build_judge`. See the
    module docstring for how a batch is judged.

    Args:
        model: any litellm model string (``deepseek/deepseek-chat``, ``openai/gpt-4o-mini``,
            ``hosted_vllm/<name>`` for a ``vllm serve`` endpoint).
        api_base: the endpoint, e.g. ``http://host:8000/v1``; None for the provider's default.
        api_key_env: NAME of the environment variable holding the API key, read at each request; None or
            ``""`` for a server without authentication (with ``api_base``, the placeholder `NO_KEY` is sent, since
            OpenAI's client refuses to send none).
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
        extra_kwargs: further keyword arguments for ``litellm.acompletion``, e.g. ``logit_bias`` on the YES/NO
            tokens or ``extra_body={"guided_choice": ["YES", "NO"]}`` for vLLM, to hold a small judge to the answer
            format (``logit_bias`` values are sent as floats); never a key (use ``api_key_env``) nor an argument
            the judge sets itself (`hir_trl.judge.config.extra_kwargs_problem`).

    Raises:
        ValueError: a setting out of range, an unknown ``failure_policy``, an ``api_key_env`` that is not
            an environment variable name, or credentials in ``api_base`` or ``extra_kwargs``.
        MissingJudgeKeyError: (a `KeyError`) ``api_key_env`` names a variable that is not set (checked at
            construction).
        MissingJudgePackageError: litellm or tenacity is not installed (``pip install 'hir-trl[judge]'``).
        JudgeCacheError: ``cache_dir`` cannot be opened or read (checked at construction).
    """

    def __init__(self, model: str = DEFAULT_JUDGE_MODEL, *, api_base: str | None = None,
                 api_key_env: str | None = DEFAULT_JUDGE_API_KEY_ENV, max_concurrency: int = 64,
                 timeout: float = 60.0, max_retries: int = 3, temperature: float = 0.0,
                 failure_policy: str = "unsatisfied", cache_dir: str | os.PathLike | None = None,
                 logprobs: bool = False, top_logprobs: int = 5, max_tokens: int = 16, retry_backoff: float = 1.0,
                 retry_backoff_max: float = 30.0, extra_kwargs: Mapping[str, Any] | None = None) -> None:
        api_key_env = api_key_env.strip() if isinstance(api_key_env, str) else api_key_env  # "NAME\n" is NAME
        problem = judge_settings_problem(model=model, api_key_env=api_key_env, max_concurrency=max_concurrency,
                                         timeout=timeout, max_retries=max_retries, temperature=temperature,
                                         failure_policy=failure_policy, retry_backoff=retry_backoff,
                                         api_base=api_base, cache_dir=None if cache_dir is None else str(cache_dir))
        if problem:
            raise ValueError(problem)
        check_judge_packages(model)
        problem = extra_kwargs_problem(extra_kwargs)
        if problem:
            raise ValueError(problem)
        if api_key_env and not os.environ.get(api_key_env, "").strip():
            unset = "is not set" if api_key_env not in os.environ else "is set but empty (only blanks)"
            raise MissingJudgeKeyError(f"the judge's API key variable {env_name_for_message(api_key_env)} {unset}; "
                                       "export it, or set judge_api_key_env to '' for a server without "
                                       "authentication")
        self.model, self.api_base, self.api_key_env = model, api_base, api_key_env or None
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, float(timeout), max_retries
        self.temperature, self.failure_policy = float(temperature), failure_policy
        self.logprobs, self.top_logprobs, self.max_tokens = logprobs, top_logprobs, max_tokens
        self.retry_backoff, self.retry_backoff_max = retry_backoff, retry_backoff_max
        self.extra_kwargs = dict(extra_kwargs or {})
        if isinstance(self.extra_kwargs.get("logit_bias"), Mapping):  # some servers (transformers serve) want floats
            self.extra_kwargs["logit_bias"] = {str(k): float(v) for k, v in self.extra_kwargs["logit_bias"].items()}
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        if self.cache_dir is not None:  # a cache that cannot be read must stop the run before its first step
            with self._cache_errors("open"):
                probe = VerdictCache(self.cache_dir, memory_entries=1)
                try:
                    with self._cache_errors("read"):
                        probe.get_many(["0" * 64])
                finally:
                    probe.close()
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
        attempts), ``judge/seconds_per_step`` (wall seconds of the judge's calls, on whichever thread made them), and the
        ``judge/rejudge_*`` subset. Latencies (present when a request was made): ``judge/latency_p50`` and
        ``judge/latency_p95``, seconds of one request attempt. verdicts = calls + cache_hits + deduplicated.
        """
        with self._stats_lock:
            stats, self._stats = self._stats, _Stats()
        metrics = {f"judge/{name}": float(stats.counts.get(name, 0.0)) for name in COUNTERS}
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
        """Import litellm and open the cache (again after a fork); return the judge event loop.

        Raises:
            JudgeCacheError: the cache cannot be opened.
        """
        with self._start_lock:
            if self._pid != os.getpid():  # forked: the parent's database connection is not ours
                self._reset_runtime()
            if self._cache is None:
                self._litellm = import_litellm()
                with self._cache_errors("open"):
                    self._cache = VerdictCache(self.cache_dir)
        return judge_event_loop()

    @contextlib.contextmanager
    def _cache_errors(self, action: str) -> Iterator[None]:
        """Turn a failure of the on-disk cache into `JudgeCacheError` naming its path (it would otherwise fail every
        soft constraint: the verdicts are there, but the batch cannot be judged)."""
        try:
            yield
        except (sqlite3.Error, OSError, Timeout) as exc:
            path = os.path.join(self.cache_dir, "judge_cache.sqlite3") if self.cache_dir else "the judge cache"
            raise JudgeCacheError(f"judge_cache_dir: cannot {action} {path}: {type(exc).__name__}: {exc}") from exc

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
        with self._cache_errors("read"):
            cached = self._cache.get_many(unique)
        to_ask = {key: prompt for key, prompt in unique.items() if key not in cached}
        future = asyncio.run_coroutine_threadsafe(self._ask_all(to_ask), loop)
        answered, retries, latencies = future.result()
        with self._cache_errors("write"):
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

        if answered and all(o.error is not None and o.permanent and not o.prompt_specific for o in answered.values()):
            first = next(iter(answered.values())).error
            raise JudgeUnavailableError(
                f"the judge ({self.model}) failed on all {len(answered)} requests with an error no retry can fix; "
                f"check judge_model, judge_api_base and judge_api_key_env; first error: {first}", failures)
        garbage = [o for o in answered.values() if o.error is not None and o.error.startswith("JudgeParseError")]
        if len(answered) >= 2 and len(garbage) == len(answered):
            raise JudgeUnavailableError(
                f"the judge ({self.model}) answered none of {len(answered)} requests with YES or NO, so it judges "
                f"nothing: check judge_model and judge_api_base (is it a chat model that follows the judge prompt?); "
                f"first error: {garbage[0].error[:200]}", failures)
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

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.retry_backoff, max=self.retry_backoff_max)
            + wait_random(0, self.retry_backoff),
            retry=retry_if_exception(lambda exc: not is_permanent_error(exc, self._litellm)),
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
            specific = tuple(getattr(self._litellm, name) for name in _PROMPT_SPECIFIC_ERRORS
                             if hasattr(self._litellm, name))
            return _Outcome(error=self._redact(text if text.startswith("litellm.") else f"{type(exc).__name__}: {text}"),
                            permanent=is_permanent_error(exc, self._litellm), prompt_specific=isinstance(exc, specific))
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
            kwargs["api_key"] = api_key(self.api_key_env)
        elif self.api_base:  # a server without authentication; OpenAI's client refuses to send no key at all
            kwargs["api_key"] = NO_KEY
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
            try:
                decided = verdict_from_logprobs(top or [first])
            except UnusableLogprobError as exc:  # a failure, never a NO: counted, and judge_failure_policy applies
                return _Outcome(answer=self._redact(content), error=self._redact(f"JudgeParseError: {exc}"))
            if decided is None:
                return _Outcome(answer=self._redact(content), error=self._redact(
                    f"JudgeParseError: neither YES nor NO among the top log-probs (answer {content[:80]!r})"))
            return _Outcome(passed=decided[0], answer=self._redact(content), p_yes=decided[1])
        if not content.strip():
            raise EmptyJudgeAnswer("the judge returned an empty answer")
        passed = parse_yes_no(content)
        if passed is None:  # the answer is the server's text: redacted as every other error (it may echo a header)
            return _Outcome(answer=self._redact(content),
                            error=self._redact(f"JudgeParseError: answer is neither YES nor NO: {content[:200]!r}"))
        return _Outcome(passed=passed, answer=self._redact(content))

    def _redact(self, text: str) -> str:
        key = api_key(self.api_key_env) if self.api_key_env else None
        text = redact(text, os.environ.get(self.api_key_env) if self.api_key_env else None)
        return redact(text, key) if key else text


def api_key(api_key_env: str) -> str | None:
    """The judge's API key: the value of the environment variable ``api_key_env`` without the blanks around it (a
    key read from a file with ``$(cat key.txt)`` ends in a newline, which no HTTP header may hold), or None when it
    is unset or blank."""
    return os.environ.get(api_key_env, "").strip() or None


def build_judge(args: JudgeArguments) -> LiteLLMJudge | None:
    """The `LiteLLMJudge` configured by ``args.judge_*`` (a `hir_trl.judge.arguments.JudgeArguments`: a `HiRConfig`
    or ``hir-trl eval``'s options), or None when ``args.judge_model`` is empty.

    Whether a judge is needed at all (the dataset has soft constraints, see `hir_trl.data.loading.has_soft_constraints`) is
    the caller's decision.

    Raises:
        MissingJudgeKeyError: (a `KeyError`) ``args.judge_api_key_env`` names an environment variable that is not set.
        MissingJudgePackageError: litellm or tenacity is not installed.
        JudgeCacheError: ``args.judge_cache_dir`` cannot be opened or read.
    """
    if not args.judge_model:
        return None
    return LiteLLMJudge(
        args.judge_model, api_base=args.judge_api_base or None, api_key_env=args.judge_api_key_env or None,
        max_concurrency=args.judge_max_concurrency, timeout=args.judge_timeout, max_retries=args.judge_max_retries,
        temperature=args.judge_temperature, failure_policy=args.judge_failure_policy,
        cache_dir=args.judge_cache_dir or None, logprobs=args.judge_logprobs, max_tokens=args.judge_max_tokens,
        retry_backoff=args.judge_retry_backoff, extra_kwargs=args.judge_extra_kwargs)


class DeferredJudge:
    """The judge `build_judge` makes of ``args``, built when a soft constraint first needs it: for training data
    whose soft constraints cannot be counted before training (a streaming `datasets.IterableDataset` whose first rows
    hold none), so that a run whose constraints are all rule checks never needs the judge's key.

    Calls, ``rejudge``, ``failure_policy`` and ``model`` are the built judge's; ``pop_metrics`` before the judge is
    built gives zero counters (the same keys on every rank), ``close`` does nothing.

    Raises:
        JudgeUnavailableError: at the first soft constraint, the judge cannot be built (its key variable is unset,
            `MissingJudgeKeyError`; its cache cannot be opened): training stops there, naming the fix.
    """

    def __init__(self, args: HiRConfig) -> None:
        self.args = args
        self.judge: LiteLLMJudge | None = None

    @property
    def model(self) -> str:
        return self.args.judge_model

    @property
    def failure_policy(self) -> str:
        return self.args.judge_failure_policy

    def built(self) -> LiteLLMJudge:
        """The judge, built now if it is not yet."""
        if self.judge is None:
            try:
                self.judge = build_judge(self.args)
            except MissingJudgeKeyError as exc:
                raise JudgeUnavailableError(f"a soft constraint needs the judge, but {exc}") from None
        return self.judge

    def __call__(self, triples: Sequence[tuple[str, str, str]]) -> list[Verdict]:
        return self.built()(triples) if triples else []

    def rejudge(self, triples: Sequence[tuple[str, str, str]]) -> list[Verdict]:
        return self.built().rejudge(triples) if triples else []

    def pop_metrics(self) -> dict[str, float]:
        if self.judge is None:
            return {f"judge/{name}": 0.0 for name in COUNTERS}
        return self.judge.pop_metrics()

    def close(self) -> None:
        if self.judge is not None:
            self.judge.close()

    def __repr__(self) -> str:
        return f"DeferredJudge({self.judge!r})" if self.judge is not None else f"DeferredJudge(model={self.model!r})"
