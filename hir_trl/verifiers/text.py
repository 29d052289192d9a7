"""Offline text utilities shared by the verifier families: word and sentence counting.

Sentence splitting uses NLTK's real Punkt model (``punkt_tab``) when it is installed on the machine,
and a deterministic regular-expression fallback otherwise (no network is ever used: NLTK data cannot be
downloaded here). `sentence_backend()` reports which one runs, and the trainer logs it.
"""

from __future__ import annotations

import functools
import re

import regex

# Common English abbreviations that end in a period but do not end a sentence.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e fig no inc ltd co corp dept est approx u.s u.k a.m p.m jan feb mar apr "
    "jun jul aug sep sept oct nov dec".split()
)
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s+|$)")
# The third-party `regex` engine, as NLTK >= 3.10's RegexpTokenizer uses: its \w also matches combining
# marks, so Devanagari or Thai words are not split apart (lm-eval's IFEval counts the same way).
_WORD = regex.compile(r"\w+")


@functools.lru_cache(maxsize=1)
def _punkt_tokenizer():
    """Return NLTK's Punkt sentence tokenizer when its data is installed, else None (never downloads)."""
    try:
        import nltk

        nltk.data.find("tokenizers/punkt_tab/english/")
    except (ImportError, LookupError):
        return None
    try:
        from nltk.tokenize import PunktTokenizer

        return PunktTokenizer("english")
    except Exception:  # a broken NLTK install: fall back rather than fail verification
        return None


def sentence_backend() -> str:
    """Return ``"punkt"`` when NLTK's real Punkt model is used, else ``"fallback"``."""
    return "punkt" if _punkt_tokenizer() is not None else "fallback"


def _fallback_split(text: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        candidate = text[start:end]
        # Do not split after a known abbreviation or a single initial ("J. Smith").
        last_word = re.findall(r"([\w.]+)[.!?]+[\"')\]]*$", candidate)
        if match.group().startswith(".") and last_word:
            word = last_word[-1].lower().rstrip(".")
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        if candidate.strip():
            sentences.append(candidate.strip())
        start = end
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences with Punkt when available, else the deterministic fallback."""
    tokenizer = _punkt_tokenizer()
    if tokenizer is not None:
        return tokenizer.tokenize(text)
    return _fallback_split(text)


def count_sentences(text: str) -> int:
    """Number of sentences in ``text`` (see `split_sentences`)."""
    return len(split_sentences(text))


def count_words(text: str) -> int:
    """Number of ``\\w+`` tokens, as IFEval's ``nltk.tokenize.RegexpTokenizer(r"\\w+")`` counts words (NLTK >= 3.10)."""
    return len(_WORD.findall(text))
