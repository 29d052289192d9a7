"""Read rows from JSON Lines and JSON files, every error naming the file and the line.

The one reader of the package's JSON inputs: responses files (`hir_trl.evaluation`), and the JSON files of every data
source (training data, benchmark files, the task sources of `hir_trl.data.synth`), which
`hir_trl.data.loading.read_source` reads through it. Python's `json` parses; this module only
locates. Each row comes with its location as the user finds it in an editor: ``"data.jsonl, line 7"`` (lines
count from 1, blank lines included), ``"rows.json, line 4"`` (the line a list item starts on) or
``"rows.json, data[3]"`` (an item of ``{"data": [...]}``, from 0).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONFileError(ValueError):
    """A file that cannot be read as rows of JSON: ``"<path>, line <n>: <detail>"`` (``"<path>: <detail>"``
    for a problem with the whole file).

    Attributes:
        path: the file, as given.
        line: the 1-based line of the problem, or None.
        detail: what is wrong, without the location.
        location: ``"<path>, line <n>"``, or ``"<path>"`` when ``line`` is None.
    """

    def __init__(self, path: str | os.PathLike, detail: str, line: int | None = None) -> None:
        self.path, self.line, self.detail = os.fspath(path), line, detail
        self.location = f"{self.path}, line {line}" if line else self.path
        super().__init__(f"{self.location}: {detail}")


def read_text(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file (a byte-order mark is dropped).

    Raises:
        JSONFileError: a byte sequence that is not UTF-8, naming its line and column.
        FileNotFoundError: a file that does not exist.
    """
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - raw.rfind(b"\n", 0, exc.start)
        raise JSONFileError(path, f"byte 0x{raw[exc.start]:02x} at column {column} is not UTF-8 text; save the file "
                            "as UTF-8", line) from None


def _lone_surrogate(value: Any, where: str = "") -> tuple[str, str] | None:
    """``(field, escape)`` of the first string in ``value`` that holds a lone UTF-16 surrogate (an escape such as
    ``\\ud800`` without its pair: JSON parses it, but it is no text, and nothing can write it as UTF-8), or None."""
    if isinstance(value, str):
        match = _SURROGATE.search(value)
        return (where or "the value", f"\\u{ord(match.group()):04x}") if match else None
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _lone_surrogate(item, f"{where}[{key}]" if isinstance(key, int) else
                                f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


#: The most levels of nested lists and objects a row may have (`nesting_depth`): a chat row has five or six; deeper
#: data is no row (Python's JSON parser and every walk over the row would recurse once per level).
MAX_NESTING = 64
_TOO_DEEP = (f"nests lists or objects more than {MAX_NESTING} levels deep: no data row is shaped like that; check "
             "the file")


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """Levels of nested lists and objects in ``value`` (0 for a scalar), counted without recursion and up to
    ``limit + 1`` (a deeper value stops the count)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, Mapping) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > limit:
            return deepest
        todo.extend((child, depth + 1) for child in children)
    return deepest


def _checked(path: str | os.PathLike, record: Any, line: int | None, prefix: str = "") -> Any:
    """``record``, or a `JSONFileError` naming a nesting deeper than `MAX_NESTING` or the field that holds a lone
    surrogate escape."""
    if nesting_depth(record) > MAX_NESTING:
        raise JSONFileError(path, f"{prefix}{_TOO_DEEP}", line)
    found = _lone_surrogate(record)
    if found is not None:
        field, escape = found
        raise JSONFileError(path, f"{prefix}field {field!r} holds a lone surrogate escape {escape}, which is not "
                            "text: remove it, or write the character itself (or both halves of its pair, e.g. "
                            "\\ud83d\\ude00)", line)
    return record


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[str, Any]]:
    """``(location, value)`` of every non-blank line of a JSON Lines file, in order.

    Lines are split at ``\\n`` only (a U+2028 inside a string is text, not a line break).

    Raises:
        JSONFileError: a line that does not parse (its line and column named; a first line ``[`` or ``{`` is
            said to look like one JSON document), a row nested more than `MAX_NESTING` levels deep, a string holding a lone surrogate escape (``\\ud800``; its line
            and field named), or a file that is not UTF-8. Raised when the iteration reaches it.
    """
    text = read_text(path)
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except RecursionError:
            raise JSONFileError(path, _TOO_DEEP, line_no) from None
        except json.JSONDecodeError as exc:
            hint = ("; the file looks like one JSON document, not JSON Lines: rename it to .json"
                    if line_no == 1 and line.strip() in ("[", "{") else "")
            raise JSONFileError(path, f"does not parse as JSON ({exc.msg}, column {exc.colno}){hint}",
                                line_no) from None
        yield f"{os.fspath(path)}, line {line_no}", _checked(path, record, line_no)


def _json_value(path: str | os.PathLike, text: str, pos: int) -> tuple[Any, int]:
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except RecursionError:
        raise JSONFileError(path, _TOO_DEEP, text.count("\n", 0, pos) + 1) from None
    except json.JSONDecodeError as exc:
        raise JSONFileError(path, f"does not parse as JSON ({exc.msg}, column {exc.colno})", exc.lineno) from None


def read_json(path: str | os.PathLike) -> Iterator[tuple[str, Any]]:
    """``(location, value)`` of every item of a JSON file holding a list of rows, or ``{"data": [...]}``.

    A list item is located by the line it starts on; an item of ``data`` by its position in ``data``.

    Raises:
        JSONFileError: an empty file, a file that does not parse (line and column named), a row nested more than
            `MAX_NESTING` levels deep, a string holding a lone
            surrogate escape (line and field named), one that holds more than one JSON value (said to look like JSON Lines), or one whose value is neither a list nor
            ``{"data": [...]}``. Raised when the iteration reaches it.
    """
    text = read_text(path)
    where = os.fspath(path)
    pos = _JSON_WHITESPACE.match(text, 0).end()
    if pos == len(text):
        raise JSONFileError(path, "is empty")
    if text[pos] != "[":
        data, end = _json_value(path, text, pos)
        rest = _JSON_WHITESPACE.match(text, end).end()
        if rest < len(text):
            raise JSONFileError(path, "holds more than one JSON value; it looks like JSON Lines (one object per "
                                "line): rename it to .jsonl", text.count("\n", 0, rest) + 1)
        if isinstance(data, Mapping) and isinstance(data.get("data"), list):
            for i, record in enumerate(data["data"]):
                yield f"{where}, data[{i}]", _checked(path, record, None, f"data[{i}]: ")
            return
        raise JSONFileError(path, "must hold a list of rows (or {'data': [...]}); a file of one JSON object per "
                            "line must be named .jsonl")
    pos = _JSON_WHITESPACE.match(text, pos + 1).end()
    line, counted = 1 + text.count("\n", 0, pos), pos
    if text[pos:pos + 1] != "]":
        while True:
            line += text.count("\n", counted, pos)
            counted = pos
            record, pos = _json_value(path, text, pos)
            yield f"{where}, line {line}", _checked(path, record, line)
            pos = _JSON_WHITESPACE.match(text, pos).end()
            if text[pos:pos + 1] == ",":
                pos = _JSON_WHITESPACE.match(text, pos + 1).end()
                continue
            if text[pos:pos + 1] == "]":
                break
            raise JSONFileError(path, "does not parse as JSON (expected ',' or ']' after a row)",
                                text.count("\n", 0, pos) + 1)
    rest = _JSON_WHITESPACE.match(text, pos + 1).end()
    if rest < len(text):
        raise JSONFileError(path, "has more text after the list of rows", text.count("\n", 0, rest) + 1)
