"""The loader: real HIR-16K-format rows load; malformed rows stop loading with the row index and field."""

from __future__ import annotations

import copy
import json

import datasets
import pytest

from hir_trl.data.loading import DatasetFormatError, load_hir_dataset, load_rows, normalize_row
from hir_trl.data.templates import join_instruction

from ..testing_utils import SAMPLE_DATA, shared_file

TYPE1_ROW = {
    "data_source": "type1",
    "prompt": [{"role": "system", "content": "Be helpful."},
               {"role": "user", "content": "Write about tea. Do not use any commas. Answer in at least 50 words."}],
    "reward_model": {"style": "rule", "ground_truth": {
        "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
        "kwargs": [{"num_words": None}, {"relation": "at least", "num_words": 50, "keyword": None}]}},
    "extra_info": {"question": "Write about tea.", "criteria": ["Do not use any commas.",
                                                               "Answer in at least 50 words."], "q_type": "type1"},
}


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_shared_hir16k_file_loads_every_row():
    path = shared_file("hir16k_format/muldimif_listing_type3.jsonl")
    rows = load_rows(path)
    assert len(rows) == 400
    # 4 real requirements no rule can check become soft (LLM-judged) constraints; the rest are hard
    soft = [(i, c["instruction_id"]) for i, row in enumerate(rows) for c in row["constraints"] if c["kind"] == "soft"]
    assert [i for i, _ in soft] == [136, 213, 250, 367]
    with pytest.raises(DatasetFormatError, match="line 137: field 'reward_model.ground_truth.instruction_id_list"):
        load_rows(path, on_unverifiable="error")
    for raw, row in zip((json.loads(line) for line in path.open()), rows):
        truth = json.loads(raw["reward_model"]["ground_truth"])
        assert [c["instruction_id"] for c in row["constraints"]] == [f"{a}_{b}" for a, b, _ in
                                                                      truth["instruction_id_list"]]
        assert [c["text"] for c in row["constraints"]] == raw["extra_info"]["criteria"]
        assert row["task"] == raw["extra_info"]["question"]
        assert row["prompt"] == raw["prompt"]  # the real prompt is kept as is, noisy rule lists included


def test_sample_data_shipped_with_recipe_loads(sample_dataset):
    assert len(sample_dataset) == 64
    assert set(sample_dataset.column_names) == {"prompt", "task", "constraints", "template", "row_id"}
    row = sample_dataset[0]
    assert row["template"] == "type3" and row["constraints"][0]["family"] == "muldimif"


def test_type1_row_normalizes_and_drops_none_kwargs():
    row = normalize_row(TYPE1_ROW, 0)
    assert row["prompt"] == TYPE1_ROW["prompt"]
    assert row["task"] == "Write about tea."
    assert [c["instruction_id"] for c in row["constraints"]] == ["punctuation:no_comma",
                                                                  "length_constraints:number_words"]
    assert json.loads(row["constraints"][0]["kwargs"]) == {}
    assert json.loads(row["constraints"][1]["kwargs"]) == {"relation": "at least", "num_words": 50}
    assert all(c["kind"] == "hard" and c["family"] == "ifeval" for c in row["constraints"])


def test_ground_truth_as_json_string_and_missing_prompt_uses_template():
    raw = copy.deepcopy(TYPE1_ROW)
    raw["reward_model"]["ground_truth"] = json.dumps(raw["reward_model"]["ground_truth"])
    del raw["prompt"]
    row = normalize_row(raw, 0)
    assert row["prompt"] == [{"role": "user", "content": join_instruction(
        "Write about tea.", ["Do not use any commas.", "Answer in at least 50 words."], "type1")}]


def _broken(mutate):
    raw = copy.deepcopy(TYPE1_ROW)
    mutate(raw)
    return raw


@pytest.mark.parametrize("mutate, field, message", [
    (lambda r: r.update(data_source="type7"), "data_source", "unknown data source"),
    (lambda r: r["reward_model"].update(ground_truth="{not json"), "reward_model.ground_truth", "does not parse"),
    (lambda r: r["reward_model"]["ground_truth"]["instruction_id_list"].__setitem__(0, "punctuation:no_dash"),
     "reward_model.ground_truth.instruction_id_list[0]", "unknown instruction id"),
    (lambda r: r["extra_info"]["criteria"].pop(), "extra_info.criteria", "has 1 items"),
    (lambda r: r["reward_model"]["ground_truth"]["kwargs"].pop(), "reward_model.ground_truth.kwargs", "one per"),
    (lambda r: r["extra_info"].update(q_type="type8"), "extra_info.q_type", "unknown q_type"),
    (lambda r: r["extra_info"].pop("question"), "extra_info.question", "non-empty string"),
    (lambda r: r["reward_model"]["ground_truth"]["kwargs"][1].pop("relation"),
     "reward_model.ground_truth.instruction_id_list[1]", "bad kwargs"),
    (lambda r: r.update(prompt=[{"role": "assistant", "content": "hi"}]), "prompt", "user turn"),
])
def test_malformed_hir_row_names_row_and_field(tmp_path, mutate, field, message):
    good = copy.deepcopy(TYPE1_ROW)
    path = _write_jsonl(tmp_path / "data.jsonl", [good, good, good, _broken(mutate), good])
    with pytest.raises(DatasetFormatError) as info:
        load_rows(path)
    assert info.value.index == 3 and info.value.field == field
    assert f"data.jsonl, line 4: field {field!r}" in str(info.value) and message in str(info.value)


def test_malformed_type3_triplet(tmp_path):
    path = shared_file("hir16k_format/muldimif_listing_type3.jsonl")
    raw = json.loads(path.open().readline())
    truth = json.loads(raw["reward_model"]["ground_truth"])
    truth["instruction_id_list"][1] = ["Length", "Words"]  # not a triplet
    raw["reward_model"]["ground_truth"] = json.dumps(truth)
    with pytest.raises(DatasetFormatError, match=r"row 0: field 'reward_model.ground_truth.instruction_id_list\[1\]'"):
        normalize_row(raw, 0)
    truth["instruction_id_list"][1] = ["Length", "Telepathy", "Read my mind"]
    raw["reward_model"]["ground_truth"] = json.dumps(truth)
    with pytest.raises(DatasetFormatError, match="unknown instruction id 'Length_Telepathy'"):
        normalize_row(raw, 0)


def test_native_rows(tmp_path):
    native = {
        "id": "ex-1", "task": "Write a haiku about rain.",
        "messages": [{"role": "system", "content": "You are a poet."}],
        "constraints": [
            {"text": "Do not use any commas.", "family": "ifeval", "instruction_id": "punctuation:no_comma"},
            {"text": "The tone should be melancholic.", "kind": "soft"},
        ],
    }
    row = normalize_row(native, 0)
    assert row["row_id"] == "ex-1" and row["template"] == "plain"
    assert row["prompt"][0] == {"role": "system", "content": "You are a poet."}
    assert row["prompt"][1]["content"] == join_instruction(
        native["task"], ["Do not use any commas.", "The tone should be melancholic."], "plain")
    assert [c["kind"] for c in row["constraints"]] == ["hard", "soft"]
    assert row["constraints"][1]["family"] is None

    for mutate, field in [
        (lambda r: r["constraints"][0].pop("instruction_id"), "constraints[0].instruction_id"),
        (lambda r: r["constraints"][1].update(kind="medium"), "constraints[1].kind"),
        (lambda r: r.update(template="zigzag"), "template"),
        (lambda r: r.update(constraints=[]), "constraints"),
        (lambda r: r["constraints"][0].update(text=""), "constraints[0].text"),
    ]:
        broken = copy.deepcopy(native)
        mutate(broken)
        with pytest.raises(DatasetFormatError) as info:
            normalize_row(broken, 7)
        assert info.value.index == 7 and info.value.field == field


def test_unrecognized_row_and_bad_json_line(tmp_path):
    with pytest.raises(DatasetFormatError, match="row 0: field 'data_source'"):
        normalize_row({"question": "hi"}, 0)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(TYPE1_ROW) + "\n{oops\n")
    with pytest.raises(DatasetFormatError, match="line 2"):
        load_rows(path)
    with pytest.raises(FileNotFoundError):
        load_rows(tmp_path / "missing.jsonl")


def test_hub_code_path_on_local_directory_and_parquet(tmp_path):
    """Directories and Hub ids go through datasets.load_dataset: exercised here on a local directory."""
    rows = [copy.deepcopy(TYPE1_ROW) for _ in range(3)]
    for i, r in enumerate(rows):
        r["extra_info"]["index"] = i
    data_dir = tmp_path / "hub_like"
    data_dir.mkdir()
    _write_jsonl(data_dir / "train.jsonl", rows)
    ds = load_hir_dataset(data_dir, split="train")
    assert len(ds) == 3 and ds[2]["row_id"] == "2"

    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "rows.parquet"))
    assert len(load_hir_dataset(tmp_path / "rows.parquet", max_rows=2)) == 2


def test_sample_file_is_real_rows_from_shared():
    shared = shared_file("hir16k_format/muldimif_listing_type3.jsonl")
    shared_lines = shared.read_text().splitlines()
    sample = SAMPLE_DATA.read_text().splitlines()
    positions = [shared_lines.index(line) for line in sample]  # verbatim real rows ...
    assert positions == sorted(positions) and len(set(positions)) == 64  # ... in their original order
