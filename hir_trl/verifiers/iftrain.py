"""IFTrain: the 29 IF-RLVR *training* constraints released with IFBench (AllenAI), as rule verifiers.

These are the "new constraints" of AllenAI's open-instruct ``IFEvalG`` registry (``instructions.py`` /
``instructions_registry.py``, Apache-2.0), used to build the IF-RLVR training data that HIR-16K's ``type2``
rows come from. They are not IFBench's 58 out-of-distribution *test* ids (`hir_trl.verifiers.ifbench` holds
those and merges this `REGISTRY` into the ``"ifbench"`` family). The package is not installable here: every
class is re-implemented from the published code, with the same instruction ids and kwarg names.

This module defines only `REGISTRY`; `hir_trl.verifiers.ifbench` gives the family's ``check`` /
``check_loose`` with IFEval's strict semantics (``None`` kwargs dropped, an empty response fails).

Conventions (shared with `hir_trl.verifiers.ifeval`):

- A missing or invalid kwarg raises ``ValueError`` naming it; an unexpected one raises ``TypeError``. The
  official code silently picks a RANDOM value instead (and treats ``0`` as missing), which would make a
  verdict meaningless.
- Integer kwargs also accept an integral float (``5.0``): JSON/Arrow round trips with missing values turn
  ints into floats (IFBench's own released test file stores ``"small_n": 5.0``).
- Word kwargs (``first_word``, ``last_word``, ``keyword`` of ``keywords:keyword_specific_position``) also
  accept a one-element list, as the official code does (``first_word[0]``): the official generator produced
  lists there.
- Keyword kwargs the official code uses as regular expressions (``keyword`` of ``word_once`` /
  ``word_count_different_numbers``, ``keyword1`` / ``keyword2``) are regular expressions here too, matched
  case-insensitively, substrings included (IFEval's ``keywords:frequency`` rule).
- "Sentences" are split with IFEval's own regular-expression splitter (``instructions_util.
  split_into_sentences``, reproduced in `split_into_sentences`): deterministic, no NLTK data needed.

Descriptions are the text of the IFBench release (the wording inside the IF-RLVR training prompts), except
for three ids whose release text contradicts the official check; those use open-instruct's later, revised
wording, which states what the check does (see each class): ``keywords:word_once`` (release text: "Include
keyword X in your response." but the check requires exactly one occurrence),
``keywords:word_count_different_numbers`` (release text drops the ``relation`` the check uses) and
``new:copy_span_idx`` (release text says the span includes index ``n_end``; the check slices it out).

Where the official check contradicts its own description or is broken (it returns ``None``, counts a
trailing period as a word, ...), the check follows the description; every such choice is written in the
class docstring under "Interpretation".
"""

from __future__ import annotations

import re
from typing import Any

from .base import Checker, compare
from .base import count_arg as _count
from .base import relation_arg as _relation
from .base import required_arg as _required
from .base import text_arg as _text
from .ifeval import IFEvalChecker, KeywordFrequency, LetterFrequency, paragraph_count
from .nlp import treebank_tokens

# --------------------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------------------

_ALPHABETS = "([A-Za-z])"
_PREFIXES = "(Mr|St|Mrs|Ms|Dr)[.]"
_SUFFIXES = "(Inc|Ltd|Jr|Sr|Co)"
_STARTERS = r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s|That\s|This\s|Wherever)"
_ACRONYMS = "([A-Z][.][A-Z][.](?:[A-Z][.])?)"
_WEBSITES = "[.](com|net|org|io|gov|edu|me)"
_DIGITS = "([0-9])"
_MULTIPLE_DOTS = r"\.{2,}"


def split_into_sentences(text: str) -> list[str]:
    """IFEval's regular-expression sentence splitter (``instructions_util.split_into_sentences``), verbatim.

    Newlines become spaces; sentences end at ``.``, ``?`` or ``!`` except after common titles, initials,
    acronyms, decimals and web domains. Each sentence is stripped; a trailing empty one is dropped.
    """
    text = " " + text + "  "
    text = text.replace("\n", " ")
    text = re.sub(_PREFIXES, "\\1<prd>", text)
    text = re.sub(_WEBSITES, "<prd>\\1", text)
    text = re.sub(_DIGITS + "[.]" + _DIGITS, "\\1<prd>\\2", text)
    text = re.sub(_MULTIPLE_DOTS, lambda match: "<prd>" * len(match.group(0)) + "<stop>", text)
    if "Ph.D" in text:
        text = text.replace("Ph.D.", "Ph<prd>D<prd>")
    text = re.sub(r"\s" + _ALPHABETS + "[.] ", " \\1<prd> ", text)
    text = re.sub(_ACRONYMS + " " + _STARTERS, "\\1<stop> \\2", text)
    text = re.sub(_ALPHABETS + "[.]" + _ALPHABETS + "[.]" + _ALPHABETS + "[.]", "\\1<prd>\\2<prd>\\3<prd>", text)
    text = re.sub(_ALPHABETS + "[.]" + _ALPHABETS + "[.]", "\\1<prd>\\2<prd>", text)
    text = re.sub(" " + _SUFFIXES + "[.] " + _STARTERS, " \\1<stop> \\2", text)
    text = re.sub(" " + _SUFFIXES + "[.]", " \\1<prd>", text)
    text = re.sub(" " + _ALPHABETS + "[.]", " \\1<prd>", text)
    if "”" in text:
        text = text.replace(".”", "”.")
    if '"' in text:
        text = text.replace('."', '".')
    if "!" in text:
        text = text.replace('!"', '"!')
    if "?" in text:
        text = text.replace('?"', '"?')
    text = text.replace(".", ".<stop>")
    text = text.replace("?", "?<stop>")
    text = text.replace("!", "!<stop>")
    text = text.replace("<prd>", ".")
    sentences = [s.strip() for s in text.split("<stop>")]
    if sentences and not sentences[-1]:
        sentences = sentences[:-1]
    return sentences


def _bare(token: str) -> str:
    """A token lower-cased with every character that is neither a word character nor a space removed.

    The official ``last_word`` checks clean the response's word this way (``re.sub(r"[^\\w\\s]", "", w)``).
    """
    return re.sub(r"[^\w\s]", "", token).lower()


def _words(text: str) -> list[str]:
    """Whitespace-separated tokens that contain at least one word character (a bare ``-`` or ``***`` is not a word)."""
    return [token for token in text.split() if re.search(r"\w", token)]


# --------------------------------------------------------------------------------------------------
# Argument validation
# --------------------------------------------------------------------------------------------------


def _word(checker: Checker, kwargs: dict[str, Any], name: str) -> str:
    """A non-empty string, or a one-element list holding one (official generator quirk)."""
    value = _required(checker, kwargs, name)
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{checker.instruction_id}: argument {name!r} must be a non-empty string (or a one-element list of "
            f"one), got {value!r}"
        )
    return value.strip()


# --------------------------------------------------------------------------------------------------
# copy: and new:
# --------------------------------------------------------------------------------------------------


class RepeatPhrase(IFEvalChecker):
    """``copy:repeat_phrase``: the phrase occurs ``small_n`` times, each with exactly one inner word replaced.

    Kwargs: ``phrase`` (string of at least 3 words), ``small_n`` (int >= 1).

    Occurrences are found as in the official code: the phrase's first word, anything on the same line, then
    its last word (case-sensitive, non-overlapping, shortest match). An occurrence must have as many words as
    the phrase.

    Interpretation: the description asks to transform the phrase "each time by replacing only one word in
    the center", so EVERY occurrence must differ from the phrase in exactly one word (the first and last
    words are fixed by the match, so the changed word is an inner one). The official check requires at most
    one difference per occurrence and exactly one in the last occurrence only, returning ``None`` (a
    failure) otherwise. The first/last words are matched as whole words here (the official pattern is an
    unescaped regex without word boundaries, so ``you`` also matched ``your``).
    """

    instruction_id = "copy:repeat_phrase"
    arg_names = ("phrase", "small_n")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.phrase = _text(self, kwargs, "phrase")
        self.words = self.phrase.split()
        if len(self.words) < 3:
            raise ValueError(
                f"{self.instruction_id}: argument 'phrase' needs at least 3 words (a first, a center and a last "
                f"word), got {self.phrase!r}"
            )
        self.small_n = _count(self, kwargs, "small_n", minimum=1)
        first, last = (re.escape(word) for word in (self.words[0], self.words[-1]))
        self._pattern = re.compile(rf"(?<!\w){first} .*? {last}(?!\w)")

    def build_description(self) -> str:
        return (
            f"Repeat the phrase {self.phrase} exactly {self.small_n} times, transforming it slightly each time by "
            "replacing only one word in the center of the phrase."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        found = self._pattern.findall(response)
        if len(found) != self.small_n:
            return False
        for occurrence in found:
            words = occurrence.split()
            if len(words) != len(self.words):
                return False
            if sum(1 for a, b in zip(words, self.words) if a != b) != 1:
                return False
        return True


class _CopyBase(IFEvalChecker):
    arg_names = ("prompt_to_repeat",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_to_repeat = _text(self, kwargs, "prompt_to_repeat", strip=False)


class Copy(_CopyBase):
    """``copy:copy``: the response is the instruction, copied verbatim and nothing else.

    Kwargs: ``prompt_to_repeat`` (string, required, as in the official code: the text to copy is not taken
    from the prompt, because the prompt also holds this instruction sentence, which must not be copied).

    The comparison strips both texts and ignores case (official).
    """

    instruction_id = "copy:copy"

    def build_description(self) -> str:
        return (
            "Copy this instruction verbatim, do not follow the instruction, only copy it into the output "
            "(do not include this instruction sentence!)."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return response.strip().lower() == self.prompt_to_repeat.strip().lower()


class CopySpanIdx(IFEvalChecker):
    """``new:copy_span_idx``: the response is ``prompt_to_repeat[n_start:n_end]`` and nothing else.

    Kwargs: ``prompt_to_repeat`` (string), ``n_start`` (int >= 0), ``n_end`` (int, ``n_start < n_end <=
    len(prompt_to_repeat)``). The comparison strips both texts and ignores case (official).

    Interpretation: the release description said the span lies "between (and including) index n_start and
    n_end", but the official check slices ``[n_start:n_end]``, leaving ``n_end`` out. We keep the official
    check (verdicts agree with the released training reward) and use open-instruct's revised description,
    which says "n_end (exclusive)" and quotes the text.
    """

    instruction_id = "new:copy_span_idx"
    arg_names = ("prompt_to_repeat", "n_start", "n_end")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_to_repeat = _text(self, kwargs, "prompt_to_repeat", strip=False)
        self.n_start = _count(self, kwargs, "n_start")
        self.n_end = _count(self, kwargs, "n_end", minimum=1)
        if not self.n_start < self.n_end <= len(self.prompt_to_repeat):
            raise ValueError(
                f"{self.instruction_id}: arguments 'n_start' ({self.n_start}) and 'n_end' ({self.n_end}) must "
                f"satisfy n_start < n_end <= len(prompt_to_repeat) ({len(self.prompt_to_repeat)})"
            )

    def build_description(self) -> str:
        return (
            f"Given the text below, output ONLY the substring from character index {self.n_start} (inclusive) up "
            f"to character index {self.n_end} (exclusive).\n"
            "Indices are 0-based character indices, counting every character including spaces.\n"
            f"Text: {self.prompt_to_repeat}"
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        span = self.prompt_to_repeat[self.n_start : self.n_end]
        return response.strip().lower() == span.strip().lower()


class CopyingSimple(_CopyBase):
    """``copy:copying_simple``: the response is the request, repeated without change, and nothing else.

    Kwargs: ``prompt_to_repeat`` (string, required, see `Copy`). Stripped, case-insensitive comparison
    (official).
    """

    instruction_id = "copy:copying_simple"

    def build_description(self) -> str:
        return (
            "Repeat the request without change (do not say anything before repeating the request; the request "
            "you need to repeat does not include this sentence) and do not answer the actual request!"
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return response.strip().lower() == self.prompt_to_repeat.strip().lower()


class CopyingMultiple(IFEvalChecker):
    """``copy:copying_multiple``: the request repeated ``N`` times, separated by ``******``, nothing else.

    Kwargs: ``prompt_to_repeat`` (string, required, see `Copy`), ``N`` (int >= 1). The response split on
    ``******`` must give exactly ``N`` parts, each equal to the request (stripped, case-insensitive): a
    leading or trailing separator therefore fails (official).
    """

    instruction_id = "copy:copying_multiple"
    arg_names = ("prompt_to_repeat", "N")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_to_repeat = _text(self, kwargs, "prompt_to_repeat", strip=False)
        self.n = _count(self, kwargs, "N", minimum=1)

    def build_description(self) -> str:
        return (
            f"Repeat the request without change {self.n} times, separated by 6 asterisk symbols (do not say "
            "anything before repeating the request; the request you need to repeat does not include this "
            "sentence) and do not answer the actual request!"
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        parts = response.split("******")
        target = self.prompt_to_repeat.strip().lower()
        return len(parts) == self.n and all(part.strip().lower() == target for part in parts)


# --------------------------------------------------------------------------------------------------
# detectable_format:
# --------------------------------------------------------------------------------------------------


class SentenceHyphens(IFEvalChecker):
    """``detectable_format:sentence_hyphens``: sentences joined by hyphens, with no spaces around them.

    Takes no kwargs. The (stripped) response split on ``-`` must give parts with no surrounding whitespace,
    each exactly one sentence (IFEval's splitter), and there must be at least two parts.

    Interpretation: the official check compares each part with the sentences of the text with hyphens
    replaced by spaces, ``zip``-truncated, and passes a single sentence without any hyphen. We require at least
    two hyphen-joined sentences (as open-instruct's revised check does: "Write multiple sentences") and
    equal counts; the response is stripped first, so a trailing newline does not fail it. A hyphen inside a
    sentence ("well-known") fails, as in the official check.
    """

    instruction_id = "detectable_format:sentence_hyphens"

    def build_description(self) -> str:
        return "All sentences must be connected using hyphens, with no spaces between them."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        parts = response.strip().split("-")
        if len(parts) < 2:
            return False
        for part in parts:
            if not part or part.strip() != part:
                return False
            if split_into_sentences(part) != [part]:
                return False
        return True


class SquareBrackets(IFEvalChecker):
    """``detectable_format:square_brackets``: every whitespace-separated token starts with ``[`` and ends with ``]``.

    Takes no kwargs. Official check (so ``[word].`` fails: put punctuation inside the brackets).
    """

    instruction_id = "detectable_format:square_brackets"

    def build_description(self) -> str:
        return "Enclose every word in your response within square brackets."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return all(token.startswith("[") and token.endswith("]") for token in response.split())


class BigramWrapping(IFEvalChecker):
    """``detectable_format:bigram_wrapping``: every consecutive word pair is wrapped, ``<<w1 w2>>``.

    Takes no kwargs. The whitespace tokens are read in pairs (1-2, 3-4, ...): the first of each pair starts
    with ``<<`` (and does not end with ``>>``), the second ends with ``>>`` (and does not start with ``<<``).

    Interpretation: the official check only tests ``startswith("<<")`` / ``endswith(">>")`` per pair and
    leaves an odd last word unchecked. "Every word bigram" is read as every word belonging to a wrapped
    pair: the token count must be even and non-zero, and a pair may not be two self-wrapped words (as in
    open-instruct's revised check).
    """

    instruction_id = "detectable_format:bigram_wrapping"

    def build_description(self) -> str:
        return "Wrap every word bigram in double angular brackets, such as <<I am>> <<at home>> <<with my>> <<cute dog>>."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        tokens = response.split()
        if not tokens or len(tokens) % 2:
            return False
        for first, second in zip(tokens[::2], tokens[1::2]):
            if not first.startswith("<<") or first.endswith(">>"):
                return False
            if not second.endswith(">>") or second.startswith("<<"):
                return False
        return True


# --------------------------------------------------------------------------------------------------
# keywords:
# --------------------------------------------------------------------------------------------------


class NoAdjacentConsecutive(IFEvalChecker):
    """``keywords:no_adjacent_consecutive``: no word is followed by a word starting with the next letter.

    Takes no kwargs. Words are whitespace tokens with at least one word character; a word's first letter is
    its first alphanumeric character, lower-cased. A pair fails when both first letters are in ``a``-``z``
    and the second is the letter right after the first (``apple banana`` fails, ``banana apple`` passes).

    Interpretation: the official check takes each token's first character as is, so two tokens starting
    with ``1`` and ``2`` (or ``(`` and ``)``) failed and a token starting with a quote hid its letter. The
    description speaks of "consecutive letters of the alphabet": only a-z letters count, leading
    punctuation is skipped. Order: ascending only, as in the official check and in open-instruct's revised
    description ("a word starting with 'a' cannot be immediately followed by a word starting with 'b'").
    """

    instruction_id = "keywords:no_adjacent_consecutive"

    def build_description(self) -> str:
        return "No two adjacent words can start with consecutive letters of the alphabet."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        initials = []
        for word in _words(response):
            match = re.search(r"[^\W_]", word)  # the first letter or digit
            if match:
                initials.append(match.group().lower())
        for first, second in zip(initials, initials[1:]):
            if "a" <= first <= "z" and "a" <= second <= "z" and ord(second) - ord(first) == 1:
                return False
        return True


class WordOnce(IFEvalChecker):
    """``keywords:word_once``: the keyword occurs exactly once (case-insensitive regex, substrings count).

    Kwargs: ``keyword`` (string).

    Interpretation: the release description, "Include keyword {keyword} in your response.", does not say
    "once", but the id and the official check do (``== 1``). We keep the check and use open-instruct's
    revised description, which says "exactly once".
    """

    instruction_id = "keywords:word_once"
    arg_names = ("keyword",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keyword = _text(self, kwargs, "keyword")

    def build_description(self) -> str:
        return f"Include the keyword {self.keyword} in your response exactly once (case-insensitive)."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return len(re.findall(self.keyword, response, flags=re.IGNORECASE)) == 1


class WordCountDifferentNumbers(KeywordFrequency):
    """``keywords:word_count_different_numbers``: the keyword occurs ``less than`` / ``at least`` N times.

    Kwargs: ``keyword`` (string), ``frequency`` (int >= 0), ``relation``. Occurrences are case-insensitive
    regex matches, substrings included (official). Kwargs, description and check are those of IFEval's
    ``keywords:frequency`` (`hir_trl.verifiers.ifeval.KeywordFrequency`).

    Interpretation: the release description, "In your response, the word {keyword} should appear
    {frequency} times.", leaves out the relation the check uses. We use open-instruct's revised description,
    which includes it.
    """

    instruction_id = "keywords:word_count_different_numbers"


class ExcludeWordHarder(IFEvalChecker):
    """``keywords:exclude_word_harder``: the keyword (a word of the instruction itself) does not occur.

    Kwargs: ``keyword`` (string).

    Interpretation: the official check was ``" " + keyword + " " not in response`` (case-sensitive, and
    blind to the word at the start or end of the response or next to punctuation). The description says "Do
    not include keyword": we fail on any whole-word, case-insensitive occurrence (open-instruct's revised
    check: ``\\b`` + escaped keyword + ``\\b``).
    """

    instruction_id = "keywords:exclude_word_harder"
    arg_names = ("keyword",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keyword = _text(self, kwargs, "keyword")
        self._pattern = re.compile(r"\b" + re.escape(self.keyword) + r"\b", flags=re.IGNORECASE)

    def build_description(self) -> str:
        return f"Do not include keyword {self.keyword} in the response."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return not self._pattern.search(response)


class Palindrome(IFEvalChecker):
    """``keywords:palindrome``: the response includes a palindrome.

    Takes no kwargs. A palindrome is a word, or a whole sentence, whose letters and digits (lower-cased,
    everything else dropped) read the same both ways and number at least 3 (``level``, ``Noon.``, ``A man,
    a plan, a canal: Panama!``).

    Interpretation: the official check accepts any whitespace token equal to its reverse, case-sensitive:
    ``a``, ``I`` or ``-`` pass (the constraint is always met), while ``Level`` or ``noon.`` fail. We ignore
    case and punctuation and require 3+ characters, so a trivial one-letter word does not count.
    """

    instruction_id = "keywords:palindrome"

    def build_description(self) -> str:
        return "Include a palindrome in your response."

    @staticmethod
    def _is_palindrome(text: str) -> bool:
        letters = "".join(char for char in text.lower() if char.isalnum())
        return len(letters) >= 3 and letters == letters[::-1]

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        candidates = [*response.split(), *split_into_sentences(response)]
        return any(self._is_palindrome(candidate) for candidate in candidates)


class KeywordSpecificPosition(IFEvalChecker):
    """``keywords:keyword_specific_position``: the keyword is word ``m`` of sentence ``n`` (both 1-based).

    Kwargs: ``keyword`` (string, or a one-element list), ``n`` (int >= 1), ``m`` (int >= 1). Sentences come
    from IFEval's splitter and words from NLTK's Treebank tokenizer, as in the official check (punctuation
    marks are tokens, so ``Yes, potato`` has ``potato`` as word 3).

    Interpretation: the official comparison is case-sensitive; the description does not ask for a case,
    and a keyword placed first in a sentence is naturally capitalised, so we compare case-insensitively.
    """

    instruction_id = "keywords:keyword_specific_position"
    arg_names = ("keyword", "n", "m")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keyword = _word(self, kwargs, "keyword")
        self.n = _count(self, kwargs, "n", minimum=1)
        self.m = _count(self, kwargs, "m", minimum=1)

    def build_description(self) -> str:
        return f"Include keyword {self.keyword} in the {self.n}-th sentence, as the {self.m}-th word of that sentence."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_into_sentences(response)
        if len(sentences) < self.n:
            return False
        tokens = treebank_tokens(sentences[self.n - 1])
        return len(tokens) >= self.m and tokens[self.m - 1].lower() == self.keyword.lower()


class StartEnd(IFEvalChecker):
    """``keywords:start_end``: the first and the last token are the same word (case-insensitive).

    Takes no kwargs. Tokens are NLTK Treebank tokens (official ``nltk.word_tokenize``), so a final period or
    closing quote is the last token and fails, as the description says ("not even punctuation"). At least
    two tokens are needed (official).
    """

    instruction_id = "keywords:start_end"

    def build_description(self) -> str:
        return (
            "Start and end your response with the same word (do not write anything after the last word, not even "
            "punctuation)."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        tokens = treebank_tokens(response.strip())
        return len(tokens) >= 2 and tokens[0].lower() == tokens[-1].lower()


# --------------------------------------------------------------------------------------------------
# paragraphs:
# --------------------------------------------------------------------------------------------------


class Paragraphs(IFEvalChecker):
    """``paragraphs:paragraphs``: exactly 2 paragraphs separated by the markdown divider ``***``.

    Takes no kwargs. IFEval's ``number_paragraphs`` rule with 2: empty leading/trailing parts are ignored,
    an empty part in the middle fails (official).
    """

    instruction_id = "paragraphs:paragraphs"

    def build_description(self) -> str:
        return "There should be 2 paragraphs. Paragraphs are separated with the markdown divider: ***"

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return paragraph_count(response, r"\s?\*\*\*\s?") == 2


class Paragraphs2(IFEvalChecker):
    """``paragraphs:paragraphs2``: exactly 2 paragraphs separated by a blank line (``\\n\\n``).

    Takes no kwargs. Split on ``\\n\\n``: empty leading/trailing parts are ignored, an empty part in the middle
    (three or more newlines in a row) fails (official).

    Interpretation: the release description ends with a space; it is dropped here (the text is otherwise
    identical).
    """

    instruction_id = "paragraphs:paragraphs2"

    def build_description(self) -> str:
        return (
            "There should be 2 paragraphs. Paragraphs and only paragraphs are separated with each other by two "
            "line breaks."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return paragraph_count(response, r"\n\n") == 2


# --------------------------------------------------------------------------------------------------
# first_word: and last_word:
# --------------------------------------------------------------------------------------------------


class _WordChecker(IFEvalChecker):
    arg_name: str = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.word = _word(self, kwargs, self.arg_name)
        self._target = _bare(self.word)


class FirstWordSent(_WordChecker):
    """``first_word:first_word_sent``: every sentence starts with the word (case-insensitive).

    Kwargs: ``first_word`` (string, or a one-element list). Sentences come from IFEval's splitter; an empty
    sentence fails (official).

    Interpretation: the official check compares the raw first token, so ``Hello,`` or ``**Hello**`` did not
    match ``hello``. We drop punctuation from the token first, as the official ``last_word`` checks do.
    """

    instruction_id = "first_word:first_word_sent"
    arg_names = ("first_word",)
    arg_name = "first_word"

    def build_description(self) -> str:
        return f"The first word of each sentence should be the word {self.word}."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_into_sentences(response)
        return bool(sentences) and all(s.split() and _bare(s.split()[0]) == self._target for s in sentences)


class FirstWordAnswer(_WordChecker):
    """``first_word:first_word_answer``: the response starts with the word (case-insensitive).

    Kwargs: ``first_word`` (string). Interpretation: punctuation is dropped from the first whitespace token
    before comparing (see `FirstWordSent`).
    """

    instruction_id = "first_word:first_word_answer"
    arg_names = ("first_word",)
    arg_name = "first_word"

    def build_description(self) -> str:
        return f"The first word of your response should be the word {self.word}."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        tokens = response.split()
        return bool(tokens) and _bare(tokens[0]) == self._target


class LastWordSent(_WordChecker):
    """``last_word:last_word_sent``: every sentence ends with the word, before punctuation (case-insensitive).

    Kwargs: ``last_word`` (string, or a one-element list). Each sentence's last whitespace token, with every
    non-word character removed, must equal the word (official). An empty sentence fails.
    """

    instruction_id = "last_word:last_word_sent"
    arg_names = ("last_word",)
    arg_name = "last_word"

    def build_description(self) -> str:
        return f"The last word of each sentence, before punctuation, should be the word {self.word}."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        sentences = split_into_sentences(response)
        return bool(sentences) and all(s.split() and _bare(s.split()[-1]) == self._target for s in sentences)


class LastWordAnswer(_WordChecker):
    """``last_word:last_word_answer``: the response's last word is the word (case-insensitive).

    Kwargs: ``last_word`` (string). The last whitespace token with every non-word character removed must
    equal the word (official).
    """

    instruction_id = "last_word:last_word_answer"
    arg_names = ("last_word",)
    arg_name = "last_word"

    def build_description(self) -> str:
        return f"The last word of your response should be the word {self.word}."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        tokens = response.split()
        return bool(tokens) and _bare(tokens[-1]) == self._target


# --------------------------------------------------------------------------------------------------
# punctuation:
# --------------------------------------------------------------------------------------------------


class PunctuationDot(IFEvalChecker):
    """``punctuation:punctuation_dot``: the response contains no ``.`` at all. Takes no kwargs (official)."""

    instruction_id = "punctuation:punctuation_dot"

    def build_description(self) -> str:
        return "In your entire response, refrain from the use of . (i.e. dots) as punctuation and in general."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return "." not in response


class PunctuationExclamation(IFEvalChecker):
    """``punctuation:punctuation_exclamation``: the response contains no ``!``. Takes no kwargs (official)."""

    instruction_id = "punctuation:punctuation_exclamation"

    def build_description(self) -> str:
        return (
            "In your entire response, refrain from the use of ! (i.e. exclamation marks) as punctuation and in "
            "general."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return "!" not in response


# --------------------------------------------------------------------------------------------------
# count:
# --------------------------------------------------------------------------------------------------


class LowercaseCounting(IFEvalChecker):
    """``count:lowercase_counting``: at most N all-lowercase words in the whole response.

    Kwargs: ``N`` (int >= 0). A lowercase word is a ``\\b[a-z]+\\b`` match (official, so ``don't`` holds two).

    Interpretation: "all lowercase words should appear at most N times" could also mean each distinct
    lowercase word at most N times; the official check (kept) counts them all together.
    """

    instruction_id = "count:lowercase_counting"
    arg_names = ("N",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = _count(self, kwargs, "N")

    def build_description(self) -> str:
        return f"In your response, all lowercase words should appear at most {self.n} times."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return len(re.findall(r"\b[a-z]+\b", response)) <= self.n


class CountingComposition(IFEvalChecker):
    """``count:counting_composition``: 3 paragraphs of ``n_sent`` sentences of ``n_words`` words each.

    Kwargs: ``n_sent`` (int >= 1), ``n_words`` (int >= 1). Paragraphs are separated by the markdown divider,
    written ``***`` or ``* * *``; empty leading/trailing parts are ignored, an empty middle part fails.
    Sentences come from IFEval's splitter; a word is a whitespace token with at least one word character.

    Interpretation: the official check splits only on ``***`` although the description says ``* * *``, and
    counts ``nltk.word_tokenize`` tokens, so the final period of a sentence counted as a word (a sentence of
    exactly ``n_words`` words always failed), and a leading/trailing divider always failed. We accept both
    divider spellings and count words, not punctuation.
    """

    instruction_id = "count:counting_composition"
    arg_names = ("n_sent", "n_words")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n_sent = _count(self, kwargs, "n_sent", minimum=1)
        self.n_words = _count(self, kwargs, "n_words", minimum=1)

    def build_description(self) -> str:
        return (
            f"Write 3 paragraphs, delimited by the markdown divider: * * *, with exactly {self.n_sent} sentences "
            f"each, with exactly {self.n_words} words in each sentence."
        )

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        parts = re.split(r"\s*\*[ \t]?\*[ \t]?\*\s*", response)
        if parts and not parts[0].strip():
            parts = parts[1:]
        if parts and not parts[-1].strip():
            parts = parts[:-1]
        if len(parts) != 3 or any(not part.strip() for part in parts):
            return False
        for part in parts:
            sentences = split_into_sentences(part)
            if len(sentences) != self.n_sent:
                return False
            if any(len(_words(sentence)) != self.n_words for sentence in sentences):
                return False
        return True


class CountUnique(IFEvalChecker):
    """``count:count_unique``: no word is used twice.

    Takes no kwargs. Words are whitespace tokens with punctuation removed, lower-cased (tokens with no word
    character, like ``-``, are not words).

    Interpretation: the official check compares ``nltk.word_tokenize`` tokens case-sensitively, so two
    periods (any two sentences) failed while ``The`` and ``the`` counted as different words. The
    description speaks of words: we compare words, ignoring case and punctuation.
    """

    instruction_id = "count:count_unique"

    def build_description(self) -> str:
        return "Only use unique words in your response, no word should be repeated!"

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        words = [_bare(word) for word in _words(response)]
        words = [word for word in words if word]
        return len(words) == len(set(words))


class CountIncrementWord(IFEvalChecker):
    """``count:count_increment_word``: ``keyword1`` occurs exactly once and ``keyword2`` exactly twice.

    Kwargs: ``keyword1``, ``keyword2`` (strings). Occurrences are case-insensitive regex matches, substrings
    included (official). Equal keywords are accepted (as in the released data) but can never be satisfied.
    """

    instruction_id = "count:count_increment_word"
    arg_names = ("keyword1", "keyword2")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keyword1 = _word(self, kwargs, "keyword1")
        self.keyword2 = _word(self, kwargs, "keyword2")

    def build_description(self) -> str:
        return f"Include keyword {self.keyword1} once in your response, keyword {self.keyword2} twice in your response."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        first = len(re.findall(self.keyword1, response, flags=re.IGNORECASE))
        second = len(re.findall(self.keyword2, response, flags=re.IGNORECASE))
        return first == 1 and second == 2


# --------------------------------------------------------------------------------------------------
# letters:
# --------------------------------------------------------------------------------------------------


class LetterCounting(IFEvalChecker):
    """``letters:letter_counting``: ``less than`` / ``at least`` N ASCII letters (``[a-zA-Z]``) in total.

    Kwargs: ``N`` (int >= 0), ``relation``. Spaces, digits, punctuation and non-ASCII letters do not count
    (official).
    """

    instruction_id = "letters:letter_counting"
    arg_names = ("N", "relation")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = _count(self, kwargs, "N")
        self.relation = _relation(self, kwargs, "relation")

    def build_description(self) -> str:
        return f"Answer with {self.relation} {self.n} letters."

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return compare(len(re.findall(r"[a-zA-Z]", response)), self.relation, self.n)


class LetterCounting2(LetterFrequency):
    """``letters:letter_counting2``: a letter occurs ``less than`` / ``at least`` N times (case-insensitive).

    The official registry maps this id to the very class of IFEval's ``keywords:letter_frequency``; so does
    this one (same kwargs ``letter``, ``let_frequency``, ``let_relation``, same description and check).
    """

    instruction_id = "letters:letter_counting2"


#: Instruction id -> checker class: the 29 IF-RLVR training ids of open-instruct's ``IFEvalG`` registry.
REGISTRY: dict[str, type[Checker]] = {
    cls.instruction_id: cls
    for cls in (
        RepeatPhrase,
        Copy,
        CopyingSimple,
        CopyingMultiple,
        CopySpanIdx,
        SentenceHyphens,
        SquareBrackets,
        BigramWrapping,
        NoAdjacentConsecutive,
        WordOnce,
        WordCountDifferentNumbers,
        ExcludeWordHarder,
        Palindrome,
        KeywordSpecificPosition,
        StartEnd,
        Paragraphs,
        Paragraphs2,
        FirstWordSent,
        FirstWordAnswer,
        LastWordSent,
        LastWordAnswer,
        PunctuationDot,
        PunctuationExclamation,
        LowercaseCounting,
        CountingComposition,
        CountUnique,
        CountIncrementWord,
        LetterCounting,
        LetterCounting2,
    )
}

__all__ = ["REGISTRY", "split_into_sentences"]
