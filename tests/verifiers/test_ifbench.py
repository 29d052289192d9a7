"""Tests for the IFBench rule verifiers (`hir_trl.verifiers.ifbench`) and the shared NLP helpers (`nlp`).

- Behaviour: hand-written passing and failing responses for each of the 58 out-of-distribution ids,
  including the cases where we interpret IFBench's description differently from its reference code.
- Data: every id and kwargs dict of the 294 real IFBench test prompts resolves and constructs; scoring
  every prompt against varied responses raises nothing (strict and loose); each description appears in
  its prompt, except a short, explicit list of prompts that word it differently.
- Errors: unknown id, missing / invalid / unexpected kwargs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hir_trl.verifiers import FAMILIES, ifbench, ifeval, iftrain, nlp, validate_constraint, verify_constraint
from hir_trl.verifiers.base import Checker

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
IFBENCH_TEST = SHARED_DATA / "ifbench" / "IFBench_test.jsonl"

#: The 58 out-of-distribution ids of IFBench (57 used by IFBench_test.jsonl + custom:character_reverse).
OOD_IDS = [
    "count:conjunctions", "count:keywords_multiple", "count:numbers", "count:person_names", "count:pronouns",
    "count:punctuation", "count:unique_word_count", "count:word_count_range", "count:words_japanese",
    "custom:character_reverse", "custom:csv_city", "custom:csv_quotes", "custom:csv_special_character",
    "custom:date_format_list", "custom:european_capitals_sort", "custom:mcq_count_length", "custom:multiples",
    "custom:reverse_newline", "custom:sentence_alphabet", "custom:word_reverse",
    "format:emoji", "format:line_indent", "format:list", "format:newline", "format:no_bullets_bullets",
    "format:no_whitespace", "format:options", "format:output_template", "format:parentheses",
    "format:quote_unquote", "format:quotes", "format:sub-bullets", "format:thesis", "format:title_case",
    "ratio:overlap", "ratio:sentence_balance", "ratio:sentence_type", "ratio:sentence_words", "ratio:stop_words",
    "repeat:repeat_change", "repeat:repeat_simple", "repeat:repeat_span",
    "sentence:alliteration_increment", "sentence:increment", "sentence:keyword",
    "words:alphabet", "words:consonants", "words:keywords_specific_position", "words:last_first",
    "words:no_consecutive", "words:odd_even_syllables", "words:palindrome", "words:paragraph_last_first",
    "words:prime_lengths", "words:repeats", "words:start_verb", "words:vowel", "words:words_position",
]  # fmt: skip

# --------------------------------------------------------------------------------------------------
# Sample responses
# --------------------------------------------------------------------------------------------------

AFRICA = [
    "Algeria", "Angola", "Benin", "Botswana", "Burkina Faso", "Burundi", "Cabo Verde", "Cameroon",
    "Central African Republic", "Chad", "Comoros", "Democratic Republic of the Congo", "Republic of the Congo",
    "Côte d'Ivoire", "Djibouti", "Egypt", "Equatorial Guinea", "Eritrea", "Eswatini", "Ethiopia", "Gabon", "Gambia",
    "Ghana", "Guinea", "Guinea-Bissau", "Kenya", "Lesotho", "Liberia", "Libya", "Madagascar", "Malawi", "Mali",
    "Mauritania", "Mauritius", "Morocco", "Mozambique", "Namibia", "Niger", "Nigeria", "Rwanda",
    "São Tomé and Príncipe", "Senegal", "Seychelles", "Sierra Leone", "Somalia", "South Africa", "South Sudan",
    "Sudan", "Tanzania", "Togo", "Tunisia", "Uganda", "Zambia", "Zimbabwe",
]  # fmt: skip
AFRICA_REVERSED = "\n".join(sorted(AFRICA, key=nlp.strip_accents, reverse=True))

CAPITALS = ", ".join(ifbench.EUROPEAN_CAPITALS_NORTH_OF_45)
CAPITALS_WITH_KYIV = CAPITALS.replace("Brussels, Prague", "Brussels, Kyiv, Prague")


def mcq(lengths_increasing: bool = True, preamble: str = "") -> str:
    stems = ["Who painted it?", "Which movement came first?", "Which artist led Cubism in Paris?",
             "Which museum first showed Abstract Expressionism in New York?"]  # fmt: skip
    if not lengths_increasing:
        stems = stems[::-1]
    blocks = [
        f"Question {number}: {stem}\nA. Picasso\nB. Braque\nC. Miro\nD. Dali\nE. Klee"
        for number, stem in enumerate(stems, start=1)
    ]
    return preamble + "\n\n".join(blocks)


def alphabet_story(letters: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ") -> str:
    return " ".join(f"{letter}x walked home." for letter in letters)


def city_csv(rows: int = 7) -> str:
    lines = ["ID,Country,City,Year,Count"] + [f"{i},France,Paris,20{i:02d},{i * 3}" for i in range(1, rows + 1)]
    return "\n".join(lines)


def special_csv(special: bool = True) -> str:
    lines = ["ProductID,Category,Brand,Price,Stock"]
    for i in range(1, 15):
        brand = '"Tom\'s & Co"' if special and i == 5 else "Acme"
        lines.append(f"{i},Tools,{brand},{i}.99,{i * 10}")
    return "\n".join(lines)


def quoted_tsv(all_quoted: bool = True) -> str:
    rows = [["StudentID", "Subject", "Grade", "Semester", "Score"], ["1", "Math", "A", "Fall", "95"],
            ["2", "Art", "B", "Spring", "88"], ["3", "Music", "A", "Fall", "91"]]  # fmt: skip
    lines = ["\t".join(f'"{field}"' for field in row) for row in rows]
    if not all_quoted:
        lines[2] = lines[2].replace('"88"', "88")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Behaviour: (id, kwargs, response, expected strict verdict)
# --------------------------------------------------------------------------------------------------

KW5 = {"keyword1": "alpha", "keyword2": "beta", "keyword3": "gamma", "keyword4": "delta", "keyword5": "omega"}
KW5_TEXT = "alpha beta beta gamma gamma gamma " + "delta " * 5 + "omega " * 7
OVERLAP_REF = {"reference_text": "the quick brown fox jumps over the lazy dog"}
SPAN = {"prompt_to_repeat": "zero one two three four five", "n_start": 1, "n_end": 3}
REQUEST = {"prompt_to_repeat": "Write a poem about cats."}
PALINDROMES = "level radar civic kayak refer rotor madam stats tenet racecar"

CASES: list[tuple[str, dict, str, bool]] = [
    # count:*
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "one two three four", True),
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "one two", False),
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "a b c d e f", False),
    ("count:unique_word_count", {"N": 4}, "Apples, bananas; cherries and dates.", True),
    ("count:unique_word_count", {"N": 4}, "the the The. THE, the", False),
    ("count:unique_word_count", {"N": 3}, "a b - -", False),  # punctuation-only tokens are not words
    ("count:conjunctions", {"small_n": 3}, "I came and saw, but left, so what.", True),
    ("count:conjunctions", {"small_n": 3}, "And and AND, and but.", False),  # only two distinct conjunctions
    ("count:person_names", {"N": 2}, "Emma met Liam.", True),
    ("count:person_names", {"N": 2}, "Emma met emma and Emmanuel.", False),
    ("count:numbers", {"N": 3}, "I have 3 cats, 12 dogs and 1,000 fish.", True),
    ("count:numbers", {"N": 3}, "Pi is 3.14 and e is 2.718.", False),
    ("count:punctuation", {}, "Wait; what: really, yes. Wow! Why? Really?!", True),
    ("count:punctuation", {}, "Wait; what: really, yes. Wow! Why?", False),
    ("count:punctuation", {}, "Really?! Yes; no: maybe.", False),
    ("count:words_japanese", {"N": 2}, "I 猫 like 犬 very 好き", True),
    ("count:words_japanese", {"N": 2}, "I like cats and dogs", False),
    ("count:pronouns", {"N": 3}, "She told him that they agreed.", True),
    ("count:pronouns", {"N": 3}, "Cats chase mice.", False),
    ("count:pronouns", {"N": 3}, "Use she/her/hers.", True),
    ("count:keywords_multiple", KW5, KW5_TEXT, True),
    ("count:keywords_multiple", KW5, KW5_TEXT + " alphabet Alpha", False),
    ("count:keywords_multiple", KW5, KW5_TEXT.replace("omega ", "", 1), False),
    # ratio:*
    ("ratio:stop_words", {"percentage": 50}, "Cats chase mice quickly.", True),
    ("ratio:stop_words", {"percentage": 50}, "The cat is on the mat.", False),
    ("ratio:sentence_type", {}, "I run. You walk. Do we?", True),
    ("ratio:sentence_type", {}, "I run. Do we? Are you?", False),
    ("ratio:sentence_balance", {}, "I run. Do you? Wow!", True),
    ("ratio:sentence_balance", {}, "I run. I walk. Do you? Wow!", False),
    ("ratio:overlap", {**OVERLAP_REF, "percentage": 40}, "the quick brown fox runs far away", True),
    ("ratio:overlap", {**OVERLAP_REF, "percentage": 50}, "the quick brown fox runs far away", False),
    ("ratio:sentence_words", {}, "Cats run. Dogs sit. Owls fly.", True),
    ("ratio:sentence_words", {}, "Cats run. Dogs run. Owls fly.", False),
    ("ratio:sentence_words", {}, "Cats run. Dogs sit. Owls flew.", False),
    # words:*
    ("words:alphabet", {}, "Alice bakes cookies daily.", True),
    ("words:alphabet", {}, "Yes, zebras always bite.", True),
    ("words:alphabet", {}, "Alice cooks.", False),
    ("words:vowel", {}, "Cats and dogs ran far.", True),
    ("words:vowel", {}, "The quick brown fox jumps over it.", False),
    ("words:vowel", {}, "Cats ran.\nDogs sat.", False),
    ("words:consonants", {}, "Strong black crows.", True),
    ("words:consonants", {}, "Strong cat.", False),
    ("words:palindrome", {}, PALINDROMES, True),
    ("words:palindrome", {}, PALINDROMES.replace(" racecar", ""), False),
    ("words:prime_lengths", {}, "an owl sat", True),
    ("words:prime_lengths", {}, "\u201can\u201d owl sat", True),  # curly quotes are not letters
    ("words:prime_lengths", {}, "an owl flew", False),
    ("words:start_verb", {}, "Consider the following idea.", True),
    ("words:start_verb", {}, "**Imagine** a world.", True),
    ("words:start_verb", {}, "The idea is simple.", False),
    ("words:repeats", {"small_n": 2}, "a a b b c", True),
    ("words:repeats", {"small_n": 2}, "A a, a b", False),
    ("words:odd_even_syllables", {}, "cat happy dog water", True),
    ("words:odd_even_syllables", {}, "cat dog", False),
    ("words:last_first", {}, "I like cats. Cats like fish. Fish swim.", True),
    ("words:last_first", {}, "I like cats. Dogs like fish.", False),
    ("words:paragraph_last_first", {}, "Hello, big world, hello!\n\nSun is up, sun.", True),
    ("words:paragraph_last_first", {}, "Hello, big world. Hello", True),
    ("words:paragraph_last_first", {}, "Hello world\nSun is up.", False),
    ("words:no_consecutive", {}, "Big red cat.", True),
    ("words:no_consecutive", {}, "Big bad cat.", False),
    ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "I am here. My big cat sleeps.", True),
    ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "I am here. My cat sleeps.", False),
    ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "My big cat.", False),
    ("words:words_position", {"keyword": "blue"}, "The blue sky is very blue today.", True),
    ("words:words_position", {"keyword": "blue"}, "The blue sky is clear today.", False),
    # sentence:*
    ("sentence:alliteration_increment", {}, "The cat sat. Big bad bears bite.", True),
    ("sentence:alliteration_increment", {}, "Big bad bears bite. The cat sat.", False),
    ("sentence:increment", {"small_n": 2}, "I run. I run fast now. I run very fast right now.", True),
    ("sentence:increment", {"small_n": 2}, "I run. I run fast.", False),
    ("sentence:keyword", {"word": "apple", "N": 2}, "Hi there. I ate an Apple today.", True),
    ("sentence:keyword", {"word": "apple", "N": 2}, "I ate an apple. Hi there.", False),
    ("sentence:keyword", {"word": "apple", "N": 2}, "Hi. I like pineapples.", False),
    # format:*
    ("format:parentheses", {}, "(a [b {c (d [e] d) c} b] a)", True),
    ("format:parentheses", {}, "(a [b {c (d) c} b] a)", False),
    ("format:parentheses", {}, "(((((x)", False),  # the five levels must be closed
    ("format:parentheses", {}, "(a [b {c (d [e) d) c} b] a)", False),  # mismatch resets
    ("format:quotes", {}, 'He said "she told me \'he yelled "stop" loudly\' today" ok.', True),
    ("format:quotes", {}, 'He said "I don\'t think \'she yelled "run" at us\' was right".', True),
    ("format:quotes", {}, "He said \"she told me 'hi' today\".", False),
    ("format:options", {"options": "yes/no/maybe"}, "Maybe.", True),
    ("format:options", {"options": "yes/no/maybe"}, "Yes, because it is.", False),
    ("format:options", {"options": "a), b), c), d)"}, " c)\n", True),
    ("format:options", {"options": "a), b), c), d)"}, "b) Because it is.", False),
    ("format:options", {"options": "a), b), c), d)"}, "e)", False),
    ("format:options", {"options": "I know or I don't know"}, "I don't know", True),
    ("format:options", {"options": "I know or I don't know"}, "I do not know", False),
    ("format:options", {"options": "Correct, Incorrect"}, "incorrect", True),
    ("format:newline", {}, "Hello\nworld\n!", True),
    ("format:newline", {}, "Hello world\nagain", False),
    ("format:emoji", {}, "I love pizza 🍕. It is great 😀!", True),
    ("format:emoji", {}, "Love ❤️. Family 👨‍👩‍👧.", True),
    ("format:emoji", {}, "I love pizza 🍕. It is great!", False),
    ("format:line_indent", {}, "a\n  b\n\n    c", True),
    ("format:line_indent", {}, "a\n  b\n  c", False),
    ("format:quote_unquote", {}, 'He said "hello" which means hi.', True),
    ("format:quote_unquote", {}, 'He said "hello"', False),
    ("format:quote_unquote", {}, '"a" "b" is explained here.', False),
    ("format:quote_unquote", {}, '"a". "b" is explained here.', False),
    ("format:list", {"sep": "!?!?"}, "Items:\n!?!? apples\n!?!? pears", True),
    ("format:list", {"sep": "!?!?"}, "Items: !?!? apples !?!? pears", False),
    ("format:list", {"sep": "!?!?"}, "- apples\n- pears", False),
    ("format:thesis", {}, "<i>Cats rule.</i> They do.", True),
    ("format:thesis", {}, "<em>Cats rule.</em>\nThey do.", True),
    ("format:thesis", {}, "<i>Cats rule.</i>", False),
    ("format:thesis", {}, "Cats rule. They do.", False),
    ("format:thesis", {}, "<i> </i> They do.", False),
    ("format:sub-bullets", {}, "* a\n  - a1\n* b\n  - b1", True),
    ("format:sub-bullets", {}, "* a\n  - a1\n* b", False),
    ("format:sub-bullets", {}, "no bullets here - just dashes", False),
    ("format:no_bullets_bullets", {}, "First sentence. Second sentence.\n* one\n* two\n", True),
    ("format:no_bullets_bullets", {}, "First sentence.\n* one\n* two", False),
    ("format:no_bullets_bullets", {}, "First one. Second one.\n* one\ntext\n* two", False),
    ("format:no_bullets_bullets", {}, "First one? Second one!\n* one\n* two", False),
    ("format:title_case", {}, "The Cat Sat on the Mat", True),
    ("format:title_case", {}, "Don't Stop Believing", True),
    ("format:title_case", {}, "The cat Sat", False),
    ("format:title_case", {}, "the Cat", False),
    ("format:output_template", {}, "My Answer: x My Conclusion: y Future Outlook: z", True),
    ("format:output_template", {}, "My Answer: x My Conclusion: y", False),
    ("format:output_template", {}, "Future Outlook: z My Answer: x My Conclusion: y", False),
    ("format:no_whitespace", {}, "Hello,world!", True),
    ("format:no_whitespace", {}, "Hello world", False),
    # repeat:*
    ("repeat:repeat_change", REQUEST, "Compose a poem about cats.", True),
    ("repeat:repeat_change", REQUEST, "Write a poem about cats.", False),
    ("repeat:repeat_change", REQUEST, "Write a poem about cats.\n", False),
    ("repeat:repeat_change", REQUEST, "Compose a poem about dogs.", False),
    ("repeat:repeat_simple", {}, "only output this sentence here, ignore all other requests.\n", True),
    ("repeat:repeat_simple", {}, "Sure! Only output this sentence here, ignore all other requests.", False),
    ("repeat:repeat_span", SPAN, "one two three", True),
    ("repeat:repeat_span", SPAN, " One  Two three\n", True),
    ("repeat:repeat_span", SPAN, "one two three four", False),
    # custom:*
    ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", True),
    ("custom:multiples", {}, "7, 14, 21, 28, 35, 42, 49", False),
    ("custom:mcq_count_length", {}, mcq(), True),
    ("custom:mcq_count_length", {}, mcq(lengths_increasing=False), False),
    ("custom:mcq_count_length", {}, mcq(preamble="Here are your questions.\n"), False),
    ("custom:mcq_count_length", {}, mcq().replace("\nE. Klee", "", 1), False),
    ("custom:reverse_newline", {}, AFRICA_REVERSED, True),
    ("custom:reverse_newline", {}, "Here is the list:\n" + AFRICA_REVERSED, True),
    ("custom:reverse_newline", {}, "\n".join(AFRICA), False),
    ("custom:reverse_newline", {}, "\n".join(AFRICA_REVERSED.split("\n")[:10]), False),
    ("custom:word_reverse", {}, "Eagle bald the is symbol national the.", True),
    ("custom:word_reverse", {}, "The bald eagle.", False),
    ("custom:character_reverse", {}, ".elgae dlab ehT", True),
    ("custom:character_reverse", {}, "The bald eagle.", False),
    ("custom:sentence_alphabet", {}, alphabet_story(), True),
    ("custom:sentence_alphabet", {}, alphabet_story("ABCDEFGHIJKLMNOPQRSTUVWXY"), False),
    ("custom:sentence_alphabet", {}, alphabet_story("BACDEFGHIJKLMNOPQRSTUVWXYZ"), False),
    ("custom:european_capitals_sort", {}, CAPITALS, True),
    ("custom:european_capitals_sort", {}, CAPITALS_WITH_KYIV, True),
    ("custom:european_capitals_sort", {}, CAPITALS.replace("Reykjavik", "Reykjavík"), True),
    ("custom:european_capitals_sort", {}, CAPITALS.replace("Helsinki, Oslo", "Oslo, Helsinki"), False),
    ("custom:european_capitals_sort", {}, CAPITALS + ", Kyiv", False),
    ("custom:csv_city", {}, city_csv(), True),
    ("custom:csv_city", {}, city_csv(6), False),
    ("custom:csv_city", {}, city_csv().replace("City", "Town", 1), False),
    ("custom:csv_special_character", {}, special_csv(), True),
    ("custom:csv_special_character", {}, special_csv(special=False), False),
    ("custom:csv_quotes", {}, quoted_tsv(), True),
    ("custom:csv_quotes", {}, quoted_tsv(all_quoted=False), False),
    ("custom:csv_quotes", {}, quoted_tsv().replace("\t", ","), False),
    ("custom:date_format_list", {}, "1796-04-12, 1805-12-02", True),
    ("custom:date_format_list", {}, "1805-12-02 (Austerlitz)", False),
    ("custom:date_format_list", {}, "1900-01-01", False),
    ("custom:date_format_list", {}, "1805-00-10", False),
    ("custom:date_format_list", {}, "1805-04-31", False),
]


def test_registry_holds_the_58_ids_and_the_iftrain_ids():
    assert sorted(ifbench.OOD_REGISTRY) == sorted(OOD_IDS)
    assert len(OOD_IDS) == 58
    for instruction_id, cls in ifbench.OOD_REGISTRY.items():
        assert ifbench.REGISTRY[instruction_id] is cls  # no IF-RLVR id shadows an IFBench id
        assert issubclass(cls, Checker) and cls.instruction_id == instruction_id
    for instruction_id, cls in iftrain.REGISTRY.items():
        assert ifbench.REGISTRY[instruction_id] is cls
    assert FAMILIES["ifbench"] is ifbench


def test_every_id_has_a_passing_and_a_failing_case():
    outcomes = {(case[0], case[3]) for case in CASES}
    missing = [(i, verdict) for i in OOD_IDS for verdict in (True, False) if (i, verdict) not in outcomes]
    assert not missing


@pytest.mark.parametrize(("instruction_id", "kwargs", "response", "expected"), CASES)
def test_description_reading(instruction_id, kwargs, response, expected):
    """The hand-written cases pin our documented reading (``reading="description"``, not the default)."""
    assert ifbench.check(instruction_id, kwargs, response, reading="description") is expected
    assert verify_constraint("ifbench", instruction_id, kwargs, response, reading="description").passed is expected


INTERPRETATIONS = [
    # (id, kwargs, response, verdict of our description reading); the official code gives the other verdict.
    ("format:sub-bullets", {}, "No bullets at all.", False),
    ("format:list", {"sep": "-"}, "A well-known, two-sided coin.", False),
    ("format:no_bullets_bullets", {}, "One. Two.\n\n* a\n\n* b\n", True),
    ("repeat:repeat_change", REQUEST, "Write a poem about cats. ", False),
    ("format:title_case", {}, "War and Peace", True),
    ("format:quotes", {}, "\u201cShe said \u2018he said \u201cgo\u201d twice\u2019 then\u201d", True),
]


@pytest.mark.parametrize(("instruction_id", "kwargs", "response", "described"), INTERPRETATIONS)
def test_interpretations_differ_from_the_official_default(instruction_id, kwargs, response, described):
    """Where our reading and IFBench's code disagree, the default is the official verdict (see the class docstrings)."""
    assert ifbench.build_checker(instruction_id, kwargs, reading="description").check_following(response) is described
    assert ifbench.build_checker(instruction_id, kwargs).check_following(response) is (not described)
    assert ifbench.check(instruction_id, kwargs, response) is (not described)


def test_unknown_reading_is_an_error_and_an_official_crash_is_a_recorded_verdict():
    with pytest.raises(ValueError, match="reading"):
        ifbench.check("format:quotes", {}, "text", reading="loose")
    # AllenAI's check divides by the number of character trigrams: it raises on a 2-character response.
    with pytest.raises(ZeroDivisionError):
        ifbench.check("ratio:overlap", {**OVERLAP_REF, "percentage": 10}, "ab")
    verdict = verify_constraint("ifbench", "ratio:overlap", {**OVERLAP_REF, "percentage": 10}, "ab")
    assert verdict.passed is False and verdict.error.startswith("ZeroDivisionError")
    assert verify_constraint("ifeval", "punctuation:no_comma", {}, "a", reading="description").error


@pytest.mark.parametrize("reading", ifbench.READINGS)
def test_vacuous_cases_follow_the_reference_code(reading):
    def chk(instruction_id, kwargs=None):
        return ifbench.build_checker(instruction_id, kwargs, reading=reading)

    assert chk("ratio:sentence_type").check_following("Wow! Great!")  # 0 = 2 x 0
    assert chk("ratio:sentence_balance").check_following("No sentence end")
    assert chk("count:words_japanese", {"N": 5}).check_following("Too short")
    assert chk("format:quote_unquote").check_following("No quotes.")
    assert chk("words:last_first").check_following("Only one sentence.")
    # ... but an empty response always fails the strict and loose verdicts.
    for instruction_id in ("ratio:sentence_type", "format:quote_unquote", "words:prime_lengths"):
        assert not ifbench.check(instruction_id, {}, "  \n ")
        assert not ifbench.check_loose(instruction_id, {}, "")


def test_strict_drops_none_kwargs_and_loose_uses_the_ifeval_variants():
    assert ifbench.check("count:numbers", {"N": 2.0, "keyword": None, "sep": None}, "1 and 2")
    fenced = "```csv\n" + city_csv() + "\n```"
    assert not ifbench.check("custom:csv_city", {}, fenced)
    assert ifbench.check_loose("custom:csv_city", {}, fenced)
    bold = "**Question 1**" + mcq()[len("Question 1") :]
    assert not ifbench.check("custom:mcq_count_length", {}, bold)
    assert ifbench.check_loose("custom:mcq_count_length", {}, bold)
    assert ifbench.loose_variants is ifeval.loose_variants


# --------------------------------------------------------------------------------------------------
# Descriptions and kwargs errors
# --------------------------------------------------------------------------------------------------


def test_descriptions_without_the_data():
    chk = ifbench.build_checker
    assert chk("count:words_japanese", {"N": 21.0}).build_description() == (
        "Every 21st word of your response must be in Japanese."
    )
    assert chk("words:keywords_specific_position", {"keyword": "x", "n": 22, "m": 11}).build_description() == (
        "Include keyword x in the 22-nd sentence, as the 11-th word of that sentence."
    )
    assert chk("ratio:overlap", {**OVERLAP_REF, "percentage": 72.0}).build_description() == (
        "Maintain a trigram overlap of 72% (\u00b12%) with the provided reference text."
    )
    assert chk("format:list", {"sep": "SEPARATOR"}).build_description() == (
        "Answer with a list of items, instead of bullet points use SEPARATOR."
    )
    for instruction_id in OOD_IDS:
        kwargs = next(case[1] for case in CASES if case[0] == instruction_id)
        description = chk(instruction_id, kwargs).build_description()
        assert isinstance(description, str) and description.strip() == description and len(description) > 20


def test_unknown_id():
    with pytest.raises(KeyError, match="no:such_id"):
        ifbench.check("no:such_id", {}, "text")
    with pytest.raises(KeyError):
        ifbench.check_loose("no:such_id", {}, "text")
    assert verify_constraint("ifbench", "no:such_id", {}, "text").error.startswith("KeyError")


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "name"),
    [
        ("count:numbers", {}, "N"),
        ("count:word_count_range", {"min_words": 3}, "max_words"),
        ("count:keywords_multiple", {**KW5, "keyword4": None}, "keyword4"),
        ("format:list", {"sep": " "}, "sep"),
        ("format:options", {}, "options"),
        ("ratio:overlap", {"percentage": 40}, "reference_text"),
        ("ratio:stop_words", {"percentage": 120}, "percentage"),
        ("sentence:keyword", {"word": "x", "N": 2.5}, "N"),
        ("sentence:keyword", {"word": "x", "N": 0}, "N"),
        ("sentence:increment", {"small_n": True}, "small_n"),
        ("count:words_japanese", {"N": float("nan")}, "N"),
        ("words:words_position", {"keyword": 3}, "keyword"),
        ("repeat:repeat_change", {}, "prompt_to_repeat"),
        ("repeat:repeat_span", {**SPAN, "n_end": 6}, "n_end"),
        ("repeat:repeat_span", {**SPAN, "n_start": 4}, "n_start"),
    ],
)
def test_missing_or_invalid_kwarg_names_it(instruction_id, kwargs, name):
    with pytest.raises(ValueError, match=repr(name)):
        ifbench.check(instruction_id, kwargs, "some text")
    assert validate_constraint("ifbench", instruction_id, kwargs).startswith("ValueError")


def test_unexpected_kwarg():
    with pytest.raises(TypeError, match="bogus"):
        ifbench.check("format:emoji", {"bogus": 1}, "Hi 😀")
    with pytest.raises(TypeError):
        ifbench.check("count:numbers", {"N": 1, "small_n": 2}, "1")
    with pytest.raises(TypeError, match="response must be a string"):
        ifbench.check("format:emoji", {}, None)


# --------------------------------------------------------------------------------------------------
# nlp helpers
# --------------------------------------------------------------------------------------------------


def test_nlp_helpers():
    assert len(nlp.STOP_WORDS) == 179 and nlp.is_stop_word("The") and not nlp.is_stop_word("cat")
    assert nlp.count_stop_words("The cat is on the mat") == 4
    assert [nlp.syllable_count(word) for word in ("cat", "happy", "beautiful", "", "42")] == [1, 2, 3, 0, 0]
    assert nlp.words("Don't stop, OK?", lower=True) == ["dont", "stop", "ok"]
    assert nlp.word_tokenize("Don't stop. Go on!") == ["Do", "n't", "stop", ".", "Go", "on", "!"]
    assert nlp.alnum_tokens("Hi, there - you!") == ["Hi", "there", "you"]
    assert nlp.ngrams(["a", "b", "c", "d"], 3) == {("a", "b", "c"), ("b", "c", "d")}
    assert nlp.strip_accents("São Tomé") == "Sao Tome"
    assert [nlp.ordinal_suffix(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 111)] == [
        "st", "nd", "rd", "th", "th", "th", "th", "st", "nd", "rd", "th"
    ]  # fmt: skip
    assert [n for n in range(20) if nlp.is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]
    assert nlp.is_emoji("😀") and nlp.is_emoji("👨‍👩‍👧") and not nlp.is_emoji("a")
    assert nlp.ends_with_emoji("Hi 👍🏽!") and nlp.ends_with_emoji("Love ❤️") and not nlp.ends_with_emoji("Hi :)")
    assert nlp.starts_with_emoji("😀 next") and not nlp.starts_with_emoji("next 😀")
    assert nlp.is_japanese("猫です") and nlp.is_japanese("カタカナ") and not nlp.is_japanese("한국어")
    assert nlp.starts_with_verb("Explore the galaxy.") and nlp.starts_with_verb("Exploring the galaxy is fun.")
    assert not nlp.starts_with_verb("Galois theory explained.") and not nlp.starts_with_verb("")
    assert nlp.pos_tags(["The", "cat"]) == [("The", "DT"), ("cat", "NN")]


def test_nlp_needs_no_network(monkeypatch):
    """The tagger, syllable table, emoji data and stop words ship with installed packages or this repo."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    for loader in (nlp._pattern_parser, nlp._syllapy, nlp._emoji, nlp._treebank_tokenizer):
        loader.cache_clear()
    assert nlp.starts_with_verb("Write a poem.")
    assert nlp.syllable_count("poem") == 2
    assert nlp.ends_with_emoji("Done 😀")
    assert nlp.count_stop_words("a poem about it") == 3


# --------------------------------------------------------------------------------------------------
# The real IFBench test prompts
# --------------------------------------------------------------------------------------------------

needs_data = pytest.mark.skipif(not IFBENCH_TEST.exists(), reason=f"{IFBENCH_TEST} not found")

#: (row key, instruction id) -> why the prompt does not contain our description verbatim.
DESCRIPTION_EXCEPTIONS = {
    ("8", "count:conjunctions"): "the prompt lacks the instruction text",
    ("268", "custom:csv_city"): "the prompt is garbled (a pasted kwargs dump; '[ID\",' lost a quote)",
    ("100", "format:options"): "the prompt omits 'Do not give any explanation.'",
    ("150", "sentence:keyword"): "the prompt writes '3-rd' where IFBench writes '{N}-th'",
    ("221", "words:last_first"): "the prompt omits the comma after 'In your response'",
}
#: sentence:increment is worded "Each sentence in your response must ..." in 5 prompts (our text) and
#: "Each sentence must ..." (IFBench's code) in the other 3.
INCREMENT_OTHER_WORDING = re.compile(r"Each sentence must contain exactly (\d+) more words than the previous one\.")


def _rows() -> list[dict]:
    with IFBENCH_TEST.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _normalise(text: str) -> str:
    return " ".join(text.split())


@needs_data
def test_every_row_resolves_and_constructs():
    rows = _rows()
    assert len(rows) == 294
    used = {instruction_id for row in rows for instruction_id in row["instruction_id_list"]}
    assert used == set(OOD_IDS) - {"custom:character_reverse"}
    for row in rows:
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"]):
            assert validate_constraint("ifbench", instruction_id, kwargs) is None, (row["key"], instruction_id)


@needs_data
def test_descriptions_appear_in_the_prompts():
    mismatched = set()
    for row in _rows():
        prompt = _normalise(row["prompt"])
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"]):
            description = _normalise(ifbench.build_checker(instruction_id, kwargs).build_description())
            if description in prompt:
                continue
            if instruction_id == "sentence:increment":
                match = INCREMENT_OTHER_WORDING.search(prompt)
                assert match and int(match.group(1)) == int(kwargs["small_n"]), row["key"]
                continue
            mismatched.add((str(row["key"]), instruction_id))
    assert mismatched == set(DESCRIPTION_EXCEPTIONS)


VARIED_RESPONSES = [
    "",
    " \n ",
    ".",
    "a",
    "Yes",
    "!?!?",
    "))))(((( ]] [[ }{",
    "\"'\"'\"' ' \" \u201c\u201d\u2018\u2019",
    "* a\n- b\n* c\n  - d\n\n**bold** text",
    "1. First item\n2. Second item\n\n- dash\n+ plus\n\u2022 bullet",
    'ID,Country,City,Year,Count\n1,"Pa,ris",X,2020,3\n"unterminated,4',
    '{"key": [1, 2, {"nested": "value"}], "other": null}',
    "Hello 😀! 👨‍👩‍👧 family ❤️. 🍕",
    "これは日本語の文です。猫 が 好き です 。 漢字 カタカナ",
    "<i>Thesis.</i> Body text.\n<em>Another</em>\n\n## Heading\n\n> quote",
    "My Answer: yes My Conclusion: no Future Outlook: maybe",
    "Question 1: What?\nA. a\nB. b\nC. c\nD. d\nE. e",
    "    indented\n        more\n\t tab\n",
    "3.14 1,000 2024-01-01 -5 1e10 \u0661\u0662\u0663",
    "\x00\x01 control \u200b zero-width \ufeff",
    "word " * 300,
    "The quick brown fox jumps over the lazy dog. " * 20 + "Why? Because! Yes?!",
]


@needs_data
def test_scoring_every_prompt_raises_nothing():
    """Our reading gives strict and loose verdicts for every constraint of every prompt, on varied responses.

    (The official reading raises where AllenAI's code raises; `test_ifbench_official` compares those too.)
    """
    for row in _rows():
        responses = [*VARIED_RESPONSES, row["prompt"]]
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"]):
            for response in responses:
                strict = ifbench.check(instruction_id, kwargs, response, row["prompt"], reading="description")
                loose = ifbench.check_loose(instruction_id, kwargs, response, row["prompt"], reading="description")
                assert isinstance(strict, bool) and isinstance(loose, bool)
                assert loose or not strict  # the response itself is a loose variant


_TEXT = st.text(
    alphabet=st.sampled_from(list("aAbBeEoOzZ xy.,!?;:'\"()[]{}*-\n\t<>/0123456789") + ["😀", "猫", "é", "\u2019"]),
    max_size=80,
)
_KWARGS = {case[0]: case[1] for case in CASES}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instruction_id=st.sampled_from(OOD_IDS), response=_TEXT)
def test_random_text_never_raises_under_our_reading(instruction_id, response):
    strict = ifbench.check(instruction_id, _KWARGS[instruction_id], response, reading="description")
    loose = ifbench.check_loose(instruction_id, _KWARGS[instruction_id], response, reading="description")
    assert loose or not strict
