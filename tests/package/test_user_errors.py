"""A newcomer's mistakes get one-line errors naming the file, line, field or flag; nothing is written.

Every case runs ``hir-trl train`` in-process (`hir_trl.cli.main.main`) on the tiny recipe and checks the exit status,
that stderr is exactly one ``hir-trl train: error: ...`` line with no traceback, and that no output folder (nor
the tiny model) was created. A hypothesis property test generates malformed rows and flags.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hir_trl import HiRConfig, load_rows
from hir_trl.cli.main import main
from hir_trl.configs import HiRScriptArguments, field_type_problem
from hir_trl.data.loading import DatasetFormatError

from ..testing_utils import SAMPLE_DATA, TINY_RECIPE, assert_nothing_written, assert_one_line_error, train, write_rows
from .utils import NATIVE, native

HIR_ROW = json.loads(SAMPLE_DATA.read_text().splitlines()[0])


# ---------------------------------------------------------------------------------------------- data


def _data_case(tmp_path, case):
    good = [native(id=f"n-{i}") for i in range(4)]
    if case == "empty_instruction":  # native 'prompt' (the final user turn) given but empty
        return write_rows(tmp_path / "d.jsonl", good[:2] + [native(prompt="")] + good[2:]), ["d.jsonl, line 3",
                                                                                             "field 'prompt'", "empty"]
    if case == "whitespace_instruction":  # HIR-16K row whose final user turn is only whitespace
        row = copy.deepcopy(HIR_ROW)
        row["prompt"][-1]["content"] = " \n\t "
        return (write_rows(tmp_path / "d.jsonl", good[:1] + [row], blank_before={1}),
                ["d.jsonl, line 3", "field 'prompt[0].content'", "empty or whitespace"])
    if case == "non_string_content":  # used to crash in pyarrow
        bad = native(messages=[{"role": "system", "content": ["a", "list"]}])
        return write_rows(tmp_path / "d.jsonl", good + [bad]), ["d.jsonl, line 5", "field 'messages[0].content'",
                                                                "expected a string (got list)"]
    if case == "content_missing":
        bad = native(messages=[{"role": "system"}])
        return write_rows(tmp_path / "d.jsonl", [bad]), ["line 1", "field 'messages[0].content'", "missing"]
    if case == "non_utf8":
        path = tmp_path / "d.jsonl"
        path.write_bytes(json.dumps(good[0]).encode() + b"\n" + json.dumps(good[1]).encode()[:-2] + b"\xe9\"}\n")
        return path, ["d.jsonl, line 2", "is not UTF-8"]
    if case == "jsonl_saved_as_json":
        return write_rows(tmp_path / "d.json", good), ["d.json, line 2", "JSON Lines", "rename it to .jsonl"]
    if case == "csv":
        path = tmp_path / "d.csv"
        path.write_text("task,constraints\nWrite.,none\n")
        return path, ["d.csv", "unsupported file type '.csv'", ".jsonl"]
    if case == "missing_file":
        return tmp_path / "nowhere" / "d.csv", ["does not exist"]
    if case == "mixed_directory_bad_file":  # HIR-16K + native rows load together; a third schema is named
        folder = tmp_path / "data"
        folder.mkdir()
        write_rows(folder / "a.jsonl", good)
        write_rows(folder / "b.jsonl", [HIR_ROW])
        write_rows(folder / "c.jsonl", [{"prompt": "P", "instruction_id_list": []}])
        return folder, ["c.jsonl, line 1", "field 'data_source'", "neither HIR-16K"]
    if case == "bad_json_line":
        return write_rows(tmp_path / "d.jsonl", good[:2] + ['{"task": "x",']), ["d.jsonl, line 3",
                                                                               "does not parse as JSON"]
    raise AssertionError(case)


DATA_CASES = ["empty_instruction", "whitespace_instruction", "non_string_content", "content_missing", "non_utf8",
              "jsonl_saved_as_json", "csv", "missing_file", "mixed_directory_bad_file", "bad_json_line"]


@pytest.mark.parametrize("case", DATA_CASES)
def test_data_errors_are_one_line_naming_file_line_and_field(tmp_path, capsys, case):
    path, fragments = _data_case(tmp_path, case)
    code, out, err = train(tmp_path, capsys, "--dataset_name", path)
    assert_one_line_error(code, out, err, *fragments)
    assert_nothing_written(tmp_path)


def test_row_numbers_are_file_line_numbers(tmp_path):
    rows = [native(id=f"n-{i}") for i in range(3)]
    bad = native(task="  ")
    path = write_rows(tmp_path / "d.jsonl", rows + [bad], blank_before={1, 3})
    with pytest.raises(DatasetFormatError) as info:
        load_rows(path)
    lines = path.read_text().split("\n")
    assert json.loads(lines[5]) == bad  # the 6th line of the file ...
    assert str(info.value).startswith(f"{path}, line 6: field 'task'")  # ... is the line named
    assert info.value.index == 3 and info.value.location == f"{path}, line 6"
    # a .json list: each row is named by the line it starts on (line 1 "[", rows on lines 2, 4, 6, 8)
    listed = tmp_path / "d.json"
    listed.write_text("[\n" + ",\n\n".join(json.dumps(r) for r in rows + [bad]) + "\n]\n")
    assert json.loads(listed.read_text().split("\n")[7].rstrip(",")) == bad
    with pytest.raises(DatasetFormatError, match=r"d\.json, line 8: field 'task'"):
        load_rows(listed)


def test_directory_mixing_schemas_loads_every_row_in_file_order(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_rows(folder / "a_native.jsonl", [native(id=f"n-{i}") for i in range(2)])
    write_rows(folder / "b_hir.jsonl", [HIR_ROW])
    rows = load_rows(folder)
    assert [r["row_id"] for r in rows] == ["n-0", "n-1", HIR_ROW["id"]]
    assert rows[2]["template"] == "type3" and rows[0]["template"] == "plain"
    with pytest.raises(DatasetFormatError, match="has no 'test' split"):
        load_rows(folder, split="test")


def test_duplicate_ids_warn_naming_the_lines(tmp_path, caplog):
    path = write_rows(tmp_path / "d.jsonl", [native(id="a"), native(id="b"), native(id="a"), native(id="c")])
    with caplog.at_level(logging.WARNING, logger="hir_trl.data.loading"):
        rows = load_rows(path)
    assert len(rows) == 4  # nothing dropped
    warning = [r.getMessage() for r in caplog.records if "share an id" in r.getMessage()]
    assert warning and f"id 'a' at {path}, lines 1, 3" in warning[0] and "'b'" not in warning[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hir_trl.data.loading"):
        load_rows(write_rows(tmp_path / "e.jsonl", [native(id="a"), native(id="b")]))
    assert not [r for r in caplog.records if "share an id" in r.getMessage()]


# ---------------------------------------------------------------------------------------------- config and flags


FLAG_CASES = {
    "float_for_int_flag": (["--max_steps", "2.5"], ["argument --max_steps", "invalid int value: '2.5'"]),
    "unknown_flag": (["--num_replay", "3"], ["unrecognized arguments: --num_replay 3"]),
    "lambda_0_negative": (["--lambda_0", "-0.5"], ["lambda_0 must be a finite number >= 0", "-0.5"]),
    "eta_above_one": (["--eta", "1.5"], ["eta must be between 0 and 1", "1.5"]),
    "eta_negative": (["--eta", "-0.1"], ["eta must be between 0 and 1"]),
    "num_replays_ge_num_generations": (["--num_replays", "6"], ["num_replays (k = 6) must be smaller than "
                                                                "num_generations (m = 6)"]),
    "dataset_max_rows_zero": (["--dataset_max_rows", "0"], ["dataset_max_rows must be >= 1"]),
    "resume_missing_checkpoint": (["--resume_from_checkpoint", "no/such/checkpoint"], ["resume_from_checkpoint",
                                                                                       "is not a folder"]),
    "temperature_zero": (["--temperature", "0"], ["temperature must be > 0", "got 0.0"]),  # used to fail mid-step
    "max_completion_length_zero": (["--max_completion_length", "0"], ["max_completion_length must be >= 1"]),
    "max_steps_zero": (["--max_steps", "0"], ["max_steps must be >= 1 (or -1"]),  # used to train one step
    "max_prompt_length_zero": (["--max_prompt_length", "0"], ["max_prompt_length must be >= 1"]),
}


@pytest.mark.parametrize("case", sorted(FLAG_CASES))
def test_flag_errors_are_one_line(tmp_path, capsys, case):
    argv, fragments = FLAG_CASES[case]
    code, out, err = train(tmp_path, capsys, *argv)
    assert_one_line_error(code, out, err, *fragments)
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("line, fragment", [
    ("max_steps: 2.5", "max_steps must be an integer, got 2.5 (float)"),  # used to crash only after the model loaded
    ("num_generations: 6.0", "num_generations must be an integer, got 6.0"),
    ("bf16: \"no\"", None),  # a string for a bool is converted by the parser (argparse's string_to_bool)
    ("num_replay: 3", "unknown key(s) in"),
    ("lambda_0: -1", "lambda_0 must be a finite number >= 0"),
    ("lora_r: 8.5", "lora_r must be an integer, got 8.5"),  # TRL's ModelConfig is checked too
])
def test_recipe_values_are_checked_at_parse_time(tmp_path, capsys, line, fragment):
    recipe = tmp_path / "recipe.yaml"  # the recipe's own line for that key replaced (a key given twice is refused)
    key = line.split(":")[0]
    kept = [old for old in TINY_RECIPE.read_text().splitlines() if not old.startswith(f"{key}:")]
    recipe.write_text("\n".join(kept) + "\n" + line + "\n")
    if fragment is None:  # parses: the run then fails on purpose at the data, before anything is written
        code, out, err = train(tmp_path, capsys, "--dataset_name", tmp_path / "none.jsonl", recipe=recipe)
        assert_one_line_error(code, out, err, "none.jsonl does not exist")
    else:
        code, out, err = train(tmp_path, capsys, recipe=recipe)
        assert_one_line_error(code, out, err, fragment)
    assert_nothing_written(tmp_path)


def test_config_types_and_ranges_in_python(tmp_path):
    common = dict(output_dir=str(tmp_path), bf16=False, per_device_train_batch_size=6)
    for field, value, message in [("max_steps", 2.5, "max_steps must be an integer, got 2.5"),
                                  ("num_replays", 1.0, "num_replays must be an integer"),
                                  ("learning_rate", "1e-4", "learning_rate must be a number"),
                                  ("log_completions", "false", "log_completions must be true or false"),
                                  ("lambda_0", float("inf"), "lambda_0 must be a finite number >= 0"),
                                  ("lambda_0", -1e-9, "lambda_0 must be"), ("eta", 1.0001, "eta must be between"),
                                  ("num_replays", 7, "must be smaller than num_generations")]:
        with pytest.raises(ValueError, match=message):
            HiRConfig(**common, **{field: value})
    assert HiRConfig(**common, eta=1.0, lambda_0=0.0, num_replays=5).num_replays == 5  # the edges are allowed
    assert HiRConfig(**common, learning_rate=1, max_steps=3).max_steps == 3  # an int is a fine float
    with pytest.raises(ValueError, match="dataset_max_rows must be an integer"):
        HiRScriptArguments(dataset_name="x", dataset_max_rows=2.5)
    with pytest.raises(ValueError, match="dataset_max_rows must be >= 1"):
        HiRScriptArguments(dataset_name="x", dataset_max_rows=-1)
    assert field_type_problem(HiRScriptArguments(dataset_name="x", dataset_max_rows=None)) is None


def test_train_without_arguments_asks_for_the_recipe_or_dataset(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train"]) == 2  # first complaint: the missing recipe or data, not bf16
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "bf16" not in err, err
    assert err.startswith("hir-trl train: error: dataset_name is required") and "--config recipe.yaml" in err
    assert not list(tmp_path.iterdir())
    data = write_rows(tmp_path / "d.jsonl", [native()])
    assert main(["train", "--dataset_name", str(data)]) == 2  # no recipe, no model
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("hir-trl train: error: model_name_or_path is required"), err


def test_use_vllm_without_vllm_is_one_line(tmp_path, capsys, tiny_model_path, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("trl.import_utils"), "is_vllm_available", lambda *a, **k: False)
    code, out, err = train(tmp_path, capsys, "--model_name_or_path", tiny_model_path, "--build_tiny_model", "false",
                           "--use_vllm", "true")
    assert_one_line_error(code, out, err, "use_vllm: true needs vLLM, which is not installed")
    assert not (tmp_path / "out").exists()


def test_a_prompt_too_long_for_the_model_is_one_line_naming_the_row(tmp_path, capsys, tiny_model_path):
    rows = [native(id=f"n-{i}") for i in range(4)]
    rows[2] = native(id="huge", task="rain " * 20000)  # the tiny model's context: 2048 tokens
    data = write_rows(tmp_path / "d.jsonl", rows)
    code, out, err = train(tmp_path, capsys, "--model_name_or_path", tiny_model_path, "--build_tiny_model", "false",
                           "--dataset_name", data)
    # checked once the model is loaded (its context and tokenizer): transformers' weight-loading bar may come first
    err = err[err.rindex("it/s]") + len("it/s]"):].lstrip("\n") if "Loading weights" in err else err
    assert_one_line_error(code, out, err, "train_dataset row 2 (row_id 'huge'): field 'prompt': the prompt is ",
                          "context of 2048 tokens")
    # nothing written (the Trainer makes output_dir and TRL its empty completions/ folder when they are built)
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


# ---------------------------------------------------------------------------------------------- judge key, --debug


def _soft_data(tmp_path):
    row = native(constraints=NATIVE["constraints"] + [{"text": "The tone is calm.", "kind": "soft"}])
    return write_rows(tmp_path / "soft.jsonl", [row])


def test_missing_judge_key_is_one_line(tmp_path, capsys, tiny_model_path, monkeypatch):
    monkeypatch.delenv("HIR_TEST_UNSET_KEY", raising=False)
    code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / "out"),
                 "--model_name_or_path", str(tiny_model_path), "--build_tiny_model", "false",
                 "--dataset_name", str(_soft_data(tmp_path)), "--judge_model", "openai/judge",
                 "--judge_api_key_env", "HIR_TEST_UNSET_KEY", "--soft_constraints", "judge"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, "the judge's API key variable 'HIR_TEST_UNSET_KEY' is not set", "export it")
    assert not (tmp_path / "out").exists()


def test_debug_flag_or_variable_shows_the_traceback(tmp_path, capsys, monkeypatch):
    path, _ = _data_case(tmp_path, "non_string_content")
    argv = ["train", "--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / "out"), "--model_name_or_path",
            str(tmp_path / "model"), "--dataset_name", str(path)]
    with pytest.raises(DatasetFormatError, match="line 5: field 'messages"):
        main(argv + ["--debug"])
    monkeypatch.setenv("HIR_TRL_DEBUG", "1")
    with pytest.raises(DatasetFormatError):
        main(argv)
    monkeypatch.setenv("HIR_TRL_DEBUG", "0")
    assert main(argv) == 2 and capsys.readouterr().err.startswith("hir-trl train: error: ")


# ---------------------------------------------------------------------------------------------- property test

#: (mutation of a valid native row, the field the error must name). Whitespace values come from hypothesis.
MUTATIONS = {
    "task_missing": (lambda r, ws: r.pop("task"), "field 'task'"),
    "task_whitespace": (lambda r, ws: r.update(task=ws), "field 'task'"),
    "task_not_a_string": (lambda r, ws: r.update(task=7), "field 'task'"),
    "prompt_whitespace": (lambda r, ws: r.update(prompt=ws), "field 'prompt'"),
    # a list prompt is read as chat messages (an already-normalized row): the error names the bad message
    "prompt_not_a_string": (lambda r, ws: r.update(prompt=["x"]), "field 'prompt[0]'"),
    "constraints_empty": (lambda r, ws: r.update(constraints=[]), "field 'constraints'"),
    "constraints_not_a_list": (lambda r, ws: r.update(constraints="no commas"), "field 'constraints'"),
    "constraint_text_whitespace": (lambda r, ws: r["constraints"][0].update(text=ws), "field 'constraints[0].text'"),
    "constraint_kind_unknown": (lambda r, ws: r["constraints"][1].update(kind="medium"), "field 'constraints[1].kind'"),
    "instruction_id_unknown": (lambda r, ws: r["constraints"][0].update(instruction_id="punctuation:no_dash"),
                               "field 'constraints[0].instruction_id'"),
    "kwargs_bad": (lambda r, ws: r["constraints"][1].update(kwargs={"relation": "about"}),
                   "field 'constraints[1].instruction_id'"),
    "template_unknown": (lambda r, ws: r.update(template="zigzag"), "field 'template'"),
    "messages_not_a_list": (lambda r, ws: r.update(messages="system: hi"), "field 'messages'"),
    "message_content_not_a_string": (lambda r, ws: r.update(messages=[{"role": "system", "content": 3}]),
                                     "field 'messages[0].content'"),
    "message_without_role": (lambda r, ws: r.update(messages=[{"content": "hi"}]), "field 'messages[0]'"),
    "row_not_an_object": (lambda r, ws: (r.clear(), r.update(__list__=True)), "expected a JSON object"),
}

BAD_FLAGS = st.one_of(
    st.tuples(st.just("max_steps"), st.floats(0.01, 1e4).filter(lambda x: x != int(x)).map(repr)),
    st.tuples(st.just("num_generations"), st.sampled_from(["2.5", "six", "1e3"])),
    st.tuples(st.just("num_replays"), st.integers(-100, -1).map(str)),
    st.tuples(st.just("num_replays"), st.integers(6, 50).map(str)),  # >= num_generations (6)
    st.tuples(st.just("eta"), st.one_of(st.floats(1.0001, 1e6), st.floats(-1e6, -1e-6)).map(repr)),
    st.tuples(st.just("lambda_0"), st.floats(-1e6, -1e-6).map(repr)),
    st.tuples(st.just("per_device_train_batch_size"), st.sampled_from(["x", "1.5", ""])),
    st.tuples(st.just("dataset_max_rows"), st.integers(-5, 0).map(str)),
    st.tuples(st.from_regex(r"[a-z]{3,10}_zz", fullmatch=True), st.just("1")),  # an unknown flag
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_malformed_rows_and_flags_give_one_line_errors(tmp_path_factory, capsys, data):
    tmp_path = tmp_path_factory.mktemp("case")
    if data.draw(st.booleans(), label="bad row (else bad flag)"):
        n = data.draw(st.integers(1, 5), label="rows")
        rows = [native(id=f"n-{i}") for i in range(n)]
        bad_at = data.draw(st.integers(0, n - 1), label="malformed row")
        kind = data.draw(st.sampled_from(sorted(MUTATIONS)), label="mutation")
        whitespace = data.draw(st.text(alphabet=" \t\n\r\u00a0\u3000", max_size=6), label="whitespace")
        mutate, fragment = MUTATIONS[kind]
        mutate(rows[bad_at], whitespace)
        if rows[bad_at].get("__list__"):
            rows[bad_at] = ["not", "an", "object"]
        blanks = data.draw(st.sets(st.integers(0, n - 1)), label="blank lines before rows")
        path = write_rows(tmp_path / "rows.jsonl", rows, blank_before=blanks)
        line = 1 + bad_at + sum(1 for b in blanks if b <= bad_at)
        code, out, err = train(tmp_path, capsys, "--dataset_name", path)
        assert_one_line_error(code, out, err, f"rows.jsonl, line {line}: ", fragment)
    else:
        flag, value = data.draw(BAD_FLAGS, label="flag")
        code, out, err = train(tmp_path, capsys, f"--{flag}", value)
        assert_one_line_error(code, out, err, flag)
    assert_nothing_written(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] in ([], ["rows.jsonl"])
