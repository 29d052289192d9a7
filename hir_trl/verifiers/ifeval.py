"""IFEval rule verifiers: the 25 instruction types of Google's IFEval benchmark.

Semantics follow google-research/instruction_following_eval (Apache-2.0), as shipped in lm-eval 0.4.x:
one `Checker` subclass per instruction id, each building the official description text from its kwargs
and checking a response with the official rule. `check` gives the official *strict* verdict and
`check_loose` the official *loose* one (any of the 8 `loose_variants` passes).

Deliberate differences from the official code:

- A missing or invalid kwarg raises ``ValueError`` naming it (an unexpected one raises ``TypeError``).
  The official code silently picks a RANDOM value instead, which would make a verdict meaningless.
- ``keywords:letter_frequency`` accepts any single non-space character as ``letter`` (the official code
  accepts only ASCII letters and randomises anything else). One real IFEval row asks for ``"#"``
  ("include at least 4 hashtags"); we count ``#`` as the prompt intends.
- Sentence counting uses `hir_trl.verifiers.text.split_sentences`: NLTK's own Punkt with NLTK's English model,
  made available offline (see `hir_trl.verifiers.text`), as the official code's ``nltk.sent_tokenize``; so does
  the sentence step of ``nltk.word_tokenize`` used by ``change_case:capital_word_frequency``. Both match the
  official code exactly (tested against lm-eval); only an explicitly selected fallback splitter differs.
- Words are counted by `hir_trl.verifiers.text.count_words`: ``\\w+`` on the ``regex`` engine, as IFEval's
  ``RegexpTokenizer(r"\\w+")`` runs under nltk >= 3.10 (its ``\\w`` also matches combining marks, so Thai or
  Devanagari words are not split apart).
- Language detection seeds langdetect (``DetectorFactory.seed = 0``) so verdicts are reproducible.
  As in the official code, text langdetect cannot classify counts as followed.

Keyword arguments that the official code uses as regular expressions (``keywords``, ``keyword``,
``forbidden_words``, ``section_spliter``, a custom ``postscript_marker``) are regular expressions here too.
"""

from __future__ import annotations

import collections
import itertools
import json
import re
from typing import Any

from .base import RELATIONS, ArgsChecker, Checker, CountedConstraint, compare
from .base import count_arg as _count
from .base import relation_arg as _relation
from .base import required_arg as _required
from .base import text_arg as _text
from .family import VerifierFamily, loose_variants
from .nlp import word_tokenize
from .text import count_sentences, count_words

FAMILY = "ifeval"

#: ISO 639-1 code -> language name, the languages IFEval's ``language:response_language`` supports.
LANGUAGE_CODES: dict[str, str] = {
    "en": "English",
    "es": "Spanish",
    "pt": "Portuguese",
    "ar": "Arabic",
    "hi": "Hindi",
    "fr": "French",
    "ru": "Russian",
    "de": "German",
    "ja": "Japanese",
    "it": "Italian",
    "bn": "Bengali",
    "uk": "Ukrainian",
    "th": "Thai",
    "ur": "Urdu",
    "ta": "Tamil",
    "te": "Telugu",
    "bg": "Bulgarian",
    "ko": "Korean",
    "pl": "Polish",
    "he": "Hebrew",
    "fa": "Persian",
    "vi": "Vietnamese",
    "ne": "Nepali",
    "sw": "Swahili",
    "kn": "Kannada",
    "mr": "Marathi",
    "gu": "Gujarati",
    "pa": "Punjabi",
    "ml": "Malayalam",
    "fi": "Finnish",
}

#: The answers ``detectable_format:constrained_response`` accepts.
CONSTRAINED_RESPONSE_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


# --------------------------------------------------------------------------------------------------
# Argument validation
# --------------------------------------------------------------------------------------------------


def _words(checker: IFEvalChecker, kwargs: dict[str, Any], name: str) -> list[str]:
    value = _required(checker, kwargs, name)
    if (
        isinstance(value, str)
        or not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(word, str) and word for word in value)
    ):
        raise ValueError(
            f"{checker.instruction_id}: argument {name!r} must be a non-empty list of non-empty strings, got {value!r}"
        )
    return list(value)


def paragraph_count(response: str, separator: str) -> int | None:
    """IFEval's paragraph count: split on the regex ``separator``; empty first/last parts are ignored, an empty
    middle part makes the layout invalid (``None``)."""
    parts = re.split(separator, response)
    count = len(parts)
    for index, part in enumerate(parts):
        if not part.strip():
            if index in (0, len(parts) - 1):
                count -= 1
            else:
                return None
    return count


def _detect_language(text: str) -> str | None:
    """langdetect's ISO 639-1 code for ``text`` (seeded), or None when it cannot classify the text."""
    import langdetect
    from langdetect.lang_detect_exception import LangDetectException

    langdetect.DetectorFactory.seed = 0
    try:
        return langdetect.detect(text)
    except LangDetectException:
        return None


# --------------------------------------------------------------------------------------------------
# Checkers
# --------------------------------------------------------------------------------------------------


class IFEvalChecker(ArgsChecker):
    """Base of the IFEval checkers: rejects keyword arguments the instruction does not take."""


class KeywordExistence(IFEvalChecker):
    """``keywords:existence``: every keyword occurs (case-insensitive regex search).

    Kwargs: ``keywords`` (non-empty list of strings). Raises ValueError when it is missing or bad.
    """

    instruction_id = "keywords:existence"
    arg_names = ("keywords",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keywords = sorted(_words(self, kwargs, "keywords"))

    def build_description(self) -> str:
        return f"Include keywords {self.keywords} in the response."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return all(re.search(keyword, response, flags=re.IGNORECASE) for keyword in self.keywords)


class KeywordFrequency(CountedConstraint, IFEvalChecker):
    """``keywords:frequency``: the keyword occurs ``less than`` / ``at least`` ``frequency`` times.

    Occurrences are case-insensitive regex matches (substrings count). Kwargs: ``keyword`` (string),
    ``frequency`` (int >= 0), ``relation``. Raises ValueError when one is missing or bad.
    """

    instruction_id = "keywords:frequency"
    arg_names = ("keyword", "frequency", "relation")
    count_arg, relation_arg = "frequency", "relation"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keyword = _text(self, kwargs, "keyword")
        self.frequency = _count(self, kwargs, "frequency")
        self.relation = _relation(self, kwargs, "relation")

    def build_description(self) -> str:
        return f"In your response, the word {self.keyword} should appear {self.relation} {self.frequency} times."

    def count(self, response: str) -> int:
        return len(re.findall(self.keyword, response, flags=re.IGNORECASE))

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return compare(self.count(response), self.relation, self.frequency)


class ForbiddenWords(IFEvalChecker):
    """``keywords:forbidden_words``: no forbidden word occurs as a whole word (case-insensitive).

    Kwargs: ``forbidden_words`` (non-empty list of strings). Raises ValueError when it is missing or bad.
    """

    instruction_id = "keywords:forbidden_words"
    arg_names = ("forbidden_words",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.forbidden_words = sorted(set(_words(self, kwargs, "forbidden_words")))

    def build_description(self) -> str:
        return f"Do not include keywords {self.forbidden_words} in the response."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return not any(re.search(rf"\b{word}\b", response, flags=re.IGNORECASE) for word in self.forbidden_words)


class LetterFrequency(CountedConstraint, IFEvalChecker):
    """``keywords:letter_frequency``: a character occurs ``less than`` / ``at least`` N times (case-insensitive).

    Kwargs: ``letter`` (one non-space character; IFEval uses ASCII letters), ``let_frequency`` (int >= 0),
    ``let_relation``. Raises ValueError when one is missing or bad.
    """

    instruction_id = "keywords:letter_frequency"
    arg_names = ("letter", "let_frequency", "let_relation")
    count_arg, relation_arg = "let_frequency", "let_relation"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        letter = _text(self, kwargs, "letter")
        if len(letter) != 1:
            raise ValueError(f"{self.instruction_id}: argument 'letter' must be a single character, got {letter!r}")
        self.letter = letter.lower()
        self.frequency = _count(self, kwargs, "let_frequency")
        self.relation = _relation(self, kwargs, "let_relation")

    def build_description(self) -> str:
        return f"In your response, the letter {self.letter} should appear {self.relation} {self.frequency} times."

    def count(self, response: str) -> int:
        return collections.Counter(response.lower())[self.letter]

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return compare(self.count(response), self.relation, self.frequency)


class ResponseLanguage(IFEvalChecker):
    """``language:response_language``: langdetect finds the response in the given language.

    Text langdetect cannot classify counts as followed (official behaviour). Kwargs: ``language``
    (an ISO 639-1 code in `LANGUAGE_CODES`). Raises ValueError when it is missing or unsupported.
    """

    instruction_id = "language:response_language"
    arg_names = ("language",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        language = _required(self, kwargs, "language")
        if not isinstance(language, str) or language not in LANGUAGE_CODES:
            raise ValueError(
                f"{self.instruction_id}: argument 'language' must be one of {sorted(LANGUAGE_CODES)}, got {language!r}"
            )
        self.language = language

    def build_description(self) -> str:
        return (
            f"Your ENTIRE response should be in {LANGUAGE_CODES[self.language]} language, "
            "no other language is allowed."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        detected = _detect_language(response)
        return detected is None or detected == self.language


class NumberOfSentences(CountedConstraint, IFEvalChecker):
    """``length_constraints:number_sentences``: ``less than`` / ``at least`` N sentences.

    Sentences are counted by `hir_trl.verifiers.text.count_sentences`. Kwargs: ``num_sentences``
    (int >= 0), ``relation``. Raises ValueError when one is missing or bad.
    """

    instruction_id = "length_constraints:number_sentences"
    arg_names = ("num_sentences", "relation")
    count_arg, relation_arg = "num_sentences", "relation"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_sentences = _count(self, kwargs, "num_sentences")
        self.relation = _relation(self, kwargs, "relation")

    def build_description(self) -> str:
        return f"Your response should contain {self.relation} {self.num_sentences} sentences."

    def count(self, response: str) -> int:
        return count_sentences(response)

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return compare(self.count(response), self.relation, self.num_sentences)


class NumberOfParagraphs(IFEvalChecker):
    """``length_constraints:number_paragraphs``: exactly N paragraphs separated by ``***`` dividers.

    Empty leading/trailing parts are ignored; an empty part in the middle fails. Kwargs:
    ``num_paragraphs`` (int >= 0). Raises ValueError when it is missing or bad.
    """

    instruction_id = "length_constraints:number_paragraphs"
    arg_names = ("num_paragraphs",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_paragraphs = _count(self, kwargs, "num_paragraphs")

    def build_description(self) -> str:
        return (
            f"There should be {self.num_paragraphs} paragraphs. "
            "Paragraphs are separated with the markdown divider: ***"
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return paragraph_count(response, r"\s?\*\*\*\s?") == self.num_paragraphs


class NumberOfWords(CountedConstraint, IFEvalChecker):
    """``length_constraints:number_words``: ``less than`` / ``at least`` N words (``\\w+`` tokens).

    Kwargs: ``num_words`` (int >= 0), ``relation``. Raises ValueError when one is missing or bad.
    """

    instruction_id = "length_constraints:number_words"
    arg_names = ("num_words", "relation")
    count_arg, relation_arg = "num_words", "relation"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_words = _count(self, kwargs, "num_words")
        self.relation = _relation(self, kwargs, "relation")

    def build_description(self) -> str:
        return f"Answer with {self.relation} {self.num_words} words."

    def count(self, response: str) -> int:
        return count_words(response)

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return compare(self.count(response), self.relation, self.num_words)


class NthParagraphFirstWord(IFEvalChecker):
    """``length_constraints:nth_paragraph_first_word``: N ``\\n\\n``-separated paragraphs, the nth starting with a word.

    The first word is compared case-insensitively, up to its first ``. , ? ! ' "``. Kwargs:
    ``num_paragraphs`` (int >= 1), ``nth_paragraph`` (1 <= n <= num_paragraphs), ``first_word``
    (string). Raises ValueError when one is missing or bad.
    """

    instruction_id = "length_constraints:nth_paragraph_first_word"
    arg_names = ("num_paragraphs", "nth_paragraph", "first_word")
    _PUNCTUATION = frozenset(".,?!'\"")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_paragraphs = _count(self, kwargs, "num_paragraphs", minimum=1)
        self.nth_paragraph = _count(self, kwargs, "nth_paragraph", minimum=1)
        if self.nth_paragraph > self.num_paragraphs:
            raise ValueError(
                f"{self.instruction_id}: argument 'nth_paragraph' ({self.nth_paragraph}) must not exceed "
                f"num_paragraphs ({self.num_paragraphs})"
            )
        self.first_word = _text(self, kwargs, "first_word", strip=False).lower()

    def build_description(self) -> str:
        return (
            f"There should be {self.num_paragraphs} paragraphs. "
            "Paragraphs and only paragraphs are separated with each other by two "
            "new lines as if it was '\\n\\n' in python. "
            f"Paragraph {self.nth_paragraph} must start with word {self.first_word}."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        paragraphs = re.split(r"\n\n", response)
        count = sum(1 for paragraph in paragraphs if paragraph.strip())
        if self.nth_paragraph > count:
            return False
        # Official quirk: the index counts empty paragraphs too, while `count` does not.
        paragraph = paragraphs[self.nth_paragraph - 1].strip()
        if not paragraph:
            return False
        word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
        first_word = "".join(char.lower() for char in itertools.takewhile(lambda c: c not in self._PUNCTUATION, word))
        return count == self.num_paragraphs and first_word == self.first_word


class NumberOfPlaceholders(CountedConstraint, IFEvalChecker):
    """``detectable_content:number_placeholders``: at least N ``[...]`` placeholders.

    Kwargs: ``num_placeholders`` (int >= 0). Raises ValueError when it is missing or bad.
    """

    instruction_id = "detectable_content:number_placeholders"
    arg_names = ("num_placeholders",)
    count_arg = "num_placeholders"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_placeholders = _count(self, kwargs, "num_placeholders")

    def build_description(self) -> str:
        return (
            f"The response must contain at least {self.num_placeholders} placeholders "
            "represented by square brackets, such as [address]."
        )

    def count(self, response: str) -> int:
        return len(re.findall(r"\[.*?\]", response))

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return self.count(response) >= self.num_placeholders


class Postscript(IFEvalChecker):
    """``detectable_content:postscript``: some line contains a postscript starting with the marker.

    ``P.S.`` and ``P.P.S`` tolerate spaces (``p. s.``); any other marker is a case-insensitive regex.
    Kwargs: ``postscript_marker`` (string). Raises ValueError when it is missing or bad.
    """

    instruction_id = "detectable_content:postscript"
    arg_names = ("postscript_marker",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.postscript_marker = _text(self, kwargs, "postscript_marker")

    def build_description(self) -> str:
        return (
            f"At the end of your response, please explicitly add a postscript starting with {self.postscript_marker}"
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        if self.postscript_marker == "P.P.S":
            pattern = r"\s*p\.\s?p\.\s?s.*$"
        elif self.postscript_marker == "P.S.":
            pattern = r"\s*p\.\s?s\..*$"
        else:
            pattern = r"\s*" + self.postscript_marker.lower() + r".*$"
        return bool(re.findall(pattern, response.lower(), flags=re.MULTILINE))


class NumberOfBullets(CountedConstraint, IFEvalChecker):
    """``detectable_format:number_bullet_lists``: exactly N markdown bullet lines (``* item`` or ``- item``).

    Kwargs: ``num_bullets`` (int >= 0). Raises ValueError when it is missing or bad.
    """

    instruction_id = "detectable_format:number_bullet_lists"
    arg_names = ("num_bullets",)
    count_arg, fixed_relation = "num_bullets", "exactly"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_bullets = _count(self, kwargs, "num_bullets")

    def build_description(self) -> str:
        return (
            f"Your answer must contain exactly {self.num_bullets} bullet points. "
            "Use the markdown bullet points such as:\n"
            "* This is point 1. \n"
            "* This is point 2"
        )

    def count(self, response: str) -> int:
        star_bullets = re.findall(r"^\s*\*[^\*].*$", response, flags=re.MULTILINE)
        dash_bullets = re.findall(r"^\s*-.*$", response, flags=re.MULTILINE)
        return len(star_bullets) + len(dash_bullets)

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return self.count(response) == self.num_bullets


class ConstrainedResponse(IFEvalChecker):
    """``detectable_format:constrained_response``: the response contains one of `CONSTRAINED_RESPONSE_OPTIONS`.

    Takes no kwargs.
    """

    instruction_id = "detectable_format:constrained_response"

    def build_description(self) -> str:
        return f"Answer with one of the following options: {CONSTRAINED_RESPONSE_OPTIONS}"

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        response = response.strip()
        return any(option in response for option in CONSTRAINED_RESPONSE_OPTIONS)


class HighlightedSections(CountedConstraint, IFEvalChecker):
    """``detectable_format:number_highlighted_sections``: at least N non-empty ``*highlighted*`` spans.

    ``*x*`` and ``**x**`` spans on one line both count (official counting). Kwargs: ``num_highlights``
    (int >= 0). Raises ValueError when it is missing or bad.
    """

    instruction_id = "detectable_format:number_highlighted_sections"
    arg_names = ("num_highlights",)
    count_arg = "num_highlights"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_highlights = _count(self, kwargs, "num_highlights")

    def build_description(self) -> str:
        return (
            f"Highlight at least {self.num_highlights} sections in your answer with "
            "markdown, i.e. *highlighted section*."
        )

    def count(self, response: str) -> int:
        single = re.findall(r"\*[^\n\*]*\*", response)
        double = re.findall(r"\*\*[^\n\*]*\*\*", response)
        count = sum(1 for span in single if span.strip("*").strip())
        return count + sum(1 for span in double if span.removeprefix("**").removesuffix("**").strip())

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return self.count(response) >= self.num_highlights


class MultipleSections(IFEvalChecker):
    """``detectable_format:multiple_sections``: at least N sections, each marked ``<splitter> <number>``.

    Kwargs: ``section_spliter`` (string, e.g. ``"Section"``; a regex, case-sensitive), ``num_sections``
    (int >= 0). Raises ValueError when one is missing or bad.
    """

    instruction_id = "detectable_format:multiple_sections"
    arg_names = ("section_spliter", "num_sections")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.section_spliter = _text(self, kwargs, "section_spliter")
        self.num_sections = _count(self, kwargs, "num_sections")

    def build_description(self) -> str:
        spliter = self.section_spliter
        return (
            f"Your response must have {self.num_sections} sections. Mark the beginning "
            f"of each section with {spliter} X, such as:\n"
            f"{spliter} 1\n"
            "[content of section 1]\n"
            f"{spliter} 2\n"
            "[content of section 2]"
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        sections = re.split(r"\s?" + self.section_spliter + r"\s?\d+\s?", response)
        return len(sections) - 1 >= self.num_sections


class JsonFormat(IFEvalChecker):
    """``detectable_format:json_format``: the whole response parses as JSON, optionally in ``` fences.

    Takes no kwargs.
    """

    instruction_id = "detectable_format:json_format"

    def build_description(self) -> str:
        return "Entire output should be wrapped in JSON format. You can use markdown ticks such as ```."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        value = (
            response.strip()
            .removeprefix("```json")
            .removeprefix("```Json")
            .removeprefix("```JSON")
            .removeprefix("```")
            .removesuffix("```")
            .strip()
        )
        try:
            json.loads(value)
        except ValueError:
            return False
        return True


class Title(IFEvalChecker):
    """``detectable_format:title``: a non-empty title in double angular brackets, ``<<title>>``, on one line.

    Takes no kwargs.
    """

    instruction_id = "detectable_format:title"

    def build_description(self) -> str:
        return "Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        titles = re.findall(r"<<[^\n]+>>", response)
        return any(title.lstrip("<").rstrip(">").strip() for title in titles)


class TwoResponses(IFEvalChecker):
    """``combination:two_responses``: exactly two different non-empty responses separated by ``******``.

    Takes no kwargs.
    """

    instruction_id = "combination:two_responses"

    def build_description(self) -> str:
        return (
            "Give two different responses. Responses and only responses should"
            " be separated by 6 asterisk symbols: ******."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        parts = response.split("******")
        responses = []
        for index, part in enumerate(parts):
            if part.strip():
                responses.append(part.strip())
            elif index not in (0, len(parts) - 1):
                return False
        return len(responses) == 2 and responses[0] != responses[1]


class RepeatPrompt(IFEvalChecker):
    """``combination:repeat_prompt``: the response starts with the request, repeated (case-insensitive).

    Kwargs: ``prompt_to_repeat`` (string). It may be left out here, and then the ``prompt`` given to
    `check_following` is used; when both are missing `check_following` raises ValueError. A given
    ``prompt_to_repeat`` that is not a non-empty string raises ValueError.
    """

    instruction_id = "combination:repeat_prompt"
    arg_names = ("prompt_to_repeat",)
    needs_prompt = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_to_repeat: str | None = None
        if kwargs.get("prompt_to_repeat") is not None:
            self.prompt_to_repeat = _text(self, kwargs, "prompt_to_repeat", strip=False)

    def build_description(self) -> str:
        return (
            "First repeat the request word for word without change,"
            " then give your answer (1. do not say any words or characters"
            " before repeating the request; 2. the request you need to repeat"
            " does not include this sentence)"
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        request = self.prompt_to_repeat if self.prompt_to_repeat is not None else prompt
        if not request:
            raise ValueError(f"{self.instruction_id}: needs argument 'prompt_to_repeat' or a prompt")
        return response.strip().lower().startswith(request.strip().lower())


class EndPhrase(IFEvalChecker):
    """``startend:end_checker``: the response ends with the phrase (case-insensitive; outer quotes ignored).

    Kwargs: ``end_phrase`` (string). Raises ValueError when it is missing or bad.
    """

    instruction_id = "startend:end_checker"
    arg_names = ("end_phrase",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.end_phrase = _text(self, kwargs, "end_phrase")

    def build_description(self) -> str:
        return (
            f"Finish your response with this exact phrase {self.end_phrase}. No other words should follow this phrase."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return response.strip().strip('"').lower().endswith(self.end_phrase.lower())


class CapitalWordFrequency(CountedConstraint, IFEvalChecker):
    """``change_case:capital_word_frequency``: ``less than`` / ``at least`` N all-capital words.

    Words are ``nltk.word_tokenize`` tokens (a hyphenated word is one token). Kwargs:
    ``capital_frequency`` (int >= 0), ``capital_relation``. Raises ValueError when one is missing or bad.
    """

    instruction_id = "change_case:capital_word_frequency"
    arg_names = ("capital_frequency", "capital_relation")
    count_arg, relation_arg = "capital_frequency", "capital_relation"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.frequency = _count(self, kwargs, "capital_frequency")
        self.relation = _relation(self, kwargs, "capital_relation")

    def build_description(self) -> str:
        return (
            f"In your response, words with all capital letters should appear {self.relation} {self.frequency} times."
        )

    def count(self, response: str) -> int:
        return sum(1 for word in word_tokenize(response) if word.isupper())

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return compare(self.count(response), self.relation, self.frequency)


class EnglishCapital(IFEvalChecker):
    """``change_case:english_capital``: all letters upper-case and langdetect finds English.

    Text langdetect cannot classify passes once it is upper-case. Takes no kwargs.
    """

    instruction_id = "change_case:english_capital"

    def build_description(self) -> str:
        return "Your entire response should be in English, and in all capital letters."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        if not response.isupper():
            return False
        detected = _detect_language(response)
        return detected is None or detected == "en"


class EnglishLowercase(IFEvalChecker):
    """``change_case:english_lowercase``: all letters lower-case and langdetect finds English.

    Text langdetect cannot classify passes once it is lower-case. Takes no kwargs.
    """

    instruction_id = "change_case:english_lowercase"

    def build_description(self) -> str:
        return (
            "Your entire response should be in English, and in all lowercase letters. No capital letters are allowed."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        if not response.islower():
            return False
        detected = _detect_language(response)
        return detected is None or detected == "en"


class NoComma(IFEvalChecker):
    """``punctuation:no_comma``: the response contains no ASCII comma. Takes no kwargs."""

    instruction_id = "punctuation:no_comma"

    def build_description(self) -> str:
        return "In your entire response, refrain from the use of any commas."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return "," not in response


class Quotation(IFEvalChecker):
    """``startend:quotation``: the stripped response starts and ends with ``"`` (at least 2 characters).

    Takes no kwargs.
    """

    instruction_id = "startend:quotation"

    def build_description(self) -> str:
        return "Wrap your entire response with double quotation marks."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        value = response.strip()
        return len(value) > 1 and value[0] == '"' and value[-1] == '"'


#: Instruction id -> checker class, all 25 ids of the official IFEval registry.
REGISTRY: dict[str, type[Checker]] = {
    cls.instruction_id: cls
    for cls in (
        KeywordExistence,
        KeywordFrequency,
        ForbiddenWords,
        LetterFrequency,
        ResponseLanguage,
        NumberOfSentences,
        NumberOfParagraphs,
        NumberOfWords,
        NthParagraphFirstWord,
        NumberOfPlaceholders,
        Postscript,
        NumberOfBullets,
        ConstrainedResponse,
        HighlightedSections,
        MultipleSections,
        JsonFormat,
        Title,
        TwoResponses,
        RepeatPrompt,
        EndPhrase,
        CapitalWordFrequency,
        EnglishCapital,
        EnglishLowercase,
        NoComma,
        Quotation,
    )
}


# --------------------------------------------------------------------------------------------------
# Official strict and loose evaluation
# --------------------------------------------------------------------------------------------------


#: IFEval as a verifier family: the official strict and loose evaluation (`hir_trl.verifiers.family`):
#: ``None`` kwargs dropped, ``combination:repeat_prompt`` falls back to the prompt, an all-whitespace response
#: fails, loose = any of the 8 `loose_variants` passes.
VERIFIER = VerifierFamily(name=FAMILY, label="IFEval", registry=REGISTRY, loose_variants=loose_variants)
build_checker = VERIFIER.build_checker
check = VERIFIER.check
check_loose = VERIFIER.check_loose


__all__ = [
    "CONSTRAINED_RESPONSE_OPTIONS",
    "FAMILY",
    "LANGUAGE_CODES",
    "REGISTRY",
    "RELATIONS",
    "VERIFIER",
    "IFEvalChecker",
    "build_checker",
    "check",
    "check_loose",
    "loose_variants",
]
