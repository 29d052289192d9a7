"""Offline NLP helpers shared by the rule verifiers: tokens, stop words, syllables, emoji, verbs, scripts.

Every helper works without a network download; the data each one needs ships inside an installed
package or inside this module:

- words and tokens: `words` (whitespace split after dropping ASCII punctuation, as IFBench's checkers do),
  `word_tokenize` (NLTK's Treebank word tokenizer applied to the sentences of
  `hir_trl.verifiers.text.split_sentences`: exactly ``nltk.word_tokenize``, as NLTK's Punkt is set up offline);
- stop words: `is_stop_word` / `count_stop_words` use NLTK's English stop-word list, embedded below
  (``nltk_data/corpora/stopwords/english``; NLTK's corpus cannot be downloaded here);
- syllables: `syllable_count` uses ``syllapy`` (MIT; a bundled table of known words plus a vowel-group
  heuristic), the library IFBench itself uses;
- emoji: `is_emoji`, `ends_with_emoji`, `starts_with_emoji` use the ``emoji`` package's bundled Unicode
  emoji data;
- part of speech: `pos_tags` / `starts_with_verb` use TextBlob's bundled Pattern tagger (a Brill-style
  lexicon plus contextual rules, Penn Treebank tags; no NLTK data needed). IFBench uses NLTK's averaged
  perceptron tagger, whose data no pip package ships, so a verdict can differ on ambiguous words;
- scripts: `is_japanese` tests for Hiragana, Katakana or CJK ideographs (no library).
"""

from __future__ import annotations

import functools
import string
import unicodedata
from collections.abc import Iterable, Sequence

import regex

from .text import split_sentences

#: ASCII punctuation, ``string.punctuation`` (what IFBench strips from words).
PUNCTUATION = string.punctuation
_STRIP_PUNCTUATION = str.maketrans("", "", PUNCTUATION)

#: NLTK's English stop-word list (``nltk_data/corpora/stopwords/english``, 179 entries). Newer releases of
#: that corpus add 19 apostrophe contractions ("he'd", "i'm", ...); they never match a ``\w+`` token, so they
#: change no count made by `count_stop_words`.
STOP_WORDS: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he
    him his himself she she's her hers herself it it's its itself they them their theirs themselves what
    which who whom this that that'll these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about against between
    into through during before after above below to from up down in out on off over under again further
    then once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t can will just don don't should should've now d ll m o re ve y ain
    aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't
    ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't
    won won't wouldn wouldn't
    """.split()
)

#: The seven English coordinating conjunctions (FANBOYS).
COORDINATING_CONJUNCTIONS: frozenset[str] = frozenset({"for", "and", "nor", "but", "or", "yet", "so"})

#: English pronouns as IFBench's ``count:pronouns`` counts them (personal, possessive, reflexive,
#: demonstrative, interrogative, relative and indefinite).
PRONOUNS: frozenset[str] = frozenset(
    """
    i me we us you he him she her it they them
    my mine our ours your yours his hers its their theirs
    myself ourselves yourself yourselves himself herself itself themselves
    this that these those
    who whom whose which what whoever whomever whatever whichever
    anybody anyone anything everybody everyone everything nobody nothing somebody someone something
    each either neither both all some any none
    """.split()
)

_WORD_RE = regex.compile(r"\w+")
_JAPANESE_RE = regex.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


# --------------------------------------------------------------------------------------------------
# Words and tokens
# --------------------------------------------------------------------------------------------------


def strip_punctuation(text: str) -> str:
    """``text`` with every ASCII punctuation character (``string.punctuation``) removed."""
    return text.translate(_STRIP_PUNCTUATION)


def strip_unicode_punctuation(text: str) -> str:
    """``text`` with every ASCII punctuation character and every Unicode punctuation character (``\\p{P}``) removed."""
    return regex.sub(r"\p{P}", "", strip_punctuation(text))


def words(text: str, lower: bool = False) -> list[str]:
    """Whitespace-separated words of ``text`` after removing ASCII punctuation (optionally lower-cased).

    This is IFBench's word splitting (``text.translate(...punctuation...).split()``): ``"don't stop!"`` gives
    ``["dont", "stop"]``, and a token made only of punctuation disappears.
    """
    if lower:
        text = text.lower()
    return strip_punctuation(text).split()


def word_tokens(text: str) -> list[str]:
    """The ``\\w+`` tokens of ``text`` (IFEval's ``RegexpTokenizer(r"\\w+")``, as `text.count_words` counts)."""
    return _WORD_RE.findall(text)


def strip_word(word: str) -> str:
    """``word`` without leading and trailing ASCII punctuation or spaces."""
    return word.strip(PUNCTUATION + " ")


@functools.lru_cache(maxsize=1)
def _treebank_tokenizer():
    """NLTK's Treebank word tokenizer, built once (the one cached tokenizer every family uses)."""
    from nltk.tokenize import NLTKWordTokenizer  # needs no NLTK data

    return NLTKWordTokenizer()


def treebank_tokens(text: str) -> list[str]:
    """NLTK's Treebank word tokens of ``text``, without a sentence split (what ``nltk.word_tokenize`` applies to
    each sentence)."""
    return _treebank_tokenizer().tokenize(text)


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize``: Treebank word tokens of each `split_sentences` sentence (Punkt unless the fallback is selected)."""
    return [token for sentence in split_sentences(text) for token in treebank_tokens(sentence)]


def alnum_tokens(text: str) -> list[str]:
    """`word_tokenize` tokens that contain at least one letter or digit (standalone punctuation dropped)."""
    return [token for token in word_tokenize(text) if any(char.isalnum() for char in token)]


def ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    """The set of ``n``-grams (tuples of ``n`` consecutive tokens) of ``tokens``."""
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def strip_accents(text: str) -> str:
    """ASCII-only ``text``: NFKD decomposition with non-ASCII code points dropped (``"São Tomé"`` -> ``"Sao Tome"``)."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


# --------------------------------------------------------------------------------------------------
# Stop words, syllables, numbers
# --------------------------------------------------------------------------------------------------


def is_stop_word(word: str) -> bool:
    """True when ``word`` (any case) is in NLTK's English stop-word list `STOP_WORDS`."""
    return word.lower() in STOP_WORDS


def count_stop_words(text: str) -> int:
    """Number of ``\\w+`` tokens of ``text`` that are stop words (IFBench's ``count_stopwords``)."""
    return sum(1 for token in word_tokens(text) if is_stop_word(token))


@functools.lru_cache(maxsize=1)
def _syllapy():
    import syllapy

    return syllapy


def syllable_count(word: str) -> int:
    """Number of syllables of ``word`` according to ``syllapy`` (0 for an empty word or one with digits)."""
    return int(_syllapy().count(word))


def is_prime(number: int) -> bool:
    """True when ``number`` is a prime number."""
    if number < 2:
        return False
    return all(number % divisor for divisor in range(2, int(number**0.5) + 1))


def ordinal_suffix(number: int) -> str:
    """English ordinal suffix of ``number``: ``"st"``, ``"nd"``, ``"rd"`` or ``"th"`` (11, 12, 13 take ``"th"``)."""
    if number % 100 in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")


# --------------------------------------------------------------------------------------------------
# Emoji and scripts
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _emoji():
    import emoji

    return emoji


def is_emoji(text: str) -> bool:
    """True when ``text`` is exactly one emoji (a single code point or a full emoji sequence)."""
    return bool(text) and bool(_emoji().is_emoji(text))


_JUNK = r"[\p{P}\s\ufe0e\ufe0f" + regex.escape(string.punctuation) + "]"
_EDGE_JUNK = regex.compile(rf"^{_JUNK}+|{_JUNK}+$")


def _trim(text: str) -> str:
    # Drop leading/trailing punctuation (ASCII or Unicode), whitespace and emoji presentation selectors.
    return _EDGE_JUNK.sub("", text)


def ends_with_emoji(text: str) -> bool:
    """True when ``text``, ignoring trailing punctuation (ASCII or Unicode) and whitespace, ends with an emoji."""
    stripped = _trim(text)
    found = _emoji().emoji_list(stripped)
    if found and found[-1]["match_end"] == len(stripped):
        return True
    # A lone emoji code point not listed as a full sequence (e.g. a skin-tone modifier left alone).
    return bool(stripped) and is_emoji(stripped[-1])


def starts_with_emoji(text: str) -> bool:
    """True when ``text``, ignoring leading punctuation (ASCII or Unicode) and whitespace, starts with an emoji."""
    stripped = _trim(text)
    found = _emoji().emoji_list(stripped)
    if found and found[0]["match_start"] == 0:
        return True
    return bool(stripped) and is_emoji(stripped[0])


def is_japanese(text: str) -> bool:
    """True when ``text`` contains a Hiragana, Katakana or CJK ideograph character (U+3040-30FF, U+4E00-9FFF)."""
    return bool(_JAPANESE_RE.search(text))


# --------------------------------------------------------------------------------------------------
# Part of speech
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _pattern_parser():
    from textblob.en import parser  # Pattern's English tagger; its lexicon ships inside textblob

    return parser


def pos_tags(tokens: Iterable[str]) -> list[tuple[str, str]]:
    """Penn Treebank part-of-speech tags of ``tokens`` from TextBlob's bundled Pattern tagger (offline)."""
    tokens = [token for token in tokens if token]
    if not tokens:
        return []
    return [(word, tag) for word, tag in _pattern_parser().find_tags(tokens)]


def starts_with_verb(text: str) -> bool:
    """True when the first word of ``text`` is tagged as a verb (a Penn tag starting ``VB``).

    Leading tokens without a letter or digit (Markdown ``**``/``#``, quotes, bullets) are skipped. The first
    sentence's first 30 `word_tokenize` tokens give the tagger its context. See `pos_tags` for the tagger.
    """
    sentences = split_sentences(text)
    if not sentences:
        return False
    tokens = treebank_tokens(sentences[0])
    tokens = list(dropwhile_no_alnum(tokens))[:30]
    tags = pos_tags(tokens)
    return bool(tags) and tags[0][1].startswith("VB")


def dropwhile_no_alnum(tokens: Iterable[str]) -> Iterable[str]:
    """``tokens`` from the first one that contains a letter or digit."""
    started = False
    for token in tokens:
        started = started or any(char.isalnum() for char in token)
        if started:
            yield token


__all__ = [
    "COORDINATING_CONJUNCTIONS",
    "PRONOUNS",
    "PUNCTUATION",
    "STOP_WORDS",
    "alnum_tokens",
    "count_stop_words",
    "dropwhile_no_alnum",
    "ends_with_emoji",
    "is_emoji",
    "is_japanese",
    "is_prime",
    "is_stop_word",
    "ngrams",
    "ordinal_suffix",
    "pos_tags",
    "starts_with_emoji",
    "starts_with_verb",
    "strip_accents",
    "strip_punctuation",
    "strip_unicode_punctuation",
    "strip_word",
    "syllable_count",
    "word_tokenize",
    "word_tokens",
    "words",
]
