"""The ``hir-trl`` command line.

``hir-trl train --config recipe.yaml [--field value ...]`` trains with `HiRTrainer`. The recipe and the
command line take the fields of `HiRScriptArguments`, `HiRConfig` and TRL's `ModelConfig`, parsed by
TRL's `TrlParser` exactly as ``trl grpo`` does (an ``env:`` block in the YAML sets environment variables;
unknown keys fail; command-line values override the recipe).

A user error (bad data, a bad flag or recipe value, a missing judge key, a missing checkpoint) is printed as one
line, ``hir-trl train: error: ...``, with exit status 2; so is a judge that stops training (`hir_trl.judge.JudgeError`:
``judge_failure_policy: raise`` firing, or every request of a step failing with an error no retry can fix).
``--debug`` (or ``HIR_TRL_DEBUG=1``) shows the traceback instead. Ctrl-C stops training with exit status 130 and names the last complete checkpoint to resume from.
So do a NaN/inf met in training or a reward function's bad result (`hir_trl.guards`) and a full disk while saving.

An ``output_dir`` holds one run (`check_output_dir`, `check_finished`; docs/scale-out.md "Resume and re-run"):
``--resume_from_checkpoint`` on a run that already reached ``max_steps`` prints one line ("already finished") and
exits 0 without touching it; ``--overwrite_output_dir`` deletes what the earlier run wrote (`run_outputs`) and
nothing else; the two together are refused.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..errors import UsageError, command_parser, one_line, parse_command, split_config_flag  # noqa: F401 - UsageError: public here too

USAGE = """usage: hir-trl <command> [options]

commands:
  train   train a model with Hindsight instruction Replay (hir-trl train --config recipe.yaml)
          errors are one line; add --debug (or set HIR_TRL_DEBUG=1) for the traceback
  synth   attach random verifiable constraints to plain prompts
          (hir-trl synth --dataset_name prompts.jsonl --output out.jsonl --num_constraints 3 --seed 0)
  eval    evaluate instruction following: hir-trl eval score|generate|compare ... (hir-trl eval --help)
  recipes list the recipes shipped with hir-trl, or copy them: hir-trl recipes copy NAME|--all DEST
          (hir-trl recipes --help)
  env     print the versions and platform facts to paste into a bug report
"""

#: Environment variable that makes ``hir-trl train`` show tracebacks of user errors (as ``--debug`` does).
DEBUG_ENV = "HIR_TRL_DEBUG"

#: Warnings a user cannot act on: TRL 1.16 reads ``gradient_checkpointing`` (and its default is set), which
#: transformers 5 renamed ``activation_checkpointing``; it warns at config creation and at every generation, and
#: TRL's ``disable_gradient_checkpointing`` (the trainer's no-grad passes) calls the deprecated
#: ``gradient_checkpointing_disable`` / ``_enable``.
_UNACTIONABLE_WARNINGS = (r"`(is_)?gradient_checkpointing(_disable|_enable)?` is deprecated and will be removed in v6",)


class TrainingInterrupted(Exception):
    """Training stopped by Ctrl-C / SIGINT; the message names the last complete checkpoint."""

  plan    check a launch before it is made: batch, memory per GPU, judge load, disk, and whether it fits
          (hir-trl plan --config recipe.yaml --gpu_memory_gb 80 [-- accelerate launch ... train ...])

def make_train_parser():
    """The `TrlParser` of ``hir-trl train``: (HiRScriptArguments, HiRConfig, ModelConfig).

    A bad flag raises `UsageError` (one line naming the flag) instead of printing argparse's usage block; values
    from the recipe are type-checked by the dataclasses (`hir_trl.configs.field_type_problem`).
    """
    from trl import ModelConfig

    from ..configs import HiRConfig, HiRScriptArguments

    return command_parser((HiRScriptArguments, HiRConfig, ModelConfig), "hir-trl train")


def parse_train_args(argv: Sequence[str]):
    """Parse ``hir-trl train`` arguments into (HiRScriptArguments, HiRConfig, ModelConfig).

    Raises:
        UsageError, ValueError: a bad flag, an unknown recipe key, or a value of the wrong type or out of range.
    """
    from ..configs import field_type_problem
    from .recipes import check_recipe

    argv = split_config_flag(argv)  # --config=FILE as --config FILE
    check_recipe(argv)  # a key given twice: TRL's YAML loader would keep the last value silently
    script_args, training_args, model_args = parse_command(make_train_parser(), argv)
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


def _checkpoint_folders(folder: Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``folder``, by N (the one glob of checkpoints)."""
    found = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and p.is_dir()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def _complete_checkpoints(output_dir: str) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir`` that were saved completely (have trainer_state.json), by N."""
    return [p for p in _checkpoint_folders(Path(output_dir)) if (p / "trainer_state.json").is_file()]


#: Largest torch file (zip format) whose every member's CRC is checked before resuming; larger ones are only opened.
_CRC_CHECK_BYTES = 2 << 30


def checkpoint_file_problem(path: Path) -> str | None:
    """Why a checkpoint file cannot be read, or None: a JSON file (``trainer_state.json``, ``hir_state.json``, ...)
    that does not parse, a ``.safetensors`` file whose header or size is wrong, or a torch file (``optimizer.pt``,
    ``scheduler.pt``, ``rng_state.pth``, ``*.bin``: torch's zip format) that is truncated or fails its CRCs."""
    import zipfile

    try:
        if path.stat().st_size == 0:
            return "the file is empty"
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        elif path.suffix in (".pt", ".pth", ".bin"):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip() if path.stat().st_size <= _CRC_CHECK_BYTES else None
            if bad is not None:
                return f"member {bad} fails its CRC check"
    except Exception as exc:  # noqa: BLE001 - json, zipfile, safetensors (SafetensorError), OS errors: unreadable
        return one_line(exc)
    return None


def check_resume(resume_from_checkpoint, output_dir: str) -> str | None:
    """Resolve ``resume_from_checkpoint`` to a checkpoint folder, refusing one that is no complete checkpoint (before
    any model is loaded).

    ``true`` (as the recipe's boolean or the command line's string) means the latest ``checkpoint-N`` of
    ``output_dir``, found as transformers does (`transformers.trainer_utils.get_last_checkpoint`); ``false``, an
    empty string or None mean a fresh run.

    Returns:
        The checkpoint folder to resume from, or None for a fresh run.

    Raises:
        ValueError: the folder does not exist or has no trainer_state.json (a checkpoint interrupted while it was
            being saved); ``true`` with no complete checkpoint in ``output_dir``, or an incomplete latest one; a
            file of the checkpoint that cannot be read (`checkpoint_file_problem`), named.
    """
    if resume_from_checkpoint in (None, False, "", "false", "False"):
        return None
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
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        problem = checkpoint_file_problem(file)
        if problem is not None:
            earlier = [p for p in _complete_checkpoints(str(path.parent)) if p != path]
            hint = f"; resume from {earlier[-1]} instead" if earlier else ""
            raise ValueError(f"resume_from_checkpoint: {file} is truncated or corrupt ({problem}){hint}")
    return str(path)


#: Files a run writes at the top of its ``output_dir`` besides its model: `Trainer.save_state`, ``save_model``'s
#: pickled arguments, results files, and the replay RNG.
_RUN_FILES = ("trainer_state.json", "training_args.bin", "all_results.json", "train_results.json",
              "eval_results.json", "hir_state.json")
#: What `Trainer.save_model` writes beside ``training_args.bin`` (model, tokenizer, model card): removed with the run
#: only when ``training_args.bin`` marks the top of ``output_dir`` as a run's final model.
_MODEL_FILES = re.compile(
    r"(?:config|generation_config|tokenizer|tokenizer_config|special_tokens_map|added_tokens|vocab|"
    r"preprocessor_config|processor_config|chat_template|adapter_config)\.(?:json|jinja)"
    r"|(?:model|pytorch_model|adapter_model)(?:-\d+-of-\d+)?\.(?:safetensors|bin)"
    r"|(?:model|pytorch_model)\.(?:safetensors|bin)\.index\.json|merges\.txt|vocab\.txt|tokenizer\.model|README\.md")
#: A HiR model card (`hir_trl.card.hir_card_section`): a README.md that is a run's output, not the user's.
_CARD_MARK = "## HiR training"


def _previous_run(output_dir: str) -> list[str]:
    """What in ``output_dir`` shows an earlier run: its ``checkpoint-N`` folders, ``completions/`` and
    ``trainer_state.json``, else ``training_args.bin`` (a final model alone); names relative to ``output_dir``."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    found = [p.name for p in _checkpoint_folders(folder)]
    if (folder / "completions").is_dir() and any((folder / "completions").iterdir()):
        found.append("completions/")
    if (folder / "trainer_state.json").is_file():
        found.append("trainer_state.json")
    if not found and (folder / "training_args.bin").is_file():  # a final model only (save_strategy: no, no logs)
        found.append("training_args.bin")
    return found


def run_outputs(output_dir: str) -> list[Path]:
    """Every path of ``output_dir`` that an earlier run wrote, which ``--overwrite_output_dir`` removes: its
    ``checkpoint-N`` folders, ``completions/``, TensorBoard's ``runs/``, `_RUN_FILES`, its HiR model card, and its
    final model (`_MODEL_FILES`, only when ``training_args.bin`` is there). Nothing else: a folder or file of the
    user's (a model or data kept inside ``output_dir``) stays."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    paths = _checkpoint_folders(folder)
    if (folder / "completions").is_dir():
        paths.append(folder / "completions")
    runs = folder / "runs"
    if runs.is_dir() and any(runs.rglob("events.out.tfevents*")):
        paths.append(runs)
    paths += [folder / name for name in _RUN_FILES if (folder / name).is_file()]
    saved_model = (folder / "training_args.bin").is_file()
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path in paths or not _MODEL_FILES.fullmatch(path.name):
            continue
        if path.name == "README.md":
            if saved_model or _CARD_MARK in path.read_text(encoding="utf-8", errors="replace"):
                paths.append(path)
        elif saved_model:
            paths.append(path)
    return paths


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def check_output_dir(output_dir: str, resume_from_checkpoint: str | None, overwrite: bool,
                     keep: Sequence[str | None] = ()) -> None:
    """Keep two runs from mixing in one ``output_dir`` (before any model is loaded).

    A fresh run (no ``resume_from_checkpoint``) into a folder that holds another run's checkpoints, completion logs,
    trainer state or final model (`_previous_run`) is refused, unless ``overwrite`` (``--overwrite_output_dir``),
    which deletes everything that run wrote (`run_outputs`; on the main process only) and nothing else. Resuming
    from a checkpoint of another folder into an ``output_dir`` that holds a run is refused the same way.

    Args:
        output_dir: the run's folder.
        resume_from_checkpoint: the checkpoint folder resumed from (`check_resume`), or None.
        overwrite: ``--overwrite_output_dir``.
        keep: paths the run reads (``model_name_or_path``, ``dataset_name``): ``overwrite`` never deletes them.

    Raises:
        ValueError: ``output_dir`` is a file; ``overwrite`` together with ``resume_from_checkpoint``; ``output_dir``
            holds another run and neither ``overwrite`` nor a checkpoint of it is resumed from; ``overwrite`` would
            delete a path of ``keep``.
    """
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir {output_dir} is a file, not a folder: give the path of a folder (it is created "
                         "when missing), or move the file away")
    if overwrite and resume_from_checkpoint is not None:
        raise ValueError(f"overwrite_output_dir: true deletes the previous run of {output_dir}, "
                         f"resume_from_checkpoint ({resume_from_checkpoint}) continues one: pass one of them, not both")
    previous = _previous_run(output_dir)
    shown = ", ".join(previous if len(previous) <= 4 else [*previous[:2], "...", *previous[-2:]])
    if resume_from_checkpoint is not None:
        if previous and not _inside(Path(resume_from_checkpoint), folder):
            raise ValueError(f"output_dir {output_dir} holds another run ({shown}), and resume_from_checkpoint "
                             f"{resume_from_checkpoint} is a checkpoint of another folder: the two runs would mix; "
                             "resume into an empty output_dir, or from a checkpoint of this one")
        return
    if not previous:
        return
    if not overwrite:
        raise ValueError(f"output_dir {output_dir} holds another run ({shown}): pass --overwrite_output_dir true to "
                         "replace it, --resume_from_checkpoint true to continue it, or choose another output_dir")
    doomed = run_outputs(output_dir)
    for path in (Path(p) for p in keep if p):
        if path.exists() and any(_inside(path, d) if d.is_dir() else path.resolve() == d.resolve() for d in doomed):
            raise ValueError(f"overwrite_output_dir: true would delete {path}, which this run reads (the previous "
                             f"run's output in {output_dir}); copy it elsewhere first, or choose another output_dir")
    if os.environ.get("RANK", "0") == "0":  # one process deletes (all of them check before anything is written)
        import shutil

        for path in doomed:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


class AlreadyFinished(Exception):
    """``--resume_from_checkpoint`` names a run that already reached ``max_steps``: nothing to train (exit 0)."""


def _state(path: Path) -> dict:
    try:
        state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def check_finished(resume_from_checkpoint: str | None, requested, output_dir: str, max_steps: int) -> None:
    """Refuse to resume a run that already reached its last step (`AlreadyFinished`), before any model is loaded:
    resuming it would train past ``max_steps`` and overwrite its final model.

    The run is finished when the checkpoint's ``global_step`` reached ``max_steps`` (the checkpoint's own
    ``max_steps`` when the run trains by epochs, ``max_steps: -1``) or, for ``--resume_from_checkpoint true``, when
    ``output_dir/trainer_state.json`` (written after the final model) did.

    Raises:
        AlreadyFinished: one line naming the step, the checkpoint, and how to train further.
    """
    if resume_from_checkpoint is None:
        return
    checkpoint = _state(Path(resume_from_checkpoint))
    states = [(Path(resume_from_checkpoint), checkpoint)]
    if requested in (True, "true", "True"):
        states.append((Path(output_dir), _state(Path(output_dir))))
    for where, state in states:
        step, planned = state.get("global_step"), state.get("max_steps")
        target = max_steps if max_steps > 0 else planned
        if isinstance(step, int) and isinstance(target, int) and target > 0 and step >= target:
            raise AlreadyFinished(
                f"{output_dir} already finished: {where} is at step {step} of max_steps {target}, so "
                "--resume_from_checkpoint has nothing to train and the final model is left as it is (raise "
                "--max_steps to train further, or pass --overwrite_output_dir true to start again)")


def prune_later_completions(resume_from_checkpoint: str | None, output_dir: str) -> list[Path]:
    """Before resuming from ``checkpoint-N`` of ``output_dir``, delete the completion logs of the steps after N
    (``completions/completions_<step>.parquet``, left by the same run going further before it was resumed from an
    earlier point), so that ``completions/`` holds one line of training; on the main process only.

    Returns:
        The files deleted.
    """
    if resume_from_checkpoint is None or not _inside(Path(resume_from_checkpoint), Path(output_dir)):
        return []
    step = _state(Path(resume_from_checkpoint)).get("global_step")
    if not isinstance(step, int):
        return []
    later = [p for p in sorted((Path(output_dir) / "completions").glob("completions_*.parquet"))
             if p.stem.split("_")[-1].isdigit() and int(p.stem.split("_")[-1]) > step]
    if os.environ.get("RANK", "0") == "0":
        for path in later:
            path.unlink()
    return later


def optimizer_restart_note(resume_from_checkpoint: str | None) -> str | None:
    """A line saying that resuming from this checkpoint restarts the optimizer and learning-rate schedule (it has no
    ``optimizer.pt``: saved with ``save_only_model: true``), or None."""
    if resume_from_checkpoint is None:
        return None
    folder = Path(resume_from_checkpoint)
    if any((folder / name).exists() for name in ("optimizer.pt", "optimizer.bin")) or any(folder.glob("global_step*")):
        return None
    return (f"{folder} holds no optimizer state (saved with save_only_model: true): training resumes from its "
            "weights, but the optimizer (Adam moments) and the learning-rate schedule start again from scratch")


def check_model_path(model_name_or_path: str, build_model: str | None) -> None:
    """Refuse a ``model_name_or_path`` that can only be a local folder (``/``, ``./``, ``~``, or more than one
    ``/``) and does not exist, unless ``build_model`` builds it there (the Hub client would call it a malformed
    repo id).

    Raises:
        FileNotFoundError: naming the folder and the fix.
    """
    from ..data.loading import _looks_local

    if build_model or Path(model_name_or_path).expanduser().exists() or not _looks_local(model_name_or_path):
        return
    raise FileNotFoundError(f"model_name_or_path {model_name_or_path}: no such model folder (give a local model "
                            "directory, a Hub model id such as Qwen/Qwen2.5-7B-Instruct, or --build_model tiny to "
                            "build a tiny model there)")
#: The pip package of each ``report_to`` tracker whose name differs from its package.
TRACKER_PACKAGES = {"azure_ml": "azureml-core", "comet_ml": "comet-ml", "tensorboard": "tensorboard"}


def check_trackers(report_to) -> None:
    """Refuse a tracker in ``report_to`` whose package is not installed, before the data and the model load
    (transformers would raise from inside `HiRTrainer`'s construction).

    Raises:
        ValueError: a named tracker (e.g. ``wandb``) that `transformers.integrations` does not find installed.
    """
    from transformers.integrations import get_available_reporting_integrations

    wanted = [report_to] if isinstance(report_to, str) else list(report_to or [])
    available = set(get_available_reporting_integrations())
    missing = [name for name in wanted if name not in ("none", "all") and name not in available]
    if missing:
        packages = " ".join(TRACKER_PACKAGES.get(name, name) for name in missing)
        raise ValueError(f"report_to: {', '.join(missing)} is not installed: pip install {packages} (and log in), "
                         "or pass --report_to none")


def prepare_training(script_args, training_args, model_args):
    """Everything before the first step: check the resume point, load the data, (optionally) build the tiny
    model, and build the `HiRTrainer` (which loads the model and builds the judge). Every user error surfaces here.

    Returns:
        ``(trainer, dataset)``.

    Raises:
        ValueError: no ``dataset_name`` or ``model_name_or_path``, a ``report_to`` tracker that is not installed
            (`check_trackers`), a ``resume_from_checkpoint`` that is no complete checkpoint, or an
            ``output_dir`` holding another run (`check_output_dir`); see also
            `hir_trl.load_hir_dataset` (`DatasetFormatError`) and `HiRTrainer`.
        hir_trl.judge.MissingJudgeKeyError: the data has soft constraints and the judge's key variable is unset.
    """
    from trl import get_peft_config, get_quantization_config

    from ..data.loading import load_hir_dataset
    from ..trainer import HiRTrainer
    from ..verifiers import import_verifier_modules

    if not script_args.dataset_name:
        raise ValueError("dataset_name is required: give a recipe (hir-trl train --config recipe.yaml, e.g. "
                         "recipes/tiny/hir/config_cpu.yaml) or --dataset_name (a Hub dataset id or a local "
                         ".jsonl/.json/.parquet file or folder) and --model_name_or_path")
    if command == "plan":
        from .plan import main as plan_main

        return plan_main(rest)
    if not model_args.model_name_or_path:
        raise ValueError("model_name_or_path is required: a Hub model id or a local model folder (with "
                         "--build_model tiny, the folder the tiny model is built in)")
    if Path(training_args.output_dir).is_file():
        check_output_dir(training_args.output_dir, None, False)  # a file: one line, before resume looks inside
    check_trackers(training_args.report_to)
    # transformers takes a string as a path: "true" from the command line becomes the latest checkpoint's folder
    requested = training_args.resume_from_checkpoint
    if script_args.overwrite_output_dir and requested not in (None, False, "", "false", "False"):
        check_output_dir(training_args.output_dir, str(requested), True)  # refused together, before any lookup
    training_args.resume_from_checkpoint = check_resume(requested, training_args.output_dir)
    check_output_dir(training_args.output_dir, training_args.resume_from_checkpoint, script_args.overwrite_output_dir,
                     keep=(model_args.model_name_or_path, str(script_args.dataset_name)))
    check_finished(training_args.resume_from_checkpoint, requested, training_args.output_dir, training_args.max_steps)
    later = prune_later_completions(training_args.resume_from_checkpoint, training_args.output_dir)
    if later:
        print(f"hir-trl train: resuming from {training_args.resume_from_checkpoint}: removed {len(later)} completion "
              f"log(s) of later steps ({later[0].name} on), which this run writes again", file=sys.stderr)
    note = optimizer_restart_note(training_args.resume_from_checkpoint)
    if note is not None:
        print(f"hir-trl train: warning: {note}", file=sys.stderr)
    import_verifier_modules(script_args.verifier_modules)  # their register_verifier calls, before the data loads
    dataset = load_hir_dataset(script_args.dataset_name, split=script_args.dataset_train_split,
                               name=script_args.dataset_config, max_rows=script_args.dataset_max_rows,
                               on_unverifiable=script_args.dataset_on_unverifiable)
    check_model_path(model_args.model_name_or_path, script_args.build_model)
    if script_args.build_model == "tiny":
        from ..models.tiny import ensure_tiny_model

        ensure_tiny_model(model_args.model_name_or_path, lambda: _training_texts(dataset))
    elif script_args.build_model == "smollm2":
        from ..models.smollm2 import ensure_smollm2_model

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
    from .console import use_step_lines
    use_step_lines(trainer)  # one console line per step; every metric still goes to trainer_state.json and trackers
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
    trainer.end()  # HiRTrainer.end: trackers, process group, and gloo's teardown pause
    if trainer.accelerator.is_main_process:
        print(training_summary(training_args.output_dir, trainer.state.log_history, dataset,
                               log_completions=training_args.log_completions, last_step=trainer.state.global_step,
                               generations_per_step=(training_args.gradient_accumulation_steps
                                                     / training_args.steps_per_generation)), end="", flush=True)


def train(script_args, training_args, model_args) -> None:
    """Run one HiR training job: `prepare_training`, then `run_training`. See those for the errors."""
    trainer, dataset = prepare_training(script_args, training_args, model_args)
    run_training(trainer, dataset, script_args, training_args)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are the user's to fix, printed as one line: bad flags/recipe values and data (ValueError,
    including `DatasetFormatError`), files (OSError), a malformed recipe (yaml.YAMLError), a missing judge key, a judge
    cache that cannot be read (`hir_trl.judge.JudgeCacheError`), a missing optional package."""
    import yaml

    from ..judge import JudgeError, MissingJudgeKeyError
    from ..models.smollm2 import MissingDependencyError

    return (ValueError, OSError, yaml.YAMLError, MissingJudgeKeyError, JudgeError, MissingDependencyError)


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
        except AlreadyFinished as exc:  # a re-run of a finished job: nothing to do, nothing touched
            print(f"hir-trl train: {exc}", file=sys.stderr)
            return 0
        except user_errors as exc:
            if debug:
                raise
            print(f"hir-trl train: error: {one_line(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("hir-trl train: interrupted before training started", file=sys.stderr)
            return 130
        from ..guards import NonFiniteTrainingError, RewardFunctionError
        from ..judge import JudgeError

        try:
            run_training(trainer, dataset, script_args, training_args)
        except TrainingInterrupted as exc:
            print(f"hir-trl train: {exc}", file=sys.stderr)
            return 130
        except Exception as exc:
            # judge_failure_policy: raise or a judge that cannot work; NaN/inf or a reward function's bad result;
            # a full disk while saving: stop, one line (nothing more is saved)
            full = disk_full(exc)
            if debug or not (full or isinstance(exc, (JudgeError, NonFiniteTrainingError, RewardFunctionError))):
                raise
            close_progress_bar(trainer)
            complete = _complete_checkpoints(training_args.output_dir)
            where = f"; the last complete checkpoint is {complete[-1]}" if complete else ""
            what = (f"no space left on device while saving to {training_args.output_dir} ({full}); free space or "
                    "choose another output_dir" if full else one_line(exc))
            print(f"hir-trl train: error: stopped at step {trainer.state.global_step}: {what}{where}",
                  file=sys.stderr)
            return 2
    return 0


def disk_full(exc: BaseException) -> str | None:
    """The first line of the error in ``exc``'s chain that says the disk is full (an `OSError` with ``ENOSPC``, or
    torch's and safetensors' own wording of it), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or any(
                mark in text for mark in ("No space left on device", "StorageFull", "Disk quota exceeded",
                                          "file write failed")):
            return (text.strip().splitlines() or [type(exc).__name__])[0][:200]
        exc = exc.__cause__ or exc.__context__
    return None


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
        from ..data.synth import main as synth_main

        return synth_main(rest)
    if command == "eval":
        from ..evaluation import main as eval_main

        return eval_main(rest)
    if command == "recipes":
        from .recipes import main as recipes_main

        return recipes_main(rest)
    if command == "env":
        from .env import main as env_main

        return env_main(rest)
    print(f"hir-trl: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2

