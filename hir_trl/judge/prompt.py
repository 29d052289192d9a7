"""The paper's soft-constraint judge prompt, and how a YES/NO answer (or its first token's log-probs) is read.

Pure functions, no I/O: `format_judge_prompt` renders the prompt of the paper's Appendix "Evaluation Prompt";
`parse_yes_no` reads an answer text strictly; `verdict_from_logprobs` decides by P(YES) vs P(NO).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

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

_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>", re.S | re.I)
# Leading decoration a model may put before its answer: whitespace, quotes, brackets, markdown.
_LEADING_NOISE = re.compile(r"^[\s\"'`*_#>\[\]{}()~.:-]+")
# YES/NO as a whole word: followed by the end, whitespace or punctuation (not a letter, digit or hyphen).
_YES_NO = re.compile(r"(yes|no)(?![\w-])", re.I)


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


class UnusableLogprobError(ValueError):
    """A YES or NO token's log-prob is not a log-probability (NaN, +inf, above 0, missing or not a number): the
    answer has no verdict, and the judge records a failure (never a NO)."""


#: Largest log-prob taken as a probability of 1 (servers round log(1) to a tiny positive number).
_LOGPROB_SLACK = 1e-4


def verdict_from_logprobs(top_logprobs: Iterable[Any]) -> tuple[bool, float] | None:
    """Decide from the first answer token's top log-probs: YES when P(YES) > P(NO).

    Args:
        top_logprobs: the first token's alternatives, objects or dicts with ``token`` and ``logprob``.
            Tokens that read ``yes`` or ``no`` after case folding and stripping spaces, quotes and
            punctuation (``"YES"``, ``" Yes"``, ``"no"``) add their probability to that side (``-inf``:
            probability 0).

    Returns:
        ``(passed, p_yes)`` with p_yes = P(YES) / (P(YES) + P(NO)), or None when neither side appears (or both have
        probability 0).

    Raises:
        UnusableLogprobError: a YES or NO token's log-prob is NaN, +inf, above 0, missing, or not a number.
    """
    mass = {"yes": 0.0, "no": 0.0}
    for item in top_logprobs or ():
        token = item.get("token") if isinstance(item, Mapping) else getattr(item, "token", None)
        logprob = item.get("logprob") if isinstance(item, Mapping) else getattr(item, "logprob", None)
        word = _token_word(token if isinstance(token, str) else "")
        if word is None:
            continue
        if isinstance(logprob, bool) or not isinstance(logprob, (int, float)) or math.isnan(logprob) or (
                logprob > _LOGPROB_SLACK):
            raise UnusableLogprobError(f"the log-prob of the answer token {token!r} is {logprob!r}, not a "
                                       "log-probability (a number <= 0)")
        mass[word] += math.exp(min(logprob, 0.0))
    total = mass["yes"] + mass["no"]
    if total <= 0.0:
        return None
    p_yes = mass["yes"] / total
    return p_yes > 0.5, p_yes
