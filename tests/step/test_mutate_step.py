"""scripts/mutate_step.py's list of mutations of the step stays true to the code: each one changes exactly one line
that is there today, the list covers what the step must be tested for, and each mutation names tests that load no
model. (Running the mutations takes minutes: ``python scripts/mutate_step.py``, docs/development.md.)"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutate_step", ROOT / "scripts" / "mutate_step.py")
mutate_step = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mutate_step  # dataclasses look their module up
_spec.loader.exec_module(mutate_step)

#: What the mutations must cover, at least.
COVERED = {"selection order", "the F_int term", "k", "the replay ratio", "replay advantages", "shortfall ties",
           "the KL copy", "supplementary weights", "positive", "ended-only"}
#: What loading a model looks like in a test's arguments or body.
MODEL = ("tiny_model_path", "HiRTrainer(", "from_pretrained(")


def test_at_least_fifteen_named_mutations_of_the_step_cover_every_part():
    names = [m.name for m in mutate_step.MUTATIONS]
    assert len(names) >= 15 and len(set(names)) == len(names)
    assert COVERED <= {m.covers for m in mutate_step.MUTATIONS}
    assert all(m.path.startswith("hir_trl/step/") for m in mutate_step.MUTATIONS)


@pytest.mark.parametrize("mutation", mutate_step.MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_changes_one_line_found_once_in_the_code(mutation):
    text = (ROOT / mutation.path).read_text()
    mutated = mutate_step.mutated_text(text, mutation)
    before, after = text.splitlines(), mutated.splitlines()
    assert len(before) == len(after)
    assert sum(a != b for a, b in zip(before, after)) == 1
    compile(mutated, mutation.path, "exec")  # a change of meaning, not of syntax


def _test_source(target: str) -> str:
    """The source of a test file, or of the one test function a node id names."""
    path, _, name = target.partition("::")
    text = (ROOT / path).read_text()
    if not name:
        return text
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(text, node)


@pytest.mark.parametrize("target", sorted({t for m in mutate_step.MUTATIONS for t in m.tests}))
def test_the_mutations_tests_load_no_model(target):
    source = _test_source(target)
    assert not [marker for marker in MODEL if marker in source]


def test_a_mutation_that_no_longer_matches_the_code_is_refused():
    mutation = mutate_step.Mutation("m", "k", "x.py", "a = 1", "a = 2", ())
    assert mutate_step.mutated_text("a = 1\nb = 2\n", mutation) == "a = 2\nb = 2\n"
    for text in ("b = 2\n", "a = 1\na = 1\n"):
        with pytest.raises(ValueError, match="not once"):
            mutate_step.mutated_text(text, mutation)
    with pytest.raises(ValueError, match="one line"):
        mutate_step.mutated_text("a = 1\n", mutate_step.Mutation("m", "k", "x.py", "a = 1", "a = 2\nb = 3", ()))
