"""One-command launch, as ``trl grpo`` does it: ``hir-trl train --accelerate_config NAME|FILE --num_processes N ...``
starts ``accelerate launch`` on ``python -m hir_trl.cli train ...``.

The words of the command line that ``hir-trl train`` does not take and ``accelerate launch`` does (its
``--num_processes``, ``--config_file``, ``--main_process_port``, ``--mixed_precision`` ... with their values) are the
launcher's; ``--accelerate_config`` names a shipped accelerate config (``recipes/accelerate_configs/NAME.yaml``:
``multi_cpu``, ``zero3``, ``fsdp2`` ...) or a file, and becomes ``--config_file`` (TRL's
``trl/cli/accelerate_config.py``, with hir-trl's configs in place of TRL's). A training flag that accelerate also
knows (``--gradient_accumulation_steps``, ``--debug``) stays the training's, as in ``trl grpo``. ``hir-trl plan``
takes the same command line (`hir_trl.cli.plan`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

#: The flag that names an accelerate config by its shipped name or a file (``trl grpo``'s).
ACCELERATE_CONFIG_FLAG = "--accelerate_config"
#: ``accelerate launch`` options that are not the launcher's to take from ``hir-trl train``: the script is always
#: ``-m hir_trl.cli``, and ``--debug`` is hir-trl's own.
_NOT_LAUNCHER = {"-h", "--help", "-m", "--module", "--no_python", "--no-python", "--debug"}
#: Environment variables that say the process already runs under a launcher (torchrun, accelerate launch).
_LAUNCHED_ENV = ("LOCAL_RANK", "HIR_TRL_LAUNCHED")


def train_options() -> set[str]:
    """Every option string of ``hir-trl train`` (its parser's flags, ``--config`` and ``--debug``)."""
    from trl import ModelConfig

    from ..configs import HiRConfig, HiRScriptArguments
    from .parser import command_parser

    parser = command_parser((HiRScriptArguments, HiRConfig, ModelConfig), "hir-trl train")
    return {*parser._option_string_actions, "--config", "--debug"}


def shipped_accelerate_configs() -> dict[str, Path]:
    """The accelerate configs shipped with hir-trl (``recipes/accelerate_configs``), name (the file's stem) to
    path."""
    from .recipes import recipes_root

    folder = recipes_root() / "accelerate_configs"
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def accelerate_config_path(value: str) -> Path:
    """The accelerate config file ``--accelerate_config`` names: a file, else a shipped config's name (with or
    without ``.yaml``).

    Raises:
        ValueError: one line naming the value and the shipped names.
    """
    if Path(value).is_file():
        return Path(value)
    shipped = shipped_accelerate_configs()
    name = value[:-len(".yaml")] if value.endswith(".yaml") else value
    if name in shipped:
        return shipped[name]
    raise ValueError(f"{ACCELERATE_CONFIG_FLAG} {value}: no such file, nor an accelerate config shipped with hir-trl "
                     f"({', '.join(shipped)})")


def launcher_options(taken: Iterable[str] = ()) -> dict[str, bool]:
    """The options of ``accelerate launch`` (`accelerate.commands.launch.launch_command_parser`) that ``hir-trl
    train`` hands to it, each with whether it takes a value; ``taken`` (the training parser's options) are left
    out, so that a training flag stays the training's."""
    from accelerate.commands.launch import launch_command_parser

    taken = set(taken) | _NOT_LAUNCHER
    options = {}
    for action in launch_command_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--") and option not in taken:
                options[option] = action.nargs != 0
    return options


def split_launch_args(argv: Sequence[str], taken: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split a ``hir-trl train`` command line into the launcher's words and the training's.

    Args:
        argv: the words after ``hir-trl train``.
        taken: the options of the training parser (which win over accelerate's of the same name).

    Returns:
        ``(launch_args, train_argv)``; ``launch_args`` is empty when the command names no launcher option, and
        ``--accelerate_config X`` in it is ``--config_file <path>`` (first, as TRL puts it).

    Raises:
        ValueError: a launcher option without its value, or an ``--accelerate_config`` that names nothing.
    """
    argv = list(argv)
    taken = set(taken)
    if not any(word.split("=", 1)[0].startswith("--") and word.split("=", 1)[0] not in taken for word in argv):
        return [], argv  # nothing that could be the launcher's: no need to read accelerate's parser
    options = {**launcher_options(taken), ACCELERATE_CONFIG_FLAG: True}
    launch: list[str] = []
    train: list[str] = []
    config: Path | None = None
    i = 0
    while i < len(argv):
        word = argv[i]
        name, has_value, value = word.partition("=")
        if name not in options or (name in taken and name != ACCELERATE_CONFIG_FLAG):
            train.append(word)
            i += 1
            continue
        if options[name] and not has_value:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise ValueError(f"{name} needs a value (an accelerate launch option)")
            value = argv[i + 1]
            i += 1
        i += 1
        if name == ACCELERATE_CONFIG_FLAG:
            config = accelerate_config_path(value)
        elif options[name]:
            launch.extend([name, value])
        else:
            launch.append(word)
    if config is not None:
        launch = ["--config_file", str(config), *launch, *_deepspeed_file_args(config, launch)]
    return launch, train


def _deepspeed_file_args(config: Path, launch: Sequence[str]) -> list[str]:
    """``--deepspeed_config_file <path>`` for a shipped config whose DeepSpeed file (``recipes/deepspeed/...``,
    relative to a clone's root) is not there from the current directory but is shipped; else nothing."""
    if any(word.split("=", 1)[0] in ("--deepspeed_config_file", "--deepspeed-config-file") for word in launch):
        return []
    import yaml

    from .recipes import RECIPES_DIR, recipes_root

    try:
        text = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []  # accelerate reads it and says what is wrong
    named = (text.get("deepspeed_config") or {}).get("deepspeed_config_file") if isinstance(text, dict) else None
    if not named or Path(named).is_absolute() or Path(named).exists():
        return []
    parts = Path(named).parts
    shipped = recipes_root().joinpath(*parts[1:]) if parts[:1] == (RECIPES_DIR,) else None
    return ["--deepspeed_config_file", str(shipped)] if shipped is not None and shipped.is_file() else []


def launched() -> str | None:
    """The variable that says this process already runs under a launcher (``LOCAL_RANK`` of torchrun and
    accelerate's multi-process launch; ``HIR_TRL_LAUNCHED``, set by `launch_training` for its processes), as ``NAME=value``, or None."""
    for name in _LAUNCHED_ENV:
        if name in os.environ:
            return f"{name}={os.environ[name]}"
    return None


def launch_training(launch_args: Sequence[str], train_argv: Sequence[str], command: str = "train") -> int:
    """Run ``accelerate launch <launch_args> -m hir_trl.cli <command> <train_argv>`` in this process (accelerate's
    `launch_command`, which starts the processes and waits for them), as ``trl grpo`` launches its script.

    Returns:
        0 when every process ended with 0, else the exit status of the first that did not (its own error line is
        already printed by it); 2 for launcher options accelerate refuses (one line).
    """
    from accelerate.commands.launch import launch_command, launch_command_parser

    under = launched()
    if under is not None:
        print(f"hir-trl {command}: error: {' '.join(launch_args)}: launcher options, but this process already runs "
              f"under a launcher ({under}); give them to that launcher, or start hir-trl {command} on its own",
              file=sys.stderr)
        return 2

    parser = launch_command_parser()
    failure: list[str] = []

    def refuse(message: str) -> None:
        failure.append(message)
        raise SystemExit(2)

    parser.error = refuse  # accelerate's parser would print its whole usage
    try:
        args = parser.parse_args([*launch_args, "--module", "hir_trl.cli", command, *train_argv])
    except SystemExit:
        print(f"hir-trl {command}: error: accelerate launch: {failure[0] if failure else 'bad options'}",
              file=sys.stderr)
        return 2
    print(f"hir-trl {command}: accelerate launch {' '.join(launch_args)} -m hir_trl.cli {command} "
          f"{' '.join(train_argv)}", file=sys.stderr, flush=True)
    os.environ["HIR_TRL_LAUNCHED"] = "1"  # the processes it starts take no launcher options again
    try:
        launch_command(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a process that failed: its own error is printed above; keep its exit status
        return _exit_status(exc)
    return 0


def _exit_status(exc: BaseException) -> int:
    """The exit status of the first failed process in accelerate's error: ``CalledProcessError.returncode`` (one
    process) or the first of torch elastic's ``ChildFailedError.failures`` (several); 1 when none is found, and the
    error is raised again when it is neither."""
    import subprocess

    if isinstance(exc, subprocess.CalledProcessError):
        return exc.returncode or 1
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        first = failures[min(failures)]
        status = getattr(first, "exitcode", 1)
        return status if isinstance(status, int) and status > 0 else 1
    raise exc


__all__ = ["ACCELERATE_CONFIG_FLAG", "accelerate_config_path", "launch_training", "launched", "launcher_options",
           "shipped_accelerate_configs", "split_launch_args", "train_options"]
