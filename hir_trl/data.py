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
``template``    how x and constraint texts are joined (`hir_trl.templates.TEMPLATES`).
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

A malformed row stops loading with a `DatasetFormatError` that names the row index and the field.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import verifiers
from .templates import TEMPLATES, join_instruction

logger = logging.getLogger(__name__)

HIR_DATA_SOURCES = {"type1": "ifeval", "type2": "ifbench", "type3": "muldimif"}
HIR_Q_TYPES = ("type1", "type2", "type3", "type4", "type5", "type6")
_LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")


class DatasetFormatError(ValueError):
    """A row that cannot be used for training. The message names the row index and the field."""

    def __init__(self, index: int | str, field: str, message: str) -> None:
        self.index, self.field = index, field
        super().__init__(f"row {index}: field {field!r}: {message}")


def _validate_hard(index: int, field: str, family: str, instruction_id: str, kwargs: dict[str, Any]) -> None:
    if not verifiers.is_known(family, instruction_id):
        raise DatasetFormatError(index, field, f"unknown instruction id {instruction_id!r} in family {family!r}")
    problem = verifiers.validate_constraint(family, instruction_id, kwargs)
    if problem is not None:
        raise DatasetFormatError(index, field, f"bad kwargs for {instruction_id!r}: {problem}")


def _messages(index: int, field: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(m, Mapping) and "role" in m for m in value):
        raise DatasetFormatError(index, field, "expected a list of chat messages with 'role' and 'content'")
    return [{"role": str(m["role"]), "content": m.get("content", "")} for m in value]


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
    if not isinstance(criteria, list) or not all(isinstance(c, str) for c in criteria):
        raise DatasetFormatError(index, "extra_info.criteria", "expected a list of strings")
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
    else:
        prompt = [{"role": "user", "content": join_instruction(task, criteria, q_type)}]
    return {
        "prompt": prompt,
        "task": task,
        "constraints": constraints,
        "template": q_type,
        "row_id": str(row.get("id", extra.get("index", index))),
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
        kind = item.get("kind", "hard")
        if kind not in ("hard", "soft"):
            raise DatasetFormatError(index, f"{field}.kind", f"expected 'hard' or 'soft', got {kind!r}")
        if kind == "soft":
            constraints.append(_constraint(item["text"], "soft", None, None, {}))
            continue
        family, instruction_id = item.get("family"), item.get("instruction_id")
        if not isinstance(family, str) or not isinstance(instruction_id, str):
            raise DatasetFormatError(index, f"{field}.instruction_id",
                                     "a hard constraint needs 'family' and 'instruction_id'")
        kwargs = item.get("kwargs") or {}
        if not isinstance(kwargs, Mapping):
            raise DatasetFormatError(index, f"{field}.kwargs", "expected an object")
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        _validate_hard(index, f"{field}.instruction_id", family, instruction_id, kwargs)
        constraints.append(_constraint(item["text"], "hard", family, instruction_id, kwargs))

    history = _messages(index, "messages", row.get("messages") or [])
    text = row.get("prompt")
    if text is None:
        text = join_instruction(task, [c["text"] for c in constraints], template)
    elif not isinstance(text, str):
        raise DatasetFormatError(index, "prompt", "expected a string (the final user turn)")
    return {
        "prompt": history + [{"role": "user", "content": text}],
        "task": task,
        "constraints": constraints,
        "template": template,
        "row_id": str(row.get("id", index)),
    }


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


def _read_local(path: Path) -> Iterable[Mapping[str, Any]]:
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetFormatError(line_no, "<json>", f"line {line_no + 1} of {path} does not parse: "
                                             f"{exc}") from None
    elif path.suffix == ".json":
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
        if isinstance(data, Mapping) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise DatasetFormatError(0, "<json>", f"{path} must hold a list of rows (or {{'data': [...]}})")
        yield from data
    else:  # parquet
        import datasets

        yield from datasets.Dataset.from_parquet(str(path))


def load_rows(source: str | os.PathLike, split: str = "train", name: str | None = None,
              on_unverifiable: str = "soft") -> list[dict[str, Any]]:
    """Read and normalize every row of ``source``.

    Args:
        source: a local ``.json``/``.jsonl``/``.parquet`` file, a local dataset directory, or a Hub dataset
            id such as ``sastpg/HIR-16K`` (loaded with `datasets.load_dataset`).
        split: the split for directories and Hub ids.
        name: the dataset configuration for directories and Hub ids.
        on_unverifiable: ``"soft"`` (default) or ``"error"``, see `normalize_hir_row`.

    Returns:
        Normalized rows (see the module docstring).

    Raises:
        DatasetFormatError: the first malformed row, naming its index and field.
        FileNotFoundError: a local file path that does not exist.
    """
    path = Path(source)
    if path.suffix in _LOCAL_SUFFIXES and not path.is_dir():
        if not path.exists():
            raise FileNotFoundError(f"dataset file {path} does not exist")
        raw: Iterable[Mapping[str, Any]] = _read_local(path)
    else:
        import datasets

        raw = datasets.load_dataset(str(source), name=name, split=split)
    rows = [normalize_row(row, index, on_unverifiable) for index, row in enumerate(raw)]
    softened = [i for i, row in enumerate(rows)
                if any(c["kind"] == "soft" and c["instruction_id"] for c in row["constraints"])]
    if softened:
        logger.warning("%s: %d rows have a requirement no rule verifier can parse; it is kept as a soft "
                       "(LLM-judged) constraint. Rows: %s", source, len(softened), softened[:20])
    return rows


def load_hir_dataset(source: str | os.PathLike, split: str = "train", name: str | None = None,
                     max_rows: int | None = None, on_unverifiable: str = "soft"):
    """Load ``source`` as a `datasets.Dataset` of normalized rows, ready for `HiRTrainer`.

    See `load_rows` for the arguments and errors; ``max_rows`` keeps the first rows only.
    """
    import datasets

    rows = load_rows(source, split=split, name=name, on_unverifiable=on_unverifiable)
    if max_rows is not None:
        rows = rows[:max_rows]
    if not rows:
        raise DatasetFormatError(0, "<rows>", f"{source} holds no rows")
    return datasets.Dataset.from_list(rows)
