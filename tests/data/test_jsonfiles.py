"""The one reader of JSON and JSON Lines rows (`hir_trl.data.jsonfiles`) and the callers that share it."""

from __future__ import annotations

import json

import pytest

from hir_trl.data.jsonfiles import JSONFileError, read_json, read_jsonl, read_text
from hir_trl.data.loading import DatasetFormatError, load_rows
from hir_trl.data.synth import read_prompts
from hir_trl.evaluation import BenchmarkFormatError, ResponsesFormatError, load_benchmark, read_responses


def test_jsonl_rows_are_located_by_their_line_blank_lines_counted(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n  \n{"a": "x\u2028y"}\n', encoding="utf-8")  # U+2028 inside a string is no break
    assert list(read_jsonl(path)) == [(f"{path}, line 1", {"a": 1}), (f"{path}, line 4", {"a": "x\u2028y"})]


def test_a_malformed_jsonl_row_names_the_file_the_line_and_the_column(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n\n{"a": 3,}\n{"a": 4}\n')
    rows = read_jsonl(path)
    assert next(rows) == (f"{path}, line 1", {"a": 1})  # rows before the bad line are read
    with pytest.raises(JSONFileError) as info:
        list(rows)
    error = info.value
    assert (error.path, error.line, error.location) == (str(path), 4, f"{path}, line 4")
    assert str(error) == f"{path}, line 4: does not parse as JSON (Expecting property name enclosed in double " \
                         "quotes, column 9)"
    assert isinstance(error, ValueError)


def test_a_json_document_named_jsonl_gets_a_hint(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps([{"a": 1}, {"a": 2}], indent=1))
    with pytest.raises(JSONFileError, match=r"line 1: .*looks like one JSON document.*rename it to \.json"):
        list(read_jsonl(path))


def test_bytes_that_are_not_utf8_name_their_line_and_column(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "caf\xe9"}\n')
    with pytest.raises(JSONFileError, match=r"line 2: byte 0xe9 at column 11 is not UTF-8"):
        read_text(path)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"a": 1}\n')
    assert list(read_jsonl(bom)) == [(f"{bom}, line 1", {"a": 1})]


def test_json_list_items_are_located_by_the_line_they_start_on(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[\n  {"a": 1},\n\n  {"a":\n     2},\n  {"a": 3}\n]\n')
    assert [(where.rsplit(", ", 1)[1], row["a"]) for where, row in read_json(path)] == [
        ("line 2", 1), ("line 4", 2), ("line 6", 3)]
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"a": 1}, {"a": 2}]}))
    assert [where for where, _ in read_json(data)] == [f"{data}, data[0]", f"{data}, data[1]"]


@pytest.mark.parametrize("text, line, message", [
    ("", None, "is empty"),
    ('{"a": 1}\n{"a": 2}\n', 2, "looks like JSON Lines"),
    ('{"rows": []}', None, "must hold a list of rows"),
    ('[\n{"a": 1}\n{"a": 2}]', 3, "expected ',' or ']' after a row"),
    ('[{"a": 1}]\nextra', 2, "has more text after the list of rows"),
    ('[\n{"a": 1},\n{"a": }]', 3, "does not parse as JSON"),
])
def test_json_file_errors(tmp_path, text, line, message):
    path = tmp_path / "rows.json"
    path.write_text(text)
    with pytest.raises(JSONFileError, match=message) as info:
        list(read_json(path))
    assert info.value.line == line


def test_every_caller_reports_the_readers_location(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('\n{"prompt": "p",\n')
    expected = f"{bad}, line 2: does not parse as JSON"
    for read, error in ((read_responses, ResponsesFormatError), (load_benchmark, BenchmarkFormatError),
                        (load_rows, DatasetFormatError), (read_prompts, DatasetFormatError)):
        with pytest.raises(error) as info:
            read(bad)
        assert str(info.value).startswith(expected), (read.__name__, str(info.value))
    # a field error of a responses file is located the same way
    field = tmp_path / "field.jsonl"
    field.write_text('{"prompt": "p", "response": "r"}\n\n{"prompt": "q", "response": 3}\n')
    with pytest.raises(ResponsesFormatError) as info:
        read_responses(field)
    assert str(info.value).startswith(f"{field}, line 3: field 'response' must be a string")


def test_every_data_source_is_read_by_one_dispatch(tmp_path):
    # training data, benchmark files and synth's task sources go through hir_trl.data.loading.read_source: the same
    # suffixes, the same refusal, the same missing-file error
    unsupported = tmp_path / "rows.txt"
    unsupported.write_text('[{"prompt": "p"}]\n')
    for read in (load_rows, load_benchmark, read_prompts):
        with pytest.raises(ValueError) as info:
            read(unsupported)
        assert str(info.value).startswith(f"{unsupported}: unsupported file type '.txt'"), (read.__name__, info.value)
    for read in (load_rows, read_prompts):
        with pytest.raises(FileNotFoundError, match="dataset file .*missing.jsonl does not exist"):
            read(tmp_path / "missing.jsonl")
    listed = tmp_path / "prompts.json"
    listed.write_text('{"data": [{"prompt": "Write."}, {"prompt": "Sing."}]}')
    assert read_prompts(listed) == ["Write.", "Sing."]
