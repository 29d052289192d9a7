"""The package's shape: rooms by concern, no import circle, and every import path the README and docs use.

The code map of docs/development.md lists every module; `hir_trl/` keeps at most 14 top-level modules (the rest live
in `step/`, `data/`, `models/`, `cli/`, `verifiers/`, `judge/`, `evaluation/`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hir_trl"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
#: Folders the code map lists as one row (their modules are described in the row).
FOLDER_ROWS = ("verifiers/", "judge/", "evaluation/")


#: Every folder of the tree's Python: the package, the lab, the scripts, the tests (their helper modules too) and
#: the examples.
TREE = ("hir_trl", "benchmarks", "scripts", "tests", "examples")


def _modules(folders: tuple[str, ...] = ("hir_trl",)) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package) for every module under ``folders`` of the repository (package data
    left out); the default: every module of `hir_trl`."""
    found = {}
    for path in (path for folder in folders for path in (ROOT / folder).rglob("*.py")):
        if "recipes_data" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_graph(modules: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports (module level or inside a function: an import inside a function
    still ties the two modules; ``TYPE_CHECKING`` imports are not imports at run time). ``from pkg import sub`` is an
    edge to ``pkg.sub`` only."""
    graph = {}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        edges = set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                elif node.module:
                    target = node.module
                else:
                    continue
                submodules = {f"{target}.{alias.name}" for alias in node.names} & set(modules)
                edges |= submodules or ({target} & set(modules))
            elif isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names} & set(modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _room(name: str) -> str:
    """``hir_trl.step.batch`` -> ``hir_trl.step``; a top-level module is its own room."""
    return ".".join(name.split(".")[:2])


def test_circles_finds_a_circle_and_no_false_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_hir_trl_keeps_at_most_fourteen_top_level_modules():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 14, top


def code_lines(function: object) -> int:
    """Non-blank, non-comment lines of ``function``'s body: its signature and docstring left out, a statement over
    several lines counted once per line."""
    source = textwrap.dedent(inspect.getsource(function))
    node = ast.parse(source).body[0]
    body = node.body[1:] if ast.get_docstring(node) else node.body
    lines = source.splitlines()[body[0].lineno - 1:body[-1].end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def test_code_lines_counts_the_body_only():
    def sample(a,
               b):
        """Docstring."""
        # a comment
        total = (a +

                 b)  # two lines of code, a blank between
        return total

    assert code_lines(sample) == 3


def test_hir_trainer_init_is_check_super_prepare_in_at_most_25_code_lines():
    """`HiRTrainer.__init__` stays a thin adapter: the checks in one call before `GRPOTrainer.__init__`, the set-up in
    one call after (`hir_trl.trainer_setup`)."""
    from hir_trl.trainer import HiRTrainer

    assert code_lines(HiRTrainer.__init__) <= 25
    calls = [ast.unparse(node.func) for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(
        HiRTrainer.__init__)))) if isinstance(node, ast.Call)]
    assert calls.count("super().__init__") == 1


def test_no_module_and_no_room_imports_itself_in_a_circle():
    graph = import_graph(_modules())
    assert circles(graph) == []
    rooms: dict[str, set[str]] = {}
    for name, edges in graph.items():
        if name == "hir_trl":  # the public API imports every room by design
            continue
        rooms.setdefault(_room(name), set()).update(_room(edge) for edge in edges if _room(edge) != _room(name))
    assert circles(rooms) == []


def test_import_graph_sees_a_circle_through_an_import_inside_a_function(tmp_path, monkeypatch):
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "__init__.py").write_text("")
    (lab / "experiments.py").write_text("from lab import figures\n")
    (lab / "figures.py").write_text("def pairs():\n    from lab import experiments\n")
    (lab / "records.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import figures\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_graph(_modules(("lab",)))
    assert graph == {"lab": set(), "lab.experiments": {"lab.figures"}, "lab.figures": {"lab.experiments"},
                     "lab.records": set()}
    assert circles(graph) == [["lab.experiments", "lab.figures"]]


def test_no_import_circle_anywhere_in_the_tree():
    """The package, the lab (`benchmarks`), the scripts, the tests' helper modules and the examples: no module imports
    itself through others, at module level or inside a function."""
    modules = _modules(TREE)
    assert {"hir_trl.step.algorithm", "benchmarks.learning.figures", "scripts.config_reference",
            "tests.testing_utils"} <= set(modules)
    graph = import_graph(modules)
    assert "benchmarks.learning.records" in graph["benchmarks.learning.figures"]
    assert circles(graph) == []


#: The one module that imports TRL's internals (`hir_trl.trl_internals`, the TRL adapter's import side).
TRL_INTERNALS_HOME = PACKAGE / "trl_internals.py"


def trl_internal_imports(source: str) -> list[str]:
    """The TRL-internal modules ``source`` imports (module level or inside a function): ``trl.<anything>``, or a
    submodule of ``trl`` taken with ``from trl import <submodule>``; ``from trl import GRPOTrainer`` (TRL's public
    API, names TRL exports at its top level) is not one."""
    from importlib.util import find_spec

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("trl.")]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.startswith("trl."):
                found.append(node.module)
            elif node.module == "trl":
                found += [f"trl.{alias.name}" for alias in node.names if find_spec(f"trl.{alias.name}") is not None]
    return found


def test_trl_internal_imports_finds_internal_imports_and_no_public_one():
    source = ("import trl\nfrom trl import GRPOTrainer, GRPOConfig\nfrom trl.trainer.utils import pad\n"
              "def f():\n    import trl.import_utils\n    from trl import models\n")
    assert trl_internal_imports(source) == ["trl.trainer.utils", "trl.import_utils", "trl.models"]


def test_trl_internals_are_imported_only_by_the_adapter():
    """Everything hir-trl takes from TRL beyond its public API is imported in `hir_trl/trl_internals.py`, the TRL
    adapter's import side, whose names `tests/trainer/test_trl_adapter.py` checks against the installed TRL."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != TRL_INTERNALS_HOME and (found := trl_internal_imports(path.read_text())):
            offenders[path.relative_to(ROOT).as_posix()] = found
    assert offenders == {}
    assert trl_internal_imports(TRL_INTERNALS_HOME.read_text())
    assert not re.search(r"^\s*(from|import) \.", TRL_INTERNALS_HOME.read_text(), re.M)  # a leaf: imports no hir_trl


def test_the_code_map_lists_every_module():
    text = (ROOT / "docs" / "development.md").read_text()
    code_map = text[text.index("## Code map"):]
    listed = set(re.findall(r"^\| `([\w/]+(?:\.py|/))` \|", code_map, re.M))
    missing = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if "recipes_data" in relative or relative.startswith(FOLDER_ROWS):
            continue
        if path.name in ("__init__.py", "__main__.py") and path.parent != PACKAGE:
            continue  # a room's own __init__ re-exports its modules: the room's heading row stands for it
        if relative not in listed:
            missing.append(relative)
    assert missing == []
    assert set(FOLDER_ROWS) <= listed


def _documented_paths() -> set[tuple[str, tuple[str, ...]]]:
    """(module, names) for every ``from hir_trl... import names`` and every dotted ``hir_trl.x.y`` the README, docs
    and examples use."""
    found = set()
    for path in [*DOCS, *EXAMPLES]:
        text = path.read_text()
        for module, names in re.findall(r"from (hir_trl[\w.]*) import ([\w, ]+)", text):
            found.add((module, tuple(name.strip() for name in names.split(",") if name.strip())))
        for dotted in re.findall(r"(?<![\w/])(hir_trl(?:\.\w+)+)", text):
            found.add((dotted, ()))
    return found


def _resolve(dotted: str):
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[end:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


def test_the_docs_name_import_paths_to_check():
    paths = _documented_paths()
    assert ("hir_trl", ("HiRConfig", "HiRTrainer", "load_hir_dataset")) in paths
    assert ("hir_trl.tiny", ("build_tiny_model",)) in paths
    assert any(module == "hir_trl.models.ensure_smollm2_model" for module, _ in paths)


@pytest.mark.parametrize("module,names", sorted(_documented_paths()))
def test_every_documented_import_path_works(module, names):
    value = _resolve(module)
    for name in names:
        assert hasattr(value, name), f"{module} has no {name}"


def test_the_public_api_is_what_all_names():
    import hir_trl

    assert sorted(hir_trl.__all__) == sorted(set(hir_trl.__all__))
    for name in hir_trl.__all__:
        assert getattr(hir_trl, name) is not None


def test_python_m_hir_trl_cli_runs_the_command():
    result = subprocess.run([sys.executable, "-m", "hir_trl.cli", "--help"], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "usage: hir-trl" in result.stdout
