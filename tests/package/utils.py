"""Helpers of the package room's tests (tests/package/): a native-format row for ``hir-trl train``."""

from __future__ import annotations

#: A native-format row (`hir_trl.data.loading`) with two IFEval constraints.
NATIVE = {"id": "n-0", "task": "Write a haiku about rain.",
          "constraints": [{"text": "Do not use any commas.", "family": "ifeval", "instruction_id": "punctuation:no_comma"},
                          {"text": "Use at most 20 words.", "family": "ifeval",
                           "instruction_id": "length_constraints:number_words",
                           "kwargs": {"relation": "less than", "num_words": 21}}]}


def native(**changes) -> dict:
    """A copy of `NATIVE` with ``changes``."""
    import copy

    row = copy.deepcopy(NATIVE)
    row.update(changes)
    return row
