"""MulDimIF rule verifiers: one checker class per constraint type, parsed from the requirement text.

A MulDimIF constraint is a triplet ``[category, subcategory, requirement]``, for example
``["Length", "Words", "The response must contain no more than 150 words"]``. The instruction id is
``f"{category}_{subcategory}"`` exactly as in the data (``"Length_Words"``, ``"Content_Keywords: Must
include"``) and the kwargs are ``{"requirement": <requirement text>}``. As in the authors' released code,
the id picks the checker class and the class parses the requirement text; here the parsing happens once, in
the constructor, which raises ``ValueError`` (naming the id and quoting the text) when the text cannot be
parsed — an unparsed requirement is never treated as passed.

Conventions shared by every class (documented once here, referred to by the class docstrings):

* **Numbers** are read as digits or English words (``"three"``, ``"a single"``); comparators are
  ``at most / no more than / not exceed / maximum of / limited to / up to / within / no longer than``,
  ``at least / minimum of / no fewer than``, ``fewer than / less than`` (strict), ``more than`` (strict),
  ``exactly / precisely / only``, and ranges ``between N and M / N to M / N-M`` (inclusive). A bare
  ``"N <unit>"`` means exactly N only for heading levels ("two heading levels"); elsewhere a number needs a
  comparator. All bounds found for one unit are intersected (contradictory bounds raise ``ValueError``).
* **Words** are counted with `hir_trl.verifiers.text.count_words` (``\\w+`` tokens, as IFEval) and
  **sentences** with `hir_trl.verifiers.text.count_sentences` (NLTK's Punkt, offline).
* **Scope.** A clause whose subject is ``each``/``every`` *X* is checked on every unit of that kind, and
  fails when the response has no such unit: ``cell`` / ``entry in the table`` -> markdown-table data
  cells; ``row`` -> table data rows; ``heading`` -> heading texts; ``sentence`` -> sentences;
  ``paragraph`` -> blank-line separated blocks; ``section`` / ``slide`` / ``part`` -> the text under each
  heading (paragraphs when there is no heading); anything else (``question``, ``definition``,
  ``name``...) -> list items, else table data rows, else non-empty lines. "each" in an apposition ("five
  paragraphs, each focusing on ...") or in a purpose clause ("... to ensure coverage of each section") does
  not set the scope. A clause about ``the table`` is checked on the table text. Other clauses are checked
  on the whole response.
* **Compound requirements.** Requirement texts sometimes bundle clauses of another kind ("must include the
  keyword 'X' and end with a period", "at most 150 words and at least 5 sentences"). Besides its own
  (primary) clause, which must parse, every class also checks the clauses of these shared kinds that it
  finds in the text: word bounds, sentence bounds, ending punctuation, letter case and quoted keywords.
* **Markdown** structure is read from ATX headings (``#``..``######``; setext headings are not read),
  GFM pipe tables (a header row followed by a ``---`` separator row), list items (``-``, ``*``, ``+``,
  ``•``, ``1.``, ``1)``) and ``>`` block quotes; fenced code blocks are ignored for all of them.
* An empty response (``strip() == ""``) fails every constraint (`check`). MulDimIF has no loose mode:
  `check_loose` is `check` (see `VERIFIER`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .base import Checker
from .family import VerifierFamily, strict_only
from .text import count_sentences, count_words, split_sentences

FAMILY = "muldimif"

# ---------------------------------------------------------------------------------------------------
# Response-side helpers: markdown structure
# ---------------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(```|~~~)")
_ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+(.*\S)")
_BULLET_ITEM = re.compile(r"^\s*[-*+•]\s+\S")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{1,}:?\s*(?:\|\s*:?-{1,}:?\s*)*\|?\s*$")
_HORIZONTAL_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")
_BLOCK_QUOTE = re.compile(r"^\s{0,3}>")
_BOLD = re.compile(r"\*\*[^*\n]+?\*\*|__[^_\n]+?__")
_TRAILING_WRAPPERS = "*_`\"'’”»)] \t\r\n"
_LEADING_MARKUP = re.compile(r"^[\s#>*_`\"'“‘(\[-]+")


def _prose_lines(text: str) -> list[str]:
    """Return the lines of ``text`` outside fenced code blocks."""
    lines: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(line)
    return lines


def _headings(text: str) -> list[tuple[int, str]]:
    """Return ``(level, title)`` for every ATX heading outside code fences."""
    found = []
    for line in _prose_lines(text):
        match = _ATX_HEADING.match(line)
        if match:
            found.append((len(match.group(1)), (match.group(2) or "").strip()))
    return found


def _split_cells(row: str) -> list[str]:
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row)]


@dataclass(frozen=True)
class _Table:
    """A GFM pipe table: the header cells and the data rows (the separator row is not kept)."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _tables(text: str) -> list[_Table]:
    """Return the GFM pipe tables of ``text``: a ``|`` header line directly followed by a separator line."""
    lines = _prose_lines(text)
    tables: list[_Table] = []
    i = 0
    while i + 1 < len(lines):
        if "|" in lines[i] and "|" in lines[i + 1] and _TABLE_SEPARATOR.match(lines[i + 1]):
            header = tuple(_split_cells(lines[i]))
            rows = []
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                rows.append(tuple(_split_cells(lines[j])))
                j += 1
            tables.append(_Table(header, tuple(rows)))
            i = j
        else:
            i += 1
    return tables


def _list_items(text: str) -> list[str]:
    return [m.group(1) for m in map(_LIST_ITEM.match, _prose_lines(text)) if m]


def _is_structural(line: str) -> bool:
    """True for lines that carry markdown structure rather than prose (headings, table rows, rules)."""
    return bool(_ATX_HEADING.match(line) or _HORIZONTAL_RULE.match(line) or line.strip().startswith("|"))


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, without heading lines and horizontal rules."""
    blocks: list[str] = []
    current: list[str] = []
    for line in _prose_lines(text) + [""]:
        if not line.strip():
            if current:
                blocks.append("\n".join(current))
            current = []
        elif not (_ATX_HEADING.match(line) or _HORIZONTAL_RULE.match(line)):
            current.append(line.strip())
    return blocks


def _sections(text: str) -> list[str]:
    """The non-empty text under each heading; the paragraphs when the response has no heading."""
    if not _headings(text):
        return _paragraphs(text)
    sections: list[str] = []
    current: list[str] | None = None  # text before the first heading is a preamble, not a section
    for line in _prose_lines(text) + ["# end"]:
        if _ATX_HEADING.match(line):
            if current is not None and "\n".join(current).strip():
                sections.append("\n".join(current).strip())
            current = []
        elif current is not None:
            current.append(line)
    return sections


def _items(text: str) -> list[str]:
    """List items; else table data rows; else the non-empty prose lines."""
    items = _list_items(text)
    if items:
        return items
    rows = [" ".join(row) for table in _tables(text) for row in table.rows]
    if rows:
        return rows
    return [line.strip() for line in _prose_lines(text) if line.strip() and not _is_structural(line)]


def _units(text: str, scope: str) -> list[str]:
    """Split a response into the units a clause of this ``scope`` applies to (see module docstring)."""
    if scope == "response":
        return [text]
    if scope == "cells":
        return [cell for table in _tables(text) for row in table.rows for cell in row]
    if scope == "rows":
        return [" ".join(row) for table in _tables(text) for row in table.rows]
    if scope == "table":
        return [" ".join(table.header + tuple(c for row in table.rows for c in row)) for table in _tables(text)]
    if scope == "headings":
        return [title for _, title in _headings(text)]
    if scope == "sentences":
        return split_sentences(text)
    if scope == "paragraphs":
        return _paragraphs(text)
    if scope == "sections":
        return _sections(text)
    if scope == "items":
        return _items(text)
    raise AssertionError(f"unknown scope {scope!r}")


def _strip_trailing_markup(text: str) -> str:
    return text.rstrip(_TRAILING_WRAPPERS)


# ---------------------------------------------------------------------------------------------------
# Requirement-side helpers: normalisation, numbers, bounds, scope, quoted strings
# ---------------------------------------------------------------------------------------------------

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_NUMBER_WORD = re.compile(
    r"\b(?:(?P<tens>" + "|".join(_TENS) + r")(?:[- ](?P<tens_unit>" + "|".join(list(_UNITS)[1:10]) + r"))?"
    r"|(?P<unit>" + "|".join(_UNITS) + r"))(?P<hundred>\s+hundred)?\b"
)


def _number_words_to_digits(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group("tens"):
            value = _TENS[match.group("tens")] + (_UNITS[match.group("tens_unit")] if match.group("tens_unit") else 0)
        else:
            value = _UNITS[match.group("unit")]
        return str(value * 100 if match.group("hundred") else value)

    return _NUMBER_WORD.sub(replace, text)


def _normalise(requirement: str) -> str:
    """Lower-case, straighten quotes, squeeze spaces, and write numbers as digits ("a single" -> "exactly 1")."""
    text = requirement.lower().replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,000 -> 1000
    text = re.sub(r"\b(?:a |one |only one |just one )?single\b", "exactly 1", text)
    text = re.sub(r"\bonly one\b", "exactly 1", text)
    return _number_words_to_digits(text)


def _clauses(norm: str) -> list[str]:
    """Split a normalised requirement into sentence-like clauses (for scope detection)."""
    return [c for c in re.split(r"(?<=[.;!?])\s+", norm) if c.strip()]


@dataclass(frozen=True)
class Bound:
    """An inclusive integer interval; ``None`` means unbounded on that side."""

    lo: int | None = None
    hi: int | None = None

    def contains(self, value: int) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def intersect(self, other: Bound) -> Bound:
        lo = max((b for b in (self.lo, other.lo) if b is not None), default=None)
        hi = min((b for b in (self.hi, other.hi) if b is not None), default=None)
        return Bound(lo, hi)

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo > self.hi


# Comparator phrases (on normalised text) and the bound each one makes of the number N after it.
_COMPARATORS: list[tuple[str, Callable[[int], Bound]]] = [
    (r"between", lambda n: Bound(n, None)),  # completed by the range's second number
    (r"at most|at maximum|no more than|not more than|(?:not|never) (?:have|contain|include|be|use) more than"
     r"|no longer than|not longer than|no greater than|(?:not|n't|never|without) (?:to )?exceed(?:ing|s)?"
     r"|max(?:imum)?(?: (?:length|word count|number|total))? of|max(?:imum)?|up to|within"
     r"|(?:word |row |column |sentence |strict |a )*limit of|limit(?:s|ed|ing)?(?: (?!to\b)[\w']+){0,4}? to",
     lambda n: Bound(None, n)),
    (r"(?:fewer|less) than", lambda n: Bound(None, n - 1)),
    (r"at least|no (?:fewer|less) than|not (?:fewer|less) than|min(?:imum)?(?: (?:length|number))? of|minimum",
     lambda n: Bound(n, None)),
    (r"more than", lambda n: Bound(n + 1, None)),
    (r"exactly|precisely|only|just|strictly", lambda n: Bound(n, n)),
]  # fmt: skip
_CMP_ALTERNATION = "|".join(f"(?:{pattern})" for pattern, _ in _COMPARATORS)
# Words that may sit between a comparator and its number ("not exceed a total of 150 words").
_FILLER = (
    r"(?:(?:a|an|the|total|maximum|minimum|max|strict|word|row|column|count|length|limit|number|of|at most"
    r"|no more than|at least|only) )*"
)
# A comparator word left before a number we could not parse: refuse to read the number as "exactly".
_COMPARATOR_HINT = re.compile(
    r"\b(?:most|least|more|less|fewer|exceed\w*|max\w*|min\w*|limit\w*|up to|within|between|range|ranging"
    r"|longer|shorter|under|over|below|above|beyond|cap\w*)\b"
)


def _find_bounds(norm: str, unit: str | None, gap_words: int = 2, bare: bool = False) -> list[Bound]:
    """Return every bound on ``unit`` (a regex) stated in the normalised text.

    Recognises ``<comparator> [filler] N [gap] <unit>``, ranges ``[between] N (and|to|-) M <unit>``, and
    ``<comparator> N <other unit> and M <unit>`` (the comparator distributes: "no more than 3 rows and 2
    columns"). With ``unit=None`` the number needs a comparator and no unit ("nesting levels must not
    exceed 3"). With ``bare=True`` a plain ``N <unit>`` means exactly N ("two heading levels"); otherwise it
    is ignored. A comparator word right before an unparsed ``N <unit>`` raises ``ValueError``.
    """
    gap = rf"(?: [a-z][a-z'-]*){{0,{gap_words}}}?"
    tail = rf"{gap} (?:{unit})\b" if unit is not None else ""
    pattern = re.compile(
        rf"(?:(?P<cmp>{_CMP_ALTERNATION}):? {_FILLER})?"
        rf"(?:(?P<first>\d+) (?:[a-z]+ )(?:and|,) )?"
        rf"(?<![\w.])(?P<n>\d+)(?:(?: ?(?:-|–|—) ?| to | and )(?P<m>\d+))?(?![\w.]){tail}"
    )
    bounds: list[Bound] = []
    for match in pattern.finditer(norm):
        n = int(match.group("n"))
        m = match.group("m")
        cmp_text = match.group("cmp")
        if m is not None and (cmp_text is None or cmp_text == "between" or unit is not None):
            bounds.append(Bound(min(n, int(m)), max(n, int(m))))
            continue
        if cmp_text is None:
            if unit is None:
                continue
            before = " ".join(norm[: match.start()].split()[-2:])
            if _COMPARATOR_HINT.search(before):
                raise ValueError(f"comparator before {match.group(0)!r} not understood")
            if bare:
                bounds.append(Bound(n, n))
            continue
        for cmp_pattern, make in _COMPARATORS:
            if re.fullmatch(cmp_pattern, cmp_text):
                bounds.append(make(n))
                break
    return bounds


def _merged(bounds: Sequence[Bound]) -> Bound | None:
    if not bounds:
        return None
    merged = functools.reduce(Bound.intersect, bounds)
    if merged.empty:
        raise ValueError(f"contradictory bounds {bounds}")
    return merged


# Each/every <noun> -> scope, by the head noun of the phrase after "each". "each word" is a unit, not a
# scope ("each word must be capitalized").
_SCOPE_NOUNS = {
    "cell": "cells", "cells": "cells", "row": "rows", "rows": "rows",
    "heading": "headings", "headings": "headings", "header": "headings", "subheading": "headings",
    "sentence": "sentences", "paragraph": "paragraphs",
    "section": "sections", "slide": "sections", "part": "sections", "chapter": "sections",
}  # fmt: skip
_EACH = re.compile(r"\b(?:each|every)\s+(?:of the\s+)?((?:[a-z][\w'-]*\s*){1,4})")
# Words that end the noun phrase after "each" (prepositions, verbs, modals).
_PHRASE_END = frozenset(
    "in of on for from with within to and or that which who must should shall will can may is are be has have "
    "includes include contains contain needs requires ends end concludes conclude starts start begins begin "
    "uses use being".split()
)
# A purpose clause ("... to ensure a thorough explanation of each section") does not set the scope.
_PURPOSE = re.compile(
    r"\b(?:to|so as to|in order to) (?:ensure|provide|maintain|give|offer|keep|help|meet|highlight|emphasi[sz]e"
    r"|cover|allow|guarantee|convey|organi[sz]e|structure|clarify|address|summari[sz]e|present|illustrate|reflect"
    r"|align|indicate|specify|show|describe|focus|capture|enhance|improve|support|fit|make|achieve|fully|clearly"
    r"|effectively|thoroughly|comprehensively)\b"
)


def _scope_of(clause: str) -> str:
    """Return the scope (see module docstring) of one normalised clause."""
    head_text = _PURPOSE.split(clause, maxsplit=1)[0]
    for match in _EACH.finditer(head_text):
        before = head_text[: match.start()].rstrip()
        if before.endswith((",", " with", "(")):
            continue  # apposition: "five paragraphs, each focusing on ...", "with each row representing ..."
        phrase: list[str] = []
        for word in match.group(1).split():
            if word in _PHRASE_END or word.endswith("ing") or word == "at":
                break
            phrase.append(word.removesuffix("'s").rstrip(":,"))
        if not phrase or phrase[0] in ("word", "words", "time", "one's"):
            continue
        noun = phrase[-1]
        if noun in ("entry", "entries") and "table" in clause:
            return "cells"
        if noun in ("table", "tables"):
            continue  # "each table must not exceed 5 rows": tables are checked one by one anyway
        if noun in _SCOPE_NOUNS:
            return _SCOPE_NOUNS[noun]
        return "items"
    if re.search(r"\b(?:in|within|of) the table\b|\bthe table (?:must|should|entries)|\btable entries\b", clause):
        return "table"
    return "response"


@dataclass(frozen=True)
class _Quoted:
    text: str
    start: int
    end: int


_QUOTED = re.compile(
    r"(?<![\w'])'(?P<single>[^'\n]+?(?:'[a-z][^'\n]*?)*)'(?![a-z])"  # 'a', 'Kellogg's', 'children's rights'
    r"|\"(?P<double>[^\"\n]+?)\"|“(?P<curly>[^”\n]+?)”|‘(?P<csingle>[^’\n]+?)’(?![a-z])|「(?P<cjk>[^」]+)」",
    re.IGNORECASE,
)


def _quoted(text: str) -> list[_Quoted]:
    """Quoted strings of a requirement ('...', "...", curly quotes, 「...」), in order."""
    found = []
    for match in _QUOTED.finditer(text):
        value = next(g for g in match.groups() if g is not None)
        found.append(_Quoted(value, match.start(), match.end()))
    return found


def _fail(instruction_id: str, requirement: str, reason: str) -> ValueError:
    return ValueError(f"{instruction_id}: cannot parse requirement {requirement!r} ({reason})")


# ---------------------------------------------------------------------------------------------------
# Conditions: the parsed, checkable pieces of a requirement
# ---------------------------------------------------------------------------------------------------


class _Condition:
    """One checkable clause of a requirement."""

    def holds(self, response: str) -> bool:
        raise NotImplementedError


def _all_units(response: str, scope: str, test: Callable[[str], bool]) -> bool:
    units = _units(response, scope)
    return bool(units) and all(test(unit) for unit in units)


@dataclass(frozen=True)
class _CountBound(_Condition):
    """A bound on the number of words or sentences of every unit of ``scope``."""

    counter: Callable[[str], int]
    bound: Bound
    scope: str

    def holds(self, response: str) -> bool:
        return _all_units(response, self.scope, lambda unit: self.bound.contains(self.counter(unit)))


_WORD_UNIT = r"words?"
_SENTENCE_UNIT = r"(?:complete |full )?sentences?"


def _count_conditions(norm: str, unit: str, counter: Callable[[str], int]) -> list[_Condition]:
    conditions: list[_Condition] = []
    for clause in _clauses(norm):
        bound = _merged(_find_bounds(clause, unit))
        if bound is not None:
            conditions.append(_CountBound(counter, bound, _scope_of(clause)))
    return conditions


def _word_conditions(norm: str) -> list[_Condition]:
    return _count_conditions(norm, _WORD_UNIT, count_words)


def _sentence_conditions(norm: str) -> list[_Condition]:
    return _count_conditions(norm, _SENTENCE_UNIT, count_sentences)


_MARKS = {
    "period": ".", "full stop": ".", "question mark": "?", "exclamation mark": "!", "exclamation point": "!",
    "semicolon": ";", "colon": ":", "comma": ",",
}  # fmt: skip
_MARK = "(?:" + "|".join(_MARKS) + ")"
_ENDING = re.compile(
    rf"\b(?:end|ends|ending|ended|conclude|concludes|concluded|concluding|finish|finishes|marked)"
    rf"(?: [\w']+){{0,3}}? with (?:a|an) (?P<marks>{_MARK}(?: or (?:a|an) {_MARK})*)"
    rf"|\bending punctuation(?: [\w']+){{0,4}}? (?:is|be|as) (?:a|an) (?P<marks2>{_MARK}(?: or (?:a|an) {_MARK})*)"
)
_AVOID_MARK = re.compile(rf"\bavoid(?:s|ing)? (?:using |the use of )?(?:any )?(?P<mark>{_MARK})s?\b")


@dataclass(frozen=True)
class _Ending(_Condition):
    """Every unit of ``scope`` ends with one of ``marks`` (trailing markdown and quotes are ignored)."""

    marks: frozenset[str]
    scope: str

    def holds(self, response: str) -> bool:
        def ends_well(unit: str) -> bool:
            stripped = _strip_trailing_markup(unit)
            return bool(stripped) and stripped[-1] in self.marks

        return _all_units(response, self.scope, ends_well)


@dataclass(frozen=True)
class _Avoids(_Condition):
    """The response contains none of ``chars``."""

    chars: frozenset[str]

    def holds(self, response: str) -> bool:
        return not any(c in response for c in self.chars)


def _ending_conditions(norm: str) -> list[_Condition]:
    conditions: list[_Condition] = []
    for clause in _clauses(norm):
        for match in _ENDING.finditer(clause):
            marks_text = match.group("marks") or match.group("marks2")
            marks = frozenset(_MARKS[m] for m in re.findall(_MARK, marks_text))
            conditions.append(_Ending(marks, _scope_of(clause)))
        for match in _AVOID_MARK.finditer(clause):
            conditions.append(_Avoids(frozenset(_MARKS[match.group("mark")])))
    return conditions


_UPPER = re.compile(
    r"\ball[- ]?(?:uppercase|upper case|caps|capital letters)\b|\b(?:entirely|written|be|in) (?:in )?uppercase\b"
)
_LOWER = re.compile(r"\blower ?case\b")
_TITLE = re.compile(r"\bcapitali[sz](?:e|ed|ing)\b|\bcapital(?:ized)? letters?\b")


def _case_words(text: str) -> list[str]:
    """Whitespace tokens stripped of leading markup, for the title-case check."""
    words = []
    for token in text.split():
        token = _LEADING_MARKUP.sub("", token)
        if token:
            words.append(token)
    return words


def _is_title_case(text: str) -> bool:
    """Every word whose first character is a cased letter starts with an upper-case letter."""
    return all(not word[0].islower() for word in _case_words(text))


def _json_keys(text: str) -> list[str] | None:
    value = _first_json(text)
    if value is None:
        return None
    keys: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                keys.append(str(key))
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(value)
    return keys


_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)


@dataclass(frozen=True)
class _Case(_Condition):
    """Letter case of the scoped text: ``title`` (each word capitalised), ``upper`` or ``lower``."""

    mode: str
    scope: str

    def _test(self, text: str) -> bool:
        if self.mode == "upper":
            return not any(c.islower() for c in text)
        if self.mode == "lower":
            return not any(c.isupper() for c in text)
        return _is_title_case(text)

    def holds(self, response: str) -> bool:
        if self.scope == "json_keys":
            keys = _json_keys(response)
            return bool(keys) and all(self._test(key) for key in keys)
        if self.scope == "urls":
            urls = _URL.findall(response)
            return bool(urls) and all(self._test(url) for url in urls)
        return _all_units(response, self.scope, self._test)


def _case_scope(clause: str) -> str:
    if re.search(r"\bjson keys\b", clause):
        return "json_keys"
    if re.search(r"\burls?\b", clause):
        return "urls"
    if re.search(r"\bheadings\b|\bsection titles?\b", clause):
        return "headings"
    scope = _scope_of(clause)
    if scope in ("items", "cells", "rows") and "table" in clause:
        return "table"
    return scope if scope != "items" else "response"


def _case_conditions(norm: str) -> list[_Condition]:
    conditions: list[_Condition] = []
    for clause in _clauses(norm):
        if _UPPER.search(clause):
            mode = "upper"
        elif _LOWER.search(clause):
            mode = "lower"
        elif _TITLE.search(clause) and not re.search(r"\bcapital (?:city|cities)\b", clause):
            mode = "title"
        else:
            continue
        conditions.append(_Case(mode, _case_scope(clause)))
    return conditions


# Keywords -----------------------------------------------------------------------------------------

_KEYWORD_TRIGGER = re.compile(
    r"\b(?:keywords?|terms?|words?|names?|phrases?|game|include[sd]?|including|inclusion|incorporat\w*"
    r"|mention\w*|contains?|appear\w*)\b|包含|包括|關鍵詞|关键词"
)
_NEGATIVE_TRIGGER = re.compile(r"\b(?:avoid\w*|exclud\w*|without|not (?:include|contain|use|mention))\b")
_LIST_SEPARATOR = re.compile(r"^\s*(?:,|and|or|, and|, or|,\s*and|,\s*or)\s*$")


# Word characters of alphabetic scripts (Latin with accents, digits): CJK keywords get no word boundaries.
_LATIN_WORD = r"[0-9A-Za-z_\u00c0-\u024f]"


def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    """Case-insensitive pattern for a keyword, with word boundaries where the keyword has word edges."""
    escaped = r"\s+".join(re.escape(part) for part in keyword.split())
    left = rf"(?<!{_LATIN_WORD})" if re.match(_LATIN_WORD, keyword) else ""
    right = rf"(?!{_LATIN_WORD})" if re.match(_LATIN_WORD, keyword[-1]) else ""
    return re.compile(left + escaped + right, re.IGNORECASE)


def _normalise_response(text: str) -> str:
    return text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')


@dataclass(frozen=True)
class _Keywords(_Condition):
    """Each group of ``required`` (alternatives joined by "or") occurs ``min_count`` times in every unit;
    no ``forbidden`` keyword occurs in the response."""

    required: tuple[tuple[str, ...], ...]
    forbidden: tuple[str, ...]
    min_count: int
    scope: str

    def holds(self, response: str) -> bool:
        response = _normalise_response(response)
        if any(_keyword_pattern(k).search(response) for k in self.forbidden):
            return False

        def has_all(unit: str) -> bool:
            return all(
                any(len(_keyword_pattern(k).findall(unit)) >= self.min_count for k in group) for group in self.required
            )

        return not self.required or _all_units(response, self.scope, has_all)


def _parse_keywords(requirement: str, norm: str) -> _Keywords | None:
    """Return the keyword condition of a requirement, or None when it quotes no keyword.

    A quoted string is a keyword when the text since the previous quote (or the clause start) holds a
    trigger ("keyword", "term", "include", "mention", ...), when it continues a quoted list ("'a', 'b',
    and 'c'"), or when it is followed by "as a keyword" / "must be included"; it is forbidden after
    "avoid"/"exclude"/"not include". Quotes right after "of" ("the transcription of 'X'") or before
    "column" are descriptions, not keywords. Raises ValueError for examples ("such as 'A' or 'B'").
    """
    text = _normalise_response(requirement)
    required: list[list[str]] = []
    forbidden: list[str] = []
    polarity: str | None = None
    previous_end = 0
    previous_kind = "start"
    for quote in _quoted(text):
        gap = text[previous_end : quote.start].lower()
        after = text[quote.end : quote.end + 40].lower()
        keyword = quote.text.strip().rstrip(".,;:!?").strip()
        previous_end = quote.end
        if not keyword:
            continue
        if re.match(r"\s*(?:column|section|heading)\b", after):
            previous_kind = "skipped"
            continue
        if _LIST_SEPARATOR.match(gap) and previous_kind in ("required", "forbidden"):
            if previous_kind == "required" and gap.strip().endswith("or"):
                required[-1].append(keyword)
            elif previous_kind == "required":
                required.append([keyword])
            else:
                forbidden.append(keyword)
            continue
        if re.search(r"\bsuch as\s*$", gap):
            raise ValueError("quoted strings are examples ('such as'), not required keywords")
        followed = re.match(
            r"\s*(?:as a keyword|(?:is|are|must|should)(?: be)? (?:also )?(?:included|incorporated|present|appear))",
            after,
        )
        if _NEGATIVE_TRIGGER.search(gap):
            polarity = "forbidden"
        elif (_KEYWORD_TRIGGER.search(gap) and not re.search(r"\bof\s*$", gap)) or followed:
            polarity = "required"
        else:
            previous_kind = "skipped"
            continue
        if polarity == "forbidden":
            forbidden.append(keyword)
        else:
            required.append([keyword])
        previous_kind = polarity
    if not required and not forbidden:
        return None
    min_count = 1
    count = re.search(r"\b(?:at least )?(twice|(\d+) times|multiple times|several times|more than once)\b", norm)
    if count:
        min_count = int(count.group(2)) if count.group(2) else 2
    scope = "response"
    for clause in _clauses(norm):
        if re.search(r"keyword|term|word|name|include", clause):
            scope = _scope_of(clause)
            break
    return _Keywords(tuple(tuple(g) for g in required), tuple(forbidden), min_count, scope)


def _keyword_conditions(requirement: str, norm: str) -> list[_Condition]:
    if not re.search(r"\bkeywords?\b", norm):
        return []
    condition = _parse_keywords(requirement, norm)
    return [condition] if condition else []


# Shared clause kinds: each checker parses its own kind and then the other kinds found in the text.
_SECONDARY: dict[str, Callable[[str, str], list[_Condition]]] = {
    "words": lambda req, norm: _word_conditions(norm),
    "sentences": lambda req, norm: _sentence_conditions(norm),
    "ending": lambda req, norm: _ending_conditions(norm),
    "case": lambda req, norm: _case_conditions(norm),
    "keywords": _keyword_conditions,
}


# JSON and XML -------------------------------------------------------------------------------------

_CODE_BLOCK = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_JSON_DECODER = json.JSONDecoder()


def _first_json(text: str) -> Any:
    """The first JSON value of the response: ```json fences first, then other fences, then the raw text.

    Within each of these, the first JSON object wins; the first array is used only when there is no object
    (so a citation like ``[1]`` before the data is not taken for it).
    """
    blocks = _CODE_BLOCK.findall(text)
    candidates = [body for lang, body in blocks if lang.lower() == "json"]
    candidates += [body for lang, body in blocks if lang.lower() != "json"] + [text]
    for candidate in candidates:
        first_array = None
        for attempt, match in enumerate(re.finditer(r"[{\[]", candidate)):
            if attempt >= 200:
                break
            try:
                value, _ = _JSON_DECODER.raw_decode(candidate, match.start())
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
            if isinstance(value, list) and first_array is None:
                first_array = value
        if first_array is not None:
            return first_array
    return None


def _json_depth(value: Any) -> int:
    """Container nesting depth: a flat object or array is 1, ``{"a": {"b": 1}}`` is 2 (as the authors)."""
    if isinstance(value, dict):
        return 1 + max((_json_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_json_depth(v) for v in value), default=0)
    return 0


_XML_TAG = re.compile(r"<([A-Za-z_][\w.:-]*)((?:\s+[A-Za-z_:][\w.:-]*\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*/?>")
_XML_ATTRIBUTE = re.compile(r"[A-Za-z_:][\w.:-]*\s*=\s*(?:\"[^\"]*\"|'[^']*')")


def _xml_attribute_counts(text: str) -> list[int]:
    """Attribute count of every XML start tag (in ```xml fences when present, else in the whole text)."""
    blocks = [body for lang, body in _CODE_BLOCK.findall(text) if lang.lower() == "xml"]
    source = "\n".join(blocks) if blocks else text
    return [len(_XML_ATTRIBUTE.findall(m.group(2))) for m in _XML_TAG.finditer(source)]


# Chinese ------------------------------------------------------------------------------------------

# Common characters whose simplified and traditional forms differ (simplified first). Heuristic: a text is
# simplified when it uses more simplified-only than traditional-only forms of these, and vice versa.
_SIMPLIFIED_TRADITIONAL_PAIRS = (
    "这這 个個 们們 来來 说說 时時 为為 国國 会會 对對 学學 发發 经經 过過 后後 还還 没沒 问問 见見 关關 点點 开開 长長 "
    "门門 语語 书書 车車 东東 电電 体體 实實 现現 种種 动動 机機 业業 样樣 与與 从從 应應 进進 认認 间間 将將 让讓 给給 "
    "无無 当當 头頭 义義 处處 产產 数數 华華 万萬 岁歲 边邊 线線 话話 较較 气氣 场場 总總 变變 热熱 纪紀 军軍 区區 历歷 "
    "传傳 带帶 单單 达達 报報 务務 术術 员員 质質 记記 识識 设設 计計 规規 视視 观觀 读讀 写寫 简簡 习習 乐樂 听聽 "
    "买買 卖賣 号號 钱錢 银銀 济濟 网網 络絡 统統 结結 须須 确確 该該 请請 谢謝 么麼 乡鄉 几幾 图圖 团團 园園"
).split()
_SIMPLIFIED_ONLY = frozenset(pair[0] for pair in _SIMPLIFIED_TRADITIONAL_PAIRS)
_TRADITIONAL_ONLY = frozenset(pair[1] for pair in _SIMPLIFIED_TRADITIONAL_PAIRS)


def _is_cjk(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff" or "\u3400" <= char <= "\u4dbf" or "\uf900" <= char <= "\ufaff"


# ---------------------------------------------------------------------------------------------------
# Checker classes
# ---------------------------------------------------------------------------------------------------


class MulDimIFChecker(Checker):
    """Base class: stores the requirement, parses it once, and checks every parsed condition.

    Subclasses set ``kind`` (their primary clause kind, one of the shared kinds or their own); `_parse` returns the
    primary conditions or raises ``ValueError``: by default the shared kind's own parser (`_SECONDARY`), else the
    subclass's. The shared clauses of the other kinds found in the text are added to them (see the module
    docstring).
    """

    instruction_id: ClassVar[str]
    kind: ClassVar[str]

    def __init__(self, *, requirement: str) -> None:
        if not isinstance(requirement, str) or not requirement.strip():
            raise ValueError(f"{self.instruction_id}: requirement must be a non-empty string, got {requirement!r}")
        super().__init__(requirement=requirement)
        self.requirement = requirement
        norm = _normalise(requirement)
        try:
            primary = self._parse(requirement, norm)
            secondary = [
                c for kind, parse in _SECONDARY.items() if kind != self.kind for c in parse(requirement, norm)
            ]
        except ValueError as exc:
            raise _fail(self.instruction_id, requirement, str(exc)) from None
        if not primary:
            raise _fail(self.instruction_id, requirement, f"no {self.kind} requirement found")
        self.conditions: tuple[_Condition, ...] = tuple(primary) + tuple(secondary)

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        return _SECONDARY[self.kind](requirement, norm)

    def build_description(self) -> str:
        return self.requirement

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        if not response.strip():
            return False
        return all(condition.holds(response) for condition in self.conditions)


class KeywordsChecker(MulDimIFChecker):
    """Quoted keywords must (or must not) appear in the response.

    Parses: the quoted strings of the requirement ('x', "x", curly quotes, 「x」) introduced by
    keyword/term/word/name/include/incorporate/mention ("must include the keywords 'a', 'b', and 'c'",
    "The keyword 'x' must be included", "'x' ... as a keyword"); "or" between quotes makes alternatives;
    quotes after "avoid"/"exclude"/"not include" are forbidden; "at least twice" / "N times" / "multiple
    times" sets the minimum count; "each question must include ..." checks every item (module docstring).
    Matching is case-insensitive, with word boundaries at word-character edges; trailing punctuation inside
    the quotes ("'Qatar.'") is dropped.

    Raises ValueError when no keyword is quoted ("the names of key players", "avoid the mention of illegal
    content"), when the quotes are examples ("a word such as 'Leaf' or 'River'"), or when the quote is the
    object of a description ("the phonetic transcription of 'Gaza'").
    """

    instruction_id = "Content_Keywords"
    kind = "keywords"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        condition = _parse_keywords(requirement, norm)
        if condition is None:
            raise ValueError("no quoted keyword introduced by include/keyword/term")
        return [condition]


class EnglishCaseChecker(MulDimIFChecker):
    """Letter case of English text: each word capitalised, all upper case, or all lower case.

    Parses: "all uppercase (letters)", "in uppercase", "All Uppercase" -> no lower-case letter;
    "lowercase" -> no upper-case letter; "capitalized letters for each word", "each word capitalized",
    "capitalize the first letter of each word", "must be capitalized", "capitalized form" -> every
    whitespace-separated word whose first character (after markdown and quotes) is a cased letter starts
    upper case (this lenient reading also accepts all-caps text). Scope: "table" -> the table text,
    "headings" / "section titles" -> heading texts, "JSON keys" -> the keys of the first JSON value,
    "URL" -> the URLs; subjects that cannot be isolated ("the names of the countries", "each option")
    are checked on the whole response.

    Raises ValueError when the text states no letter case (e.g. a mis-filed markdown requirement).
    """

    instruction_id = "Language_English"
    kind = "case"


class WordCountChecker(MulDimIFChecker):
    """Number of words (``\\w+`` tokens) of the response, or of every unit of an "each X" subject.

    Parses: "at most / no more than / not exceed / maximum of / limited to / up to N words", "at least /
    minimum of N words", "between N and M words", "N to M words", "N-M words", "a word count not
    exceeding N", "exactly N words" (numbers as digits or words); "each cell in the table must contain at
    most 10 words" checks every data cell, "each definition ..." every item.

    Raises ValueError when no bound on words is stated ("at most 10 labeled components", "at least 15
    characters").
    """

    instruction_id = "Length_Words"
    kind = "words"


class SentenceCountChecker(MulDimIFChecker):
    """Number of sentences (`hir_trl.verifiers.text.count_sentences`) of the response or of every unit.

    Parses the comparators of `WordCountChecker` with the unit "sentence(s)" ("at least 5 sentences",
    "between 3 to 5 sentences", "no more than three sentences", "at least one complete sentence"), and
    "a single sentence" / "only one sentence" as exactly one; "each section must contain at least three
    sentences" checks every section.

    Raises ValueError when no bound on sentences is stated ("no more than five references").
    """

    instruction_id = "Length_Sentences"
    kind = "sentences"


@dataclass(frozen=True)
class _ParagraphBound(_Condition):
    bound: Bound
    scope: str

    def holds(self, response: str) -> bool:
        return _all_units(response, self.scope, lambda unit: self.bound.contains(len(_paragraphs(unit))))


class ParagraphCountChecker(MulDimIFChecker):
    """Number of paragraphs: blank-line separated blocks, not counting heading lines and horizontal rules.

    Parses the shared comparators with the unit "paragraph(s)" ("at least 3 paragraphs", "between 3 and 5
    paragraphs", "no more than 5 paragraphs", "a single paragraph", "exactly 2 paragraphs", "5 to 7
    paragraphs"); "each slide must contain at least 1 paragraph" checks every section.

    Raises ValueError when no bound on paragraphs is stated.
    """

    instruction_id = "Length_Paragraphs"
    kind = "paragraphs"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        conditions: list[_Condition] = []
        for clause in _clauses(norm):
            bound = _merged(_find_bounds(clause, r"(?:distinct )?paragraphs?"))
            if bound is not None:
                scope = _scope_of(clause)
                conditions.append(_ParagraphBound(bound, "response" if scope == "paragraphs" else scope))
        return conditions


class EndingPunctuationChecker(MulDimIFChecker):
    """The response (or every unit of an "each X" subject) ends with the required punctuation mark.

    Parses: "end(s) / conclude(s) with a period | question mark | exclamation mark | semicolon" (also
    "... with a period or a question mark"), "ending punctuation must be a period", "marked with a period";
    "each sentence must end with a period" checks every sentence, "each entry in the table" every data
    cell, "each question" every item; "avoid using exclamation marks" forbids the mark anywhere. Trailing
    markdown emphasis, quotes and closing brackets after the mark are ignored.

    Raises ValueError when no ending mark is stated.
    """

    instruction_id = "Content_Punctuation"
    kind = "ending"


@dataclass(frozen=True)
class _TableBounds(_Condition):
    rows: Bound | None
    columns: Bound | None
    required: bool
    count_header: bool

    def holds(self, response: str) -> bool:
        tables = _tables(response)
        if not tables:
            return not self.required
        for table in tables:
            n_rows = len(table.rows) + (1 if self.count_header else 0)
            if self.rows is not None and not self.rows.contains(n_rows):
                return False
            if self.columns is not None and not self.columns.contains(len(table.header)):
                return False
        return True


def _top_level_items(text: str) -> list[str]:
    """List items at the smallest indentation used by any list item."""
    matches = [(len(line) - len(line.lstrip()), line) for line in _prose_lines(text) if _LIST_ITEM.match(line)]
    if not matches:
        return []
    indent = min(i for i, _ in matches)
    return [line for i, line in matches if i == indent]


@dataclass(frozen=True)
class _ListEntries(_Condition):
    """The number of entries: data rows of the tables when there is a table, else top-level list items."""

    bound: Bound

    def holds(self, response: str) -> bool:
        tables = _tables(response)
        count = sum(len(t.rows) for t in tables) if tables else len(_top_level_items(response))
        return self.bound.contains(count)


class TableChecker(MulDimIFChecker):
    """Row and column limits of markdown (GFM pipe) tables.

    Rows are DATA rows: the header row and the ``---`` separator are not counted, unless the requirement
    says "including the header (row)". Columns are the cells of the header row. Every table of the response
    must meet the limits. The table is optional ("If a table is used ...", "Any table included ...",
    "When presenting data in a table ...": no table passes) or required (any other mention of a table, or
    a row/column minimum without the word "table": no table fails).

    Parses the shared comparators with the units "row(s)" and "column(s)", "a row limit of N", "a column
    limit of four", "no more than 3 rows and 2 columns", "exactly three columns: A, B, and C". A
    requirement about a list that bounds rows without naming a table ("The list must not exceed 10 rows")
    or bounds other things ("The list must contain no more than 5 boss fights", "a maximum of 5
    universities in the list") bounds the number of entries: the data rows when the response has a table,
    else its top-level list items.

    Raises ValueError when no row, column or list-entry bound is stated (e.g. "each question has exactly 4
    answer options", "limit the discussion to no more than three countries").
    """

    instruction_id = "Format_Table"
    kind = "table"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        # Appositions describe the rows, they do not count them: "12 rows, each representing ...".
        norm = re.sub(r"(?:,\s*|\bwith )(?:each|every|one for each)\b[^.;]*", " ", norm)
        norm = re.sub(r"\b(row|column) limit of (\d+)", r"at most \2 \1s", norm)  # "a row limit of 3"
        norm = re.sub(r"\b(\d+)-(row|column) limit\b", r"at most \1 \2s", norm)  # "the 10-row limit"
        rows = _merged(_find_bounds(norm, r"rows?", gap_words=1))
        columns = _merged(_find_bounds(norm, r"columns?", gap_words=1))
        if rows is None and columns is None:
            # "The list must contain no more than 5 boss fights": the entries of the list or table.
            if not re.search(r"\blist\b", norm):
                return []
            entries = _merged(_find_bounds(norm, r"[a-z][a-z-]*", gap_words=2))
            return [_ListEntries(entries)] if entries is not None else []
        if columns is None and re.search(r"\blist\b", norm) and not re.search(r"\btab(?:le|ular)", norm):
            return [_ListEntries(rows)]  # "The list must not exceed 10 rows": rows of a list are its entries
        first_table_clause = next((c for c in _clauses(norm) if re.search(r"\btab(?:le|ular)", c)), None)
        if first_table_clause is not None:
            required = not re.search(r"\b(?:if|when|whenever|any)\b[^.;]*?\btab(?:le|ular)", first_table_clause)
        else:
            required = any(b is not None and (b.lo or 0) >= 1 for b in (rows, columns))
        count_header = bool(re.search(r"\bincluding (?:the )?headers?\b", norm))
        return [_TableBounds(rows, columns, required, count_header)]


@dataclass(frozen=True)
class _HeadingRules(_Condition):
    """Markdown heading requirements (all optional fields are checked when set)."""

    min_headings: int = 1
    levels_present: frozenset[int] = frozenset()
    level_count: Bound | None = None
    heading_count: Bound | None = None
    max_level: int | None = None
    first_line_level: int | None = None  # 0: any level
    titles: tuple[str, ...] = ()

    def holds(self, response: str) -> bool:
        headings = _headings(response)
        levels = {level for level, _ in headings}
        if len(headings) < self.min_headings or not self.levels_present <= levels:
            return False
        if self.level_count is not None and not self.level_count.contains(len(levels)):
            return False
        if self.heading_count is not None and not self.heading_count.contains(len(headings)):
            return False
        if self.max_level is not None and any(level > self.max_level for level in levels):
            return False
        if self.first_line_level is not None:
            first = next((line for line in _prose_lines(response) if line.strip()), "")
            match = _ATX_HEADING.match(first)
            if not match or (self.first_line_level and len(match.group(1)) != self.first_line_level):
                return False
        for title in self.titles:
            wanted = title.lower().strip(" .,:;!?\"'")
            if not any(wanted in text.lower().strip("*_ ") for _, text in headings):
                return False
        return True


@dataclass(frozen=True)
class _LinePresence(_Condition):
    """At least one prose line matches ``pattern`` (or none does, when ``present`` is False)."""

    pattern: re.Pattern[str]
    present: bool = True

    def holds(self, response: str) -> bool:
        found = any(self.pattern.search(line) for line in _prose_lines(response))
        return found == self.present


_HEADING_WORDS = re.compile(r"\b(?:headings?|subheadings?|heading levels?|h[1-6]|sections?|level \d)\b|#")


def _parse_headings(requirement: str, norm: str) -> list[_Condition]:
    # Examples ("such as '## Overview' and '### Details'", "such as H1 and H2") impose nothing.
    text = re.sub(r"\bsuch as\b.*?(?=,\s*(?:to|which|ensuring|as|and)\b|[.;]|$)", " ", norm)
    text = re.sub(r"\be\.g\.,?.*?(?=[.;)]|$)", " ", text)
    if not _HEADING_WORDS.search(text):
        return []
    levels: set[int] = set()
    max_level = None
    for match in re.finditer(r"\b(?:up to|not exceed|no deeper than|maximum) level (\d)\b", text):
        max_level = int(match.group(1))
    text_no_max = re.sub(r"\b(?:up to|not exceed|no deeper than|maximum) level \d\b", " ", text)
    for match in re.finditer(r"\blevels? (\d(?:(?:,|, and| and| or) \d)*)", text_no_max):
        levels.update(int(d) for d in re.findall(r"\d", match.group(1)))
    levels.update(int(d) for d in re.findall(r"\bh([1-6])\b", text_no_max))
    levels.update(len(h) for h in re.findall(r"(?<![#\w])(#{1,6})(?![#\w])", text_no_max))
    level_unit = (
        r"(?:different |distinct |separate )?(?:heading |header )?levels?(?: of (?:headings?|headers?))?(?! \d)"
    )
    level_count = _merged(_find_bounds(text, level_unit, gap_words=0, bare=True))
    if level_count is None and re.search(
        r"\b(?:multiple|different|various) (?:heading )?levels\b|\bsub-?headings?\b|\bsub-?sections?\b", text
    ):
        level_count = Bound(2, None)  # "headings and subheadings", "different levels of headings"
    # "a level 2 heading" and "two levels of headings" are not "2 headings".
    without_levels = re.sub(r"\blevels? \d\b|\blevels? of (?:headings?|headers?)", "level x", text)
    heading_unit = r"(?:markdown )?headings?(?! levels?\b)(?! at\b)"
    heading_count = _merged(_find_bounds(without_levels, heading_unit, gap_words=2))
    first_line_level = None
    begin = re.search(
        r"\b(?:begin|begins|start|starts|starting) with (?:a )?(?:markdown )?(?:heading|level)"
        r"|\bat the beginning\b",
        text,
    )
    if begin:
        near = re.search(r"\blevel (\d)|heading level (\d)", text[begin.start() : begin.end() + 30])
        first_line_level = int(next(g for g in near.groups() if g)) if near else 0
    titles = tuple(
        q.text
        for q in _quoted(_normalise_response(requirement))
        if re.search(
            r"(?:titled|title:?|with the text|main heading should be|heading should be)\s*$",
            _normalise_response(requirement)[: q.start].lower(),
        )
    )
    optional = bool(re.search(r"\b(?:any|if|if any) headings?\b", text))  # "Any headings used must not exceed level 2"
    return [
        _HeadingRules(
            min_headings=0 if optional else 1,
            levels_present=frozenset(levels),
            level_count=level_count,
            heading_count=heading_count,
            max_level=max_level,
            first_line_level=first_line_level,
            titles=titles,
        )
    ]


class MarkdownChecker(MulDimIFChecker):
    """Markdown structure: ATX headings (levels, number of distinct levels, titles), block quotes, bullets, bold.

    Parses: "(include / use / formatted as) a level 2 heading", "heading level 3", "heading levels 1 and 2",
    "H1, H2, and H3", "'##' for main sections" -> those levels must occur; "at least / exactly / a maximum
    of two heading levels", "headings at two levels", "two levels of headings", "multiple heading levels"
    -> number of distinct levels (a bare number means exactly; "subheadings" / "subsections" mean at least
    two); "at least two headings" -> number of headings; "must not exceed level 2" / "up to level 3" ->
    deepest level; "begin with a level 2 heading" / "at the beginning" -> the first line is a heading;
    "titled 'X'" / "the main heading should be 'X'" -> a heading contains X; any other mention of headings
    or sections -> at least one heading ("Any headings used ..." needs none). A level requirement means at
    least one heading of that level ("formatted as a level 2 heading" does not forbid other text). Section
    names given as examples ("such as 'Introduction' and 'Conclusion'") are not enforced. "block
    quote(s)" -> a ``>`` line; "bullet points" -> a bullet item; "bold" -> ``**bold**`` text.

    Raises ValueError when no heading, block quote, bullet or bold requirement is stated.
    """

    instruction_id = "Format_Markdown"
    kind = "markdown"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        conditions: list[_Condition] = []
        if re.search(r"\bblock ?quotes?\b", norm):
            conditions.append(_LinePresence(_BLOCK_QUOTE))
            norm_rest = re.sub(r"\bblock ?quotes?\b", " ", norm)
        else:
            norm_rest = norm
        if re.search(r"\bbullet(?: points?|ed)?\b", norm) and not re.search(r"\bno bullet", norm):
            conditions.append(_LinePresence(_BULLET_ITEM))
        if re.search(r"\bbold\b", norm):
            conditions.append(_LinePresence(_BOLD))
        conditions += _parse_headings(requirement, norm_rest)
        return conditions


@dataclass(frozen=True)
class _JsonDepth(_Condition):
    bound: Bound

    def holds(self, response: str) -> bool:
        value = _first_json(response)
        return value is not None and self.bound.contains(_json_depth(value))


class JsonChecker(MulDimIFChecker):
    """The response holds a JSON object or array whose nesting depth is within a bound.

    The JSON value is the first object (else array) of ```json fences, then other fences, then the raw text
    (see `_first_json`). Depth counts containers: ``{"a": 1}`` is 1, ``{"a": {"b": 1}}`` is 2 (objects and
    arrays alike, as in the authors' checker). Parses: "object nesting levels must not exceed 3", "not
    exceeding two", "at least two levels of nesting", "exactly two levels of nesting", "a nesting level of 2"
    (exactly); a JSON example quoted in the requirement is ignored.

    Raises ValueError when no nesting bound is stated.
    """

    instruction_id = "Format_Json"
    kind = "json"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        if not re.search(r"\bnest", norm):
            return []
        text = re.sub(r"\{.*\}", " ", norm)  # a JSON example inside the requirement
        text = re.sub(r"\bnesting level of (\d+)", r"exactly \1", text)
        bound = _merged(_find_bounds(text, None))
        return [_JsonDepth(bound)] if bound is not None else []


@dataclass(frozen=True)
class _XmlAttributes(_Condition):
    bound: Bound
    per_element: bool
    required: bool

    def holds(self, response: str) -> bool:
        counts = _xml_attribute_counts(response)
        if not counts:
            return not self.required
        if self.per_element:
            return all(self.bound.contains(c) for c in counts)
        return self.bound.contains(sum(counts))


class XmlAttributesChecker(MulDimIFChecker):
    """Number of attributes of the XML elements in the response (```xml fences when present).

    "Each XML element must have no more than three attributes" bounds every element; otherwise ("describe
    the XML data structure with at least 5 attributes", "Number of attributes must be exactly 5") the bound
    is on the total number of attributes. No XML element fails, unless XML is optional ("If you choose to
    use XML ..."). Parses the shared comparators with numbers as digits or words.

    Raises ValueError when no attribute bound is stated.
    """

    instruction_id = "XML_Number of attributes"
    kind = "xml"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        if not re.search(r"\battributes?\b", norm):
            return []
        bound = _merged(_find_bounds(norm, None))
        if bound is None:
            return []
        per_element = bool(re.search(r"\b(?:each|every)(?: xml)? (?:element|tag)\b", norm))
        required = not re.search(r"\b(?:if|when)\b", norm)
        return [_XmlAttributes(bound, per_element, required)]


@dataclass(frozen=True)
class _Chinese(_Condition):
    script: str | None  # "simplified", "traditional" or None (either)
    min_ratio: float = 0.5

    def holds(self, response: str) -> bool:
        letters = [c for c in response if c.isalpha()]
        cjk = [c for c in letters if _is_cjk(c)]
        if not letters or len(cjk) / len(letters) < self.min_ratio:
            return False
        simplified = sum(c in _SIMPLIFIED_ONLY for c in cjk)
        traditional = sum(c in _TRADITIONAL_ONLY for c in cjk)
        if self.script == "simplified":
            return simplified >= traditional
        if self.script == "traditional":
            return traditional >= simplified
        return True


class ChineseChecker(MulDimIFChecker):
    """The response is written in Chinese, optionally in the simplified or the traditional script.

    Heuristic (no language model): at least half of the letters (``str.isalpha``) are CJK ideographs; the
    script is judged from a list of 112 common characters whose simplified and traditional forms differ —
    "Simplified" passes unless traditional-only forms outnumber simplified-only ones, and vice versa (a text
    using none of them passes either). Parses "Simplified Chinese" / 简体 / 簡體, "Traditional Chinese" / 繁體 /
    繁体, and plain "Chinese" / 中文.

    Raises ValueError when the text names no Chinese requirement.
    """

    instruction_id = "Language_Chinese"
    kind = "chinese"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        if re.search(r"simplified|简体|簡體", norm):
            return [_Chinese("simplified")]
        if re.search(r"traditional|繁體|繁体", norm):
            return [_Chinese("traditional")]
        if re.search(r"chinese|中文", norm):
            return [_Chinese(None)]
        return []


@dataclass(frozen=True)
class _StartsWith(_Condition):
    prefix: str
    every_line: bool  # False: the response's first line; True: some line (one of the "each X" units)

    def holds(self, response: str) -> bool:
        lines = [_LEADING_MARKUP.sub("", line) for line in _prose_lines(response)]
        lines = [re.sub(r"^(?:[-*+•]|\d{1,3}[.)])\s+", "", line).lstrip("*_ ") for line in lines if line.strip()]
        if not lines:
            return False
        candidates = lines if self.every_line else lines[:1]
        return any(line.lower().startswith(self.prefix.lower()) for line in candidates)


class IdentifierChecker(MulDimIFChecker):
    """The response (or one of its lines) starts with a quoted identifier, word or letter.

    Parses: "must start with the identifier 'List of Models:'" -> the first line (after markdown heading,
    list and emphasis markers) starts with it; "Each example must start with the word 'Example:'" -> at least
    one line starts with it (the examples themselves cannot be delimited); "must start with the letter 'P'"
    -> the first word starts with that letter. Comparison is case-insensitive.

    Raises ValueError when no quoted start identifier is stated.
    """

    instruction_id = "Content_Identifiers"
    kind = "identifier"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        text = _normalise_response(requirement)
        match = re.search(
            r"\b(?:start|starts|begin|begins)\s+with\s+the\s+(identifier|word|letter|phrase|prefix)\s+"
            r"(['\"])(.+?)\2(?![a-z])",
            text,
            re.IGNORECASE,
        )
        if not match:
            return []
        each = bool(re.search(r"\b(?:each|every)\b", norm))
        return [_StartsWith(match.group(3), every_line=each)]


@dataclass(frozen=True)
class _FullSentences(_Condition):
    def holds(self, response: str) -> bool:
        lines = [line for line in _prose_lines(response) if line.strip()]
        if any(_LIST_ITEM.match(line) or _is_structural(line) for line in lines):
            return False
        return all(_strip_trailing_markup(p)[-1:] in (".", "!", "?") for p in _paragraphs(response))


class PlainTextChecker(MulDimIFChecker):
    """Plain-text form: no bullet points, or full sentences.

    Parses: "No bullet points" -> no line is a bullet item (``-``, ``*``, ``+``, ``•``; numbered items are
    allowed); "in full sentences" -> no list item, heading, table or rule lines, and every paragraph ends with
    ``.``, ``!`` or ``?``.

    Raises ValueError for any other text.
    """

    instruction_id = "Format_Text"
    kind = "text"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        conditions: list[_Condition] = []
        if re.search(r"\bno bullet(?: points?)?\b|\bwithout bullet", norm):
            conditions.append(_LinePresence(_BULLET_ITEM, present=False))
        if re.search(r"\bfull sentences\b|\bcomplete sentences\b", norm):
            conditions.append(_FullSentences())
        return conditions


#: Word limit of a "short blurb" (the requirement gives no number; 100 words is a short paragraph).
BLURB_MAX_WORDS = 100


@dataclass(frozen=True)
class _Blurb(_Condition):
    def holds(self, response: str) -> bool:
        lines = [line for line in _prose_lines(response) if line.strip()]
        if any(_LIST_ITEM.match(line) or _is_structural(line) for line in lines):
            return False
        return len(_paragraphs(response)) == 1 and count_words(response) <= BLURB_MAX_WORDS


class BlurbChecker(MulDimIFChecker):
    """A short blurb: a single paragraph of prose (no list, heading or table) of at most `BLURB_MAX_WORDS` words.

    Parses: "short blurb" / "blurb". Raises ValueError for any other text.
    """

    instruction_id = "Format_Blurb"
    kind = "blurb"

    def _parse(self, requirement: str, norm: str) -> list[_Condition]:
        return [_Blurb()] if re.search(r"\bblurb\b", norm) else []


# ---------------------------------------------------------------------------------------------------
# Registry and entry point
# ---------------------------------------------------------------------------------------------------


# MulDimIF files one constraint kind under several ids (the data's ``category_subcategory`` pairs). Each extra id is
# a subclass that only sets ``instruction_id``: same parsing and check, and its own id in error messages.


class KeywordsMustInclude(KeywordsChecker):
    instruction_id = "Content_Keywords: Must include"


class EnglishCapitalized(EnglishCaseChecker):
    instruction_id = "Language_English: Capitalized"


class EnglishAllUppercase(EnglishCaseChecker):
    instruction_id = "Language_English: All Uppercase"


class WordCountAtMost(WordCountChecker):
    instruction_id = "Length_Words: At most"


class WordCountAtLeast(WordCountChecker):
    instruction_id = "Length_Words: At least"


class WordCountRange(WordCountChecker):
    instruction_id = "Length_Words: Range"


class SentenceCountAtLeast(SentenceCountChecker):
    instruction_id = "Length_Sentences: At least"


class SentenceCountAtMost(SentenceCountChecker):
    instruction_id = "Length_Sentences: At most"


class ParagraphCountAtMost(ParagraphCountChecker):
    instruction_id = "Length_Paragraphs: At most"


class ContentEndingPunctuation(EndingPunctuationChecker):
    instruction_id = "Content_Punctuation: Ending punctuation"


class PunctuationEndingPunctuation(EndingPunctuationChecker):
    instruction_id = "Punctuation_Ending punctuation"


class TableRowLimit(TableChecker):
    instruction_id = "Table_Row limit"


class TableColumnLimit(TableChecker):
    instruction_id = "Table_Column limit"


class FormatTableRowLimit(TableChecker):
    instruction_id = "Format_Table: Row limit"


class FormatTableColumnLimit(TableChecker):
    instruction_id = "Format_Table: Column limit"


class TableTable(TableChecker):
    instruction_id = "Table_Table"


class MarkdownHeadingLevels(MarkdownChecker):
    instruction_id = "Markdown_Heading levels"


class FormatMarkdownHeadingLevels(MarkdownChecker):
    instruction_id = "Format_Markdown: Heading levels"


class MarkdownBlockQuotes(MarkdownChecker):
    instruction_id = "Markdown_Block quotes"


class JsonNestingLevels(JsonChecker):
    instruction_id = "Json_Object nesting levels"


class FormatXml(XmlAttributesChecker):
    instruction_id = "Format_XML"


class ChineseTraditional(ChineseChecker):
    instruction_id = "Language_Chinese: Traditional"


#: Instruction id (``"<category>_<subcategory>"``) -> checker class: the 36 pairs of the MulDimIF data.
REGISTRY: dict[str, type[Checker]] = {
    cls.instruction_id: cls
    for cls in (
        KeywordsChecker, KeywordsMustInclude,
        EnglishCaseChecker, EnglishCapitalized, EnglishAllUppercase,
        WordCountChecker, WordCountAtMost, WordCountAtLeast, WordCountRange,
        SentenceCountChecker, SentenceCountAtLeast, SentenceCountAtMost,
        ParagraphCountChecker, ParagraphCountAtMost,
        EndingPunctuationChecker, ContentEndingPunctuation, PunctuationEndingPunctuation,
        TableChecker, TableRowLimit, TableColumnLimit, FormatTableRowLimit, FormatTableColumnLimit, TableTable,
        MarkdownChecker, MarkdownHeadingLevels, FormatMarkdownHeadingLevels, MarkdownBlockQuotes,
        JsonChecker, JsonNestingLevels,
        XmlAttributesChecker, FormatXml,
        ChineseChecker, ChineseTraditional,
        IdentifierChecker,
        PlainTextChecker,
        BlurbChecker,
    )
}  # fmt: skip


def _requirement_kwargs(instruction_id: str, kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """MulDimIF's kwargs: exactly ``{"requirement": <str>}``. Raises ValueError naming the id otherwise."""
    kwargs = dict(kwargs or {})
    if "requirement" not in kwargs:
        raise ValueError(f"{instruction_id}: missing kwarg 'requirement'")
    unexpected = sorted(set(kwargs) - {"requirement"})
    if unexpected:
        raise ValueError(f"{instruction_id}: unexpected kwargs {unexpected}")
    if not isinstance(kwargs["requirement"], str):
        raise ValueError(f"{instruction_id}: requirement must be a string, got {type(kwargs['requirement']).__name__}")
    return kwargs


@functools.lru_cache(maxsize=8192)
def _parsed(cls: type[Checker], requirement: str) -> Checker:
    return cls(requirement=requirement)


def _parsed_checker(cls: type[Checker], kwargs: dict[str, Any]) -> Checker:
    """The checker for ``cls`` and this requirement, parsed once per (id, requirement) and then cached."""
    return _parsed(cls, kwargs["requirement"])


#: MulDimIF as a verifier family. Kwargs are exactly ``{"requirement": text}`` (`_requirement_kwargs`), a parsed
#: checker is cached per (id, requirement), and an all-whitespace response fails. ``check_loose`` equals ``check``
#: (`strict_only`): the MulDimIF evaluation (Ye et al., 2025) gives one verdict per constraint and has no loose
#: mode, and IFEval's loose variants (markup or first/last line removed) would change what a markup constraint
#: (headings, tables, JSON) asks for; so a MulDimIF run's loose figures are its strict ones.
VERIFIER = VerifierFamily(
    name=FAMILY,
    label="MulDimIF",
    registry=REGISTRY,
    loose_variants=strict_only,
    prepare_kwargs=_requirement_kwargs,
    construct=_parsed_checker,
)
build_checker = VERIFIER.build_checker
check = VERIFIER.check
check_loose = VERIFIER.check_loose


__all__ = [
    "BLURB_MAX_WORDS",
    "FAMILY",
    "REGISTRY",
    "VERIFIER",
    "Bound",
    "MulDimIFChecker",
    "build_checker",
    "check",
    "check_loose",
    *(cls.__name__ for cls in REGISTRY.values()),
]
