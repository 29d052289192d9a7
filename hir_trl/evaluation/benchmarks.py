"""Benchmark files for ``hir-trl eval``: format detection and loading into `EvalRow` records.

Four formats are read (``--format`` overrides the detection):

========== ================================================================================================
format     rows
========== ================================================================================================
``ifeval`` IFEval's ``input_data.jsonl``: ``{"key", "prompt", "instruction_id_list", "kwargs"}``; every id
           is checked by the ``ifeval`` verifier family; ``"family:instruction_id"`` names a constraint of a family
           registered with `hir_trl.register_verifier`. Category = the id's prefix before ``":"``.
``ifbench`` the same row shape (IFBench's ``IFBench_test.jsonl``). An id is looked up in the ``ifbench``
           family first, then in ``ifeval`` (IFBench rows may use the 25 classic ids).
``muldimif`` MulDimIF's ``test.json``: ``{"id", "conversations", "constraints": [[category, subcategory,
           requirement], ...], "constraint_pattern", "difficulty"}``. Instruction id =
           ``f"{category}_{subcategory}"``, kwargs ``{"requirement": text}``, family ``muldimif``; the
           category is the constraint's ``category``. Rows are grouped by ``pattern`` and ``difficulty``.
``hir``    any dataset `hir_trl.data.load_rows` reads (HIR-16K schema or our native rows): hard constraints
           keep their family/id/kwargs, soft ones are judged (or reported as unjudged).
========== ================================================================================================

Detection looks at the first row: ``conversations`` + ``constraints`` -> ``muldimif``;
``instruction_id_list`` + ``prompt`` -> ``ifbench`` when some id of the file is an IFBench-only id, else
``ifeval``; ``data_source`` or ``task`` + ``constraints`` -> ``hir``.

A constraint that cannot be checked is never dropped: an id no family knows gets ``status="unknown"``
(`hir_trl.evaluation.evaluate` refuses it unless ``allow_unknown``), a MulDimIF requirement the rule checker
cannot parse gets ``status="unverifiable"`` and is handled like a soft constraint (judged when a judge is
configured, otherwise reported as unjudged).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import verifiers
from ..data.chat import instruction_text
from ..data.loading import DatasetFormatError, load_rows, read_source
from ..verifiers import ifbench, ifeval
from ..verifiers.registry import own_loose_check, registered_families, registered_id

#: The built-in verifier families' records, one per benchmark format of the same name.
_FAMILY_RECORDS = [verifiers.FAMILIES[name].VERIFIER for name in verifiers.BUILTIN_FAMILIES]

#: The benchmark formats ``--format`` accepts (``"auto"`` detects one of them): one per built-in verifier family
#: (``ifeval``, ``ifbench``, ``muldimif``), then ``hir`` (training data).
FORMATS: tuple[str, ...] = (*(family.name for family in _FAMILY_RECORDS), "hir")

#: Display names of the benchmarks with a fixed format (others take the file's stem): the families' labels.
DISPLAY_NAMES: dict[str, str] = {family.name: family.label for family in _FAMILY_RECORDS}

#: Formats scored in the official strict and loose modes (IFEval's 8-variant loose rule): the families with one.
LOOSE_FORMATS: frozenset[str] = frozenset(family.name for family in _FAMILY_RECORDS if family.has_loose_mode)


class BenchmarkFormatError(ValueError):
    """A benchmark file that cannot be read; the message names the file, the row and the field."""


@dataclass(frozen=True)
class EvalConstraint:
    """One constraint of a benchmark row.

    Attributes:
        kind: ``"hard"`` (rule-checked by ``family``/``instruction_id`` with ``kwargs``) or ``"soft"``
            (judged by an LLM on ``text``).
        family: verifier family of a hard (or unverifiable) constraint, else None.
        instruction_id: id within ``family``; None for a plain soft constraint.
        kwargs: the checker's arguments.
        text: the constraint text (the judge's criteria item; None when the benchmark gives none).
        category: the breakdown category (IFEval id prefix, MulDimIF category, ``"soft"``...).
        status: ``"ok"``, ``"unknown"`` (no family has the id) or ``"unverifiable"`` (the MulDimIF
            requirement cannot be parsed by the rule checker).
        problem: why the constraint is unknown or unverifiable.
    """

    kind: str
    family: str | None
    instruction_id: str | None
    kwargs: dict[str, Any]
    text: str | None
    category: str
    status: str = "ok"
    problem: str | None = None

    @property
    def label(self) -> str:
        """The breakdown label: the instruction id, or ``"soft"`` for a plain soft constraint."""
        return self.instruction_id or "soft"

    @property
    def needs_judge(self) -> bool:
        """True when only an LLM judge can give the verdict (soft or unverifiable)."""
        return self.kind == "soft" or self.status == "unverifiable"


@dataclass
class EvalRow:
    """One benchmark prompt.

    Attributes:
        key: the row's id (``key``/``id``/``row_id``, else its index), as a string.
        prompt: the instruction text responses are matched on (the final user turn).
        messages: the chat messages sent to the model (earlier turns, then the final user turn).
        constraints: the row's constraints, in order.
        groups: breakdown groups of the row, e.g. ``{"pattern": "Listing", "difficulty": "Level 3"}``.
    """

    key: str
    prompt: str
    messages: list[dict[str, Any]]
    constraints: list[EvalConstraint]
    groups: dict[str, str] = field(default_factory=dict)


@dataclass
class Benchmark:
    """A loaded benchmark: its rows and how to score them."""

    name: str
    format: str
    path: str
    rows: list[EvalRow]

    @functools.cached_property
    def has_loose(self) -> bool:
        """True when strict and loose accuracies are reported: the IFEval-style formats, and HIR/native data holding
        a constraint registered with a loose check of its own (``register_verifier(..., check_loose=...)``)."""
        return self.format in LOOSE_FORMATS or any(
            c.kind == "hard" and own_loose_check(c.family, c.instruction_id) for row in self.rows
            for c in row.constraints)

    @property
    def group_names(self) -> list[str]:
        """The row-group names present (e.g. ``["pattern", "difficulty"]`` for MulDimIF)."""
        names: list[str] = []
        for row in self.rows:
            names.extend(name for name in row.groups if name not in names)
        return names


def _read_records(path: Path) -> list[Any]:
    """The raw rows of a benchmark file (a ``.jsonl`` file, a ``.json`` file holding a list or ``{"data": [...]}``,
    or a ``.parquet`` file), read by `hir_trl.data.loading.read_source`."""
    try:
        return [record for _, record in read_source(path)]
    except DatasetFormatError as exc:
        raise BenchmarkFormatError(str(exc)) from None


def detect_format(records: list[Any], path: str | os.PathLike = "<rows>") -> str:
    """Guess the benchmark format of ``records`` (see the module docstring).

    Raises:
        BenchmarkFormatError: no rows, or the first row matches no known format.
    """
    if not records:
        raise BenchmarkFormatError(f"{path} holds no rows")
    first = records[0]
    if not isinstance(first, Mapping):
        raise BenchmarkFormatError(f"{path}: row 0 is {type(first).__name__}, expected a JSON object")
    if "conversations" in first and "constraints" in first:
        return "muldimif"
    if "instruction_id_list" in first and "prompt" in first:
        for record in records:
            ids = record.get("instruction_id_list") if isinstance(record, Mapping) else None
            for instruction_id in ids if isinstance(ids, list) else []:
                if instruction_id in ifbench.REGISTRY and instruction_id not in ifeval.REGISTRY:
                    return "ifbench"
        return "ifeval"
    if "data_source" in first or ("task" in first and "constraints" in first):
        return "hir"
    raise BenchmarkFormatError(
        f"{path}: cannot tell the benchmark format from row 0 (fields {sorted(first)}); expected IFEval/IFBench "
        "rows (prompt, instruction_id_list, kwargs), MulDimIF rows (conversations, constraints), or HIR/native "
        "rows (data_source, or task and constraints). Pass --format to choose one."
    )


def _category(instruction_id: str) -> str:
    return instruction_id.split(":", 1)[0]


def _key(record: Mapping[str, Any], index: int) -> str:
    for name in ("key", "id", "row_id"):
        if record.get(name) is not None:
            return str(record[name])
    return str(index)


def _ifeval_rows(records: list[Any], path: str, fmt: str) -> list[EvalRow]:
    families = ("ifbench", "ifeval") if fmt == "ifbench" else ("ifeval",)
    rows = []
    for index, record in enumerate(records):
        where = f"{path}: row {index}"
        if not isinstance(record, Mapping):
            raise BenchmarkFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
        prompt, ids = record.get("prompt"), record.get("instruction_id_list")
        if not isinstance(prompt, str):
            raise BenchmarkFormatError(f"{where}: field 'prompt' must be a string")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise BenchmarkFormatError(f"{where}: field 'instruction_id_list' must be a list of strings")
        kwargs_list = record.get("kwargs")
        if kwargs_list is None:
            kwargs_list = [{} for _ in ids]
        if not isinstance(kwargs_list, list) or len(kwargs_list) != len(ids):
            raise BenchmarkFormatError(f"{where}: field 'kwargs' must be a list of {len(ids)} objects, one per id")
        constraints = []
        for j, (instruction_id, kwargs) in enumerate(zip(ids, kwargs_list)):
            if kwargs is None:
                kwargs = {}
            if not isinstance(kwargs, Mapping):
                raise BenchmarkFormatError(f"{where}: field 'kwargs[{j}]' must be an object")
            family = next((f for f in families if verifiers.is_known(f, instruction_id)), None)
            status, problem, category = "ok", None, _category(instruction_id)
            registered = registered_id(instruction_id) if family is None else None
            if registered is not None:  # "family:instruction_id" of a family of your own (register_verifier)
                family, instruction_id = registered
            elif family is None:
                family, status = families[-1], "unknown"
                problem = f"unknown instruction id {instruction_id!r} (not in the {' or '.join(families)} family)"
            constraints.append(EvalConstraint("hard", family, instruction_id, dict(kwargs), None, category, status,
                                              problem))
        rows.append(EvalRow(_key(record, index), prompt, [{"role": "user", "content": prompt}], constraints))
    return rows


def muldimif_constraint(category: str, subcategory: str, requirement: str) -> EvalConstraint:
    """The `EvalConstraint` of a MulDimIF ``[category, subcategory, requirement]`` triplet."""
    instruction_id, kwargs = f"{category}_{subcategory}", {"requirement": requirement}
    if not verifiers.is_known("muldimif", instruction_id):
        return EvalConstraint("hard", "muldimif", instruction_id, kwargs, requirement, category, "unknown",
                              f"unknown instruction id {instruction_id!r} (not in the muldimif family)")
    problem = verifiers.validate_constraint("muldimif", instruction_id, kwargs)
    status = "ok" if problem is None else "unverifiable"
    return EvalConstraint("hard", "muldimif", instruction_id, kwargs, requirement, category, status, problem)


def _muldimif_rows(records: list[Any], path: str) -> list[EvalRow]:
    rows = []
    for index, record in enumerate(records):
        where = f"{path}: row {index}"
        if not isinstance(record, Mapping):
            raise BenchmarkFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
        conversation = record.get("conversations")
        if not isinstance(conversation, list) or not all(isinstance(m, Mapping) and "role" in m for m in conversation):
            raise BenchmarkFormatError(f"{where}: field 'conversations' must be a list of chat messages")
        messages = [{"role": str(m["role"]), "content": m.get("content", "")} for m in conversation]
        while messages and messages[-1]["role"] != "user":  # a reference answer after the prompt is not sent
            messages.pop()
        if not messages:
            raise BenchmarkFormatError(f"{where}: field 'conversations' has no user turn")
        triplets = record.get("constraints")
        if not isinstance(triplets, list):
            raise BenchmarkFormatError(f"{where}: field 'constraints' must be a list of [category, subcategory, "
                                       "requirement] triplets")
        constraints = []
        for j, item in enumerate(triplets):
            if not (isinstance(item, (list, tuple)) and len(item) == 3 and all(isinstance(s, str) for s in item)):
                raise BenchmarkFormatError(f"{where}: field 'constraints[{j}]' must be [category, subcategory, "
                                           "requirement]")
            constraints.append(muldimif_constraint(*item))
        groups = {name: str(record[source]) for name, source in (("pattern", "constraint_pattern"),
                                                                  ("difficulty", "difficulty"))
                  if record.get(source) is not None}
        rows.append(EvalRow(_key(record, index), instruction_text(messages), messages, constraints, groups))
    return rows


def _hir_category(family: str | None, instruction_id: str | None) -> str:
    if not instruction_id:
        return "soft"
    if family in registered_families():
        return family
    if family == "muldimif":
        return instruction_id.split("_", 1)[0]
    return _category(instruction_id)


def _hir_rows(path: str, split: str, name: str | None) -> list[EvalRow]:
    rows = []
    for row in load_rows(path, split=split, name=name, on_unverifiable="soft"):
        constraints = []
        for c in row["constraints"]:
            kwargs = json.loads(c["kwargs"]) if isinstance(c["kwargs"], str) else dict(c["kwargs"] or {})
            family, instruction_id = c.get("family"), c.get("instruction_id")
            if c["kind"] == "soft" and instruction_id:
                # load_rows keeps a MulDimIF requirement no rule can parse as a soft constraint
                problem = verifiers.validate_constraint(family, instruction_id, kwargs)
                constraints.append(EvalConstraint("hard", family, instruction_id, kwargs, c["text"],
                                                  _hir_category(family, instruction_id), "unverifiable", problem))
            elif c["kind"] == "soft":
                constraints.append(EvalConstraint("soft", None, None, {}, c["text"], "soft"))
            else:
                constraints.append(EvalConstraint("hard", family, instruction_id, kwargs, c["text"],
                                                  _hir_category(family, instruction_id)))
        messages = [dict(m) for m in row["prompt"]]
        groups = {"template": str(row["template"])} if row.get("template") else {}
        rows.append(EvalRow(str(row["row_id"]), instruction_text(messages), messages, constraints, groups))
    return rows


#: The public Hub dataset behind each benchmark name ``--benchmark`` takes instead of a file (each holds one split,
#: the benchmark). MulDimIF is released as a file only (its ``test.json``, github.com/Junjie-Ye/MulDimIF).
PUBLIC_BENCHMARKS: dict[str, str] = {"ifeval": "google/IFEval", "ifbench": "allenai/IFBench_test"}


def public_records(dataset: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a benchmark's dataset, a Hub id (read with `datasets.load_dataset`, cached by `datasets`) or a
    local folder holding the same files: its one split (`hir_trl.data.loading.read_source` with ``split=None``).

    The Arrow table gives every row's ``kwargs`` the union of all rows' keys, the missing ones None; those are
    dropped again (as IFEval's own scorer drops them), so the rows hold what the released JSON Lines file holds.

    Raises:
        BenchmarkFormatError: the dataset cannot be read (offline with no cached copy, a wrong id), or holds more
            than one split.
    """
    try:
        table = [record for _, record in read_source(dataset, split=None)]
    except (DatasetFormatError, FileNotFoundError) as exc:
        detail = exc.detail if isinstance(exc, DatasetFormatError) else str(exc)
        raise BenchmarkFormatError(f"cannot read the dataset {dataset}: {detail.splitlines()[0]}; without network "
                                   "access pass the benchmark's file instead") from None
    records = []
    for record in table:
        record = dict(record)
        if isinstance(record.get("kwargs"), list):
            record["kwargs"] = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in record["kwargs"]]
        records.append(record)
    return records


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "benchmark"


def load_benchmark(source: str | os.PathLike, format: str = "auto", name: str | None = None,
                   limit: int | None = None, split: str = "test") -> Benchmark:
    """Load a benchmark file (or, for ``format="hir"``, anything `hir_trl.data.load_rows` reads).

    Args:
        source: a local ``.json``/``.jsonl`` benchmark file; with ``format="hir"`` also a ``.parquet`` file,
            a dataset directory or a Hub id; or ``"ifeval"`` / ``"ifbench"``: the public Hub dataset
            (`PUBLIC_BENCHMARKS`, read by `public_records`) when no such local path exists.
        format: ``"auto"`` or one of `FORMATS`.
        name: the benchmark's display name; default: `DISPLAY_NAMES` for the format, else the file stem.
        limit: keep the first ``limit`` rows only.
        split: the split of a dataset directory or Hub id (``format="hir"`` only).

    Raises:
        FileNotFoundError: a local path that does not exist, or ``"muldimif"`` (released as a file only).
        BenchmarkFormatError: an undetectable format, a malformed row (named by index and field), or a directory
            without ``format="hir"``.
        hir_trl.DatasetFormatError: a malformed HIR/native row (including an unknown instruction id).
    """
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format must be 'auto' or one of {FORMATS}, got {format!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    path = Path(source)
    local = path.exists()
    if not local and str(source) in (*PUBLIC_BENCHMARKS, "muldimif"):
        if str(source) == "muldimif":
            raise FileNotFoundError("muldimif: MulDimIF has no Hub dataset; pass the path of its test.json "
                                    "(github.com/Junjie-Ye/MulDimIF, see docs/evaluation.md)")
        dataset = PUBLIC_BENCHMARKS[str(source)]
        records = public_records(dataset)[:limit]
        rows = _ifeval_rows(records, dataset, str(source))
        return Benchmark(name or DISPLAY_NAMES.get(str(source), str(source)), str(source), dataset, rows)
    if path.is_dir() and format != "hir":
        inside = sorted(p.name for p in path.iterdir() if p.suffix in (".json", ".jsonl"))[:3]
        raise BenchmarkFormatError(f"{path} is a directory; give the benchmark file itself"
                                   f"{' (it holds ' + ', '.join(inside) + ')' if inside else ''}, or --format hir "
                                   "for a folder of HIR/native data files")
    if not local and (format != "hir" or path.suffix in (".json", ".jsonl")):
        raise FileNotFoundError(f"benchmark file {path} does not exist")
    if format == "hir" and (not local or path.is_dir() or path.suffix == ".parquet"):
        rows = _hir_rows(str(source), split, None)
        fmt = "hir"
    else:
        records = _read_records(path)
        fmt = detect_format(records, path) if format == "auto" else format
        if limit is not None:
            records = records[:limit]
        if fmt in ("ifeval", "ifbench"):
            rows = _ifeval_rows(records, str(path), fmt)
        elif fmt == "muldimif":
            rows = _muldimif_rows(records, str(path))
        else:
            rows = _hir_rows(str(path), split, None)
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise BenchmarkFormatError(f"{source} holds no rows")
    default_name = DISPLAY_NAMES.get(fmt) or _slug(path.stem if local else str(source))
    return Benchmark(name or default_name, fmt, str(source), rows)


__all__ = [
    "DISPLAY_NAMES",
    "FORMATS",
    "LOOSE_FORMATS",
    "Benchmark",
    "BenchmarkFormatError",
    "EvalConstraint",
    "EvalRow",
    "detect_format",
    "load_benchmark",
    "muldimif_constraint",
]
