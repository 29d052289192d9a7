"""`hir_trl.data.synth`: programmatic constraint synthesis (reproducible, contradiction-free, loadable, trainable)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from hir_trl import load_hir_dataset
from hir_trl.cli.synth import main
from hir_trl.data.synth import (
    EXCLUSIVE,
    FAMILY_IDS,
    SAMPLERS,
    VOCABULARY,
    compatible,
    conflicts,
    length_bounds,
    numeric_compatible,
    read_prompts,
    synthesize,
    texts_compatible,
    words_compatible,
)
from hir_trl.data.templates import join_instruction
from hir_trl.verifiers import FAMILIES, ifeval, iftrain

from ..testing_utils import SHARED_DATA, TINY_RECIPE

TYPE3_ROWS = SHARED_DATA / "hir16k_format" / "muldimif_listing_type3.jsonl"

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how vaccines train the immune system, in simple terms.",
    "Give advice to a student starting university.",
    "Describe your ideal weekend.",
    "Summarize the causes of the French Revolution.",
    "Write a product description for a reusable water bottle!",
]


def _real_questions() -> list[str]:
    if not TYPE3_ROWS.exists():
        pytest.skip(f"{TYPE3_ROWS} is absent: the real data lives beside the project only in development/CI")
    return [json.loads(line)["extra_info"]["question"] for line in TYPE3_ROWS.read_text().splitlines() if line]


def _ids_and_kwargs(row: dict) -> list[tuple[str, dict]]:
    truth = json.loads(row["reward_model"]["ground_truth"])
    return list(zip(truth["instruction_id_list"], truth["kwargs"]))


@pytest.fixture(scope="module")
def many_rows() -> list[dict]:
    """1,600 synthesized rows: the 400 real questions x 4 seeds/sizes, both families."""
    questions = _real_questions()
    rows = []
    for seed, n in ((0, 3), (1, 4), (2, 5), (3, 2)):
        rows += synthesize(questions, n, seed)
    return rows


def _write_prompts(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


# --------------------------------------------------------------------------------------------------
# Reproducibility and the CLI
# --------------------------------------------------------------------------------------------------


def test_same_seed_same_file_different_seed_different_file(tmp_path):
    source = _write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    outputs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        outputs[name] = tmp_path / f"{name}.jsonl"
        assert main(["--dataset_name", str(source), "--output", str(outputs[name]), "--num_constraints", "3",
                     "--seed", str(seed)]) == 0
    assert outputs["a"].read_bytes() == outputs["b"].read_bytes()
    assert outputs["a"].read_bytes() != outputs["c"].read_bytes()
    assert synthesize(PROMPTS, 2, seed=3) == synthesize(PROMPTS, 2, seed=3)


def test_cli_input_columns_max_rows_and_output_formats(tmp_path):
    hir_row = {"data_source": "type3", "prompt": [{"role": "user", "content": "x with rules"}],
               "extra_info": {"question": "Plain task one."}}
    rows = [{"prompt": "Plain task zero."}, hir_row,
            {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Plain task two."}]},
            {"prompt": [{"role": "user", "content": "Plain task three."}]}, {"prompt": "  "}]
    source = tmp_path / "in.json"
    source.write_text(json.dumps(rows))
    assert read_prompts(source) == ["Plain task zero.", "Plain task one.", "Plain task two.", "Plain task three."]
    assert read_prompts(source, max_rows=2) == ["Plain task zero.", "Plain task one."]

    out = tmp_path / "out.parquet"
    assert main(["--dataset_name", str(source), "--output", str(out), "--num_constraints", "2", "--seed", "1",
                 "--families", "ifeval", "--max_rows", "3"]) == 0
    loaded = load_hir_dataset(out)
    assert len(loaded) == 3 and [r["task"] for r in loaded] == ["Plain task zero.", "Plain task one.",
                                                                 "Plain task two."]
    assert all(c["family"] == "ifeval" for r in loaded for c in r["constraints"])

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "no prompt column"}) + "\n")
    with pytest.raises(ValueError, match="row 0 .* no 'prompt'"):
        read_prompts(bad)
    assert main(["--dataset_name", str(source), "--output", str(out), "--families", "muldimif"]) == 2  # one line
    with pytest.raises(ValueError, match="families"):
        synthesize(PROMPTS, 2, 0, families=("muldimif",))
    with pytest.raises(ValueError, match="num_constraints"):
        synthesize(PROMPTS, 0, 0)


@pytest.mark.parametrize("case, fragment", [
    ("no_prompt_column", "row 0 of {src} has no 'prompt'"),
    ("zero_constraints", "--num_constraints must be >= 1, got 0"),
    ("fifty_constraints", "could not find 50 compatible constraints"),
    ("output_is_a_folder", "is a folder"),
    ("missing_file", "does not exist"),
])
def test_cli_user_errors_are_one_line_with_status_2(tmp_path, capsys, case, fragment):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"prompt": "Plain task zero."}) + "\n")
    argv = {"dataset_name": source, "output": tmp_path / "out.jsonl"}
    if case == "no_prompt_column":
        source.write_text(json.dumps({"text": "no prompt column"}) + "\n")
    elif case == "zero_constraints":
        argv["num_constraints"] = 0
    elif case == "fifty_constraints":
        argv["num_constraints"] = 50
    elif case == "output_is_a_folder":
        argv["output"] = tmp_path
    elif case == "missing_file":
        argv["dataset_name"] = tmp_path / "nowhere.jsonl"
    code = main([str(part) for key, value in argv.items() for part in (f"--{key}", value)])
    out, err = capsys.readouterr()
    assert code == 2 and not out and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("hir-trl synth: error: ") and fragment.format(src=source) in err, err
    assert not (tmp_path / "out.jsonl").exists()


# --------------------------------------------------------------------------------------------------
# Rows: schema, criteria, loading
# --------------------------------------------------------------------------------------------------


def test_criteria_are_the_checkers_descriptions_and_rows_load(tmp_path):
    rows = synthesize(PROMPTS * 5, 3, seed=11)
    for index, row in enumerate(rows):
        extra = row["extra_info"]
        assert extra["index"] == index and extra["question"] == PROMPTS[index % len(PROMPTS)]
        assert extra["q_type"] in ("type1", "type2", "type3", "type4", "type5", "type6")
        pairs = _ids_and_kwargs(row)
        assert len(pairs) == 3 == len(extra["criteria"])
        ids = [i for i, _ in pairs]
        assert row["data_source"] == ("type1" if all(i in ifeval.REGISTRY for i in ids) else "type2")
        for (instruction_id, kwargs), text in zip(pairs, extra["criteria"]):
            cls = ifeval.REGISTRY.get(instruction_id) or iftrain.REGISTRY[instruction_id]
            assert text == cls(**kwargs).build_description()
        assert row["prompt"] == [{"role": "user", "content": join_instruction(extra["question"], extra["criteria"],
                                                                               extra["q_type"])}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_hir_dataset(path)
    assert len(loaded) == len(rows)
    for row, normalized in zip(rows, loaded):
        assert normalized["prompt"] == row["prompt"] and normalized["task"] == row["extra_info"]["question"]
        assert [c["text"] for c in normalized["constraints"]] == row["extra_info"]["criteria"]
        for constraint in normalized["constraints"]:
            expected = "ifeval" if constraint["instruction_id"] in ifeval.REGISTRY else "ifbench"
            assert constraint["kind"] == "hard" and constraint["family"] == expected
            cls = FAMILIES[constraint["family"]].REGISTRY[constraint["instruction_id"]]
            assert cls(**json.loads(constraint["kwargs"])).build_description() == constraint["text"]


def test_families_select_ids():
    assert {r["data_source"] for r in synthesize(PROMPTS * 3, 3, 0, families=("ifeval",))} == {"type1"}
    only_training = synthesize(PROMPTS * 3, 3, 0, families=("ifbench",))
    assert {r["data_source"] for r in only_training} == {"type2"}
    assert all(i in iftrain.REGISTRY for r in only_training for i, _ in _ids_and_kwargs(r))


def test_every_sampled_id_has_a_checker_and_ifbench_test_ids_are_never_sampled():
    assert set(SAMPLERS) == set(ifeval.REGISTRY) | set(iftrain.REGISTRY)
    assert set(FAMILY_IDS["ifbench"]) == set(iftrain.REGISTRY)
    ood = set(FAMILIES["ifbench"].REGISTRY) - set(iftrain.REGISTRY)
    assert not ood & set(SAMPLERS)


def test_vocabulary_words_do_not_contain_each_other():
    assert len(set(VOCABULARY)) == len(VOCABULARY)
    for a, b in itertools.permutations(VOCABULARY, 2):
        assert a not in b


# --------------------------------------------------------------------------------------------------
# No contradictions
# --------------------------------------------------------------------------------------------------


def test_conflict_table_is_symmetric_and_has_the_documented_pairs():
    ids = sorted(SAMPLERS)
    for a, b in itertools.product(ids, ids):
        assert conflicts(a, b) == conflicts(b, a)
        assert conflicts(a, a)
    for a, b in [
        ("change_case:english_lowercase", "change_case:english_capital"),
        ("change_case:english_lowercase", "change_case:capital_word_frequency"),
        ("detectable_format:json_format", "detectable_format:number_bullet_lists"),
        ("detectable_format:json_format", "detectable_format:multiple_sections"),
        ("detectable_format:json_format", "detectable_format:title"),
        ("punctuation:no_comma", "custom:csv_city"),
        ("length_constraints:number_paragraphs", "paragraphs:paragraphs2"),
        ("detectable_format:square_brackets", "detectable_format:bigram_wrapping"),
        ("punctuation:punctuation_dot", "detectable_content:postscript"),
        ("first_word:first_word_sent", "first_word:first_word_answer"),
        ("count:count_unique", "copy:repeat_phrase"),
        ("count:count_unique", "keywords:start_end"),
        ("first_word:first_word_sent", "paragraphs:paragraphs"),
        ("detectable_format:square_brackets", "first_word:first_word_sent"),
        ("combination:two_responses", "first_word:first_word_sent"),
    ]:
        assert conflicts(a, b), (a, b)
    for exclusive in EXCLUSIVE:
        assert all(conflicts(exclusive, other) for other in ids)
    assert not conflicts("punctuation:no_comma", "keywords:palindrome")


def test_numeric_and_text_checks():
    at_most_49 = ("length_constraints:number_words", {"num_words": 50, "relation": "less than"})
    at_least_300 = ("length_constraints:number_words", {"num_words": 300, "relation": "at least"})
    assert not numeric_compatible([at_most_49, at_least_300])
    assert not numeric_compatible([at_most_49, ("length_constraints:number_paragraphs", {"num_paragraphs": 5})])
    assert numeric_compatible([at_most_49, ("length_constraints:number_paragraphs", {"num_paragraphs": 2})])
    assert not numeric_compatible([at_most_49, ("letters:letter_counting", {"N": 1500, "relation": "at least"})])
    assert not numeric_compatible([("letters:letter_counting", {"N": 100, "relation": "less than"}), at_least_300])
    assert not numeric_compatible([("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"}),
                                   ("count:counting_composition", {"n_sent": 2, "n_words": 5})])
    assert length_bounds("count:counting_composition", {"n_sent": 2, "n_words": 5}).max_words == 30
    assert not words_compatible([("keywords:existence", {"keywords": ["ocean"]}),
                                 ("keywords:exclude_word_harder", {"keyword": "Oceans"})])
    assert not words_compatible([("keywords:start_end", {}), ("first_word:first_word_answer", {"first_word": "a"}),
                                 ("last_word:last_word_answer", {"last_word": "b"})])
    repeat = ("combination:repeat_prompt", {"prompt_to_repeat": "Hello, world."})
    assert not texts_compatible([repeat, ("punctuation:no_comma", {})])
    assert texts_compatible([("combination:repeat_prompt", {"prompt_to_repeat": "Hello world."}),
                             ("punctuation:no_comma", {})])
    assert not compatible([("copy:repeat_phrase", {"phrase": "The early bird catches the worm", "small_n": 2}),
                           ("keywords:no_adjacent_consecutive", {})])
    phrase = ("copy:repeat_phrase", {"phrase": "Dance like nobody is watching you", "small_n": 3})
    assert not compatible([phrase, ("count:lowercase_counting", {"N": 5})])  # 12+ lowercase words
    assert compatible([phrase, ("count:lowercase_counting", {"N": 40})])
    assert not compatible([phrase, ("keywords:letter_frequency", {"letter": "k", "let_frequency": 3,
                                                                  "let_relation": "less than"})])


def test_no_contradictions_over_many_samples(many_rows):
    seen = set()
    for row in many_rows:
        pairs = _ids_and_kwargs(row)
        ids = [i for i, _ in pairs]
        seen.update(ids)
        assert len(set(ids)) == len(ids)
        for a, b in itertools.combinations(ids, 2):
            assert not conflicts(a, b), (a, b)
        assert numeric_compatible(pairs), pairs
        assert words_compatible(pairs), pairs
        assert texts_compatible(pairs), pairs
        assert not EXCLUSIVE & set(ids)
        languages = [k["language"] for i, k in pairs if i == "language:response_language"]
        assert len(languages) <= 1
    assert seen == set(SAMPLERS) - EXCLUSIVE  # every non-exclusive id shows up


def test_single_constraints_may_be_exclusive():
    rows = synthesize(PROMPTS * 40, 1, seed=5)
    ids = {i for row in rows for i, _ in _ids_and_kwargs(row)}
    assert ids & EXCLUSIVE
    for row in rows:
        for _, kwargs in _ids_and_kwargs(row):
            if "prompt_to_repeat" in kwargs:
                assert kwargs["prompt_to_repeat"] == row["extra_info"]["question"]


# --------------------------------------------------------------------------------------------------
# The synthesized rows train
# --------------------------------------------------------------------------------------------------


def test_synthesized_rows_train_with_the_tiny_recipe(tmp_path):
    from hir_trl.cli.main import main as cli_main

    source = _write_prompts(tmp_path / "prompts.jsonl", _real_questions()[:8])
    out = tmp_path / "synth.jsonl"
    assert main(["--dataset_name", str(source), "--output", str(out), "--num_constraints", "3", "--seed", "0",
                 "--families", "ifeval", "ifbench"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["data_source"] for r in rows} <= {"type1", "type2"} and len(rows) == 8
    run = tmp_path / "run"
    cli_main(["train", "--config", str(TINY_RECIPE), "--dataset_name", str(out), "--output_dir", str(run),
              "--model_name_or_path", str(tmp_path / "model"), "--max_steps", "2", "--save_strategy", "no"])
    assert (run / "model.safetensors").exists()
