"""Helpers of the step room's tests (tests/step/): dataset rows for `tests.fakes.FakePasses`."""

from __future__ import annotations


def ifeval_constraint(text: str, instruction_id: str, **kwargs) -> dict:
    """A native-format rule constraint of the IFEval family (`hir_trl.data.loading`)."""
    return {"text": text, "family": "ifeval", "instruction_id": instruction_id, "kwargs": kwargs}


def dataset_row(task: str, constraints: list[dict], *, template: str = "plain", row_id: str | None = None,
                messages: list[dict] | None = None) -> dict:
    """One dataset row as `hir_trl.load_hir_dataset` gives it (``prompt`` chat messages, ``task``, ``constraints``
    with JSON ``kwargs``, ``template``, ``row_id``), normalized from the native format."""
    from hir_trl.data.loading import normalize_row

    row = {"task": task, "constraints": constraints, "template": template, "messages": messages or []}
    if row_id is not None:
        row["id"] = row_id
    return normalize_row(row, 0)
