"""The LLM judge for soft constraints: the paper's YES/NO prompt through litellm, async, cached and bounded.

A soft constraint (style, coherence, ...) has no rule checker; the paper judges it with an LLM that
answers YES or NO to the prompt of its Appendix "Evaluation Prompt" (`JUDGE_PROMPT_TEMPLATE`), using
DeepSeek-V3.1 in non-thinking mode. `LiteLLMJudge` is that judge as a `hir_trl.judge.Judge`: it is
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
   connection errors, 5xx, 408, 409, 429, malformed or empty answers) are retried ``max_retries`` times with
   exponential backoff and jitter (tenacity). Errors no retry can fix (`is_permanent_error`: missing or
   wrong credentials, any other 4xx) are not retried, nor is an answer that is neither YES nor NO (the
   same prompt would get it again). The caller's thread waits only for this batch.
3. An answer is parsed strictly (`parse_yes_no`) or, in log-prob mode, decided by P(YES) vs P(NO)
   (`verdict_from_logprobs`; a YES/NO log-prob that is NaN, +inf, above 0 or missing is a failure, never a NO).
   Parsed verdicts are written to the cache; failures never are.
4. A call that still fails is a failure: with ``failure_policy="unsatisfied"`` (default) its verdict is
   ``Verdict(False, error=..., source="judge")`` and ``judge/failures`` counts it; with ``"raise"`` the
   batch raises `JudgeError` (after every other call has finished and been cached). Whatever the policy,
   a batch whose every request failed with an error no retry can fix raises `JudgeUnavailableError`, and
   a cache that cannot be opened, read or written raises `JudgeCacheError` (checked when the judge is
   built, so before training starts): either would make every soft constraint count as unmet.

The API key is read from the environment variable named by ``api_key_env`` at each request and is
never stored on the judge or the config; error texts are redacted (the current key, bearer tokens and
anything shaped like a credential become ``***``). No judge setting may hold a credential
(`judge_settings_problem`): a key pasted into a field is refused without being shown.

litellm is imported lazily (first request), with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no network
fetch of the price map at import) and ``LITELLM_MODE=PRODUCTION`` (no ``.env`` loading) set first
unless the user set them.

The package, in the order a batch runs: `hir_trl.judge.protocol` (`Judge`, and `judge_batch`, the one call
of a judge in training and evaluation), `hir_trl.judge.prompt` (the paper's prompt, answer parsing),
`hir_trl.judge.cache` (`VerdictCache`), `hir_trl.judge.loop` (the event-loop thread), `hir_trl.judge.client`
(`LiteLLMJudge`, `build_judge`), `hir_trl.judge.arguments` (`JudgeArguments`, the ``judge_*`` options that
`hir_trl.HiRConfig` and ``hir-trl eval`` share, with their defaults and help) and `hir_trl.judge.config` (validation of
the settings, credential shapes, redaction). Every public name is importable from `hir_trl.judge`.
"""

from .arguments import JudgeArguments, judge_problem
from .cache import VerdictCache
from .client import (
    NO_KEY,
    DeferredJudge,
    EmptyJudgeAnswer,
    JudgeCacheError,
    JudgeError,
    JudgeUnavailableError,
    LiteLLMJudge,
    MissingJudgeKeyError,
    MissingJudgePackageError,
    MissingLogprobs,
    build_judge,
    check_judge_packages,
    import_litellm,
    is_permanent_error,
)
from .config import (
    DEFAULT_JUDGE_API_KEY_ENV,
    DEFAULT_JUDGE_MODEL,
    FAILURE_POLICIES,
    credential_param,
    extra_kwargs_problem,
    judge_settings_problem,
    looks_like_credential,
    redact,
)
from .loop import judge_event_loop
from .prompt import (
    JUDGE_PROMPT_TEMPLATE,
    UnusableLogprobError,
    format_judge_prompt,
    parse_yes_no,
    verdict_from_logprobs,
)
from .protocol import Judge, judge_batch

__all__ = [
    "DEFAULT_JUDGE_API_KEY_ENV",
    "DEFAULT_JUDGE_MODEL",
    "FAILURE_POLICIES",
    "JUDGE_PROMPT_TEMPLATE",
    "Judge",
    "JudgeArguments",
    "NO_KEY",
    "DeferredJudge",
    "EmptyJudgeAnswer",
    "JudgeCacheError",
    "JudgeError",
    "JudgeUnavailableError",
    "LiteLLMJudge",
    "MissingJudgeKeyError",
    "MissingJudgePackageError",
    "check_judge_packages",
    "MissingLogprobs",
    "UnusableLogprobError",
    "VerdictCache",
    "build_judge",
    "credential_param",
    "extra_kwargs_problem",
    "format_judge_prompt",
    "import_litellm",
    "is_permanent_error",
    "judge_batch",
    "judge_event_loop",
    "judge_problem",
    "judge_settings_problem",
    "looks_like_credential",
    "parse_yes_no",
    "redact",
    "verdict_from_logprobs",
]
