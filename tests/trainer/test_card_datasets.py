"""The model card's dataset: TRL's ``datasets:`` metadata (and its Hub link) only for a Hub dataset id; local files
and mixtures are named in the card's text."""

from __future__ import annotations

import pytest

from hir_trl.card import MIXTURE_SEPARATOR, _dataset_line, card_dataset_name


@pytest.mark.parametrize(("name", "expected"), [
    ("sastpg/HIR-16K", "sastpg/HIR-16K"),
    ("google/IFEval", "google/IFEval"),
    (None, None),
    ("recipes/tiny/data/muldimif_listing_sample.jsonl", None),  # a local file (suffix, three parts)
    ("./data", None),
    (f"a.jsonl{MIXTURE_SEPARATOR}b.jsonl", None),  # a mixture: no Hub id, so no datasets: entry
    (f"org/a{MIXTURE_SEPARATOR}org/b", None),
])
def test_only_a_hub_dataset_id_goes_to_the_card_metadata(name, expected):
    assert card_dataset_name(name) == expected


def test_a_local_file_that_exists_is_local_even_when_shaped_like_an_id(tmp_path, monkeypatch):
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "data").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    assert card_dataset_name("org/data") is None


def test_the_cards_text_names_local_files_and_each_entry_of_a_mixture():
    assert _dataset_line("sastpg/HIR-16K") == "- Dataset: `sastpg/HIR-16K` (Hugging Face Hub)"
    line = _dataset_line(f"a.jsonl{MIXTURE_SEPARATOR}sastpg/HIR-16K")
    assert line.startswith("- Dataset: a mixture of `a.jsonl`, `sastpg/HIR-16K` (Hub)") and "not on the Hub" in line
    assert _dataset_line("notes.jsonl").startswith("- Dataset: `notes.jsonl` (local files")
