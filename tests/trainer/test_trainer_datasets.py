"""`HiRConfig` and `HiRTrainer` construct from their own defaults, and `HiRTrainer` takes any row schema that
`load_hir_dataset` reads (normalizing it at ``__init__``), refusing anything else with one message naming the row
and the field."""

from __future__ import annotations

import copy
import json

import pytest
from datasets import Dataset

from hir_trl import DatasetFormatError, HiRConfig, HiRTrainer, load_hir_dataset
from hir_trl.data.loading import normalize_dataset

from ..testing_utils import SAMPLE_DATA

NATIVE = [{"id": f"n-{i}", "task": f"Write a haiku about rain number {i}.",
           "constraints": [{"text": "Do not use any commas.", "family": "ifeval",
                            "instruction_id": "punctuation:no_comma"},
                           {"text": "Use at most 20 words.", "family": "ifeval",
                            "instruction_id": "length_constraints:number_words",
                            "kwargs": {"relation": "less than", "num_words": 21}}]} for i in range(6)]
HIR_ROWS = [json.loads(line) for line in SAMPLE_DATA.read_text().splitlines()[:6]]


def test_hirconfig_defaults_construct():
    args = HiRConfig()
    assert (args.num_generations, args.num_replays) == (6, 2)
    assert args.generation_batch_size % args.num_generations == 0
    args = HiRConfig("out", use_cpu=True)
    assert args.per_device_train_batch_size % args.num_generations == 0


def test_hirtrainer_with_default_args_constructs(tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output_dir, "<model>-HiR", is relative
    trainer = HiRTrainer(str(tiny_model_path), train_dataset=load_hir_dataset(SAMPLE_DATA))
    assert trainer.args.output_dir == f"{tiny_model_path.name}-HiR"
    assert trainer.args.generation_batch_size % trainer.args.num_generations == 0


def _table_without_kind():
    """docs/data.md's native rows through ``Dataset.from_list``: one row's constraint has 'kind', the others' read None."""
    rows = copy.deepcopy(NATIVE)
    rows[0]["constraints"][0]["kind"] = "hard"
    return Dataset.from_list(rows)


@pytest.mark.parametrize("make", [lambda: Dataset.from_list(NATIVE), _table_without_kind, lambda: list(NATIVE),
                                  lambda: Dataset.from_list(HIR_ROWS), lambda: load_hir_dataset(SAMPLE_DATA)],
                         ids=["native_from_list", "native_missing_kind", "native_list", "hir16k_from_list",
                              "load_hir_dataset"])
def test_every_schema_load_hir_dataset_reads_is_normalized(make):
    dataset = normalize_dataset(make())
    assert set(dataset.column_names) == {"prompt", "task", "constraints", "template", "row_id"}
    for row in dataset:
        assert row["prompt"][-1]["role"] == "user" and row["prompt"][-1]["content"].strip()
        assert all(c["kind"] in ("hard", "soft") and isinstance(json.loads(c["kwargs"]), dict)
                   for c in row["constraints"])
    assert normalize_dataset(dataset).to_list() == dataset.to_list()  # idempotent
    if len(dataset) == len(NATIVE) and dataset[0]["row_id"].startswith("n-"):
        assert [r["row_id"] for r in dataset] == [r["id"] for r in NATIVE]
        assert dataset[0]["constraints"][1]["kwargs"] == json.dumps({"num_words": 21, "relation": "less than"})


def test_native_rows_from_list_train_in_the_trainer(tiny_model_path, tmp_path):
    args = HiRConfig(str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=6, max_steps=1,
                     max_completion_length=8, report_to="none", save_strategy="no", judge_model="",
                     replay_truncated_completions=True, gradient_checkpointing=False)
    trainer = HiRTrainer(str(tiny_model_path), args=args, train_dataset=_table_without_kind())
    trainer.train()
    assert trainer.state.global_step == 1


@pytest.mark.parametrize("rows, fragments", [
    ([{"prompt": [{"role": "user", "content": "Write a poem."}]}],  # TRL-style prompt-only rows
     ["train_dataset row 0", "field 'data_source'", "load_hir_dataset"]),
    ([NATIVE[0], {**NATIVE[1], "constraints": [{"text": "Be brief.", "kind": "hard"}]}],
     ["train_dataset row 1", "field 'constraints[0].instruction_id'", "load_hir_dataset"]),
    ([{**NATIVE[0], "constraints": [{"text": "No commas.", "kind": "strict", "family": "ifeval",
                                     "instruction_id": "punctuation:no_comma"}]}],
     ["train_dataset row 0", "field 'constraints[0].kind'", "'strict'"]),
], ids=["trl_prompt_only", "hard_without_id", "unknown_kind"])
def test_rows_of_no_schema_are_refused_at_init_naming_row_and_field(tiny_model_path, tmp_path, rows, fragments):
    args = HiRConfig(str(tmp_path / "out"), use_cpu=True, report_to="none", judge_model="")
    with pytest.raises(DatasetFormatError) as info:
        HiRTrainer(str(tiny_model_path), args=args, train_dataset=Dataset.from_list(rows))
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert not (tmp_path / "out").exists()


def test_a_prompt_longer_than_the_context_is_refused_at_init_with_its_token_count(tiny_model_path, tmp_path):
    rows = [dict(row) for row in NATIVE]
    rows[4] = {**rows[4], "id": "huge", "task": "rain " * 3000}  # the tiny model's context: 2048 tokens
    args = HiRConfig(str(tmp_path / "out"), use_cpu=True, report_to="none", judge_model="", max_completion_length=32)
    with pytest.raises(DatasetFormatError) as info:
        HiRTrainer(str(tiny_model_path), args=args, train_dataset=rows)
    message = str(info.value)
    assert message.startswith("train_dataset row 4 (row_id 'huge'): field 'prompt': the prompt is ")
    count = int(message.split("the prompt is ")[1].split(" tokens")[0].replace(",", ""))
    assert count > 2048 and "context of 2048 tokens" in message and "max_completion_length (32)" in message


def test_max_prompt_length_refuses_longer_prompts_and_counts_the_chat_template(tiny_model_path, tmp_path):
    dataset = normalize_dataset(NATIVE)
    common = dict(use_cpu=True, report_to="none", judge_model="")
    trainer = HiRTrainer(str(tiny_model_path), args=HiRConfig(str(tmp_path / "a"), **common), train_dataset=dataset)
    lengths = [len(ids) for ids in trainer.hir_passes.tokenize_prompts(dataset[:]["prompt"])]
    longest = max(lengths)
    HiRTrainer(str(tiny_model_path), args=HiRConfig(str(tmp_path / "b"), max_prompt_length=longest, **common),
               train_dataset=dataset)  # exactly at the limit: accepted
    with pytest.raises(DatasetFormatError, match=rf"row {lengths.index(longest)} .*the prompt is {longest} tokens .*"
                       rf"more than {longest - 1}: max_prompt_length \({longest - 1}\)"):
        HiRTrainer(str(tiny_model_path), args=HiRConfig(str(tmp_path / "c"), max_prompt_length=longest - 1, **common),
                   train_dataset=dataset)
