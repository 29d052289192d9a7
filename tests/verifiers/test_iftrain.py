"""Tests for the IF-RLVR training constraints (`hir_trl.verifiers.iftrain`), the "ifbench" family's training ids.

Hand-written responses pin every id both ways; descriptions are pinned word for word; kwargs validation
raises errors naming the argument. Verdicts go through the family's official strict entry point,
`hir_trl.verifiers.ifbench.check` (None kwargs dropped, empty response fails).
"""

from __future__ import annotations

import json

import pytest

from hir_trl.verifiers import ifbench, ifeval, iftrain, verify_constraint
from hir_trl.verifiers.base import Checker
from hir_trl.verifiers.iftrain import split_into_sentences

from .utils import IFTRAIN_EXAMPLE_KWARGS, IFTRAIN_REQUEST

ALL_IDS = [
    "copy:repeat_phrase",
    "copy:copy",
    "copy:copying_simple",
    "copy:copying_multiple",
    "new:copy_span_idx",
    "detectable_format:sentence_hyphens",
    "detectable_format:square_brackets",
    "detectable_format:bigram_wrapping",
    "keywords:no_adjacent_consecutive",
    "keywords:word_once",
    "keywords:word_count_different_numbers",
    "keywords:exclude_word_harder",
    "keywords:palindrome",
    "keywords:keyword_specific_position",
    "keywords:start_end",
    "paragraphs:paragraphs",
    "paragraphs:paragraphs2",
    "first_word:first_word_sent",
    "first_word:first_word_answer",
    "last_word:last_word_sent",
    "last_word:last_word_answer",
    "punctuation:punctuation_dot",
    "punctuation:punctuation_exclamation",
    "count:lowercase_counting",
    "count:counting_composition",
    "count:count_unique",
    "count:count_increment_word",
    "letters:letter_counting",
    "letters:letter_counting2",
]

COMPOSITION = "I like cats. You like dogs.\n***\nWe eat food. They drink water.\n* * *\nBirds can fly. Fish can swim."

#: (instruction id, kwargs or None for `IFTRAIN_EXAMPLE_KWARGS`, response, expected strict verdict).
CASES = [
    # copy:repeat_phrase - every occurrence changes exactly one inner word
    ("copy:repeat_phrase", None, "Dance like everybody is watching you. Then: Dance like nobody is seeing you.", True),
    ("copy:repeat_phrase", None, "Dance like nobody is watching you. Dance like nobody is watching you.", False),
    ("copy:repeat_phrase", None, "Dance like everybody is watching you. Dance like somebody is watching you. "
                                 "Dance like anybody is watching you.", False),
    ("copy:repeat_phrase", None, "Dance like everybody was watching you. Dance like nobody is seeing you.", False),
    ("copy:repeat_phrase", None, "Dance like everyone is watching your dog. Dance like nobody is seeing you.", False),
    # copy:copy / copying_simple - only the request, case-insensitive
    ("copy:copy", None, "write a poem about the sea.", True),
    ("copy:copy", None, "Write a poem about the sea. The sea is vast and blue.", False),
    ("copy:copying_simple", None, f"  {IFTRAIN_REQUEST}\n", True),
    ("copy:copying_simple", None, f"Sure! {IFTRAIN_REQUEST}", False),
    # copy:copying_multiple - N copies separated by ******, nothing around them
    ("copy:copying_multiple", None, f"{IFTRAIN_REQUEST}\n******\n{IFTRAIN_REQUEST}", True),
    ("copy:copying_multiple", None, f"{IFTRAIN_REQUEST} ****** {IFTRAIN_REQUEST} ****** {IFTRAIN_REQUEST}", False),
    ("copy:copying_multiple", None, f"******\n{IFTRAIN_REQUEST}\n******\n{IFTRAIN_REQUEST}", False),
    # new:copy_span_idx - IFTRAIN_REQUEST[8:12] == "poem"
    ("new:copy_span_idx", None, "poem", True),
    ("new:copy_span_idx", None, "Poem\n", True),
    ("new:copy_span_idx", None, "poem about", False),
    ("new:copy_span_idx", None, "poem ", True),
    # detectable_format:sentence_hyphens
    ("detectable_format:sentence_hyphens", None, "I woke up.-I ate breakfast.-I left.\n", True),
    ("detectable_format:sentence_hyphens", None, "I woke up. - I ate breakfast.", False),
    ("detectable_format:sentence_hyphens", None, "I woke up.", False),
    ("detectable_format:sentence_hyphens", None, "I woke up. I ate.-I left.", False),
    # detectable_format:square_brackets
    ("detectable_format:square_brackets", None, "[Hello] [world.]", True),
    ("detectable_format:square_brackets", None, "[Hello] world", False),
    ("detectable_format:square_brackets", None, "[Hello] [world].", False),
    # detectable_format:bigram_wrapping
    ("detectable_format:bigram_wrapping", None, "<<I am>> <<at home>> <<with my>> <<cute dog.>>", True),
    ("detectable_format:bigram_wrapping", None, "<<I am>> <<at home>> today", False),
    ("detectable_format:bigram_wrapping", None, "I am at home", False),
    ("detectable_format:bigram_wrapping", None, "<<I>> <<am>>", False),
    # keywords:no_adjacent_consecutive - ascending consecutive initials fail
    ("keywords:no_adjacent_consecutive", None, "The cat sat quietly. Big apple!", True),
    ("keywords:no_adjacent_consecutive", None, "A big dog.", False),
    ("keywords:no_adjacent_consecutive", None, 'Take "(big) chairs', False),
    ("keywords:no_adjacent_consecutive", None, "Call 1 2 now", True),
    # keywords:word_once
    ("keywords:word_once", None, "I love the SEA.", True),
    ("keywords:word_once", None, "The sea, the sea.", False),
    ("keywords:word_once", None, "No water here.", False),
    # keywords:word_count_different_numbers
    ("keywords:word_count_different_numbers", None, "sea and Sea", True),
    ("keywords:word_count_different_numbers", None, "only one sea", False),
    ("keywords:word_count_different_numbers", {"keyword": "sea", "frequency": 2, "relation": "less than"},
     "only one sea", True),
    ("keywords:word_count_different_numbers", {"keyword": "sea", "frequency": 2, "relation": "less than"},
     "sea sea", False),
    # keywords:exclude_word_harder - whole word, case-insensitive
    ("keywords:exclude_word_harder", None, "I wrote verses and poems.", True),
    ("keywords:exclude_word_harder", None, "Poem: roses are red.", False),
    ("keywords:exclude_word_harder", None, "This is my poem.", False),
    # keywords:palindrome - a word or sentence of 3+ letters
    ("keywords:palindrome", None, "We saw a racecar today.", True),
    ("keywords:palindrome", None, "Level.", True),
    ("keywords:palindrome", None, "He said it. Step on no pets!", True),
    ("keywords:palindrome", None, "I saw a cat.", False),
    # keywords:keyword_specific_position - sentence 2, token 3
    ("keywords:keyword_specific_position", None, "I like food. My favourite potato is red.", True),
    ("keywords:keyword_specific_position", None, "I like food. My favourite POTATO is red.", True),
    ("keywords:keyword_specific_position", None, "I like food. Potato is my favourite.", False),
    ("keywords:keyword_specific_position", None, "My favourite potato is red.", False),
    # keywords:start_end
    ("keywords:start_end", None, "Love is all you need, love", True),
    ("keywords:start_end", None, "Love is all you need, love.", False),
    ("keywords:start_end", None, "Love", False),
    # paragraphs:paragraphs / paragraphs2
    ("paragraphs:paragraphs", None, "First paragraph.\n***\nSecond paragraph.", True),
    ("paragraphs:paragraphs", None, "First paragraph.\n\nSecond paragraph.", False),
    ("paragraphs:paragraphs", None, "One.\n***\nTwo.\n***\nThree.", False),
    ("paragraphs:paragraphs2", None, "First paragraph.\n\nSecond paragraph.\n", True),
    ("paragraphs:paragraphs2", None, "First paragraph.\n\n\n\nSecond paragraph.", False),
    ("paragraphs:paragraphs2", None, "One.\n\nTwo.\n\nThree.", False),
    # first_word / last_word
    ("first_word:first_word_sent", None, "The cat sat. **The** dog ran! The end?", True),
    ("first_word:first_word_sent", None, "The cat sat. A dog ran.", False),
    ("first_word:first_word_answer", None, "Hello, world.", True),
    ("first_word:first_word_answer", None, "Well, hello.", False),
    ("first_word:first_word_answer", {"first_word": ["hello"]}, "hello there", True),
    ("last_word:last_word_sent", None, "I am happy today. We go out today!", True),
    ("last_word:last_word_sent", None, "I am happy today. We go out.", False),
    ("last_word:last_word_answer", None, "That is all, goodbye!", True),
    ("last_word:last_word_answer", None, "Goodbye, that is all.", False),
    # punctuation
    ("punctuation:punctuation_dot", None, "No dots here!", True),
    ("punctuation:punctuation_dot", None, "A dot.", False),
    ("punctuation:punctuation_exclamation", None, "Calm.", True),
    ("punctuation:punctuation_exclamation", None, "Wow!", False),
    # count:lowercase_counting - at most N [a-z]+ words in total
    ("count:lowercase_counting", None, "The Cat Sat on a Mat", True),
    ("count:lowercase_counting", None, "the cat sat on the mat", False),
    # count:counting_composition - 3 paragraphs x 2 sentences x 3 words
    ("count:counting_composition", None, COMPOSITION, True),
    ("count:counting_composition", None, "***\n" + COMPOSITION + "\n***", True),
    ("count:counting_composition", None, COMPOSITION.replace("Birds can fly.", "Birds can really fly."), False),
    ("count:counting_composition", None, "I like cats. You like dogs.\n***\nWe eat food. They drink water.", False),
    ("count:counting_composition", None, COMPOSITION.replace("\n***\n", "\n\n"), False),
    # count:count_unique
    ("count:count_unique", None, "Every word here is different - truly.", True),
    ("count:count_unique", None, "The cat saw the dog.", False),
    # count:count_increment_word
    ("count:count_increment_word", None, "The sun and the moon and another Moon.", True),
    ("count:count_increment_word", None, "sun moon", False),
    ("count:count_increment_word", None, "sun sun moon moon", False),
    # letters
    ("letters:letter_counting", None, "Hi there", True),
    ("letters:letter_counting", None, "Hello there friend", False),
    ("letters:letter_counting", {"N": 10, "relation": "at least"}, "Hello there friend", True),
    ("letters:letter_counting", {"N": 10, "relation": "at least"}, "Hi 123 !!", False),
    ("letters:letter_counting2", None, "Eve sees", True),
    ("letters:letter_counting2", None, "abc", False),
]


def strict(instruction_id: str, kwargs: dict, response: str, prompt: str | None = None) -> bool:
    """The family's official strict verdict (None kwargs dropped, empty response fails)."""
    return ifbench.check(instruction_id, kwargs, response, prompt)


def test_registry_has_the_29_official_ids():
    assert sorted(iftrain.REGISTRY) == sorted(ALL_IDS)
    assert len(ALL_IDS) == 29
    for instruction_id, cls in iftrain.REGISTRY.items():
        assert issubclass(cls, Checker) and cls.instruction_id == instruction_id
        assert cls.__doc__ and instruction_id in cls.__doc__
        assert instruction_id not in ifeval.REGISTRY


def test_ifbench_family_merges_the_registry():
    for instruction_id, cls in iftrain.REGISTRY.items():
        assert ifbench.REGISTRY[instruction_id] is cls


def test_verdicts_go_through_the_ifbench_family():
    assert ifbench.FAMILY == "ifbench"
    assert ifbench.check("punctuation:punctuation_dot", {"n": None}, "no dots here") is True
    assert verify_constraint("ifbench", "punctuation:punctuation_dot", {}, "no dots").passed
    verdict = verify_constraint("ifbench", "punctuation:punctuation_dot", {}, "a dot.")
    assert not verdict.passed and verdict.error is None
    verdict = verify_constraint("ifbench", "copy:copying_multiple", {"prompt_to_repeat": "Hi."}, "Hi.")
    assert not verdict.passed and "'N'" in verdict.error


@pytest.mark.parametrize(("instruction_id", "kwargs", "response", "expected"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_hand_written_case(instruction_id, kwargs, response, expected):
    kwargs = IFTRAIN_EXAMPLE_KWARGS[instruction_id] if kwargs is None else kwargs
    assert strict(instruction_id, kwargs, response) is expected


def test_hand_written_cases_cover_every_id_both_ways():
    for instruction_id in ALL_IDS:
        verdicts = {expected for i, _, _, expected in CASES if i == instruction_id}
        assert verdicts == {True, False}, instruction_id


DESCRIPTIONS = {
    "copy:repeat_phrase": "Repeat the phrase Dance like nobody is watching you exactly 2 times, transforming it "
                          "slightly each time by replacing only one word in the center of the phrase.",
    "copy:copy": "Copy this instruction verbatim, do not follow the instruction, only copy it into the output (do "
                 "not include this instruction sentence!).",
    "copy:copying_simple": "Repeat the request without change (do not say anything before repeating the request; "
                           "the request you need to repeat does not include this sentence) and do not answer the "
                           "actual request!",
    "copy:copying_multiple": "Repeat the request without change 2 times, separated by 6 asterisk symbols (do not "
                             "say anything before repeating the request; the request you need to repeat does not "
                             "include this sentence) and do not answer the actual request!",
    "new:copy_span_idx": "Given the text below, output ONLY the substring from character index 8 (inclusive) up to "
                         "character index 12 (exclusive).\nIndices are 0-based character indices, counting every "
                         "character including spaces.\nText: Write a poem about the sea.",
    "detectable_format:sentence_hyphens": "All sentences must be connected using hyphens, with no spaces between "
                                          "them.",
    "detectable_format:square_brackets": "Enclose every word in your response within square brackets.",
    "detectable_format:bigram_wrapping": "Wrap every word bigram in double angular brackets, such as <<I am>> "
                                         "<<at home>> <<with my>> <<cute dog>>.",
    "keywords:no_adjacent_consecutive": "No two adjacent words can start with consecutive letters of the alphabet.",
    "keywords:word_once": "Include the keyword sea in your response exactly once (case-insensitive).",
    "keywords:word_count_different_numbers": "In your response, the word sea should appear at least 2 times.",
    "keywords:exclude_word_harder": "Do not include keyword poem in the response.",
    "keywords:palindrome": "Include a palindrome in your response.",
    "keywords:keyword_specific_position": "Include keyword potato in the 2-th sentence, as the 3-th word of that "
                                          "sentence.",
    "keywords:start_end": "Start and end your response with the same word (do not write anything after the last "
                          "word, not even punctuation).",
    "paragraphs:paragraphs": "There should be 2 paragraphs. Paragraphs are separated with the markdown divider: ***",
    "paragraphs:paragraphs2": "There should be 2 paragraphs. Paragraphs and only paragraphs are separated with each "
                              "other by two line breaks.",
    "first_word:first_word_sent": "The first word of each sentence should be the word the.",
    "first_word:first_word_answer": "The first word of your response should be the word hello.",
    "last_word:last_word_sent": "The last word of each sentence, before punctuation, should be the word today.",
    "last_word:last_word_answer": "The last word of your response should be the word goodbye.",
    "punctuation:punctuation_dot": "In your entire response, refrain from the use of . (i.e. dots) as punctuation "
                                   "and in general.",
    "punctuation:punctuation_exclamation": "In your entire response, refrain from the use of ! (i.e. exclamation "
                                           "marks) as punctuation and in general.",
    "count:lowercase_counting": "In your response, all lowercase words should appear at most 3 times.",
    "count:counting_composition": "Write 3 paragraphs, delimited by the markdown divider: * * *, with exactly 2 "
                                  "sentences each, with exactly 3 words in each sentence.",
    "count:count_unique": "Only use unique words in your response, no word should be repeated!",
    "count:count_increment_word": "Include keyword sun once in your response, keyword moon twice in your response.",
    "letters:letter_counting": "Answer with less than 10 letters.",
    "letters:letter_counting2": "In your response, the letter e should appear at least 3 times.",
}


def test_descriptions_exact_text():
    assert sorted(DESCRIPTIONS) == sorted(ALL_IDS)
    for instruction_id, text in DESCRIPTIONS.items():
        assert iftrain.REGISTRY[instruction_id](**IFTRAIN_EXAMPLE_KWARGS[instruction_id]).build_description() == text


def test_letter_counting2_is_ifeval_letter_frequency():
    kwargs = IFTRAIN_EXAMPLE_KWARGS["letters:letter_counting2"]
    ours = iftrain.REGISTRY["letters:letter_counting2"](**kwargs)
    theirs = ifeval.REGISTRY["keywords:letter_frequency"](**kwargs)
    assert ours.build_description() == theirs.build_description()
    for response in ("eee", "e", "Eve sees everything"):
        assert ours.check_following(response) == theirs.check_following(response)


MISSING = [(i, name) for i, kwargs in IFTRAIN_EXAMPLE_KWARGS.items() for name in kwargs]


@pytest.mark.parametrize(("instruction_id", "name"), MISSING, ids=[f"{i}-{n}" for i, n in MISSING])
def test_missing_required_kwarg_raises_value_error_naming_it(instruction_id, name):
    kwargs = {k: v for k, v in IFTRAIN_EXAMPLE_KWARGS[instruction_id].items() if k != name}
    with pytest.raises(ValueError, match=repr(name)):
        iftrain.REGISTRY[instruction_id](**kwargs)
    with pytest.raises(ValueError, match=repr(name)):  # None means missing too
        iftrain.REGISTRY[instruction_id](**{**kwargs, name: None})


BAD = [
    ("copy:repeat_phrase", {"small_n": 0}, "small_n"),
    ("copy:repeat_phrase", {"small_n": "2"}, "small_n"),
    ("copy:repeat_phrase", {"phrase": "Two words"}, "phrase"),
    ("copy:copy", {"prompt_to_repeat": "   "}, "prompt_to_repeat"),
    ("copy:copying_multiple", {"N": 2.5}, "N"),
    ("copy:copying_multiple", {"N": True}, "N"),
    ("new:copy_span_idx", {"n_start": 12, "n_end": 8}, "n_start"),
    ("new:copy_span_idx", {"n_end": 100}, "n_end"),
    ("new:copy_span_idx", {"n_start": -1}, "n_start"),
    ("keywords:word_count_different_numbers", {"relation": "at most"}, "relation"),
    ("keywords:word_count_different_numbers", {"frequency": -1}, "frequency"),
    ("keywords:word_once", {"keyword": ""}, "keyword"),
    ("keywords:keyword_specific_position", {"n": 0}, "n"),
    ("keywords:keyword_specific_position", {"keyword": ["a", "b"]}, "keyword"),
    ("first_word:first_word_sent", {"first_word": 3}, "first_word"),
    ("count:lowercase_counting", {"N": -2}, "N"),
    ("count:counting_composition", {"n_words": 0}, "n_words"),
    ("count:count_increment_word", {"keyword2": " "}, "keyword2"),
    ("letters:letter_counting", {"relation": "more than"}, "relation"),
    ("letters:letter_counting2", {"letter": "ab"}, "letter"),
]


@pytest.mark.parametrize(("instruction_id", "bad", "name"), BAD, ids=[f"{i}-{n}" for i, _, n in BAD])
def test_bad_kwarg_raises_value_error_naming_it(instruction_id, bad, name):
    with pytest.raises(ValueError, match=repr(name)):
        iftrain.REGISTRY[instruction_id](**{**IFTRAIN_EXAMPLE_KWARGS[instruction_id], **bad})


@pytest.mark.parametrize("instruction_id", ALL_IDS)
def test_unexpected_kwarg_raises_type_error(instruction_id):
    with pytest.raises(TypeError, match="frobnicate"):
        iftrain.REGISTRY[instruction_id](**IFTRAIN_EXAMPLE_KWARGS[instruction_id], frobnicate=1)


def test_integral_floats_and_one_element_lists_are_accepted():
    """Arrow/JSON round trips store ints as floats (5.0); the official generator stored some words as lists."""
    checker = iftrain.REGISTRY["copy:copying_multiple"](prompt_to_repeat="Hi.", N=2.0)
    assert checker.n == 2 and checker.build_description().startswith("Repeat the request without change 2 times")
    position = iftrain.REGISTRY["keywords:keyword_specific_position"](keyword=["potato"], n=1.0, m=2.0)
    assert position.build_description() == "Include keyword potato in the 1-th sentence, as the 2-th word of that sentence."
    assert iftrain.REGISTRY["last_word:last_word_sent"](last_word=["today"]).check_following("Fine today.")


@pytest.mark.parametrize("instruction_id", ALL_IDS)
def test_empty_response_fails(instruction_id):
    for response in ("", "   \n\t"):
        assert strict(instruction_id, IFTRAIN_EXAMPLE_KWARGS[instruction_id], response) is False


def test_none_kwargs_are_dropped():
    """IFBench rows carry every kwarg name of the family, unused ones null: they must not reach the class."""
    padded = {name: None for name in ("N", "keyword", "n", "m", "prompt_to_repeat", "n_start", "n_end", "relation")}
    kwargs = {**padded, "N": 3}
    assert strict("count:lowercase_counting", kwargs, "The Cat Sat on a Mat") is True
    assert strict("count:lowercase_counting", kwargs, "the cat sat on the mat") is False


def test_kwargs_are_not_mutated():
    kwargs = {"keyword": "potato", "n": 2, "m": 3, "N": None}
    before = json.dumps(kwargs, sort_keys=True)
    strict("keywords:keyword_specific_position", kwargs, "I like food. My favourite potato is red.")
    assert json.dumps(kwargs, sort_keys=True) == before


def test_split_into_sentences_is_ifeval_splitter():
    assert split_into_sentences("Mr. Smith went home. He slept! Did he? Yes.") == [
        "Mr. Smith went home.", "He slept!", "Did he?", "Yes."]
    assert split_into_sentences("Pi is 3.14 today.\nNew line here") == ["Pi is 3.14 today.", "New line here"]
    assert split_into_sentences("Visit example.com now. Ok.") == ["Visit example.com now.", "Ok."]
    assert split_into_sentences("") == []


def test_type2_rows_with_training_ids_load(tmp_path):
    """HIR-16K type2 rows (null-padded kwargs, float counts) with these ids load as "ifbench" constraints."""
    from hir_trl import load_hir_dataset

    ids = ["count:lowercase_counting", "keywords:word_once", "punctuation:no_comma"]
    padded = {name: None for name in ("N", "keyword", "frequency", "relation", "small_n")}
    kwargs = [{**padded, "N": 40.0}, {**padded, "keyword": "ocean"}, {}]
    criteria = [iftrain.REGISTRY[ids[0]](N=40).build_description(),
                iftrain.REGISTRY[ids[1]](keyword="ocean").build_description(),
                ifeval.REGISTRY[ids[2]]().build_description()]
    row = {"data_source": "type2", "reward_model": {"style": "rule", "ground_truth": json.dumps(
        {"instruction_id_list": ids, "kwargs": kwargs})},
        "extra_info": {"index": 0, "question": "Describe the sea.", "criteria": criteria, "q_type": "type4"}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (loaded,) = load_hir_dataset(path)
    assert [c["family"] for c in loaded["constraints"]] == ["ifbench", "ifbench", "ifeval"]
    assert [c["text"] for c in loaded["constraints"]] == criteria
