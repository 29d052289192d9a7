"""The ``hir-trl`` command line: one table of commands (`COMMANDS`), each a `Command` whose code is one module of
``hir_trl.cli`` named as the command (`hir_trl.cli.train`, `hir_trl.cli.synth`, `hir_trl.cli.eval`,
`hir_trl.cli.recipes`, `hir_trl.cli.env`, `hir_trl.cli.plan`), as TRL's ``trl/cli/commands`` lists its commands.
`main` looks the first argument up in the table and hands the rest of the command line to that module's ``main``;
the module is imported then, so ``hir-trl env`` loads no training code.

Every command parses its options with `hir_trl.cli.parser` (TRL's `TrlParser` over dataclasses), prints a user error
as one line ``hir-trl <command>: error: ...`` and exits 2.

The names of ``hir-trl train`` (`main` of `hir_trl.cli.train`, `parse_train_args`, `make_train_parser`,
`prepare_training`, ...) are importable from here too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from .train import (  # noqa: F401 - the names of hir-trl train, importable from here as before
    _UNACTIONABLE_WARNINGS,
    DEBUG_ENV,
    TRACKER_PACKAGES,
    TrainingInterrupted,
    UsageError,
    check_model_path,
    check_reward_model_path,
    check_trackers,
    close_progress_bar,
    disk_full,
    make_train_parser,
    parse_train_args,
    prepare_training,
    run_train,
    run_training,
    train,
)


@dataclass(frozen=True)
class Command:
    """One ``hir-trl`` command: its ``name`` (also the name of its module under ``hir_trl.cli``) and the
    ``help_text`` that ``hir-trl --help`` shows for it (one or more lines)."""

    name: str
    help_text: str

    @property
    def module(self) -> str:
        """The dotted name of the command's module, ``hir_trl.cli.<name>``."""
        return f"{__package__}.{self.name}"

    def run(self, argv: Sequence[str]) -> int:
        """Run the command on the arguments after its name: its module's ``main(argv)``; returns the exit status."""
        return importlib.import_module(self.module).main(list(argv))


#: The commands of ``hir-trl``, in the order ``hir-trl --help`` lists them.
COMMANDS: dict[str, Command] = {command.name: command for command in (
    Command("train", "train a model with Hindsight instruction Replay (hir-trl train --config recipe.yaml)\n"
                     "on several processes: add --accelerate_config NAME|FILE --num_processes N (accelerate launch's "
                     "options)\n"
                     "errors are one line; add --debug (or set HIR_TRL_DEBUG=1) for the traceback"),
    Command("synth", "attach random verifiable constraints to plain prompts\n"
                     "(hir-trl synth --dataset_name prompts.jsonl --output out.jsonl --num_constraints 3 --seed 0)"),
    Command("eval", "evaluate instruction following: hir-trl eval score|generate|compare ... (hir-trl eval --help)"),
    Command("recipes", "list the recipes shipped with hir-trl, or copy them: hir-trl recipes copy NAME|--all DEST\n"
                       "(hir-trl recipes --help)"),
    Command("env", "print the versions and platform facts to paste into a bug report"),
    Command("plan", "check a launch before it is made: batch, memory per GPU, judge load, disk, and whether it fits\n"
                    "(hir-trl plan --config recipe.yaml --gpu_memory_gb 80 [-- accelerate launch ... train ...])"),
)}


def usage(commands: dict[str, Command] = COMMANDS) -> str:
    """The text of ``hir-trl --help``: one entry per command of ``commands``, its help text's lines aligned."""
    width = max(len(name) for name in commands)
    lines = [f"  {c.name:<{width}} " + c.help_text.replace("\n", "\n" + " " * (width + 3)) for c in commands.values()]
    return "usage: hir-trl <command> [options]\n\ncommands:\n" + "\n".join(lines) + "\n"


USAGE = usage()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hir-trl`` console script: the command `COMMANDS` names by ``argv[0]``, run on the rest.

    Returns:
        The command's exit status; 0 for ``--help``, 2 with no arguments or an unknown command (usage printed).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"hir-trl: unknown command {argv[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return command.run(argv[1:])


__all__ = ["COMMANDS", "USAGE", "Command", "main", "usage"]
