"""Load multi-constraint instruction data (HIR-16K's verl schema or our native JSONL) into normalized rows.

Every source is normalized to the same columns, which `HiRTrainer` and `ConstraintReward` read:

=============== ==========================================================================================
column          meaning
=============== ==========================================================================================
``prompt``      chat messages: the turns before the final user turn (system, earlier turns), then the final
                user turn holding the instruction q. Only that final turn is rewritten for a replay.
``task``        the task description x (paper §2).
``constraints`` the ordered constraints C: a list of ``{"text", "kind", "family", "instruction_id",
                "kwargs"}``; ``kind`` is ``"hard"`` (rule-checked by ``family``/``instruction_id`` with
                ``kwargs``, a JSON string) or ``"soft"`` (judged by an LLM; family/id are ``None``).
``template``    how x and constraint texts are joined (`hir_trl.data.templates.TEMPLATES`).
``row_id``      the source row's id, or its index.
=============== ==========================================================================================

HIR-16K rows (design §2): ``data_source`` ``type1`` (IFEval family), ``type2`` (IFBench family; the 25
classic IFEval ids also resolve to IFEval) or ``type3`` (MulDimIF family);
``reward_model.ground_truth`` a dict or JSON string with ``instruction_id_list`` (and ``kwargs`` for
type1/type2); ``extra_info.question`` = x, ``extra_info.criteria`` = constraint texts in the same
order, ``extra_info.q_type`` = the joiner.

Native rows (one JSON object per line)::

    {"id": "ex-1",                                  # optional
     "task": "Write a haiku about rain.",           # x
     "constraints": [
        {"text": "Do not use any commas.", "family": "ifeval",
         "instruction_id": "punctuation:no_comma", "kwargs": {}},
        {"text": "The tone should be melancholic.", "kind": "soft"}],
     "template": "plain",                           # optional, default "plain"
     "messages": [{"role": "system", "content": "..."}],  # optional turns before the final user turn
     "prompt": "..."}                               # optional final user text; default: template(x, C)

A row already normalized (the columns above, ``kwargs`` a JSON string, ``prompt`` the whole conversation) is a
native row too, so normalizing is idempotent; `HiRTrainer` normalizes its datasets with `normalize_dataset`.

A malformed row stops loading with a `DatasetFormatError` that names the file, the line (or row) and the field.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import verifiers
from .jsonfiles import JSONFileError, read_json, read_jsonl
from .templates import TEMPLATES, join_instruction

logger = logging.getLogger(__name__)

HIR_DATA_SOURCES = {"type1": "ifeval", "type2": "ifbench", "type3": "muldimif"}
HIR_Q_TYPES = ("type1", "type2", "type3", "type4", "type5", "type6")
#: Suffixes that make a path that does not exist a missing local file (never a Hub id).
_DATA_FILE_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".tsv", ".txt", ".arrow", ".gz", ".zst")


class DatasetFormatError(ValueError):
    """A row (or a file) that cannot be used for training. The message names where and which field.

    Attributes:
        index: the row's 0-based position among the rows read (``-1`` for a problem with a whole file).
        field: the field at fault, e.g. ``"extra_info.question"``; ``"<file>"`` for a file-level problem.
        detail: what is wrong with it.
        location: where the row is, as the user finds it: ``"data.jsonl, line 7"`` (the line number in the
            file, counting from 1, blank lines included), ``"rows.parquet, row 3"``, or None (``"row <index>"``).
    """

    def __init__(self, index: int | str, field: str, message: str, location: str | None = None) -> None:
        self.index, self.field, self.detail, self.location = index, field, message, location
        where = location or f"row {index}"
        super().__init__(f"{where}: {message}" if field.startswith("<") else f"{where}: field {field!r}: {message}")

    def at(self, location: str | None) -> DatasetFormatError:
        """The same error, located in a file (``location`` as in the class docstring)."""
        return DatasetFormatError(self.index, self.field, self.detail, location)


def _validate_hard(index: int, field: str, family: str, instruction_id: str, kwargs: dict[str, Any]) -> None:
    if family not in verifiers.FAMILIES:  # the family, not the id, is what is missing
        raise DatasetFormatError(index, field, verifiers.unknown_family_message(family))
    if not verifiers.is_known(family, instruction_id):
        raise DatasetFormatError(index, field, f"unknown instruction id {instruction_id!r} in family {family!r}")
    problem = verifiers.validate_constraint(family, instruction_id, kwargs)
    if problem is not None:
        raise DatasetFormatError(index, field, f"bad kwargs for {instruction_id!r}: {problem}")


def _messages(index: int, field: str, value: Any) -> list[dict[str, Any]]:
    """Chat messages with a string ``role`` and a string ``content`` each (text-only training)."""
    if not isinstance(value, list):
        raise DatasetFormatError(index, field, "expected a list of chat messages with 'role' and 'content'")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise DatasetFormatError(index, f"{field}[{i}]", "expected a chat message with a string 'role' and "
                                     "'content'")
        content = message.get("content")
        if not isinstance(content, str):
            got = "missing" if "content" not in message else f"got {type(content).__name__}"
            raise DatasetFormatError(index, f"{field}[{i}].content", f"expected a string ({got})")
        messages.append({"role": message["role"], "content": content})
    return messages


def _check_instruction(index: int, field: str, text: str) -> None:
    if not text.strip():
        raise DatasetFormatError(index, field, "the instruction (final user turn) is empty or whitespace")


def normalize_hir_row(row: Mapping[str, Any], index: int, on_unverifiable: str = "soft") -> dict[str, Any]:
    """Normalize one HIR-16K (verl schema) row. See the module docstring for the output columns.

    ``on_unverifiable`` decides what happens to a MulDimIF requirement whose text no rule checker can
    parse (4 of 1,399 in the real type3 sample): ``"soft"`` keeps it as a soft constraint (LLM-judged;
    `load_rows` logs a warning naming the rows), ``"error"`` stops loading.

    Raises:
        DatasetFormatError: unknown ``data_source`` or instruction id, ground truth that does not parse,
            criteria and instruction lists of different lengths, a missing field, or bad kwargs.
    """
    source = row.get("data_source")
    if source not in HIR_DATA_SOURCES:
        raise DatasetFormatError(index, "data_source", f"unknown data source {source!r}; expected one of "
                                 f"{sorted(HIR_DATA_SOURCES)}")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise DatasetFormatError(index, "reward_model.ground_truth", "missing")
    truth = reward_model["ground_truth"]
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(index, "reward_model.ground_truth", f"does not parse as JSON: {exc}") from None
    if not isinstance(truth, Mapping) or not isinstance(truth.get("instruction_id_list"), list):
        raise DatasetFormatError(index, "reward_model.ground_truth", "expected an object with 'instruction_id_list'")
    ids = truth["instruction_id_list"]

    extra = row.get("extra_info")
    if not isinstance(extra, Mapping):
        raise DatasetFormatError(index, "extra_info", "missing")
    task = extra.get("question")
    if not isinstance(task, str) or not task.strip():
        raise DatasetFormatError(index, "extra_info.question", "expected a non-empty string")
    criteria = extra.get("criteria")
    if not isinstance(criteria, list):
        raise DatasetFormatError(index, "extra_info.criteria", "expected a list of strings")
    for j, text in enumerate(criteria):
        if not isinstance(text, str) or not text.strip():
            raise DatasetFormatError(index, f"extra_info.criteria[{j}]", "expected a non-empty string")
    if len(criteria) != len(ids):
        raise DatasetFormatError(index, "extra_info.criteria", f"has {len(criteria)} items but "
                                 f"reward_model.ground_truth.instruction_id_list has {len(ids)}")
    if not ids:
        raise DatasetFormatError(index, "reward_model.ground_truth.instruction_id_list", "is empty")
    q_type = extra.get("q_type")
    if q_type not in HIR_Q_TYPES:
        raise DatasetFormatError(index, "extra_info.q_type", f"unknown q_type {q_type!r}; expected one of "
                                 f"{list(HIR_Q_TYPES)}")

    constraints = []
    if source == "type3":
        for j, (item, text) in enumerate(zip(ids, criteria)):
            field = f"reward_model.ground_truth.instruction_id_list[{j}]"
            if not (isinstance(item, list) and len(item) == 3 and all(isinstance(s, str) for s in item)):
                raise DatasetFormatError(index, field, "expected [category, subcategory, requirement]")
            instruction_id, kwargs = f"{item[0]}_{item[1]}", {"requirement": item[2]}
            if not verifiers.is_known("muldimif", instruction_id):
                raise DatasetFormatError(index, field, f"unknown instruction id {instruction_id!r} in family "
                                         "'muldimif'")
            problem = verifiers.validate_constraint("muldimif", instruction_id, kwargs)
            if problem is not None and on_unverifiable == "error":
                raise DatasetFormatError(index, field, f"requirement cannot be rule-checked: {problem}")
            # A requirement no rule can check (e.g. "include the phonetic transcription of 'Gaza' in Arabic")
            # needs semantic evaluation: it becomes a soft constraint for the LLM judge.
            kind = "hard" if problem is None else "soft"
            constraints.append(_constraint(text, kind, "muldimif", instruction_id, kwargs))
    else:
        kwargs_list = truth.get("kwargs")
        if not isinstance(kwargs_list, list) or len(kwargs_list) != len(ids):
            raise DatasetFormatError(index, "reward_model.ground_truth.kwargs",
                                     f"expected a list of {len(ids)} objects, one per instruction id")
        for j, (instruction_id, kwargs, text) in enumerate(zip(ids, kwargs_list, criteria)):
            field = f"reward_model.ground_truth.instruction_id_list[{j}]"
            if not isinstance(instruction_id, str):
                raise DatasetFormatError(index, field, "expected an instruction id string")
            if kwargs is None:
                kwargs = {}
            if not isinstance(kwargs, Mapping):
                raise DatasetFormatError(index, f"reward_model.ground_truth.kwargs[{j}]", "expected an object")
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
            family = HIR_DATA_SOURCES[source]
            if family == "ifbench" and not verifiers.is_known("ifbench", instruction_id):
                family = "ifeval"  # IFBench rows also use the 25 classic IFEval ids
            _validate_hard(index, field, family, instruction_id, kwargs)
            constraints.append(_constraint(text, "hard", family, instruction_id, kwargs))

    if "prompt" in row and row["prompt"] is not None:
        prompt = _messages(index, "prompt", row["prompt"])
        if not prompt or prompt[-1]["role"] != "user":
            raise DatasetFormatError(index, "prompt", "the conversation must end with a user turn")
        _check_instruction(index, f"prompt[{len(prompt) - 1}].content", prompt[-1]["content"])
    else:
        prompt = [{"role": "user", "content": join_instruction(task, criteria, q_type)}]
    return {
        "prompt": prompt,
        "task": task,
        "constraints": constraints,
        "template": q_type,
        "row_id": str(_first_not_none(row.get("id"), extra.get("index"), index)),
    }


def normalize_native_row(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Normalize one row of our native format (see the module docstring).

    Raises:
        DatasetFormatError: missing task or constraints, an unknown kind/template/instruction id,
            a hard constraint without family and instruction id, or bad kwargs.
    """
    task = row.get("task")
    if not isinstance(task, str) or not task.strip():
        raise DatasetFormatError(index, "task", "expected a non-empty string")
    items = row.get("constraints")
    if not isinstance(items, list) or not items:
        raise DatasetFormatError(index, "constraints", "expected a non-empty list")
    template = row.get("template") or "plain"
    if template not in TEMPLATES:
        raise DatasetFormatError(index, "template", f"unknown template {template!r}; expected one of "
                                 f"{sorted(TEMPLATES)}")
    constraints = []
    for j, item in enumerate(items):
        field = f"constraints[{j}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise DatasetFormatError(index, f"{field}.text", "expected a non-empty string")
        kind = item.get("kind") or "hard"  # None: a row without 'kind' in a table where other rows have one
        if kind not in ("hard", "soft"):
            raise DatasetFormatError(index, f"{field}.kind", f"expected 'hard' or 'soft', got {kind!r}")
        family, instruction_id = item.get("family"), item.get("instruction_id")
        kwargs = item.get("kwargs") or {}
        if isinstance(kwargs, str):  # a normalized row's kwargs: a JSON string
            try:
                kwargs = json.loads(kwargs)
            except json.JSONDecodeError as exc:
                raise DatasetFormatError(index, f"{field}.kwargs", f"does not parse as JSON: {exc}") from None
        if not isinstance(kwargs, Mapping):
            raise DatasetFormatError(index, f"{field}.kwargs", "expected an object")
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if kind == "soft":  # a normalized row's softened rule constraint keeps its family and id
            named = isinstance(family, str) and isinstance(instruction_id, str)
            constraints.append(_constraint(item["text"], "soft", family if named else None,
                                           instruction_id if named else None, kwargs if named else {}))
            continue
        if not isinstance(family, str) or not isinstance(instruction_id, str):
            raise DatasetFormatError(index, f"{field}.instruction_id",
                                     "a hard constraint needs 'family' and 'instruction_id'")
        _validate_hard(index, f"{field}.instruction_id", family, instruction_id, kwargs)
        constraints.append(_constraint(item["text"], "hard", family, instruction_id, kwargs))

    history = _messages(index, "messages", row.get("messages") or [])
    text = row.get("prompt")
    if isinstance(text, list):  # a normalized row (`load_hir_dataset`): chat messages ending with the user turn
        if history:
            raise DatasetFormatError(index, "messages", "give the earlier turns either in 'messages' (with 'prompt' "
                                     "the final user text) or in 'prompt' (the whole conversation), not both")
        history = _messages(index, "prompt", text)
        if not history or history[-1]["role"] != "user":
            raise DatasetFormatError(index, "prompt", "the conversation must end with a user turn")
        _check_instruction(index, f"prompt[{len(history) - 1}].content", history[-1]["content"])
        text = history.pop()["content"]
    elif text is None:
        text = join_instruction(task, [c["text"] for c in constraints], template)
    elif not isinstance(text, str):
        raise DatasetFormatError(index, "prompt", "expected a string (the final user turn) or chat messages")
    _check_instruction(index, "prompt", text)
    return {
        "prompt": history + [{"role": "user", "content": text}],
        "task": task,
        "constraints": constraints,
        "template": template,
        "row_id": str(_first_not_none(row.get("id"), row.get("row_id"), index)),
    }


def _first_not_none(*values: Any) -> Any:
    """The first value that is not None (a table fills a column a row lacks with None)."""
    return next(v for v in values if v is not None)


def _constraint(text: str, kind: str, family: str | None, instruction_id: str | None, kwargs: dict) -> dict:
    return {
        "text": text,
        "kind": kind,
        "family": family,
        "instruction_id": instruction_id,
        "kwargs": json.dumps(kwargs, sort_keys=True),
    }


def normalize_row(row: Mapping[str, Any], index: int, on_unverifiable: str = "soft") -> dict[str, Any]:
    """Normalize a HIR-16K row (has ``data_source``) or a native row (has ``task`` and ``constraints``)."""
    if not isinstance(row, Mapping):
        raise DatasetFormatError(index, "<row>", f"expected a JSON object, got {type(row).__name__}")
    if on_unverifiable not in ("soft", "error"):
        raise ValueError(f"on_unverifiable must be 'soft' or 'error', got {on_unverifiable!r}")
    if "data_source" in row:
        return normalize_hir_row(row, index, on_unverifiable)
    if "task" in row or "constraints" in row:
        return normalize_native_row(row, index)
    raise DatasetFormatError(index, "data_source", "row is neither HIR-16K (has 'data_source') nor native (has "
                             "'task' and 'constraints')")


# ---------------------------------------------------------------------------------------------- reading files


def _file_error(path: Path | str, message: str, line: int | None = None) -> DatasetFormatError:
    return DatasetFormatError(-1, "<file>", message, f"{path}, line {line}" if line else str(path))


def _json_rows(rows: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """``rows`` (from `hir_trl.data.jsonfiles`), with a file that does not read as JSON a `DatasetFormatError`."""
    try:
        yield from rows
    except JSONFileError as exc:
        raise DatasetFormatError(-1, "<file>", exc.detail, exc.location) from None


def _read_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    import datasets

    try:
        table = datasets.Dataset.from_parquet(str(path))
    except Exception as exc:  # noqa: BLE001 - pyarrow's many error types: any of them means "not readable"
        raise _file_error(path, f"cannot be read as Parquet: {exc}") from exc
    for i, record in enumerate(table):
        yield f"{path}, row {i}", record


#: How a data file is read, by its suffix: ``(location, raw row)`` of every row; a file that does not read as its
#: kind is a `DatasetFormatError` naming the file (and the line).
FILE_READERS: dict[str, Callable[[Path], Iterator[tuple[str, Any]]]] = {
    ".jsonl": lambda path: _json_rows(read_jsonl(path)),
    ".json": lambda path: _json_rows(read_json(path)),
    ".parquet": _read_parquet,
}


def _read_file(path: Path) -> Iterator[tuple[str, Any]]:
    suffix = path.suffix.lower()
    if suffix in FILE_READERS:
        return FILE_READERS[suffix](path)
    why = " (a table cannot hold the nested constraints and chat messages)" if suffix in (".csv", ".tsv") else ""
    raise _file_error(path, f"unsupported file type {path.suffix or '(none)'!r}{why}; use .jsonl (one JSON object "
                      "per line), .json (a list of objects) or .parquet")


def _one_split(splits: list[str], where: str) -> str:
    """The one split of a source read with ``split=None``, or a `DatasetFormatError` naming its splits."""
    if len(splits) != 1:
        raise _file_error(where, f"holds the splits {sorted(splits)}, expected one: name the split")
    return splits[0]


def _directory_files(path: Path, split: str | None) -> list[Path]:
    """The data files of ``split`` (None: the directory's one split) in a local dataset directory, found by the
    `datasets` library's conventions (``train.jsonl``, ``data/test-00000.parquet``, ...; every file is ``train`` when
    no name says otherwise)."""
    from datasets.data_files import DataFilesDict, EmptyDatasetError, get_data_patterns

    try:
        files = DataFilesDict.from_patterns(get_data_patterns(str(path)), base_path=str(path))
    except EmptyDatasetError:
        raise _file_error(path, "is a directory without data files (.jsonl, .json or .parquet)") from None
    split = _one_split(list(map(str, files)), str(path)) if split is None else split
    if split not in files:
        raise _file_error(path, f"has no {split!r} split; its splits: {sorted(map(str, files))}")
    return [Path(f) for f in files[split]]


def _looks_local(source: str | os.PathLike) -> bool:
    """True for what can only be a local path (never a Hub id ``org/name``)."""
    text = os.fspath(source)
    return (isinstance(source, os.PathLike) or text.startswith(("/", "./", "../", "~", ".\\"))
            or Path(text).suffix.lower() in _DATA_FILE_SUFFIXES or len(Path(text).parts) > 2)


def read_source(source: str | os.PathLike, split: str | None = "train",
                name: str | None = None) -> Iterator[tuple[str, Any]]:
    """``(location, raw row)`` of every row of ``source``: the one way a data source is read (training data,
    `load_rows`; benchmark files and the public benchmarks, `hir_trl.evaluation`; the task sources of
    `hir_trl.data.synth`).

    - an existing file: read by its suffix (`FILE_READERS`: ``.jsonl``, ``.json``, ``.parquet``); another suffix is
      refused;
    - an existing directory (without ``name``): its files of ``split`` by the `datasets` naming conventions, each read
      as a file;
    - a path that can only be local and does not exist: `FileNotFoundError`;
    - anything else: a Hub dataset id (or a directory with a configuration ``name``), `datasets.load_dataset`.

    Args:
        source: the file, directory or Hub id.
        split: the split of a directory or Hub dataset; None: its one split (one with several is refused).
        name: the dataset configuration of a Hub id.

    Raises:
        DatasetFormatError: a file that cannot be read (named with its line), a directory without data files or
            without ``split``, a Hub dataset that cannot be loaded, or several splits with ``split=None``. Raised
            when the iteration reaches it.
        FileNotFoundError: a local path that does not exist.
    """
    path = Path(source).expanduser()
    if path.is_file():
        yield from _read_file(path)
        return
    if path.is_dir() and name is None:
        for file in _directory_files(path, split):
            yield from _read_file(file)
        return
    if not path.exists() and _looks_local(source):
        raise FileNotFoundError(f"dataset file {path} does not exist")
    import datasets

    try:
        table = datasets.load_dataset(os.fspath(source), name=name, split=split)
    except Exception as exc:  # noqa: BLE001 - any failure of the Hub path gets one message naming the source
        raise DatasetFormatError(-1, "<source>", f"no local file or directory has this name, and loading it as a "
                                 f"Hub dataset failed: {exc}", os.fspath(source)) from exc
    if split is None:
        split = _one_split(list(table), os.fspath(source))
        table = table[split]
    for i, record in enumerate(table):
        yield f"{source} ({split} split), row {i}", record


def load_rows(source: str | os.PathLike, split: str = "train", name: str | None = None,
              on_unverifiable: str = "soft") -> list[dict[str, Any]]:
    """Read and normalize every row of ``source``.

    Args:
        source: a local ``.jsonl`` (one JSON object per line), ``.json`` (a list of objects, or ``{"data":
            [...]}``) or ``.parquet`` file; a local directory of such files (``split`` picks the files by the
            `datasets` naming conventions; files of both row schemas may be mixed); or a Hub dataset id such as
            ``sastpg/HIR-16K`` (loaded with `datasets.load_dataset`).
        split: the split for directories and Hub ids.
        name: the dataset configuration for Hub ids (a directory with ``name`` is also loaded by `datasets`).
        on_unverifiable: ``"soft"`` (default) or ``"error"``, see `normalize_hir_row`.

    Returns:
        Normalized rows (see the module docstring), in file order. Logs a warning naming the rows when
        several rows share an id (their ``row_id`` would not tell them apart in the completion logs).

    Raises:
        DatasetFormatError: the first malformed row, or a file that cannot be read, named by file and line
            (``data.jsonl, line 7``: the line number in the file, counting from 1; ``rows.parquet, row 3`` for
            Parquet rows, counting from 0): bytes that are not UTF-8, a line that does not parse, JSON Lines
            saved as ``.json``, an unsupported file type such as ``.csv``, a row of neither schema, a missing or
            malformed field. Also a source that is neither local nor loadable from the Hub.
        FileNotFoundError: a local path that does not exist.
        ValueError: an unknown ``on_unverifiable``.
    """
    if on_unverifiable not in ("soft", "error"):
        raise ValueError(f"on_unverifiable must be 'soft' or 'error', got {on_unverifiable!r}")
    rows, locations = [], []
    for index, (location, record) in enumerate(read_source(source, split, name)):
        try:
            rows.append(normalize_row(record, index, on_unverifiable))
        except DatasetFormatError as exc:
            raise exc.at(location) from None
        locations.append(location)
    softened = [i for i, row in enumerate(rows)
                if any(c["kind"] == "soft" and c["instruction_id"] for c in row["constraints"])]
    if softened:
        logger.warning("%d rows have a requirement no rule verifier can parse; it is kept as a soft (LLM-judged) "
                       "constraint: %s", len(softened), _where(locations, softened))
    by_id: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_id.setdefault(row["row_id"], []).append(i)
    shared = {row_id: indices for row_id, indices in by_id.items() if len(indices) > 1}
    if shared:
        shown = "; ".join(f"id {row_id!r} at {_where(locations, indices)}" for row_id, indices in
                          list(shared.items())[:5])
        more = f"; and {len(shared) - 5} more ids" if len(shared) > 5 else ""
        logger.warning("Several rows share an id, so row_id in the completion logs does not tell them apart (give "
                       "each row its own 'id'): %s%s", shown, more)
    return rows


def _where(locations: list[str], indices: list[int], limit: int = 20) -> str:
    """The rows at ``indices``, e.g. ``"data.jsonl, lines 3, 9"`` (at most ``limit`` shown)."""
    shown = [locations[i].rsplit(", ", 1) for i in indices[:limit]]
    tails = [part[-1].split(" ") for part in shown]
    if (all(len(part) == 2 for part in shown) and len({part[0] for part in shown}) == 1
            and all(len(t) == 2 and t[0] == tails[0][0] for t in tails)):
        text = f"{shown[0][0]}, {tails[0][0]}{'s' if len(tails) > 1 else ''} " + ", ".join(t[1] for t in tails)
    else:
        text = "; ".join(", ".join(part) for part in shown)
    return text + (f" and {len(indices) - limit} more" if len(indices) > limit else "")


def load_hir_dataset(source: str | os.PathLike, split: str = "train", name: str | None = None,
                     max_rows: int | None = None, on_unverifiable: str = "soft"):
    """Load ``source`` as a `datasets.Dataset` of normalized rows, ready for `HiRTrainer`.

    See `load_rows` for the arguments and errors; ``max_rows`` keeps the first rows only.

    Raises:
        ValueError: ``max_rows`` is not a positive integer; see also `load_rows`.
        DatasetFormatError: as `load_rows`, or no rows at all.
    """
    import datasets

    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise ValueError(f"dataset_max_rows must be an integer >= 1, got {max_rows!r}")
    rows = load_rows(source, split=split, name=name, on_unverifiable=on_unverifiable)
    if max_rows is not None:
        rows = rows[:max_rows]
    if not rows:
        raise DatasetFormatError(-1, "<rows>", "holds no rows", os.fspath(source))
    return datasets.Dataset.from_list(rows)


#: The `datasets` builder of a local file given as a mixture entry's ``path`` (`load_script_datasets`).
_MIXTURE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _mixture(script: Any) -> Any:
    """The rows of ``script.datasets`` (TRL's dataset mixture), read by TRL's own helper `trl.get_dataset` (its
    ``columns`` and ``fraction``), unsplit, normalized; a local file as an entry's ``path`` is read as
    ``path: json, data_files: <file>`` (``datasets.load_dataset`` takes no file as its path)."""
    import dataclasses

    from trl import DatasetMixtureConfig, get_dataset

    entries = []
    for entry in script.datasets:
        path = Path(entry.path).expanduser()
        if path.is_file() and entry.data_files is None:
            if path.suffix not in _MIXTURE_BUILDERS:
                raise _file_error(path, "datasets: a mixture reads .jsonl, .json or .parquet files, got "
                                  f"{path.suffix!r}")
            entry = dataclasses.replace(entry, path=_MIXTURE_BUILDERS[path.suffix], data_files=str(path))
        elif not path.exists() and _looks_local(entry.path) and entry.data_files is None:
            raise FileNotFoundError(f"datasets: dataset file {path} does not exist")
        entries.append(entry)
    check_mixture_files(entries)
    try:
        mixture = get_dataset(DatasetMixtureConfig(datasets=entries))["train"]
    except (ValueError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - datasets' and pyarrow's many error types: one line naming the mixture
        raise ValueError(f"datasets: the mixture's entries cannot be read as one table "
                         f"({(str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]})") from exc
    return normalize_dataset(mixture, "datasets", script.dataset_on_unverifiable)


def _row_format(keys: set[str]) -> str:
    return "HIR-16K" if "data_source" in keys else "native" if keys & {"task", "constraints"} else "unknown"


def check_mixture_files(entries: Sequence[Any]) -> None:
    """Read every local file of a dataset mixture (TRL's `DatasetConfig` entries: ``data_files`` a file or a list
    of files) with this package's readers before `datasets` reads them as one table, so that a problem is one line
    naming the file.

    Raises:
        DatasetFormatError: a file that does not read (a truncated or malformed line: the file and line named; a row
            nested too deep), or two files whose rows are of different formats (HIR-16K and native) or columns, which
            `datasets` cannot put in one table (both files and the difference named).
    """
    seen: list[tuple[Path, str, frozenset[str]]] = []
    for entry in entries:
        files = entry.data_files if isinstance(entry.data_files, (list, tuple)) else [entry.data_files]
        for file in files:
            if not isinstance(file, (str, os.PathLike)) or not Path(file).expanduser().is_file():
                continue
            path = Path(file).expanduser()
            columns: set[str] = set()
            for _, row in _read_file(path):
                if isinstance(row, Mapping):
                    columns |= set(row) if entry.columns is None else set(row) & set(entry.columns)
            kind = _row_format(columns)
            for other, other_kind, other_columns in seen:
                if other_kind != kind:
                    raise _file_error(path, f"datasets: its rows are {kind} rows and those of {other} {other_kind} "
                                      "rows; a mixture's files must share one row format (convert one of them, or "
                                      "train on them one at a time)")
                if other_columns != columns:
                    where, only = (path, sorted(columns - other_columns)) if columns - other_columns else (
                        other, sorted(other_columns - columns))
                    raise _file_error(path, f"datasets: its columns differ from those of {other} (only {where} has "
                                      f"{', '.join(only)}); a mixture's files must have the same columns (give "
                                      "'columns' in each entry to pick the shared ones)")
            seen.append((path, kind, frozenset(columns)))


def load_script_datasets(script: Any, *, evaluate: bool, seed: int) -> tuple[Any, Any]:
    """The training and evaluation data of ``hir-trl train``'s script options (`hir_trl.configs.HiRScriptArguments`),
    as ``trl grpo`` reads them, normalized.

    - training rows: ``datasets`` (TRL's mixture, `trl.get_dataset`), else ``dataset_name`` (`load_hir_dataset`,
      its ``dataset_train_split`` and ``dataset_config``); ``dataset_max_rows`` keeps the first rows;
    - ``test_split_size``: that share (or count) of them is held out as the evaluation set (seeded with ``seed``,
      so every rank and every re-run holds out the same rows);
    - else, when ``evaluate`` (``eval_strategy`` is not ``no``, as ``trl grpo`` decides): the
      ``dataset_test_split`` split of ``dataset_name``; a ``dataset_test_split`` other than ``test`` without
      ``evaluate``, or rows held out by ``test_split_size`` that nothing evaluates, is logged as a warning;
    - ``system_prompt``: every row's system turn (`hir_trl.data.chat.with_system_prompt`).

    Returns:
        ``(train_dataset, eval_dataset or None)``, `datasets.Dataset` of normalized rows.

    Raises:
        ValueError: ``evaluate`` with a mixture and no ``test_split_size``, or with ``dataset_name`` a single
            file (which has one split) and no ``test_split_size``; a single file with ``dataset_train_split`` other
            than ``train`` or with ``dataset_config``; a held-out share that leaves no training or evaluation row.
        DatasetFormatError, FileNotFoundError: as `load_hir_dataset`; a directory or Hub dataset without
            ``dataset_test_split``.
    """
    from ..errors import one_line
    from .chat import with_system_prompt

    one_file = bool(script.dataset_name) and not script.datasets and Path(script.dataset_name).expanduser().is_file()
    if one_file and (script.dataset_train_split != "train" or script.dataset_config):
        option = (f"dataset_train_split: {script.dataset_train_split}" if script.dataset_train_split != "train"
                  else f"dataset_config: {script.dataset_config}")
        raise ValueError(f"{option} names a part of a dataset, but dataset_name {script.dataset_name} is one file: "
                         "remove it, or give a dataset folder or Hub id")
    if evaluate and script.test_split_size is None and (script.datasets or one_file):
        what = "the datasets mixture" if script.datasets else f"dataset_name {script.dataset_name} (one file)"
        raise ValueError(f"eval_strategy is set but {what} has no test split: set test_split_size (e.g. 0.1) to hold "
                         "out part of the rows for evaluation" + (
                             "" if script.datasets else ", or give a dataset folder or Hub id with a "
                             f"{script.dataset_test_split!r} split (dataset_test_split)"))
    if not evaluate and script.dataset_test_split != "test":
        logger.warning("dataset_test_split: %s is read only when eval_strategy is not 'no' (as in trl grpo): no "
                       "evaluation set is loaded", script.dataset_test_split)
    if script.datasets:
        train = _mixture(script)
        if script.dataset_max_rows is not None:
            train = train.select(range(min(script.dataset_max_rows, len(train))))
    else:
        train = load_hir_dataset(script.dataset_name, split=script.dataset_train_split, name=script.dataset_config,
                                 max_rows=script.dataset_max_rows, on_unverifiable=script.dataset_on_unverifiable)
    evaluation = None
    if script.test_split_size is not None:
        try:
            parts = train.train_test_split(test_size=script.test_split_size, seed=seed)
        except ValueError as exc:
            raise ValueError(f"test_split_size: {script.test_split_size} of {len(train)} training rows: "
                             f"{one_line(exc)}") from None
        train, evaluation = parts["train"], parts["test"] if evaluate else None
        if not evaluate:
            logger.warning("test_split_size holds out %d of %d training rows for evaluation, but eval_strategy is "
                           "'no': they are neither trained on nor evaluated (set eval_strategy, or remove "
                           "test_split_size)", len(parts["test"]), len(parts["train"]) + len(parts["test"]))
    elif evaluate:
        evaluation = load_hir_dataset(script.dataset_name, split=script.dataset_test_split, name=script.dataset_config,
                                      on_unverifiable=script.dataset_on_unverifiable)
    if script.system_prompt is not None:
        import datasets

        def add(rows: Any) -> Any:
            return datasets.Dataset.from_list(
                [{**row, "prompt": with_system_prompt(row["prompt"], script.system_prompt)} for row in rows])

        train = add(train)
        evaluation = None if evaluation is None else add(evaluation)
    return train, evaluation


def normalize_dataset(dataset: Any, name: str = "train_dataset", on_unverifiable: str = "soft") -> Any:
    """The rows of a dataset given to `HiRTrainer`, normalized (see the module docstring); idempotent.

    Any row `load_hir_dataset` reads works: HIR-16K rows, native rows (also as a `datasets.Dataset` built with
    ``Dataset.from_list``, whose missing keys read as None) and already normalized rows.

    Args:
        dataset: a `datasets.Dataset` or a list of row dicts; a dict of them (several evaluation sets, normalized
            one by one); None. A streaming `datasets.IterableDataset` is returned unchanged (it cannot be read
            ahead; its rows must already be normalized).
        name: what the error messages call the dataset (``"train_dataset"``).
        on_unverifiable: as in `normalize_hir_row`.

    Returns:
        A `datasets.Dataset` of normalized rows (a dict of them for a dict; None for None).

    Raises:
        DatasetFormatError: the first row of neither schema or with a malformed field, named as
            ``train_dataset row 3`` with the field; or a dataset without rows.
    """
    import datasets

    if dataset is None or isinstance(dataset, datasets.IterableDataset):
        return dataset
    if isinstance(dataset, Mapping):
        return type(dataset)({key: normalize_dataset(part, f"{name}[{key!r}]", on_unverifiable)
                              for key, part in dataset.items()})
    rows = []
    for index, row in enumerate(dataset):
        try:
            rows.append(normalize_row(row, index, on_unverifiable))
        except DatasetFormatError as exc:
            raise DatasetFormatError(index, exc.field, f"{exc.detail} (HiRTrainer takes the rows "
                                     "hir_trl.load_hir_dataset reads: HIR-16K, native or normalized rows)",
                                     f"{name} row {index}") from None
    if not rows:
        raise DatasetFormatError(-1, "<rows>", "holds no rows", name)
    return datasets.Dataset.from_list(rows)


# ------------------------------------------------------------------------------------------------ soft constraints


def count_soft_constraints(dataset: Any) -> tuple[int, int] | None:
    """``(soft constraints, rows holding one)`` in normalized rows (`load_hir_dataset`), or None when unknowable.

    ``dataset``: a `datasets.Dataset`, a list of rows, a dict of either (summed over its values: several evaluation
    sets), or None (``(0, 0)``). A streaming `datasets.IterableDataset` cannot be counted without reading it: None.
    """
    if dataset is None:
        return 0, 0
    from datasets import IterableDataset

    if isinstance(dataset, IterableDataset):
        return None
    if isinstance(dataset, Mapping):
        counts = [count_soft_constraints(d) for d in dataset.values()]
        if any(c is None for c in counts):
            return None
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
    column = [row["constraints"] for row in dataset] if isinstance(dataset, (list, tuple)) else dataset["constraints"]
    per_row = [sum(c.get("kind") == "soft" for c in row) for row in column]
    return sum(per_row), sum(n > 0 for n in per_row)


def has_soft_constraints(dataset: Any) -> bool:
    """True when some row of a normalized dataset (`load_hir_dataset`) has a ``soft`` constraint (one the judge
    must see, `hir_trl.judge`).

    Accepts what `count_soft_constraints` accepts; a streaming ``IterableDataset``, whose column cannot be read
    without iterating it, is assumed to have some.
    """
    counts = count_soft_constraints(dataset)
    return counts is None or counts[0] > 0


def drop_soft_constraints(dataset: Any) -> Any:
    """``dataset`` without its soft constraints (HiRConfig ``soft_constraints: skip``).

    Each row keeps its hard constraints in order; a row left with none is removed (it would be rewarded 1 for any
    completion). Counts are logged as a warning. Accepts what `count_soft_constraints` accepts (an
    `IterableDataset` is mapped and filtered lazily, uncounted); returns the same kind.
    """
    if dataset is None:
        return None
    if isinstance(dataset, Mapping):
        return type(dataset)({name: drop_soft_constraints(d) for name, d in dataset.items()})  # dict or DatasetDict

    def hard_only(row: Mapping[str, Any]) -> dict[str, Any]:
        return {"constraints": [c for c in row["constraints"] if c.get("kind") != "soft"]}

    counts = count_soft_constraints(dataset)
    if isinstance(dataset, (list, tuple)):
        kept = [{**row, **hard_only(row)} for row in dataset]
        result = [row for row in kept if row["constraints"]]
    else:
        from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        shown = not are_progress_bars_disabled()  # no progress bars before training: an error after is one line
        disable_progress_bars()
        try:
            result = dataset.map(hard_only).filter(lambda row: len(row["constraints"]) > 0)
        finally:
            if shown:
                enable_progress_bars()
    if counts is None:
        logger.warning("soft_constraints='skip': soft constraints removed from a streaming dataset (uncounted)")
    elif counts[0]:
        removed = len(dataset) - len(result)
        logger.warning(f"soft_constraints='skip': {counts[0]} soft constraint(s) in {counts[1]} row(s) are not judged "
                       f"nor rewarded; {removed} row(s) left with no hard constraint are not trained on")
    return result


def prompt_length_limits(max_prompt_length: int | None, context: Any,
                         max_completion_length: int | None) -> list[tuple[int, str]]:
    """The ``(tokens, why)`` limits a prompt must fit for `check_prompt_lengths`: ``max_prompt_length`` when set, and
    the model's context (``max_position_embeddings``, when a positive int) less ``max_completion_length``."""
    limits = []
    if max_prompt_length is not None:
        limits.append((max_prompt_length, f"max_prompt_length ({max_prompt_length})"))
    if isinstance(context, int) and context > 0:
        completion = max_completion_length or 0
        limits.append((context - completion, f"the model's context of {context} tokens (max_position_embeddings) "
                       f"less max_completion_length ({completion})"))
    return limits


def check_prompt_lengths(dataset: Any, name: str, tokenize: Any, limits: list[tuple[int, str]],
                         batch_size: int = 256) -> None:
    """Refuse a row whose prompt cannot be sampled from: longer than the smallest of ``limits``.

    Args:
        dataset: a `datasets.Dataset` with ``prompt`` and ``row_id`` columns (anything else, a streaming dataset for
            instance, is not checked).
        name: the dataset's name in the message (``train_dataset``, ``eval_dataset['x']``).
        tokenize: ``tokenize(prompts) -> list[list[int]]``, the prompts' token ids as TRL tokenizes them for
            generation (chat template applied, `hir_trl.trl_adapter.TRLPasses.tokenize_prompts`).
        limits: ``(tokens, why)`` pairs, e.g. ``max_prompt_length`` and the model's context less
            ``max_completion_length``; none: nothing to check.

    Raises:
        DatasetFormatError: naming the row (index and ``row_id``), its token count and the limit.
    """
    from datasets import Dataset

    if not isinstance(dataset, Dataset) or len(dataset) == 0 or not limits:
        return
    limit, why = min(limits)
    # the tokenizer warns of each sequence longer than its model_max_length: this check reports them itself
    quiet = logging.getLogger("transformers.tokenization_utils_base")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        lengths = [len(ids) for start in range(0, len(dataset), batch_size)
                   for ids in tokenize(dataset[start:start + batch_size]["prompt"])]
    finally:
        quiet.setLevel(level)
    for index, length in enumerate(lengths):
        if length > limit:
            raise DatasetFormatError(index, "prompt", f"the prompt is {length:,} tokens (chat template applied), "
                                     f"more than {max(limit, 0):,}: {why}; shorten or remove the row, or raise "
                                     f"the limit", f"{name} row {index} (row_id {dataset[index]['row_id']!r})")
