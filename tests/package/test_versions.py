"""The supported TRL range: declared once in pyproject.toml, checked at import (`hir_trl.versions`)."""

from __future__ import annotations

import logging
import subprocess
import sys
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hir_trl import versions

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def declared(name: str, extra: str | None = None) -> Requirement:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    lines = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return next(r for r in map(Requirement, lines) if r.name == name)


def test_the_declared_trl_range_is_the_checked_one():
    assert str(declared("trl").specifier) == str(declared("trl", "vllm").specifier)
    assert declared("trl").specifier == SpecifierSet(versions.SUPPORTED_TRL)


def test_the_package_declares_ranges_not_pins_for_a_users_stack():
    torch, litellm = declared("torch"), declared("litellm", "judge")
    assert not any(spec.operator in ("==", "===", "<", "<=", "~=") for spec in torch.specifier), torch
    assert not any(spec.operator in ("==", "===", "<", "<=", "~=") for spec in litellm.specifier), litellm
    # every range admits the versions our own CI runs (constraints.txt)
    pins = {Requirement(line).name: Requirement(line) for line in
            (PYPROJECT.parent / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")}
    for name, extra in (("torch", None), ("trl", None), ("litellm", "judge"), ("transformers", None)):
        (pinned,) = [Version(spec.version) for spec in pins[name].specifier]
        assert declared(name, extra).specifier.contains(pinned, prereleases=True), (name, pinned)


def test_the_base_install_leaves_the_judge_and_the_trackers_to_extras():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    base = {Requirement(line).name for line in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert not base & {"litellm", "tenacity", "wandb", "trackio"}
    assert {Requirement(line).name for line in extras["judge"]} == {"litellm", "tenacity"}
    assert {Requirement(line).name for line in extras["trackers"]} == {"wandb", "trackio"}
    # make install-dev (the tests) keeps the judge: the dev extra holds the judge extra's requirements
    assert set(extras["judge"]) <= set(extras["dev"])


@pytest.mark.parametrize("installed", ["1.16.0", "1.16.3", "1.16.0.dev0", "1.16.1rc1"])
def test_a_supported_trl_passes_silently(installed, caplog):
    with caplog.at_level(logging.WARNING, logger="hir_trl"):
        assert versions.check_trl(installed) is None
    assert caplog.records == []


@pytest.mark.parametrize("installed", ["1.15.0", "1.14.2", "1.12.0", "0.29.1"])
def test_an_older_trl_is_refused_in_one_line(installed):
    with pytest.raises(versions.UnsupportedTRLError) as info:
        versions.check_trl(installed)
    message = str(info.value)
    assert "\n" not in message and f"TRL {installed} is installed" in message
    assert versions.SUPPORTED_TRL in message and "pip install 'trl>=1.16,<1.17'" in message


@pytest.mark.parametrize("installed", ["1.17.0", "1.18.2", "2.0.0"])
def test_a_newer_trl_gets_one_warning_line(installed, caplog):
    with caplog.at_level(logging.WARNING, logger="hir_trl"):
        message = versions.check_trl(installed)
    assert [r.getMessage() for r in caplog.records] == [message]
    assert "\n" not in message and f"TRL {installed} is installed and untested" in message


def test_no_trl_is_refused(monkeypatch):
    def missing(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(versions, "version", missing)
    with pytest.raises(versions.UnsupportedTRLError, match="TRL is not installed"):
        versions.check_trl()


FAKE_TRL = """
import importlib.metadata as metadata, sys
real = metadata.version
metadata.version = lambda name: {installed!r} if name == "trl" else real(name)
sys.argv = [{argv0!r}]
import hir_trl
print("imported")
"""


@pytest.mark.parametrize("installed", ["1.13.0", "1.15.0"])
def test_the_console_script_says_one_line_for_an_older_trl(installed):
    run = subprocess.run([sys.executable, "-c", FAKE_TRL.format(installed=installed, argv0="/usr/bin/hir-trl")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [f"hir-trl supports TRL >=1.16,<1.17; TRL {installed} is installed, "
                                               "and its private trainer methods differ: pip install 'trl>=1.16,<1.17'"]


def test_python_users_get_an_import_error_and_a_newer_trl_still_imports():
    old = subprocess.run([sys.executable, "-c", FAKE_TRL.format(installed="1.14.2", argv0="script.py")],
                         capture_output=True, text=True)
    assert old.returncode == 1 and "hir_trl.versions.UnsupportedTRLError: hir-trl supports TRL" in old.stderr
    new = subprocess.run([sys.executable, "-c", FAKE_TRL.format(installed="1.17.0", argv0="script.py")],
                         capture_output=True, text=True)
    assert new.returncode == 0 and new.stdout.strip() == "imported"
    assert "TRL 1.17.0 is installed and untested" in new.stderr
