"""`JudgeArguments`: the ``judge_*`` options of the soft-constraint judge, declared once for training and evaluation.

`hir_trl.HiRConfig` takes its ``judge_*`` fields from this dataclass (it subclasses it), and ``hir-trl eval score`` /
``hir-trl eval generate`` parse it as is (`hir_trl.cli.eval`): the same names, defaults, help and choices in both, so
both build the same judge (`hir_trl.judge.build_judge`). The defaults are those of `hir_trl.judge.LiteLLMJudge`:
the paper's judge (``deepseek/deepseek-chat``, key in ``DEEPSEEK_API_KEY``); an empty ``judge_model`` means no judge.

Imports nothing beyond `hir_trl.judge.config` (no litellm: it is the optional ``[judge]`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import (
    DEFAULT_JUDGE_API_KEY_ENV,
    DEFAULT_JUDGE_MODEL,
    FAILURE_POLICIES,
    extra_kwargs_problem,
    judge_settings_problem,
)


@dataclass
class JudgeArguments:
    """The LLM judge of soft constraints (paper Appendix "Evaluation Prompt"): one field per `LiteLLMJudge` setting,
    each ``judge_<setting>``, with its default. Keys are never stored here: ``judge_api_key_env`` holds the NAME of
    the environment variable, read at each request.

    ``judge_model`` empty (or None) means no judge: training then follows ``soft_constraints`` (`hir_trl.HiRConfig`),
    and ``hir-trl eval`` reports soft constraints as unjudged. ``judge_extra_kwargs`` is a mapping (a JSON object on
    the command line, parsed by `hir_trl.HiRConfig` as TRL parses its dict options, and by ``hir-trl eval``).
    Validation: `judge_problem`.
    """

    judge_model: str | None = field(
        default=DEFAULT_JUDGE_MODEL,
        metadata={"help": "litellm model string of the soft-constraint judge (paper: DeepSeek-V3.1 non-thinking, "
                  "'deepseek/deepseek-chat'). 'hosted_vllm/<name>' or 'openai/<name>' with judge_api_base for an "
                  "OpenAI-compatible server such as `vllm serve`. Empty: no judge (training: see soft_constraints; "
                  "hir-trl eval: soft constraints are reported as unjudged)."},
    )
    judge_api_base: str | None = field(
        default=None,
        metadata={"help": "Base URL of the judge endpoint, e.g. 'http://host:8000/v1'; None: the provider's default."},
    )
    judge_api_key_env: str | None = field(
        default=DEFAULT_JUDGE_API_KEY_ENV,
        metadata={"help": "NAME of the environment variable holding the judge's API key (never the key itself; it "
                  "is read at each request and never saved). Empty: send no key (local server without auth)."},
    )
    judge_max_concurrency: int = field(
        default=64,
        metadata={"help": "Most judge requests in flight at once (per process)."},
    )
    judge_timeout: float = field(
        default=60.0,
        metadata={"help": "Seconds one judge request attempt may take before it is abandoned (finite)."},
    )
    judge_max_retries: int = field(
        default=3,
        metadata={"help": "Retries of a failed judge request (timeout, connection error, 5xx, 429, malformed or "
                  "empty answer), with exponential backoff."},
    )
    judge_retry_backoff: float = field(
        default=1.0,
        metadata={"help": "Seconds before the first judge retry; doubles each retry (with jitter), capped at 30 s."},
    )
    judge_temperature: float = field(
        default=0.0,
        metadata={"help": "Sampling temperature of the judge."},
    )
    judge_max_tokens: int = field(
        default=16,
        metadata={"help": "Most tokens in a judge answer (text mode). The answer is YES or NO; raise it for a "
                  "judge that thinks before answering."},
    )
    judge_logprobs: bool = field(
        default=False,
        metadata={"help": "Decide a soft constraint by P(YES) vs P(NO) of the judge's first answer token "
                  "(logprobs, max_tokens=1) instead of parsing its answer text. Needs a server that returns logprobs."},
    )
    judge_failure_policy: str = field(
        default="unsatisfied",
        metadata={"help": "A judge call that still fails after its retries (or an answer that is neither YES nor NO): "
                  "'unsatisfied' records a failed, not-satisfied verdict (counted in judge/failures); 'raise' stops "
                  "the run (training or evaluation) with JudgeError.", "choices": list(FAILURE_POLICIES)},
    )
    judge_extra_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "Further arguments of litellm.acompletion for every judge request (a mapping in a recipe, "
                  "JSON on the command line), e.g. to hold a small judge to YES/NO: {\"logit_bias\": {\"<YES id>\": "
                  "100.0, \"<NO id>\": 100.0}} (token ids of the judge's tokenizer; values are sent as floats) or, for "
                  "vLLM, {\"extra_body\": {\"guided_choice\": [\"YES\", \"NO\"]}}. Never a key, nor an argument "
                  "another judge_* field sets."},
    )
    judge_cache_dir: str | None = field(
        default=None,
        metadata={"help": "Directory of the on-disk judge cache (SQLite; safe to share between processes and runs), "
                  "so a resumed or repeated run asks nothing twice. None: cache in memory for this run only."},
    )


def judge_problem(args: Any) -> str | None:
    """A ``judge_*`` field of ``args`` (a `JudgeArguments`, or a `hir_trl.HiRConfig`) out of range, a
    ``judge_api_key_env`` that is not an environment variable name, a ``judge_extra_kwargs`` that is not a mapping of
    litellm arguments, or anything shaped like a credential in a judge field (`hir_trl.judge.config`; the message
    never shows it), as one line naming the field; None when the settings are usable. Needs neither litellm nor the
    key."""
    problem = judge_settings_problem(
        model=args.judge_model, api_key_env=args.judge_api_key_env, max_concurrency=args.judge_max_concurrency,
        timeout=args.judge_timeout, max_retries=args.judge_max_retries, temperature=args.judge_temperature,
        failure_policy=args.judge_failure_policy, retry_backoff=args.judge_retry_backoff,
        api_base=args.judge_api_base, cache_dir=args.judge_cache_dir)
    if problem is None and (not isinstance(args.judge_max_tokens, int) or args.judge_max_tokens < 1):
        problem = f"judge_max_tokens must be an integer >= 1, got {args.judge_max_tokens!r}"
    if problem is None and isinstance(args.judge_extra_kwargs, str):
        problem = ("judge_extra_kwargs must be a JSON object (e.g. '{\"logit_bias\": {\"31\": 100.0}}'), got a "
                   "string that is not one")
    return problem if problem is not None else extra_kwargs_problem(args.judge_extra_kwargs)


__all__ = ["JudgeArguments", "judge_problem"]
