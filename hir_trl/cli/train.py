"""``hir-trl train``: the training command of the ``hir-trl`` command line (`hir_trl.cli.main`).

``hir-trl train --config recipe.yaml [--field value ...]`` trains with `HiRTrainer`. The recipe and the
command line take the fields of `HiRScriptArguments`, `HiRConfig` and TRL's `ModelConfig`, parsed by
TRL's `TrlParser` exactly as ``trl grpo`` does (an ``env:`` block in the YAML sets environment variables;
unknown keys fail; command-line values override the recipe).

A user error (bad data, a bad flag or recipe value, a missing judge key, a missing checkpoint) is printed as one
line, ``hir-trl train: error: ...``, with exit status 2; so is a judge that stops training (`hir_trl.judge.JudgeError`:
``judge_failure_policy: raise`` firing, or every request of a step failing with an error no retry can fix).
``--debug`` (or ``HIR_TRL_DEBUG=1``) shows the traceback instead.
``--accelerate_config NAME|FILE``, ``--num_processes N`` and the other options of ``accelerate launch`` start the
training under ``accelerate launch`` (`hir_trl.cli.launch`), as ``trl grpo`` does. Ctrl-C stops training with exit status 130 and names the last complete checkpoint to resume from.
So do a NaN/inf met in training or a reward function's bad result (`hir_trl.guards`) and a full disk while saving.

An ``output_dir`` holds one run, and the run holds it (`hir_trl.run_folder`; docs/scale-out.md "Resume and re-run"):
a second ``hir-trl train`` on it is refused; ``--resume_from_checkpoint`` on a run that already reached ``max_steps``
and saved all of its final model prints one line ("already finished") and exits 0 without touching it;
``--overwrite_output_dir`` deletes what the earlier run wrote and nothing this run reads; the two together are
refused; resuming from an earlier checkpoint moves the later line aside.
"""

from __future__ import annotations

import errno
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..errors import one_line
from ..run_folder import (  # the run-folder rules hir-trl train applies
    AlreadyFinished,
    check_finished,
    check_not_finished,
    check_output_dir,
    check_resume,
    check_resume_point,
    claim_run_folder,
    complete_final_save,
    last_checkpoint,
    mark_final_save,
    optimizer_restart_note,
    output_model_problem,
    paths_read,
    release_run_folder,
    set_aside_later_line,
    start_final_save,
    unwritable,
)
from .parser import UsageError, command_parser, parse_command, split_config_flag  # noqa: F401 - UsageError: public here too

#: Environment variable that makes ``hir-trl train`` show tracebacks of user errors (as ``--debug`` does).
DEBUG_ENV = "HIR_TRL_DEBUG"

#: Warnings a user cannot act on: TRL 1.16 reads ``gradient_checkpointing`` (and its default is set), which
#: transformers 5 renamed ``activation_checkpointing``; it warns at config creation and at every generation, and
#: TRL's ``disable_gradient_checkpointing`` (the trainer's no-grad passes) calls the deprecated
#: ``gradient_checkpointing_disable`` / ``_enable``.
_UNACTIONABLE_WARNINGS = (r"`(is_)?gradient_checkpointing(_disable|_enable)?` is deprecated and will be removed in v6",)


class TrainingInterrupted(Exception):
    """Training stopped by Ctrl-C / SIGINT; the message names the last complete checkpoint."""


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
#: The trackers hir-trl's ``[trackers]`` extra installs (pyproject.toml).
TRACKERS_EXTRA = ("wandb", "trackio")


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
        extra = [name for name in missing if name in TRACKERS_EXTRA]
        others = " ".join(TRACKER_PACKAGES.get(name, name) for name in missing if name not in TRACKERS_EXTRA)
        install = " and ".join((["pip install 'hir-trl[trackers]'"] if extra else [])
                               + ([f"pip install {others}"] if others else []))
        raise ValueError(f"report_to: {', '.join(missing)} is not installed: {install} (and log in), "
                         "or pass --report_to none")


def check_reward_model_path(path: str, field: str) -> None:
    """Refuse a reward model given as a local folder (``/``, ``./``, ``~``, more than one ``/``) that does not exist.

    Raises:
        FileNotFoundError: one line naming the field, the folder and what it takes.
    """
    from ..data.loading import _looks_local

    if Path(path).expanduser().exists() or not _looks_local(path):
        return
    raise FileNotFoundError(f"{field}: {path}: no such reward model folder (give a folder holding a sequence-"
                            "classification model and its tokenizer, or a Hub id such as org/reward-model)")


def prepare_training(script_args, training_args, model_args, recipe: str | None = None):
    """Everything before the first step: check the resume point, load the data, (optionally) build the tiny
    model, and build the `HiRTrainer` (which loads the model and builds the judge). Every user error surfaces here.

    Returns:
        ``(trainer, dataset)``.

    Raises:
        ValueError: no ``dataset_name`` or ``model_name_or_path``, a ``report_to`` tracker that is not installed
            (`check_trackers`), a ``resume_from_checkpoint`` that is no complete checkpoint, or an
            ``output_dir`` holding another run (`check_output_dir`); a ``reward_funcs`` entry that does not
            import (`hir_trl.trainer_setup.named_reward_functions`), a ``chat_template`` that does not read; see also
            `hir_trl.data.loading.load_script_datasets` (the training and evaluation data, `DatasetFormatError`)
            and `HiRTrainer`.
        hir_trl.judge.MissingJudgeKeyError: the data has soft constraints and the judge's key variable is unset.
    """
    from trl import get_peft_config, get_quantization_config

    from ..card import MIXTURE_SEPARATOR
    from ..data.loading import load_script_datasets
    from ..models.adapter_base import planned_base
    from ..trainer import HiRTrainer
    from ..trainer_setup import extra_rewards_problem, named_reward_functions
    from ..verifiers import import_verifier_modules

    if not script_args.dataset_name and not script_args.datasets:
        raise ValueError("dataset_name is required (or a datasets mixture): give a recipe (hir-trl train --config "
                         "recipe.yaml, e.g. recipes/tiny/hir/config_cpu.yaml) or --dataset_name (a Hub dataset id or "
                         "a local .jsonl/.json/.parquet file or folder) and --model_name_or_path")
    if not model_args.model_name_or_path:
        raise ValueError("model_name_or_path is required: a Hub model id or a local model folder (with "
                         "--build_model tiny, the folder the tiny model is built in)")
    if Path(training_args.output_dir).is_file():
        check_output_dir(training_args.output_dir, None, False)  # a file: one line, before resume looks inside
    problem = output_model_problem(training_args.output_dir, model_args.model_name_or_path)
    if problem is not None:  # the model trained from, or another model: before the folder is claimed (written)
        raise ValueError(problem)
    check_trackers(training_args.report_to)
    template = None
    if script_args.chat_template is not None:  # read and parsed before anything is written
        from ..data.chat import chat_template_text

        template = chat_template_text(script_args.chat_template)
    writer = training_args.should_save  # the process that writes output_dir (one per node with save_on_each_node)
    claim_run_folder(training_args.output_dir, writer)  # the run holds its folder until `release_run_folder`
    # transformers takes a string as a path: "true" from the command line becomes the latest checkpoint's folder
    requested = training_args.resume_from_checkpoint
    if script_args.overwrite_output_dir and requested not in (None, False, "", "false", "False"):
        check_output_dir(training_args.output_dir, str(requested), True)  # refused together, before any lookup
    training_args.resume_from_checkpoint = check_resume(requested, training_args.output_dir)
    # true and no usable checkpoint (interrupted before its first one): the run starts again, its earlier start aside
    from_start = requested in (True, "true", "True") and training_args.resume_from_checkpoint is None
    read = paths_read(script_args, training_args, model_args, recipe=recipe)  # overwrite deletes none of them
    if from_start:
        check_not_finished(training_args.output_dir)
    else:
        check_output_dir(training_args.output_dir, training_args.resume_from_checkpoint,
                         script_args.overwrite_output_dir, keep=read, writer=writer)
    unsaved = check_finished(training_args.resume_from_checkpoint, requested, training_args.output_dir,
                             training_args.max_steps)
    if unsaved is not None:  # at max_steps, the final save incomplete: write it, train nothing, exit 0
        raise AlreadyFinished(complete_final_save(training_args.resume_from_checkpoint, training_args.output_dir,
                                                  unsaved, writer))
    lora = (dict(r=model_args.lora_r, lora_alpha=model_args.lora_alpha, target_modules=model_args.lora_target_modules,
                 base=planned_base(model_args.model_name_or_path, script_args.build_model),
                 model=model_args.model_name_or_path) if model_args.use_peft
            else None)  # base: the checkpoint's exact base, _hir_adapter_base.json
    check_resume_point(training_args.resume_from_checkpoint, training_args, lora)
    moved_to, moved = set_aside_later_line(training_args.resume_from_checkpoint, training_args.output_dir,
                                           keep=list(read.values()), writer=writer, from_start=from_start)
    if moved and writer:  # one line per folder moved in
        shown = ", ".join(moved if len(moved) <= 4 else [*moved[:2], "...", *moved[-1:]])
        start = (f"no usable checkpoint in {training_args.output_dir}, starting from step 0" if from_start else
                 f"resuming from {training_args.resume_from_checkpoint}")
        print(f"hir-trl train: {start}: moved the later line aside to {moved_to} ({shown}), so that "
              "--resume_from_checkpoint true continues this one", file=sys.stderr)
    note = optimizer_restart_note(training_args.resume_from_checkpoint)
    if note is not None:
        print(f"hir-trl train: warning: {note}", file=sys.stderr)
    import_verifier_modules(script_args.verifier_modules)  # their register_verifier calls, before the data loads
    reward_funcs = named_reward_functions(script_args.reward_funcs)  # trl grpo's names, dotted paths, models
    if script_args.reward_model_name_or_path:  # first of the extra rewards, as trl grpo puts it
        reward_funcs.insert(0, script_args.reward_model_name_or_path)
    for model in (f for f in reward_funcs if isinstance(f, str)):  # a reward model's folder, before anything loads
        check_reward_model_path(model, "reward_model_name_or_path" if model == script_args.reward_model_name_or_path
                                else "reward_funcs")
    dataset, eval_dataset = load_script_datasets(script_args, evaluate=training_args.eval_strategy != "no",
                                                 seed=training_args.seed)
    problem = extra_rewards_problem(reward_funcs, dataset.column_names, training_args.reward_weights)
    if problem is not None:  # before the model is built or loaded
        raise ValueError(problem)
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

    processing_class = None
    if template is not None:  # the tokenizer GRPOTrainer would load, with the template set
        from transformers import AutoProcessor

        processing_class = AutoProcessor.from_pretrained(
            model_args.model_name_or_path, revision=model_args.model_revision, truncation_side="left",
            padding_side="left", trust_remote_code=training_args.trust_remote_code)
        processing_class.chat_template = template
    dataset_name = (str(script_args.dataset_name) if not script_args.datasets
                    else MIXTURE_SEPARATOR.join(str(d.data_files or d.path) for d in script_args.datasets))
    trainer = HiRTrainer(model_args.model_name_or_path, reward_funcs, training_args, dataset, eval_dataset,
                         processing_class, peft_config=get_peft_config(model_args),
                         quantization_config=get_quantization_config(model_args), dataset_name=dataset_name)
    if script_args.ignore_bias_buffers:  # as TRL's scripts: DDP skips boolean buffers (an LM's masks)
        import torch

        trainer.model._ddp_params_and_buffers_to_ignore = [
            name for name, buffer in trainer.model.named_buffers() if buffer.dtype == torch.bool]
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
        hir_trl.guards.NothingTrainedError: every optimizer step had a gradient of exactly zero
            (`hir_trl.guards.ZeroGradientGuard`); nothing more is saved.
    """
    from .summary import training_summary

    try:
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    except KeyboardInterrupt:
        close_progress_bar(trainer)
        raise TrainingInterrupted(f"interrupted at step {trainer.state.global_step}; "
                                  f"{_resume_hint(training_args)}") from None
    guard = getattr(trainer, "zero_gradient_guard", None)
    if guard is not None:
        guard.check()  # every step's gradient was zero: no final model, exit 2 (NothingTrainedError)
    start_final_save(training_args.output_dir, trainer.args.should_save)  # the final model counts once marked
    try:
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json (log history with the hir/* metrics) beside the model
        trainer.create_model_card()  # also when push_to_hub is off (rank 0 writes it)
    except KeyboardInterrupt:
        raise TrainingInterrupted(f"interrupted while saving the final model at step {trainer.state.global_step}: "
                                  f"{training_args.output_dir} holds no whole final model; "
                                  f"{_resume_hint(training_args)}") from None
    if trainer.args.should_save:
        mark_final_save(training_args.output_dir, trainer.state.global_step, trainer.state.max_steps)
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=trainer.dataset_name)
    trainer.end()  # HiRTrainer.end: trackers, process group, and gloo's teardown pause
    if trainer.accelerator.is_main_process:
        print(training_summary(training_args.output_dir, trainer.state.log_history, dataset,
                               log_completions=training_args.log_completions, last_step=trainer.state.global_step,
                               generations_per_step=(training_args.gradient_accumulation_steps
                                                     / training_args.steps_per_generation),
                               num_replays=training_args.num_replays), end="", flush=True)


def _resume_hint(training_args) -> str:
    """Where to resume after an interruption: the last complete checkpoint of this run's line (`last_checkpoint`)."""
    last = last_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)
    return (f"the last complete checkpoint is {last}; resume with --resume_from_checkpoint {last}" if last else
            "no checkpoint was saved yet")


def train(script_args, training_args, model_args) -> None:
    """Run one HiR training job: `prepare_training`, then `run_training`, holding ``output_dir`` throughout. See
    those for the errors."""
    try:
        trainer, dataset = prepare_training(script_args, training_args, model_args)
        run_training(trainer, dataset, script_args, training_args)
    finally:
        release_run_folder(training_args.output_dir)


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
    from .launch import launch_training, split_launch_args, train_options

    try:  # accelerate launch's options (--accelerate_config, --num_processes ...): launch, as trl grpo does
        launch_args, argv = split_launch_args(argv, train_options())
    except ValueError as exc:
        print(f"hir-trl train: error: {one_line(exc)}", file=sys.stderr)
        return 2
    if launch_args:
        return launch_training(launch_args, argv)
    argv = [a for a in argv if a != "--debug"]
    with warnings.catch_warnings():
        for pattern in _UNACTIONABLE_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern, category=FutureWarning)
        user_errors = _user_errors()
        try:  # user errors surface before the first step; later errors keep their traceback
            script_args, training_args, model_args = parse_train_args(argv)
            trainer, dataset = prepare_training(script_args, training_args, model_args, recipe=_recipe_path(argv))
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
        from ..guards import NonFiniteTrainingError, NothingTrainedError, RewardFunctionError
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
            denied = None if full else unwritable(exc)  # the folder turned read-only
            if debug or not (full or denied or isinstance(exc, (JudgeError, NonFiniteTrainingError,
                                                                RewardFunctionError, NothingTrainedError))):
                raise
            close_progress_bar(trainer)
            last = last_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)
            where = f"; the last complete checkpoint is {last}" if last else ""
            what = (f"no space left on device while saving to {training_args.output_dir} ({full}); free space or "
                    "choose another output_dir" if full else
                    f"cannot write to {training_args.output_dir} ({denied}): make it writable (or choose another "
                    "output_dir) and resume" if denied else one_line(exc))
            print(f"hir-trl train: error: stopped at step {trainer.state.global_step}: {what}{where}",
                  file=sys.stderr)
            return 2
    return 0


def _recipe_path(argv: Sequence[str]) -> str | None:
    """The recipe of ``--config FILE`` or ``--config=FILE``, or None."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


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
    """``hir-trl train``: `run_train`, then let go of the ``output_dir`` this process held
    (`hir_trl.run_folder.claim_run_folder`); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run_train(argv)
    finally:
        release_run_folder()
