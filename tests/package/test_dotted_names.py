"""Every backticked dotted name ``hir_trl.…`` of the package's docstrings and comments, the README and ``docs/*.md``
resolves: a module, or an attribute of one (a class's method, a dataclass's field), as written.

A module that moves leaves its old name behind in prose; this test names each such pointer with its file and line.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A dotted name written in backticks: `hir_trl.step.replay`, ``hir_trl.HiRConfig``, `~hir_trl.judge.Judge`.
DOTTED = re.compile(r"`+~?(hir_trl(?:\.\w+)+)")


def sources() -> list[Path]:
    """The package's modules (package data left out), README.md and docs/*.md."""
    package = [path for path in sorted((ROOT / "hir_trl").rglob("*.py")) if "recipes_data" not in path.parts]
    return [*package, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def dotted_names(text: str) -> list[tuple[int, str]]:
    """(line number, name) of every backticked ``hir_trl.…`` name of ``text``, in order."""
    return [(number, match.group(1)) for number, line in enumerate(text.splitlines(), 1)
            for match in DOTTED.finditer(line)]


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: its longest importable prefix, then each attribute in turn (a dataclass field
    without a default, which is no class attribute, resolves to its `dataclasses.Field`).

    Raises:
        ModuleNotFoundError: no prefix of ``dotted`` is a module.
        AttributeError: an attribute after the module is missing.
    """
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError as exc:
            if not (exc.name and ".".join(parts[:end]).startswith(exc.name)):  # a missing dependency, not a name
                raise
            continue
        for attribute in parts[end:]:
            is_class = isinstance(value, type) and dataclasses.is_dataclass(value)
            fields = {field.name: field for field in dataclasses.fields(value)} if is_class else {}
            value = fields[attribute] if attribute in fields and not hasattr(value, attribute) else getattr(value,
                                                                                                         attribute)
        return value
    raise ModuleNotFoundError(dotted)


def test_dotted_names_are_found_in_single_and_double_backticks_only():
    text = "See `hir_trl.step.replay` and ``hir_trl.HiRConfig``,\nnot hir_trl.plain, `~hir_trl.judge.Judge`()."
    assert dotted_names(text) == [(1, "hir_trl.step.replay"), (1, "hir_trl.HiRConfig"), (2, "hir_trl.judge.Judge")]


def test_resolve_takes_modules_attributes_and_dataclass_fields_and_refuses_a_moved_module():
    from hir_trl.step import replay
    from hir_trl.step.state import SupplementarySamples

    assert resolve("hir_trl.step.replay") is replay
    assert resolve("hir_trl.step.replay.select_rewrite") is replay.select_rewrite
    assert resolve("hir_trl.step.state.SupplementarySamples.tensors").name == "tensors"
    assert "tensors" in {field.name for field in dataclasses.fields(SupplementarySamples)}
    with pytest.raises(AttributeError):
        resolve("hir_trl.replay.select_rewrite")  # the module moved to hir_trl.step.replay
    with pytest.raises(AttributeError):
        resolve("hir_trl.step.replay.no_such_function")


def test_every_backticked_dotted_name_resolves():
    found = [(path, number, name) for path in sources() for number, name in dotted_names(path.read_text())]
    assert len(found) > 200  # the package and its docs point at their modules this way
    stale = []
    for path, number, name in found:
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            stale.append(f"{path.relative_to(ROOT)}:{number}: `{name}` ({type(exc).__name__}: {exc})")
    assert stale == []
