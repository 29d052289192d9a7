"""The ``hir-trl`` command line.

``hir-trl train --config recipe.yaml [--field value ...]`` trains with `HiRTrainer`. The recipe and the
command line take the fields of `HiRScriptArguments`, `HiRConfig` and TRL's `ModelConfig`, parsed by
TRL's `TrlParser` exactly as ``trl grpo`` does (an ``env:`` block in the YAML sets environment variables;
unknown keys fail; command-line values override the recipe).

A user error (bad data, a bad flag or recipe value, a missing judge key, a missing checkpoint) is printed as one
line, ``hir-trl train: error: ...``, with exit status 2; so is a judge that stops training (`hir_trl.judge.JudgeError`:
``judge_failure_policy: raise`` firing, or every request of a step failing with an error no retry can fix).
``--debug`` (or ``HIR_TRL_DEBUG=1``) shows the traceback instead. Ctrl-C stops training with exit status 130 and names the last complete checkpoint to resume from.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

USAGE = """usage: hir-trl <command> [options]

commands:
  train   train a model with Hindsight instruction Replay (hir-trl train --config recipe.yaml)
          errors are one line; add --debug (or set HIR_TRL_DEBUG=1) for the traceback
  synth   attach random verifiable constraints to plain prompts
          (hir-trl synth --dataset_name prompts.jsonl --output out.jsonl --num_constraints 3 --seed 0)
  eval    evaluate instruction following: hir-trl eval score|generate|compare ... (hir-trl eval --help)
"""

#: Environment variable that makes ``hir-trl train`` show tracebacks of user errors (as ``--debug`` does).
DEBUG_ENV = "HIR_TRL_DEBUG"

#: Warnings a user cannot act on: TRL 1.16 reads ``gradient_checkpointing`` (and its default is set), which
#: transformers 5 renamed ``activation_checkpointing``; it warns at config creation and at every generation.
_UNACTIONABLE_WARNINGS = (r"`(is_)?gradient_checkpointing` is deprecated and will be removed in v6",)


class UsageError(ValueError):
    """A bad command line (raised by the train parser instead of printing argparse's usage block)."""


class TrainingInterrupted(Exception):
    """Training stopped by Ctrl-C / SIGINT; the message names the last complete checkpoint."""


def make_train_parser():
    """The `TrlParser` of ``hir-trl train``: (HiRScriptArguments, HiRConfig, ModelConfig).

    A bad flag raises `UsageError` (one line naming the flag) instead of printing argparse's usage block; values
    from the recipe are type-checked by the dataclasses (`hir_trl.configs.field_type_problem`).
    """
    from trl import ModelConfig, TrlParser

    from .configs import HiRConfig, HiRScriptArguments

    class TrainParser(TrlParser):
        def error(self, message):  # argparse's error(): usage + message + exit 2
            raise UsageError(f"{message} (hir-trl train --help lists the options)")

    return TrainParser((HiRScriptArguments, HiRConfig, ModelConfig), prog="hir-trl train", allow_abbrev=False)


def parse_train_args(argv: Sequence[str]):
    """Parse ``hir-trl train`` arguments into (HiRScriptArguments, HiRConfig, ModelConfig).

    Raises:
        UsageError, ValueError: a bad flag, an unknown recipe key, or a value of the wrong type or out of range.
    """
    from .configs import field_type_problem

    argv = list(argv)
    *parsed, from_recipe, from_command_line = make_train_parser().parse_args_and_config(
        argv, return_remaining_strings=True, separate_remaining_strings=True)
    if from_recipe:
        recipe = argv[argv.index("--config") + 1]
        raise ValueError(f"unknown key(s) in {recipe}: {', '.join(k.lstrip('-') for k in from_recipe[::2])}")
    if from_command_line:
        raise UsageError(f"unrecognized arguments: {' '.join(from_command_line)} (hir-trl train --help lists the "
                         "options)")
    script_args, training_args, model_args = parsed
    problem = field_type_problem(model_args)
    if problem is not None:
        raise ValueError(problem)
    return script_args, training_args, model_args


def _training_texts(dataset) -> list[str]:
    texts = []
    for row in dataset:
        texts.extend(str(m["content"]) for m in row["prompt"])
        texts.extend(c["text"] for c in row["constraints"])
    return texts


def _complete_checkpoints(output_dir: str) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir`` that were saved completely (have trainer_state.json), by N."""
    folder = Path(output_dir)
    found = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and p.is_dir()]
    return sorted((p for p in found if (p / "trainer_state.json").is_file()), key=lambda p: int(p.name.split("-")[-1]))


def check_resume(resume_from_checkpoint, output_dir: str) -> None:
    """Refuse a ``resume_from_checkpoint`` that names no complete checkpoint (before any model is loaded).

    Raises:
        ValueError: the folder does not exist or has no trainer_state.json (a checkpoint interrupted while it was
            being saved); ``true`` with no complete checkpoint in ``output_dir``, or an incomplete latest one.
    """
    if resume_from_checkpoint in (None, False, "", "false", "False"):
        return
    if resume_from_checkpoint in (True, "true", "True"):
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise ValueError(f"resume_from_checkpoint: true, but {output_dir} has no checkpoint-N folder to resume from")
        path = Path(last)
    else:
        path = Path(str(resume_from_checkpoint))
        if not path.is_dir():
            raise ValueError(f"resume_from_checkpoint: {path} is not a folder")
    if not (path / "trainer_state.json").is_file():
        complete = _complete_checkpoints(str(path.parent))
        hint = (f"; resume from {complete[-1]} instead, or delete {path}" if complete else "")
        raise ValueError(f"resume_from_checkpoint: {path} is not a complete checkpoint (no trainer_state.json; was "
                         f"it interrupted while saving?){hint}")


def prepare_training(script_args, training_args, model_args):
    """Everything before the first step: check the resume point, load the data, (optionally) build the tiny
    model, and build the `HiRTrainer` (which loads the model and builds the judge). Every user error surfaces here.

    Returns:
        ``(trainer, dataset)``.

    Raises:
        ValueError: no ``dataset_name``, or a ``resume_from_checkpoint`` that is no complete checkpoint; see also
            `hir_trl.load_hir_dataset` (`DatasetFormatError`) and `HiRTrainer`.
        hir_trl.judge.MissingJudgeKeyError: the data has soft constraints and the judge's key variable is unset.
    """
    from trl import get_peft_config, get_quantization_config

    from .data import load_hir_dataset
    from .trainer import HiRTrainer

    if not script_args.dataset_name:
        raise ValueError("dataset_name is required: a Hub dataset id or a local .jsonl/.json/.parquet file or folder")
    check_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    dataset = load_hir_dataset(script_args.dataset_name, split=script_args.dataset_train_split,
                               name=script_args.dataset_config, max_rows=script_args.dataset_max_rows,
                               on_unverifiable=script_args.dataset_on_unverifiable)
    if script_args.build_model == "tiny":
        from .tiny import ensure_tiny_model

        ensure_tiny_model(model_args.model_name_or_path, lambda: _training_texts(dataset))
    elif script_args.build_model == "smollm2":
        from .models import ensure_smollm2_model

        ensure_smollm2_model(model_args.model_name_or_path,
                             announce=lambda line: print(f"hir-trl train: {line}", file=sys.stderr, flush=True))

    model_init_kwargs = dict(revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code,
                             attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    model_init_kwargs = {k: v for k, v in model_init_kwargs.items() if v is not None}
    if training_args.model_init_kwargs is not None:
        model_init_kwargs.update(training_args.model_init_kwargs)
    training_args.model_init_kwargs = model_init_kwargs

    trainer = HiRTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset,
                         peft_config=get_peft_config(model_args),
                         quantization_config=get_quantization_config(model_args), dataset_name=str(script_args.dataset_name))
    return trainer, dataset


def close_progress_bar(trainer) -> None:
    """Close the trainer's progress bar, so that a message printed next starts on a line of its own."""
    for callback in trainer.callback_handler.callbacks:
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()
            callback.training_bar = None


def run_training(trainer, dataset, script_args, training_args) -> None:
    """Train, save the model, its state and model card, push (``push_to_hub``), and print the run summary.

    Raises:
        TrainingInterrupted: Ctrl-C during training (the message names the last complete checkpoint).
    """
    import transformers
    from packaging.version import Version

    from .summary import training_summary

    try:
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    except KeyboardInterrupt:
        close_progress_bar(trainer)
        complete = _complete_checkpoints(training_args.output_dir)
        where = (f"the last complete checkpoint is {complete[-1]}; resume with --resume_from_checkpoint {complete[-1]}"
                 if complete else "no checkpoint was saved yet")
        raise TrainingInterrupted(f"interrupted at step {trainer.state.global_step}; {where}") from None
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json (log history with the hir/* metrics) beside the model
    trainer.create_model_card()  # also when push_to_hub is off (rank 0 writes it)
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=str(script_args.dataset_name))
    if Version(transformers.__version__) >= Version("5.18.0"):
        trainer.end()
    if trainer.accelerator.is_main_process:
        print(training_summary(training_args.output_dir, trainer.state.log_history, dataset,
                               log_completions=training_args.log_completions), end="", flush=True)


def train(script_args, training_args, model_args) -> None:
    """Run one HiR training job: `prepare_training`, then `run_training`. See those for the errors."""
    trainer, dataset = prepare_training(script_args, training_args, model_args)
    run_training(trainer, dataset, script_args, training_args)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are the user's to fix, printed as one line: bad flags/recipe values and data (ValueError,
    including `DatasetFormatError`), files (OSError), a malformed recipe (yaml.YAMLError), a missing judge key, a judge
    cache that cannot be read (`hir_trl.judge.JudgeCacheError`), a missing optional package."""
    import yaml

    from .judge import JudgeError, MissingJudgeKeyError
    from .models import MissingDependencyError

    return (ValueError, OSError, yaml.YAMLError, MissingJudgeKeyError, JudgeError, MissingDependencyError)


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


def run_train(argv: Sequence[str]) -> int:
    """``hir-trl train``: parse, train, summarise; returns the exit status (0; 2: a user error, printed as one line
    unless ``--debug`` or ``HIR_TRL_DEBUG=1``; 130: interrupted)."""
    argv = list(argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "").lower() not in ("", "0", "false", "no")
    argv = [a for a in argv if a != "--debug"]
    with warnings.catch_warnings():
        for pattern in _UNACTIONABLE_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern, category=FutureWarning)
        user_errors = _user_errors()
        try:  # user errors surface before the first step; later errors keep their traceback
            script_args, training_args, model_args = parse_train_args(argv)
            trainer, dataset = prepare_training(script_args, training_args, model_args)
        except user_errors as exc:
            if debug:
                raise
            print(f"hir-trl train: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("hir-trl train: interrupted before training started", file=sys.stderr)
            return 130
        from .judge import JudgeError

        try:
            run_training(trainer, dataset, script_args, training_args)
        except TrainingInterrupted as exc:
            print(f"hir-trl train: {exc}", file=sys.stderr)
            return 130
        except JudgeError as exc:  # judge_failure_policy: raise, or a judge that cannot work: stop, one line
            if debug:
                raise
            close_progress_bar(trainer)
            complete = _complete_checkpoints(training_args.output_dir)
            where = f"; the last complete checkpoint is {complete[-1]}" if complete else ""
            print(f"hir-trl train: error: stopped at step {trainer.state.global_step}: {_one_line(exc)}{where}",
                  file=sys.stderr)
            return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hir-trl`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        return run_train(rest)
    if command == "synth":
        from .synth import main as synth_main

        return synth_main(rest)
    if command == "eval":
        from .evaluation import main as eval_main

        return eval_main(rest)
    print(f"hir-trl: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
