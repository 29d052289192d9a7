"""Programmatic constraint synthesis: attach random, verifiable, mutually compatible constraints to plain prompts.

The HiR paper built part of HIR-16K this way: every IFEval / IF-RLVR instruction class builds its own
description from its kwargs, so a constraint can be sampled as (instruction id, kwargs) and its text derived.
`synthesize` does this for a list of task descriptions and returns rows in HIR-16K's verl schema
(`hir_trl.data`): ``data_source`` ``type1`` when every id is an IFEval id, else ``type2``; ``prompt`` the
joined instruction as one user turn; ``reward_model.ground_truth`` a JSON string (as in HIR-16K) of
``{"instruction_id_list": [...], "kwargs": [...]}``; ``extra_info`` ``{"question", "criteria", "q_type",
"index"}``. Criteria are exactly the checkers' ``build_description()`` texts, and the rows load with
`hir_trl.load_hir_dataset`.

The ``hir-trl synth`` command (`hir_trl.cli.synth`) runs it on a prompt file::

    hir-trl synth --dataset_name prompts.jsonl --output out.jsonl --num_constraints 3 --seed 0 \\
        [--families ifeval ifbench] [--dataset_max_rows N] [--dataset_train_split train] [--dataset_config NAME]

Flags are snake_case as ``hir-trl train`` and TRL take them (kebab-case accepted too; ``--config FILE`` reads them
from YAML), parsed by `hir_trl.cli.synth.SynthArguments`.

Which ids are sampled
---------------------
Every id with a kwargs sampler in `SAMPLERS`: the 25 IFEval ids (family ``ifeval``) and the 29 IF-RLVR
training ids of `hir_trl.verifiers.iftrain` (family ``ifbench``). IFBench's 58 out-of-distribution ids are
deliberately NOT sampled: they are IFBench's *test* constraints, and training on them would contaminate the
out-of-distribution evaluation. Prompt-dependent kwargs are derived from the task description x:
``prompt_to_repeat`` is x itself, ``new:copy_span_idx`` takes a character span of x, and
``keywords:exclude_word_harder`` forbids a word of x (as the official generator did). Ids that fix the whole
response (`EXCLUSIVE`: copy the request, pick a fixed answer) are only used when ``n == 1``.

How contradictions are avoided
------------------------------
A set of constraints is kept only when `compatible` accepts it. It combines:

1. `conflicts` - an explicit, symmetric pair table: `EXCLUSIVE` ids conflict with every other id;
   `COMPATIBLE_ONLY` ids (official IFEval "conflicts with everything but ..." entries for ``json_format``,
   ``two_responses``, ``repeat_prompt``, extended to the IF-RLVR ids) combine only with the ids listed;
   `CONFLICT_GROUPS` lists the remaining pairs by theme (the official IFEval conflict table, case, response
   language, paragraph layouts, token wrapping, hyphen-joined sentences, punctuation, word positions, word
   repetition, letters). An id never appears twice.
2. `length_bounds` / `numeric_compatible` - a numeric check on length-like constraints: each constraint
   implies bounds on the number of words and sentences (``less than 50 words`` -> at most 49 words;
   5 paragraphs -> at least 5 sentences and 50 words; a sentence needs at least `MIN_WORDS_PER_SENTENCE`
   words and holds at most `MAX_WORDS_PER_SENTENCE`), and the combined bounds must leave room.
3. `words_compatible` - no word the response must contain (keywords, first/last words, the phrase to
   repeat, the end phrase, a section splitter) is, or contains, a word it must not contain; and
   ``keywords:start_end`` is not combined with both a first-word and a last-word rule (two different words).
4. `texts_compatible` - the fixed texts the response must contain (the phrase to repeat, ``small_n``
   times; the end phrase; the request for ``combination:repeat_prompt``, i.e. x itself; a postscript
   marker; the section headers) must themselves pass every character-level rule of the set, each text
   alone (`TEXT_RULES`: no comma, no dot, no exclamation mark, no adjacent words with consecutive
   initials), and all together every upper bound of the set (`UPPER_BOUND_RULES`: ``less than`` N letters,
   a letter, capital words or keyword occurrences; at most N lowercase words). So ``repeat_prompt`` and
   ``no_comma`` conflict exactly when x has a comma, ``The early bird catches the worm`` never meets
   ``no_adjacent_consecutive``, and a phrase repeated 3 times never meets "at most 5 lowercase words".

Sampling is reproducible: one `random.Random(seed)` drives the id order, the kwargs and the joiner
(``q_type``) of every row, so the same prompts, ``n``, ``seed`` and ``families`` give the same rows.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..verifiers import FAMILIES, ifeval, iftrain, registered_families
from ..verifiers import is_known as _is_known
from .chat import last_user_text
from .loading import read_source
from .templates import join_instruction

logger = logging.getLogger(__name__)

#: HIR-16K joiners (``extra_info.q_type``), see `hir_trl.data.templates`.
Q_TYPES = ("type1", "type2", "type3", "type4", "type5", "type6")

#: Family name -> the registry whose ids `synthesize` may sample for it.
FAMILY_IDS: dict[str, tuple[str, ...]] = {
    "ifeval": tuple(sorted(ifeval.REGISTRY)),
    "ifbench": tuple(sorted(iftrain.REGISTRY)),
}

#: Keywords for kwargs samplers: common nouns (from IFEval's word list), none a substring of another, so
#: regex keyword counts never see one keyword inside another.
VOCABULARY: tuple[str, ...] = (
    "ocean", "garden", "bridge", "candle", "forest", "mirror", "planet", "river", "silver", "window",
    "thunder", "harbor", "meadow", "lantern", "puzzle", "journey", "compass", "blanket", "orchard", "canyon",
    "feather", "market", "violin", "island", "shadow", "rocket", "village", "anchor", "castle", "diamond",
    "engine", "falcon", "glacier", "hammer", "jungle", "kettle", "ladder", "museum", "needle", "pepper",
    "quartz", "saddle", "tunnel", "umbrella", "velvet", "walnut", "yellow", "zipper", "biscuit", "cactus",
    "dolphin", "empire", "fabric", "guitar", "helmet", "insect", "jacket", "kitten", "lemon", "magnet",
)

#: The phrases of the official ``copy:repeat_phrase`` generator.
PHRASES: tuple[str, ...] = (
    "Dance like nobody is watching you",
    "The early bird catches the worm",
    "Time flies when having fun",
    "Every cloud has a silver lining",
    "Actions speak louder than words",
    "Don't judge a book by cover",
    "Live each day to the fullest",
    "All that glitters is not gold",
    "Laughter is the best medicine",
    "The pen is mightier than sword",
)

#: The official ``startend:end_checker`` endings.
END_PHRASES = ("Any other questions?", "Is there anything else I can help with?")

#: Words of a task that ``keywords:exclude_word_harder`` never forbids (too common to avoid).
_COMMON_WORDS = frozenset(
    "that this with from what your have will which their there about would should could into they them then than "
    "when where some more most such only also each been were does make write give about these those other".split()
)

Sampler = Callable[[random.Random, str, set], dict[str, Any]]


# --------------------------------------------------------------------------------------------------
# kwargs samplers
# --------------------------------------------------------------------------------------------------


def _fresh(rng: random.Random, used: set) -> str:
    """A vocabulary word not used yet in this row (recorded in ``used``)."""
    word = rng.choice([w for w in VOCABULARY if w not in used])
    used.add(word)
    return word


def _relation(rng: random.Random) -> str:
    return rng.choice(ifeval.RELATIONS)


def _number_words(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    relation = _relation(rng)
    choices = (50, 80, 100, 150, 200, 300) if relation == "less than" else (50, 100, 150, 200, 300, 400)
    return {"num_words": rng.choice(choices), "relation": relation}


def _number_sentences(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    relation = _relation(rng)
    return {"num_sentences": rng.randint(2, 10) if relation == "less than" else rng.randint(2, 12),
            "relation": relation}


def _letter_frequency(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    relation = _relation(rng)
    if relation == "less than":  # a rare letter, or a long answer could not avoid it
        return {"letter": rng.choice("jqxzkv"), "let_frequency": rng.randint(2, 6), "let_relation": relation}
    return {"letter": rng.choice("etaoinsrhl"), "let_frequency": rng.randint(3, 15), "let_relation": relation}


def _nth_paragraph(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    num = rng.randint(2, 5)
    return {"num_paragraphs": num, "nth_paragraph": rng.randint(1, num), "first_word": _fresh(rng, used)}


def _exclude_word(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z]{4,}", task)} - _COMMON_WORDS - used)
    keyword = rng.choice(words) if words else _fresh(rng, used)
    used.add(keyword)
    return {"keyword": keyword}


def _copy_span(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    start = rng.randint(0, len(task) - 2)
    return {"prompt_to_repeat": task, "n_start": start, "n_end": rng.randint(start + 1, min(len(task), start + 80))}


def _capital_frequency(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    relation = _relation(rng)  # "less than 2" would even forbid a second "I"
    return {"capital_frequency": rng.randint(5, 20) if relation == "less than" else rng.randint(2, 20),
            "capital_relation": relation}


def _count_increment(rng: random.Random, task: str, used: set) -> dict[str, Any]:
    return {"keyword1": _fresh(rng, used), "keyword2": _fresh(rng, used)}


def _const(kwargs: dict[str, Any]) -> Sampler:
    return lambda rng, task, used: dict(kwargs)


#: Instruction id -> kwargs sampler ``(rng, task, used_words) -> kwargs``.
SAMPLERS: dict[str, Sampler] = {
    # IFEval
    "keywords:existence": lambda rng, task, used: {"keywords": [_fresh(rng, used) for _ in range(rng.randint(1, 3))]},
    "keywords:frequency": lambda rng, task, used: {"keyword": _fresh(rng, used), "frequency": rng.randint(1, 4),
                                                   "relation": _relation(rng)},
    "keywords:forbidden_words": lambda rng, task, used: {
        "forbidden_words": [_fresh(rng, used) for _ in range(rng.randint(1, 3))]},
    "keywords:letter_frequency": _letter_frequency,
    "language:response_language": lambda rng, task, used: {"language": rng.choice(sorted(ifeval.LANGUAGE_CODES))},
    "length_constraints:number_sentences": _number_sentences,
    "length_constraints:number_paragraphs": lambda rng, task, used: {"num_paragraphs": rng.randint(2, 5)},
    "length_constraints:number_words": _number_words,
    "length_constraints:nth_paragraph_first_word": _nth_paragraph,
    "detectable_content:number_placeholders": lambda rng, task, used: {"num_placeholders": rng.randint(1, 4)},
    "detectable_content:postscript": lambda rng, task, used: {"postscript_marker": rng.choice(("P.S.", "P.P.S"))},
    "detectable_format:number_bullet_lists": lambda rng, task, used: {"num_bullets": rng.randint(2, 5)},
    "detectable_format:constrained_response": _const({}),
    "detectable_format:number_highlighted_sections": lambda rng, task, used: {"num_highlights": rng.randint(1, 4)},
    "detectable_format:multiple_sections": lambda rng, task, used: {
        "section_spliter": rng.choice(("Section", "SECTION")), "num_sections": rng.randint(2, 5)},
    "detectable_format:json_format": _const({}),
    "detectable_format:title": _const({}),
    "combination:two_responses": _const({}),
    "combination:repeat_prompt": lambda rng, task, used: {"prompt_to_repeat": task},
    "startend:end_checker": lambda rng, task, used: {"end_phrase": rng.choice(END_PHRASES)},
    "change_case:capital_word_frequency": _capital_frequency,
    "change_case:english_capital": _const({}),
    "change_case:english_lowercase": _const({}),
    "punctuation:no_comma": _const({}),
    "startend:quotation": _const({}),
    # IF-RLVR training ids (family "ifbench")
    "copy:repeat_phrase": lambda rng, task, used: {"phrase": rng.choice(PHRASES), "small_n": rng.randint(2, 3)},
    "copy:copy": lambda rng, task, used: {"prompt_to_repeat": task},
    "copy:copying_simple": lambda rng, task, used: {"prompt_to_repeat": task},
    "copy:copying_multiple": lambda rng, task, used: {"prompt_to_repeat": task, "N": rng.randint(2, 3)},
    "new:copy_span_idx": _copy_span,
    "detectable_format:sentence_hyphens": _const({}),
    "detectable_format:square_brackets": _const({}),
    "detectable_format:bigram_wrapping": _const({}),
    "keywords:no_adjacent_consecutive": _const({}),
    "keywords:word_once": lambda rng, task, used: {"keyword": _fresh(rng, used)},
    "keywords:word_count_different_numbers": lambda rng, task, used: {
        "keyword": _fresh(rng, used), "frequency": rng.randint(1, 4), "relation": _relation(rng)},
    "keywords:exclude_word_harder": _exclude_word,
    "keywords:palindrome": _const({}),
    "keywords:keyword_specific_position": lambda rng, task, used: {"keyword": _fresh(rng, used),
                                                                   "n": rng.randint(1, 5), "m": rng.randint(1, 10)},
    "keywords:start_end": _const({}),
    "paragraphs:paragraphs": _const({}),
    "paragraphs:paragraphs2": _const({}),
    "first_word:first_word_sent": lambda rng, task, used: {"first_word": _fresh(rng, used)},
    "first_word:first_word_answer": lambda rng, task, used: {"first_word": _fresh(rng, used)},
    "last_word:last_word_sent": lambda rng, task, used: {"last_word": _fresh(rng, used)},
    "last_word:last_word_answer": lambda rng, task, used: {"last_word": _fresh(rng, used)},
    "punctuation:punctuation_dot": _const({}),
    "punctuation:punctuation_exclamation": _const({}),
    "count:lowercase_counting": lambda rng, task, used: {"N": rng.randint(5, 50)},
    "count:counting_composition": lambda rng, task, used: {"n_sent": rng.randint(1, 3), "n_words": rng.randint(3, 12)},
    "count:count_unique": _const({}),
    "count:count_increment_word": _count_increment,
    "letters:letter_counting": lambda rng, task, used: {"N": rng.choice((100, 200, 400, 800, 1500)),
                                                        "relation": _relation(rng)},
    "letters:letter_counting2": _letter_frequency,
}


# --------------------------------------------------------------------------------------------------
# Conflict table
# --------------------------------------------------------------------------------------------------

#: Ids that fix the whole response (copy the request verbatim, or pick one of three fixed answers): they
#: conflict with every other id, so they are only sampled for ``n == 1``.
EXCLUSIVE = frozenset({
    "detectable_format:constrained_response",
    "copy:copy",
    "copy:copying_simple",
    "copy:copying_multiple",
    "new:copy_span_idx",
})

#: Id -> the only ids it may be combined with. The IFEval part is the official conflict table's "conflicts
#: with every instruction except ..." entries; the IF-RLVR ids added are those that stay satisfiable.
COMPATIBLE_ONLY: dict[str, frozenset[str]] = {
    "detectable_format:json_format": frozenset({
        "keywords:forbidden_words", "keywords:existence",  # official
        "keywords:word_once", "keywords:word_count_different_numbers", "keywords:exclude_word_harder",
        "keywords:palindrome", "count:count_increment_word", "letters:letter_counting", "letters:letter_counting2",
        "punctuation:punctuation_exclamation",
    }),
    "combination:two_responses": frozenset({
        "keywords:forbidden_words", "keywords:existence", "language:response_language", "detectable_format:title",
        "punctuation:no_comma",  # official
        "keywords:exclude_word_harder", "keywords:palindrome", "punctuation:punctuation_dot",
        "punctuation:punctuation_exclamation", "letters:letter_counting", "letters:letter_counting2",
        "count:lowercase_counting", "keywords:no_adjacent_consecutive", "keywords:word_once",
        "keywords:word_count_different_numbers", "count:count_increment_word", "first_word:first_word_answer",
        "last_word:last_word_answer", "last_word:last_word_sent",
    }),
    "combination:repeat_prompt": frozenset({
        "keywords:existence", "detectable_format:title", "punctuation:no_comma",  # official
        "keywords:palindrome",
    }),
}

_WRAPPING = ("detectable_format:square_brackets", "detectable_format:bigram_wrapping")
_PARAGRAPH_LAYOUTS = (
    "length_constraints:number_paragraphs", "length_constraints:nth_paragraph_first_word", "paragraphs:paragraphs",
    "paragraphs:paragraphs2", "count:counting_composition",
)

#: Theme -> (ids, ids they conflict with). Every id of the first tuple conflicts with every id of the second;
#: ``None`` as the second tuple means the ids of the first conflict with each other.
CONFLICT_GROUPS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    # The official IFEval INSTRUCTION_CONFLICTS pairs (besides the COMPATIBLE_ONLY entries).
    "ifeval: response language": (("language:response_language",), (
        "detectable_format:multiple_sections", "keywords:existence", "keywords:frequency",
        "keywords:forbidden_words", "startend:end_checker", "change_case:english_capital",
        "change_case:english_lowercase")),
    "ifeval: paragraphs": (("length_constraints:number_paragraphs",), (
        "length_constraints:nth_paragraph_first_word", "length_constraints:number_sentences")),
    "ifeval: sections": (("detectable_format:multiple_sections",), ("detectable_format:number_highlighted_sections",)),
    # "SECTION 1" headers are capital words.
    "capital words vs sections": (("change_case:capital_word_frequency",), ("detectable_format:multiple_sections",)),
    "ifeval: case": (("change_case:capital_word_frequency", "change_case:english_lowercase",
                      "change_case:english_capital"), None),
    "ifeval: quotation": (("startend:quotation",), ("detectable_format:title",)),
    # A response in another language cannot hold given English words or letter counts.
    "response language vs English words": (("language:response_language",), (
        "keywords:letter_frequency", "length_constraints:nth_paragraph_first_word",
        "change_case:capital_word_frequency", "copy:repeat_phrase", "keywords:word_once",
        "keywords:word_count_different_numbers", "keywords:keyword_specific_position", "first_word:first_word_sent",
        "first_word:first_word_answer", "last_word:last_word_sent", "last_word:last_word_answer",
        "count:count_increment_word", "letters:letter_counting", "letters:letter_counting2",
        "count:counting_composition")),
    # Case-sensitive matches ("Section 1", the phrase's capital first word) or lowercase-word limits.
    "lowercase": (("change_case:english_lowercase",), (
        "detectable_format:multiple_sections", "count:lowercase_counting", "copy:repeat_phrase")),
    "uppercase": (("change_case:english_capital",), ("detectable_format:multiple_sections", "copy:repeat_phrase")),
    # At most one paragraph layout (different separators or counts).
    "paragraph layouts": (_PARAGRAPH_LAYOUTS, None),
    "counting composition": (("count:counting_composition",), (
        "length_constraints:number_sentences", "detectable_format:number_bullet_lists",
        "detectable_format:multiple_sections", "detectable_format:title", "detectable_content:postscript",
        "startend:end_checker", "copy:repeat_phrase")),
    # Every token wrapped: no room for markup, dividers, titles or exact token positions.
    "token wrapping": (_WRAPPING, (*_WRAPPING,
        "detectable_format:title", "startend:quotation", "detectable_format:number_bullet_lists",
        "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
        "detectable_content:postscript", "startend:end_checker", "length_constraints:number_paragraphs",
        "paragraphs:paragraphs", "count:counting_composition", "keywords:start_end",
        "keywords:keyword_specific_position", "length_constraints:nth_paragraph_first_word",
        "detectable_format:sentence_hyphens", "copy:repeat_phrase", "first_word:first_word_sent",
        "last_word:last_word_sent")),
    # One line of hyphen-joined sentences: no bullets ("- "), paragraphs, sections, dots or wrappers.
    "sentence hyphens": (("detectable_format:sentence_hyphens",), (
        "detectable_format:number_bullet_lists", *_PARAGRAPH_LAYOUTS, "detectable_format:multiple_sections",
        "detectable_content:postscript", "startend:quotation", "detectable_format:title",
        "punctuation:punctuation_dot", "keywords:keyword_specific_position")),
    # "P.S." and sentence counting need dots.
    "no dots": (("punctuation:punctuation_dot",), (
        "detectable_content:postscript", "count:counting_composition", "keywords:keyword_specific_position",
        "length_constraints:number_sentences", "detectable_format:sentence_hyphens")),
    # Comma-separated values need commas (IFBench test ids: listed for completeness, never sampled).
    "no comma": (("punctuation:no_comma",), ("custom:csv_city", "custom:csv_quotes", "custom:csv_special_character")),
    # Word positions: two rules on the same first/last word, or structure that owns the first/last word.
    "first word of each sentence": (("first_word:first_word_sent",), (
        "first_word:first_word_answer", "length_constraints:nth_paragraph_first_word",
        "keywords:keyword_specific_position", "copy:repeat_phrase", "detectable_format:title",
        "detectable_format:number_bullet_lists", "detectable_format:multiple_sections",
        "detectable_content:postscript", "startend:end_checker", "count:count_unique")),
    # Dividers, titles, bullets and headers glue onto the next sentence and shift its first words.
    "sentence starts vs markup": (("first_word:first_word_sent", "keywords:keyword_specific_position"), (
        "detectable_format:title", "startend:quotation", "detectable_format:number_bullet_lists",
        "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
        "length_constraints:number_paragraphs", "paragraphs:paragraphs", "count:counting_composition")),
    "last word of each sentence": (("last_word:last_word_sent",), (
        "last_word:last_word_answer", "startend:end_checker", "count:count_unique", "copy:repeat_phrase")),
    "first word of the answer": (("first_word:first_word_answer",), (
        "detectable_format:title", "length_constraints:nth_paragraph_first_word",
        "keywords:keyword_specific_position")),
    "last word of the answer": (("last_word:last_word_answer",), ("startend:end_checker",)),
    "same first and last word": (("keywords:start_end",), (
        "startend:end_checker", "startend:quotation", "detectable_format:title")),
    # No repeated word vs rules that repeat words.
    "unique words": (("count:count_unique",), (
        "copy:repeat_phrase", "keywords:frequency", "keywords:word_count_different_numbers",
        "count:count_increment_word", "detectable_format:multiple_sections", "keywords:start_end")),
    # Two rules on letter counts could bound the same letter both ways.
    "letters": (("keywords:letter_frequency",), ("letters:letter_counting2",)),
}


def _build_pairs() -> frozenset[frozenset[str]]:
    pairs = set()
    for ids, others in CONFLICT_GROUPS.values():
        for a, b in itertools.product(ids, ids if others is None else others):
            if a != b:
                pairs.add(frozenset((a, b)))
    return frozenset(pairs)


#: Every conflicting pair of `CONFLICT_GROUPS`, unordered.
CONFLICT_PAIRS: frozenset[frozenset[str]] = _build_pairs()


def conflicts(a: str, b: str) -> bool:
    """Return True when ids ``a`` and ``b`` must not be combined (symmetric; an id conflicts with itself)."""
    if a == b or a in EXCLUSIVE or b in EXCLUSIVE:
        return True
    for x, y in ((a, b), (b, a)):
        if x in COMPATIBLE_ONLY and y not in COMPATIBLE_ONLY[x]:
            return True
    return frozenset((a, b)) in CONFLICT_PAIRS


# --------------------------------------------------------------------------------------------------
# Numeric compatibility of length-like constraints
# --------------------------------------------------------------------------------------------------

#: A sentence holds at least this many words (``\\w+`` tokens) ...
MIN_WORDS_PER_SENTENCE = 3
#: ... and at most this many.
MAX_WORDS_PER_SENTENCE = 40
#: A paragraph holds at least this many words (and one sentence).
MIN_WORDS_PER_PARAGRAPH = 10


@dataclass(frozen=True)
class Bounds:
    """Bounds a constraint puts on the response's word and sentence counts (inclusive)."""

    min_words: int = 0
    max_words: float = math.inf
    min_sentences: int = 0
    max_sentences: float = math.inf

    def __and__(self, other: Bounds) -> Bounds:
        return Bounds(max(self.min_words, other.min_words), min(self.max_words, other.max_words),
                      max(self.min_sentences, other.min_sentences), min(self.max_sentences, other.max_sentences))

    def feasible(self) -> bool:
        """True when some response length satisfies every bound (see the module docstring)."""
        return (
            self.min_words <= self.max_words
            and self.min_sentences <= self.max_sentences
            and self.min_sentences * MIN_WORDS_PER_SENTENCE <= self.max_words
            and self.min_words <= self.max_sentences * MAX_WORDS_PER_SENTENCE
        )


def _paragraphs(count: int) -> Bounds:
    return Bounds(min_words=count * MIN_WORDS_PER_PARAGRAPH, min_sentences=count)


def length_bounds(instruction_id: str, kwargs: Mapping[str, Any]) -> Bounds:
    """The word/sentence bounds one constraint implies (no bound for ids that do not constrain length)."""
    k = kwargs
    at_least = k.get("relation") == "at least"
    if instruction_id == "length_constraints:number_words":
        return Bounds(min_words=k["num_words"]) if at_least else Bounds(max_words=k["num_words"] - 1)
    if instruction_id == "length_constraints:number_sentences":
        return Bounds(min_sentences=k["num_sentences"]) if at_least else Bounds(max_sentences=k["num_sentences"] - 1)
    if instruction_id in ("length_constraints:number_paragraphs", "length_constraints:nth_paragraph_first_word"):
        return _paragraphs(k["num_paragraphs"])
    if instruction_id in ("paragraphs:paragraphs", "paragraphs:paragraphs2"):
        return _paragraphs(2)
    if instruction_id == "count:counting_composition":
        words, sentences = 3 * k["n_sent"] * k["n_words"], 3 * k["n_sent"]
        return Bounds(words, words, sentences, sentences)
    if instruction_id == "detectable_format:number_bullet_lists":
        return Bounds(min_words=3 * k["num_bullets"])
    if instruction_id == "detectable_format:multiple_sections":
        return Bounds(min_words=5 * k["num_sections"])
    if instruction_id == "detectable_format:number_highlighted_sections":
        return Bounds(min_words=k["num_highlights"])
    if instruction_id == "detectable_content:number_placeholders":
        return Bounds(min_words=k["num_placeholders"])
    if instruction_id == "keywords:existence":
        return Bounds(min_words=len(k["keywords"]))
    if instruction_id in ("keywords:frequency", "keywords:word_count_different_numbers") and at_least:
        return Bounds(min_words=k["frequency"])
    if instruction_id == "change_case:capital_word_frequency" and k.get("capital_relation") == "at least":
        return Bounds(min_words=k["capital_frequency"])
    if instruction_id == "letters:letter_counting":  # a word holds 1 to ~12 letters
        return Bounds(min_words=math.ceil(k["N"] / 12)) if at_least else Bounds(max_words=k["N"] - 1)
    if instruction_id == "copy:repeat_phrase":
        return Bounds(min_words=k["small_n"] * len(k["phrase"].split()))
    if instruction_id == "keywords:keyword_specific_position":
        return Bounds(min_words=(k["n"] - 1) * MIN_WORDS_PER_SENTENCE + k["m"], min_sentences=k["n"])
    if instruction_id == "detectable_format:sentence_hyphens":
        return Bounds(min_sentences=2)
    if instruction_id == "count:count_increment_word":
        return Bounds(min_words=3)
    if instruction_id == "keywords:start_end":
        return Bounds(min_words=2)
    return Bounds()


def numeric_compatible(constraints: Iterable[tuple[str, Mapping[str, Any]]]) -> bool:
    """True when the combined `length_bounds` of ``(instruction_id, kwargs)`` pairs are `Bounds.feasible`."""
    combined = Bounds()
    for instruction_id, kwargs in constraints:
        combined = combined & length_bounds(instruction_id, kwargs)
    return combined.feasible()


# --------------------------------------------------------------------------------------------------
# Required vs forbidden words
# --------------------------------------------------------------------------------------------------


def _required_words(instruction_id: str, kwargs: Mapping[str, Any]) -> list[str]:
    k = kwargs
    if instruction_id == "keywords:existence":
        return list(k["keywords"])
    if instruction_id in ("keywords:frequency", "keywords:word_count_different_numbers"):
        return [k["keyword"]] if k["relation"] == "at least" and k["frequency"] > 0 else []
    if instruction_id in ("keywords:word_once", "keywords:keyword_specific_position"):
        return [k["keyword"]]
    if instruction_id in ("first_word:first_word_sent", "first_word:first_word_answer",
                          "length_constraints:nth_paragraph_first_word"):
        return [k["first_word"]]
    if instruction_id in ("last_word:last_word_sent", "last_word:last_word_answer"):
        return [k["last_word"]]
    if instruction_id == "count:count_increment_word":
        return [k["keyword1"], k["keyword2"]]
    if instruction_id == "copy:repeat_phrase":
        return k["phrase"].split()
    if instruction_id == "startend:end_checker":
        return re.findall(r"\w+", k["end_phrase"])
    if instruction_id == "detectable_format:multiple_sections":
        return [k["section_spliter"]]
    return []


def _forbidden_words(instruction_id: str, kwargs: Mapping[str, Any]) -> list[str]:
    if instruction_id == "keywords:forbidden_words":
        return list(kwargs["forbidden_words"])
    if instruction_id == "keywords:exclude_word_harder":
        return [kwargs["keyword"]]
    return []


_FIRST_WORD_IDS = frozenset({"first_word:first_word_sent", "first_word:first_word_answer"})
_LAST_WORD_IDS = frozenset({"last_word:last_word_sent", "last_word:last_word_answer"})


def words_compatible(constraints: Iterable[tuple[str, Mapping[str, Any]]]) -> bool:
    """True when no required word equals, contains or is contained in a forbidden word (case-insensitive),
    and ``keywords:start_end`` does not meet both a first-word and a last-word rule (their words differ)."""
    constraints = list(constraints)
    required = {w.lower() for i, k in constraints for w in _required_words(i, k)}
    forbidden = {w.lower() for i, k in constraints for w in _forbidden_words(i, k)}
    if any(f in r or r in f for r in required for f in forbidden):
        return False
    ids = {i for i, _ in constraints}
    return not ("keywords:start_end" in ids and ids & _FIRST_WORD_IDS and ids & _LAST_WORD_IDS)


#: Character-level rules that hold for every part of a response: a fixed text the response must contain
#: has to pass them too.
TEXT_RULES = (
    "punctuation:no_comma",
    "punctuation:punctuation_dot",
    "punctuation:punctuation_exclamation",
    "keywords:no_adjacent_consecutive",
)


#: Upper bounds on counts over the whole response: the fixed texts, together, must stay under them.
UPPER_BOUND_RULES = (
    "keywords:letter_frequency",
    "letters:letter_counting2",
    "letters:letter_counting",
    "count:lowercase_counting",
    "change_case:capital_word_frequency",
    "keywords:frequency",
    "keywords:word_count_different_numbers",
)


def _is_upper_bound(instruction_id: str, kwargs: Mapping[str, Any]) -> bool:
    if instruction_id not in UPPER_BOUND_RULES:
        return False
    relation = kwargs.get("relation", kwargs.get("let_relation", kwargs.get("capital_relation")))
    return instruction_id == "count:lowercase_counting" or relation == "less than"


def _checker(instruction_id: str, kwargs: Mapping[str, Any]):
    return (ifeval.REGISTRY.get(instruction_id) or iftrain.REGISTRY[instruction_id])(**kwargs)


def _required_texts(instruction_id: str, kwargs: Mapping[str, Any]) -> list[str]:
    if instruction_id == "copy:repeat_phrase":
        return [kwargs["phrase"]] * kwargs["small_n"]
    if instruction_id == "startend:end_checker":
        return [kwargs["end_phrase"]]
    if instruction_id in ("combination:repeat_prompt", "copy:copy", "copy:copying_simple", "copy:copying_multiple"):
        return [kwargs["prompt_to_repeat"]]
    if instruction_id == "detectable_content:postscript":
        return [kwargs["postscript_marker"]]
    if instruction_id == "detectable_format:multiple_sections":
        return [f"{kwargs['section_spliter']} {i}" for i in range(1, kwargs["num_sections"] + 1)]
    return []


def texts_compatible(constraints: Iterable[tuple[str, Mapping[str, Any]]]) -> bool:
    """True when the fixed texts the response must contain pass the set's `TEXT_RULES` (each text alone)
    and its `UPPER_BOUND_RULES` (all texts together)."""
    constraints = list(constraints)
    texts = [text for i, k in constraints for text in _required_texts(i, k)]
    if not texts:
        return True
    for instruction_id, kwargs in constraints:
        if instruction_id in TEXT_RULES:
            checker = _checker(instruction_id, kwargs)
            if not all(checker.check_following(text) for text in texts):
                return False
        elif _is_upper_bound(instruction_id, kwargs):
            if not _checker(instruction_id, kwargs).check_following("\n".join(texts)):
                return False
    return True


def compatible(constraints: Sequence[tuple[str, Mapping[str, Any]]]) -> bool:
    """True when the ``(instruction_id, kwargs)`` pairs can all be met by one response.

    Combines the pair table (`conflicts`), the numeric check (`numeric_compatible`), the word check
    (`words_compatible`) and the fixed-text check (`texts_compatible`; request-dependent rules read the
    request from ``prompt_to_repeat``).
    """
    ids = [instruction_id for instruction_id, _ in constraints]
    if any(conflicts(a, b) for a, b in itertools.combinations(ids, 2)):
        return False
    return numeric_compatible(constraints) and words_compatible(constraints) and texts_compatible(constraints)


# --------------------------------------------------------------------------------------------------
# Synthesis
# --------------------------------------------------------------------------------------------------


def registered_samplers(family: str) -> dict[str, Sampler]:
    """``"family:instruction_id"`` -> kwargs sampler for the ids of a family registered with
    `hir_trl.register_verifier` that `synthesize` can write: those with a ``description``, and either a
    ``sample_kwargs`` or a checker that needs no kwargs. The others are skipped (logged at INFO)."""
    samplers: dict[str, Sampler] = {}
    for instruction_id, cls in FAMILIES[family].REGISTRY.items():
        sampler = getattr(cls, "sample_kwargs", None)
        if getattr(cls, "description", None) is None:
            logger.info("synth skips %s/%s: registered without a description", family, instruction_id)
            continue
        if sampler is None:
            try:
                cls()
            except TypeError:
                logger.info("synth skips %s/%s: it needs kwargs and was registered without sample_kwargs", family,
                            instruction_id)
                continue
            samplers[f"{family}:{instruction_id}"] = lambda rng, task, used: {}
        else:
            samplers[f"{family}:{instruction_id}"] = (
                lambda rng, task, used, draw=sampler, name=f"{family}/{instruction_id}": _sampled(name, draw, rng, task))
    return samplers


def _sampled(name: str, draw: Callable[..., Any], rng: random.Random, task: str) -> dict[str, Any]:
    """The kwargs ``draw`` (a registered ``sample_kwargs``) gives, or a ValueError naming the verifier."""
    try:
        kwargs = draw(rng, task)
    except Exception as exc:  # noqa: BLE001 - the user's sampler: one line naming it
        raise ValueError(f"sample_kwargs of {name} failed: {type(exc).__name__}: {exc} (it is called as "
                         "sample_kwargs(rng: random.Random, task: str) -> dict)") from None
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ValueError(f"sample_kwargs of {name} returned {type(kwargs).__name__} {kwargs!r:.60}, not a dict of "
                         "keyword arguments")
    return dict(kwargs)


def _description(family: str, instruction_id: str, kwargs: Mapping[str, Any]) -> str:
    """The constraint text of a registered id for ``kwargs``; its checker refusing the kwargs, or a description
    template or function that fails, is a ValueError naming the verifier."""
    try:
        return _registry(family)[instruction_id](**kwargs).build_description()
    except Exception as exc:  # noqa: BLE001 - the user's description or kwargs: one line naming them
        raise ValueError(f"the description of {family}/{instruction_id} failed for kwargs {kwargs!r:.80}: "
                         f"{type(exc).__name__}: {exc} (register_verifier's description is formatted with "
                         "str.format(**kwargs), or called as description(**kwargs) -> str)") from None


def _families() -> list[str]:
    """The families `synthesize` accepts: ``ifeval``, ``ifbench`` and every registered family."""
    return sorted(FAMILY_IDS) + registered_families()


def _samplers(families: Sequence[str]) -> dict[str, Sampler]:
    unknown = sorted(set(families) - set(_families()))
    if unknown or not families:
        raise ValueError(f"families must be a non-empty subset of {_families()}, got {list(families)}")
    samplers = {i: SAMPLERS[i] for family in families if family in FAMILY_IDS for i in FAMILY_IDS[family]
                if i in SAMPLERS}
    for family in families:
        if family not in FAMILY_IDS:
            samplers.update(registered_samplers(family))
    return samplers


def _resolve_family(data_source: str, instruction_id: str) -> str:
    """The family `hir_trl.data` will verify this id with (type2 rows prefer the IFBench family)."""
    if data_source == "type2" and _is_known("ifbench", instruction_id):
        return "ifbench"
    return "ifeval" if instruction_id in ifeval.REGISTRY else "ifbench"


def _registry(family: str) -> Mapping[str, Any]:
    return FAMILIES[family].REGISTRY


def sample_constraints(rng: random.Random, task: str, n: int, candidate_ids: Sequence[str],
                       max_attempts: int = 50, samplers: Mapping[str, Sampler] | None = None
                       ) -> list[tuple[str, dict[str, Any]]]:
    """Draw ``n`` mutually `compatible` ``(instruction_id, kwargs)`` pairs for ``task``.

    Ids are tried in an order shuffled by ``rng``; each one that does not conflict with those already kept
    gets sampled kwargs (``samplers``, default `SAMPLERS`), and is kept when the whole set stays `compatible`.

    Raises:
        ValueError: ``n`` < 1, or no compatible set of ``n`` constraints was found in ``max_attempts`` tries.
    """
    if n < 1:
        raise ValueError(f"num_constraints must be >= 1, got {n}")
    samplers = SAMPLERS if samplers is None else samplers
    ids = [i for i in candidate_ids if n == 1 or i not in EXCLUSIVE]
    if len(task) < 2:
        ids = [i for i in ids if i != "new:copy_span_idx"]
    for _ in range(max_attempts):
        order = list(ids)
        rng.shuffle(order)
        chosen: list[tuple[str, dict[str, Any]]] = []
        used: set[str] = set()
        for instruction_id in order:
            if len(chosen) == n:
                break
            if any(conflicts(instruction_id, other) for other, _ in chosen):
                continue
            trial_used = set(used)
            kwargs = samplers[instruction_id](rng, task, trial_used)
            if compatible([*chosen, (instruction_id, kwargs)]):
                chosen.append((instruction_id, kwargs))
                used = trial_used
        if len(chosen) == n:
            return chosen
    raise ValueError(f"could not find {n} compatible constraints among {len(ids)} ids for task {task[:60]!r}; "
                     "lower num_constraints")


def synthesize(prompts: Sequence[str], n: int, seed: int, families: Sequence[str] = ("ifeval", "ifbench")
               ) -> list[dict[str, Any]]:
    """Attach ``n`` random compatible constraints to every prompt; return HIR-16K-format rows.

    Args:
        prompts: the task descriptions x (plain text, one per row).
        n: constraints per prompt.
        seed: seed of the single `random.Random` that draws ids, kwargs and joiners for all rows.
        families: ``"ifeval"`` (IFEval's 25 ids), ``"ifbench"`` (the 29 IF-RLVR training ids) and/or families
            registered with `hir_trl.register_verifier` (their ids with a description, `registered_samplers`).

    Returns:
        One row per prompt, in order (see the module docstring for the schema). ``extra_info.criteria`` are
        the checkers' ``build_description()`` texts, ``prompt`` their join with ``extra_info.q_type``. A row with
        a constraint of a registered family is a native row instead (``task``, ``constraints`` with ``family``,
        ``instruction_id``, ``kwargs`` and ``text``, ``template`` = the joiner, ``prompt``), since HIR-16K's
        ``data_source`` names only the built-in families.

    Raises:
        ValueError: unknown family, an empty prompt, ``n`` < 1, or no compatible set found for a prompt.
    """
    samplers = _samplers(families)
    candidates = sorted(samplers)
    rng = random.Random(seed)
    rows = []
    for index, task in enumerate(prompts):
        if not isinstance(task, str) or not task.strip():
            raise ValueError(f"prompt {index} is empty or not a string: {task!r}")
        task = task.strip()
        constraints = sample_constraints(rng, task, n, candidates, samplers=samplers)
        ids = [instruction_id for instruction_id, _ in constraints]
        if any(i not in SAMPLERS for i in ids):  # a registered family's id: a native row
            rows.append(_native_row(task, index, seed, constraints, rng.choice(Q_TYPES)))
            continue
        data_source = "type1" if all(i in ifeval.REGISTRY for i in ids) else "type2"
        criteria = [_registry(_resolve_family(data_source, i))[i](**kwargs).build_description()
                    for i, kwargs in constraints]
        q_type = rng.choice(Q_TYPES)
        truth = {"instruction_id_list": ids, "kwargs": [kwargs for _, kwargs in constraints]}
        rows.append({
            "id": f"synth-{seed}-{index}",
            "data_source": data_source,
            "prompt": [{"role": "user", "content": join_instruction(task, criteria, q_type)}],
            "ability": "instruction_following",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, ensure_ascii=False)},
            "extra_info": {"index": index, "question": task, "criteria": criteria, "q_type": q_type},
        })
    return rows


def _native_row(task: str, index: int, seed: int, constraints: Sequence[tuple[str, dict[str, Any]]],
                q_type: str) -> dict[str, Any]:
    """A native-format row (`hir_trl.data`) for constraints that include a registered family's
    ``"family:instruction_id"``."""
    items = []
    for name, kwargs in constraints:
        if name in SAMPLERS:
            family, instruction_id = ("ifeval" if name in ifeval.REGISTRY else "ifbench"), name
        else:
            family, instruction_id = name.split(":", 1)
        text = _description(family, instruction_id, kwargs)
        items.append({"text": text, "family": family, "instruction_id": instruction_id, "kwargs": kwargs})
    return {"id": f"synth-{seed}-{index}", "task": task, "constraints": items, "template": q_type,
            "prompt": join_instruction(task, [item["text"] for item in items], q_type)}


# --------------------------------------------------------------------------------------------------
# Input and output
# --------------------------------------------------------------------------------------------------


def prompt_of(row: Mapping[str, Any]) -> str | None:
    """The task text of an input row, or None when it has none.

    In order: ``extra_info.question`` (an HIR-16K row: its plain task, without its constraints), a string
    ``prompt``, ``task`` (native rows), the last user turn of a chat ``prompt`` or of ``messages``.
    """
    extra = row.get("extra_info")
    if isinstance(extra, Mapping) and isinstance(extra.get("question"), str):
        return extra["question"]
    for key in ("prompt", "task"):
        if isinstance(row.get(key), str):
            return row[key]
    for key in ("prompt", "messages"):
        text = last_user_text(row.get(key))
        if isinstance(text, str):
            return text
    return None


def read_prompts(source: str, split: str = "train", name: str | None = None,
                 max_rows: int | None = None) -> list[str]:
    """Read the task texts of ``source``: a Hub dataset id, a local .json/.jsonl/.parquet file or a dataset directory
    (`hir_trl.data.loading.read_source`).

    Each row needs a ``prompt`` (a string, or chat messages: the last user turn is taken) or ``messages``
    column; HIR-16K rows give their ``extra_info.question``. Rows with an empty prompt are skipped (logged).

    Raises:
        ValueError: a row without any prompt column; DatasetFormatError (a ValueError): a source that cannot be read,
            named with its file and line; FileNotFoundError: a missing local file.
    """
    prompts, skipped = [], 0
    for index, (_, row) in enumerate(read_source(source, split, name)):
        if max_rows is not None and len(prompts) >= max_rows:
            break
        text = prompt_of(row) if isinstance(row, Mapping) else None
        if text is None:
            raise ValueError(f"row {index} of {source} has no 'prompt' (string or chat messages) or 'messages' column")
        if not text.strip():
            skipped += 1
            continue
        prompts.append(text.strip())
    if skipped:
        logger.warning("%s: skipped %d rows with an empty prompt", source, skipped)
    return prompts


def write_rows(rows: Sequence[Mapping[str, Any]], output: str | Path) -> Path:
    """Write rows as .jsonl (one object per line), .json (a list) or .parquet."""
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif path.suffix == ".json":
        path.write_text(json.dumps(list(rows), ensure_ascii=False, indent=1), encoding="utf-8")
    elif path.suffix == ".parquet":
        import datasets

        datasets.Dataset.from_list(list(rows)).to_parquet(str(path))
    else:
        raise ValueError(f"output must end in .jsonl, .json or .parquet, got {path}")
    return path


__all__ = [
    "COMPATIBLE_ONLY",
    "CONFLICT_GROUPS",
    "CONFLICT_PAIRS",
    "EXCLUSIVE",
    "SAMPLERS",
    "Bounds",
    "TEXT_RULES",
    "UPPER_BOUND_RULES",
    "compatible",
    "conflicts",
    "length_bounds",
    "numeric_compatible",
    "read_prompts",
    "registered_samplers",
    "sample_constraints",
    "synthesize",
    "texts_compatible",
    "words_compatible",
    "write_rows",
]
