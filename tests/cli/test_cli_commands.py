"""The ``hir-trl`` command room: each command is one module ``hir_trl/cli/<name>.py`` with a ``main(argv)``, listed
once in `hir_trl.cli.main.COMMANDS`, and `hir_trl.cli.main.main` dispatches through that table only."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from hir_trl.cli.main import COMMANDS, USAGE, Command, main, usage

from ..testing_utils import REPO_ROOT

CLI = REPO_ROOT / "hir_trl" / "cli"


def test_every_command_is_one_module_of_hir_trl_cli_with_a_main():
    assert list(COMMANDS) == ["train", "synth", "eval", "recipes", "env", "plan"]
    for name, command in COMMANDS.items():
        assert isinstance(command, Command) and command.name == name
        assert (CLI / f"{name}.py").is_file(), name
        module = importlib.import_module(command.module)
        assert module.__name__ == f"hir_trl.cli.{name}"
        assert list(inspect.signature(module.main).parameters)[0] == "argv", name


def test_help_lists_the_table_in_its_order():
    starts = [line.split()[0] for line in USAGE.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert starts == list(COMMANDS)
    assert usage({"a": Command("a", "one\ntwo")}) == "usage: hir-trl <command> [options]\n\ncommands:\n  a one\n    two\n"


def test_dispatch_goes_through_the_table(monkeypatch, capsys):
    calls = []

    class Recorded(Command):
        def run(self, argv):
            calls.append((self.name, list(argv)))
            return 7

    monkeypatch.setitem(COMMANDS, "env", Recorded("env", "recorded"))
    monkeypatch.setitem(COMMANDS, "extra", Recorded("extra", "a command only the table knows"))
    assert main(["env", "--x", "1"]) == 7
    assert main(["extra"]) == 7
    assert calls == [("env", ["--x", "1"]), ("extra", [])]
    monkeypatch.delitem(COMMANDS, "synth")
    assert main(["synth", "--help"]) == 2  # gone from the table: an unknown command
    assert "unknown command 'synth'" in capsys.readouterr().err


def test_a_command_runs_its_modules_main(monkeypatch):
    from hir_trl.cli import recipes

    seen = []
    monkeypatch.setattr(recipes, "main", lambda argv: seen.append(argv) or 5)
    assert main(["recipes", "list"]) == 5
    assert seen == [["list"]]


def test_main_names_no_command_itself():
    """No ``if command == "train"`` chain: the dispatch code compares no string with the command."""
    tree = ast.parse(inspect.getsource(importlib.import_module("hir_trl.cli.main").main))
    names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert names.isdisjoint(COMMANDS)


@pytest.mark.parametrize("argv, code", [([], 2), (["--help"], 0), (["-h"], 0), (["nope"], 2)])
def test_no_command_help_and_an_unknown_command(argv, code, capsys):
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert USAGE in out + err
    assert ("unknown command 'nope'" in err) == (argv == ["nope"])
