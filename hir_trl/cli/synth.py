"""``hir-trl synth``: attach random, verifiable, mutually compatible constraints to plain prompts
(`hir_trl.data.synth.synthesize`) and write HIR-16K-format rows.

::

    hir-trl synth --dataset_name prompts.jsonl --output out.jsonl --num_constraints 3 --seed 0 \\
        [--families ifeval ifbench] [--dataset_max_rows N] [--dataset_train_split train] [--dataset_config NAME]

Flags are snake_case as ``hir-trl train`` and TRL take them (kebab-case accepted too; ``--config FILE`` reads them
from YAML), parsed by `SynthArguments`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..data.synth import _families, read_prompts, synthesize, write_rows
from ..errors import one_line
from ..verifiers import import_verifier_modules
from ..verifiers.registry import VerifierModuleError
from .parser import command_parser, parse_command


@dataclass
class SynthArguments:
    """The options of ``hir-trl synth``, named as ``hir-trl train`` names the same things (``dataset_name``,
    ``dataset_config``, ``dataset_train_split``, ``dataset_max_rows``, ``seed``, ``verifier_modules``); the former
    ``--max_rows`` and ``--dataset_split`` are accepted too."""

    dataset_name: str = field(metadata={
        "help": "Hub dataset id or local .json/.jsonl/.parquet with a 'prompt' (string or chat messages) or "
                "'messages' column"})
    output: str = field(metadata={"help": "output file: .jsonl, .json or .parquet (never the input)"})
    num_constraints: int = field(default=3, metadata={"help": "constraints per prompt (default 3)"})
    seed: int = field(default=0, metadata={"help": "random seed (default 0)"})
    families: list[str] = field(default_factory=lambda: ["ifeval", "ifbench"], metadata={
        "help": "verifier families to sample from (default: ifeval ifbench); a family of your own "
                "(hir_trl.register_verifier, imported with --verifier_modules) adds its ids that have a description"})
    verifier_modules: list[str] | None = field(default=None, metadata={
        "metavar": "MODULE",
        "help": "modules to import first, so that their register_verifier calls run (dotted names or .py files)"})
    dataset_max_rows: int | None = field(default=None, metadata={
        "aliases": ["--max_rows", "--max-rows"], "help": "use the first N prompts only"})
    dataset_train_split: str = field(default="train", metadata={
        "aliases": ["--dataset_split", "--dataset-split"], "help": "split of a Hub dataset (default train)"})
    dataset_config: str | None = field(default=None, metadata={"help": "configuration name of a Hub dataset"})


def make_parser():
    """The parser of ``hir-trl synth``: TRL's `TrlParser` over `SynthArguments` (`hir_trl.cli.parser.command_parser`)."""
    return command_parser((SynthArguments,), "hir-trl synth",
                          "Attach random, verifiable, mutually compatible IFEval / IF-RLVR constraints to plain "
                          "prompts and write HIR-16K-format rows (trainable with `hir-trl train --dataset_name "
                          "OUTPUT`).")


def _check_args(args: SynthArguments) -> None:
    """Refuse bad values before any data is read.

    Raises:
        ValueError: ``num_constraints`` or ``dataset_max_rows`` < 1, a family that is not registered, an ``output``
            that is the input file (its path, another spelling of it, a symbolic or hard link to it) or lies in the
            input folder, that is a folder, a symbolic link or empty, or has another suffix than .jsonl, .json or
            .parquet.
    """
    if args.num_constraints < 1:
        raise ValueError(f"--num_constraints must be >= 1, got {args.num_constraints}")
    if args.dataset_max_rows is not None and args.dataset_max_rows < 1:
        raise ValueError(f"--dataset_max_rows must be >= 1, got {args.dataset_max_rows}")
    unknown = [family for family in args.families if family not in _families()]
    if unknown:
        raise ValueError(f"--families: {', '.join(map(repr, unknown))} is no verifier family: choose from "
                         f"{', '.join(_families())} (a family of your own needs --verifier_modules)")
    if not str(args.output).strip():
        raise ValueError("--output is empty: give a file name ending in .jsonl, .json or .parquet")
    output = Path(args.output)
    source = Path(args.dataset_name)
    if output.exists() and source.exists() and (os.path.samefile(output, source)
                                               or output.resolve() == source.resolve()):
        raise ValueError(f"--output {output} is the input --dataset_name {args.dataset_name} (the same file, through "
                         "a link or another spelling of its path): synth would overwrite its input; give another "
                         "--output")
    if source.is_dir() and output.exists() and output.resolve().is_relative_to(source.resolve()):
        raise ValueError(f"--output {output} is inside the input folder --dataset_name {args.dataset_name}: a "
                         "later run would read it as input; give an --output outside it")
    if output.is_dir():
        raise ValueError(f"--output {output} is a folder: give a file name ending in .jsonl, .json or .parquet")
    from ..errors import write_target_problem

    problem = write_target_problem(output)  # after the input checks, which name an input written over
    if problem is not None:
        raise ValueError(f"--output {problem}")
    if output.suffix not in (".jsonl", ".json", ".parquet"):
        raise ValueError(f"--output must end in .jsonl, .json or .parquet, got {output}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hir-trl synth``; returns the exit status: 0, or 2 for a user error (a bad option, a missing
    file or prompt column, a module that cannot be imported, constraints that cannot be made compatible), printed
    as one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        (args,) = parse_command(make_parser(), argv)
        import_verifier_modules(args.verifier_modules)  # before --families is checked
        _check_args(args)
        prompts = read_prompts(args.dataset_name, split=args.dataset_train_split, name=args.dataset_config,
                               max_rows=args.dataset_max_rows)
        if not prompts:
            raise ValueError(f"{args.dataset_name} holds no prompts")
        rows = synthesize(prompts, args.num_constraints, args.seed, families=args.families)
        path = write_rows(rows, args.output)
    except (ValueError, OSError, VerifierModuleError) as exc:  # UsageError, JSONFileError, DatasetFormatError: lines
        print(f"hir-trl synth: error: {one_line(exc)}", file=sys.stderr)
        return 2
    counts = {kind: sum(row.get("data_source", "native") == kind for row in rows)
              for kind in ("type1", "type2", "native")}
    print(f"Wrote {len(rows)} rows to {path} ({counts['type1']} type1, {counts['type2']} type2"
          + (f", {counts['native']} native with constraints of your own" if counts["native"] else "") + ").")
    return 0


__all__ = ["SynthArguments", "main", "make_parser"]
