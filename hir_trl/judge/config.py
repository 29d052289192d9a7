"""Validation of the judge settings, and the credential shapes it refuses (and error texts redact).

Imports nothing of `hir_trl`, so `hir_trl.configs` imports `judge_settings_problem` at module level to validate
`HiRConfig`'s ``judge_*`` fields, without an import cycle. No judge setting may hold a credential: the config is
saved into every checkpoint (``training_args.bin``), which a Hub push uploads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

#: The paper's judge (DeepSeek-V3.1, non-thinking) through its provider: DeepSeek's ``deepseek-chat``.
DEFAULT_JUDGE_MODEL = "deepseek/deepseek-chat"
DEFAULT_JUDGE_API_KEY_ENV = "DEEPSEEK_API_KEY"
FAILURE_POLICIES = ("unsatisfied", "raise")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
#: Words of a URL parameter's name that mark it as carrying a credential (``?api_key=``, ``?code=`` as Azure
#: Functions use, ``?sig=`` of an Azure SAS, ``?X-Amz-Signature=``, ``?subscription-key=``, ``#access_token=``, ...).
#: The name is split into words at separators and case changes (``apiKey`` -> ``api``, ``key``); a word matches
#: when it holds a stem such as ``secret``/``token``/``passw``, or starts or ends with a short one such as ``key``,
#: ``auth``, ``sig`` or ``code``: new spellings of the same idea are caught too.
_CREDENTIAL_WORD = re.compile(
    r"secret|token(?!s)|passw|passphrase|sessid|session|apikey|credential|signature|cookie|bearer|hmac|privatekey"
    r"|^(?:key|pass|pwd|auth|sig|sign|code|cred|creds|sid|jwt|otp|sas|pat|private|nonce|ticket)"
    r"|(?:key|pwd|auth|code|cred|creds|sig|jwt)$")
_NAME_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def credential_param(name: str) -> bool:
    """True when a URL parameter named ``name`` would carry a credential, judged by the words of its name (see
    `_CREDENTIAL_WORD`), not by a fixed list: ``api_key``, ``apiKey``, ``code``, ``sig``, ``X-Amz-Signature``,
    ``client_secret``, ``subscription-key``, ``sessionid``, ``pwd`` do; ``api-version``, ``model``, ``timeout`` do not."""
    words = _NAME_WORDS.findall(name.strip())
    joined = "".join(words).lower()
    return bool(joined) and any(_CREDENTIAL_WORD.search(w) for w in [*(w.lower() for w in words), joined])


_CONVENTIONAL_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def env_name_for_message(name: str) -> str:
    """How a message names the variable ``name`` of ``judge_api_key_env``: quoted when it reads like a variable name
    (upper case, digits and ``_``, as ``DEEPSEEK_API_KEY``), else a description that does not show it: a mixed-case
    value such as ``Tr0ub4dor3`` may be a password pasted in by mistake, and messages end up in logs."""
    if _CONVENTIONAL_ENV_NAME.fullmatch(name) and not looks_like_credential(name):
        return repr(name)
    return "named in judge_api_key_env (not shown: it is not an upper-case variable name such as DEEPSEEK_API_KEY)"


def redact(text: str, key: str | None = None) -> str:
    """``text`` with ``key`` (when 4 characters or longer), bearer tokens and anything shaped like a credential
    (see `looks_like_credential`) replaced by ``***``, cut to 500 characters: safe to log or record in a verdict."""
    if key and len(key) >= 4:
        text = text.replace(key, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "sk-") + "***", text)
    return _CREDENTIAL_SHAPES.sub("***", text)[:500]


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
            if value and credential_param(name):
                return f"the {where} parameter {name.strip()!r}"
            if looks_like_credential(item):
                return f"the {where}"
    if looks_like_credential(parts.netloc) or looks_like_credential(parts.path):
        return "the host or path"
    return None


#: litellm arguments the judge sets from its own fields: named in an error when ``judge_extra_kwargs`` holds one.
_JUDGE_OWN_ARGUMENTS = {"model": "judge_model", "messages": None, "temperature": "judge_temperature",
                        "max_tokens": "judge_max_tokens", "timeout": "judge_timeout", "api_base": "judge_api_base",
                        "base_url": "judge_api_base", "logprobs": "judge_logprobs", "top_logprobs": None,
                        "max_retries": "judge_max_retries", "api_key": "judge_api_key_env"}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


#: litellm arguments the judge cannot work with: each request must return one whole answer.
_UNSUPPORTED_ARGUMENTS = {
    "stream": "the judge reads one whole answer per request (a streamed one has no YES/NO to read); remove it",
    "stream_options": "the judge does not stream its requests; remove it",
    "n": "the judge reads one answer per request (several choices would be billed and ignored); remove it",
    "best_of": "the judge reads one answer per request; remove it",
}

#: An HTTP authorization value (``Bearer <token>``, ``Basic <user:password>``).
_AUTH_SCHEME = re.compile(r"\b(?:Bearer|Basic|Token)\s+\S{6,}", re.I)
#: Names of special tokens (``pad_token``, ...) whose string values are token texts, not credentials.
_SPECIAL_TOKEN_NAME = re.compile(r"(?:pad|eos|bos|unk|sep|cls|mask|additional_special)_tokens?", re.I)


def _credential_items(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted path, why)`` of every item of a nested mapping/list that carries a credential: a string (or
    bytes) value under a name that reads like one (`credential_param`; special-token names excepted), HTTP
    ``headers``, or any string shaped like one (`looks_like_credential`, a 40-digit commit hash excepted; an
    authorization value such as ``Bearer ...``)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if (isinstance(item, (str, bytes)) and item and credential_param(str(key))
                    and not _SPECIAL_TOKEN_NAME.fullmatch(str(key))):
                yield where, "name"
            elif str(key).lower() in ("headers", "extra_headers", "default_headers") and item:
                yield where, "headers"
            else:
                yield from _credential_items(item, where)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _credential_items(item, f"{path}[{index}]")
    elif isinstance(value, str) and (looks_like_credential(value, hex_keys=False) or _AUTH_SCHEME.search(value)):
        yield path, "value"


def options_credential_problem(args: Any) -> str | None:
    """A message naming the dict option (``model_init_kwargs``, ``generation_kwargs``, ...) of ``args`` that holds a
    credential at any depth (`_credential_items`), or None. The config is pickled into every checkpoint's
    ``training_args.bin`` and listed in the model card, as ``hub_token`` would be; the value is never shown.
    ``judge_extra_kwargs`` is checked by `extra_kwargs_problem`. A dict option still given as a JSON string (the
    command line, before `transformers.TrainingArguments` parses it) is parsed first."""
    import dataclasses
    import json

    for field in dataclasses.fields(args) if dataclasses.is_dataclass(args) else ():
        if field.name == "judge_extra_kwargs":
            continue
        value = getattr(args, field.name, None)
        if isinstance(value, str) and value.lstrip().startswith("{"):
            try:
                value = json.loads(value)
            except ValueError:
                continue
        if not isinstance(value, Mapping):
            continue
        for path, _ in _credential_items(value):
            return (f"{field.name} holds a credential ({field.name}.{path}): it would be saved in clear in "
                    "training_args.bin of every checkpoint and in the model card; log in with `hf auth login` or set "
                    "HF_TOKEN (or the provider's variable) in the environment instead; the value is not shown")
    return None


def extra_kwargs_problem(extra: Any) -> str | None:
    """What is wrong with ``judge_extra_kwargs`` (further arguments of ``litellm.acompletion``), or None.

    It must be a mapping with string keys; no key may be an argument the judge sets from a field of its own
    (``temperature``: use ``judge_temperature``, ...) or cannot work with (``stream``, ``n``: one whole answer per
    request), or carry a credential (``api_key``, ``headers``, ``extra_headers``, any name such as ``*_token``,
    `credential_param`) at any depth (``extra_body.api_key``), and no value, however deep, may look like one
    (`looks_like_credential`). The value is never shown.
    """
    if extra is None:
        return None
    if not isinstance(extra, Mapping) or not all(isinstance(k, str) for k in extra):
        return f"judge_extra_kwargs must be a mapping of litellm argument names to values, got {type(extra).__name__}"
    for name in extra:
        if name in _UNSUPPORTED_ARGUMENTS:
            return f"judge_extra_kwargs must not set {name!r}: {_UNSUPPORTED_ARGUMENTS[name]}"
        if name in _JUDGE_OWN_ARGUMENTS:
            field = _JUDGE_OWN_ARGUMENTS[name]
            return (f"judge_extra_kwargs must not set {name!r}: the judge sets it"
                    + (f" from {field}" if field else ""))
        if name in ("headers", "extra_headers") or credential_param(name):
            return (f"judge_extra_kwargs must not carry credentials (key {name!r}); put the key in an environment "
                    "variable and give its NAME in judge_api_key_env")
    nested = next((path for path, why in _credential_items(extra) if "." in path and why != "value"), None)
    if nested is not None:
        return (f"judge_extra_kwargs must not carry credentials (key {nested!r}); put the key in an environment "
                "variable and give its NAME in judge_api_key_env")
    if any(looks_like_credential(text) or _AUTH_SCHEME.search(text) for text in _strings(extra)):
        return ("judge_extra_kwargs looks like it contains a credential; put the key in an environment variable and "
                "give its NAME in judge_api_key_env; the value is not shown")
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
    if isinstance(api_key_env, str):
        api_key_env = api_key_env.strip()  # blanks around the name are no part of it (the judge strips them)
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
