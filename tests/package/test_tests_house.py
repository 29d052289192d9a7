"""The tests' own house rules.

1. Helpers shared by test modules live in tests/testing_utils.py (as TRL's), fakes in tests/fakes.py, and a helper
   of one room's tests in that room's ``utils.py`` (tests/step/utils.py, ...): no module under tests/ or
   benchmarks/tests/ imports a test module (``test_*.py``) or a conftest.py; fixtures stay in conftest.py files, and
   pytest finds them without an import.
2. Every marker pyproject.toml declares is carried by at least one test, so ``-m <marker>`` and ``-m "not <marker>"``
   mean something (``pytest -m "not slow"`` is the quick loop of docs/development.md).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

from ..testing_utils import REPO_ROOT

TEST_FOLDERS = [REPO_ROOT / "tests", REPO_ROOT / "benchmarks" / "tests"]


def _python_files() -> list[Path]:
    return sorted(path for folder in TEST_FOLDERS for path in folder.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_test_module_or_conftest(dotted: str) -> bool:
    """``dotted`` names a module (file) under tests/ or benchmarks/tests/ that is a test module or a conftest."""
    parts = dotted.split(".")
    path = REPO_ROOT.joinpath(*parts).with_suffix(".py")
    if not path.is_file() or not any(folder in path.parents for folder in TEST_FOLDERS):
        return False
    return parts[-1] == "conftest" or parts[-1].startswith("test_")


def forbidden_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """The test modules and conftests that the code ``source`` of ``module`` (dotted) imports, at module level or in
    a function, plus any ``pytest_plugins`` naming one."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
            # `from pkg import name`: name may be a module of pkg
            targets = [stem] + [f"{stem}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytest_plugins" for t in node.targets):
            targets = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        found += [f"line {node.lineno}: {target}" for target in targets if _is_test_module_or_conftest(target)]
    return found


def test_the_check_sees_each_way_of_importing_a_test_module():
    cases = {
        "from .test_trainer import make_args": ["line 1: tests.trainer.test_trainer"],
        "from . import test_trainer": ["line 1: tests.trainer.test_trainer"],
        "import tests.trainer.test_trainer": ["line 1: tests.trainer.test_trainer"],
        "from ..step.test_step import M": ["line 1: tests.step.test_step"],
        "from ..conftest import x": ["line 1: tests.conftest"],
        "from ...conftest import x": [],  # above tests/: no such module
        "def f():\n    from tests.package.test_user_errors import train": ["line 2: tests.package.test_user_errors"],
        "pytest_plugins = ['tests.conftest']": ["line 1: tests.conftest"],
        "from ..testing_utils import make_args\nfrom ..judge_server import FakeJudgeServer": [],
        "from ..fakes import FakePasses\nfrom ..step.utils import dataset_row": [],
    }
    for source, expected in cases.items():
        assert forbidden_imports(source, "tests.trainer.test_example") == expected, source
    assert forbidden_imports("from ..test_ifeval import generate_text", "tests.verifiers.test_x") == []
    assert forbidden_imports("from .test_ifeval import generate_text", "tests.verifiers.test_x") == [
        "line 1: tests.verifiers.test_ifeval"]
    assert forbidden_imports("from ..conftest import require", "tests.verifiers.official") == ["line 1: tests.conftest"]
    assert forbidden_imports("from tests.conftest import require", "benchmarks.tests.conftest") == [
        "line 1: tests.conftest"]


def test_no_test_module_nor_conftest_is_imported():
    """Shared helpers live in tests/testing_utils.py (fakes in tests/fakes.py, a room's own in its utils.py); import
    them from there."""
    offenders = {}
    for path in _python_files():
        found = forbidden_imports(path.read_text(encoding="utf-8"), _module_name(path), path.name == "__init__.py")
        if found:
            offenders[str(path.relative_to(REPO_ROOT))] = found
    assert not offenders, f"move the shared helpers to tests/testing_utils.py or the room's utils.py: {offenders}"


def _declared_markers() -> list[str]:
    """The markers of ``[tool.pytest.ini_options] markers`` in pyproject.toml (not the plugins' own)."""
    lines = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    return [re.split(r"[:(]", line, maxsplit=1)[0].strip() for line in lines]


def _markers_in_use() -> set[str]:
    """Markers written ``pytest.mark.<name>`` (decorator, ``pytestmark``, ``pytest.param(marks=...)``) in a test
    module."""
    used = set()
    for path in _python_files():
        if not path.name.startswith("test_"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "mark" and getattr(node.value.value, "id", None) == "pytest"):
                used.add(node.attr)
    return used


def test_every_declared_marker_selects_tests():
    declared = _declared_markers()
    assert {"slow", "vllm_cpu", "deepspeed", "judge_real"} <= set(declared)
    unused = sorted(set(declared) - _markers_in_use())
    assert not unused, f"markers declared in pyproject.toml that no test carries: {unused}"



def test_xdist_workers_share_the_cores():
    import torch

    from ..testing_utils import share_cores_among_workers

    before = torch.get_num_threads()
    try:
        assert share_cores_among_workers({}, cpu_count=8) is None
        assert share_cores_among_workers({"PYTEST_XDIST_WORKER_COUNT": "1"}, cpu_count=8) is None
        for workers, cores, threads in [(2, 2, 1), (3, 8, 2), (4, 16, 4), (4, 2, 1)]:
            environ = {"PYTEST_XDIST_WORKER_COUNT": str(workers)}
            assert share_cores_among_workers(environ, cpu_count=cores) == threads
            assert environ["OMP_NUM_THREADS"] == str(threads) and torch.get_num_threads() == threads
        environ = {"PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "3"}  # a user's own setting stays
        assert share_cores_among_workers(environ, cpu_count=8) == 4 and environ["OMP_NUM_THREADS"] == "3"
    finally:
        torch.set_num_threads(before)
