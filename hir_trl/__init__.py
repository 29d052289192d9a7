"""hir-trl: Hindsight instruction Replay (HiR) as a TRL trainer."""

import os as _os
import sys as _sys


def _bug_report_command() -> bool:
    """Whether this process is ``hir-trl env`` (the console script, or ``python -m hir_trl.cli env``): the report a
    bug needs runs under any TRL, with none, and without the extras, so the TRL check and the trainer's imports are
    left out of it."""
    argv = list(getattr(_sys, "orig_argv", ()) or _sys.argv)
    for i, arg in enumerate(argv):
        script = _os.path.basename(arg) == "hir-trl" or (arg == "hir_trl.cli" and i > 0 and argv[i - 1] == "-m")
        if script:
            return argv[i + 1:i + 2] == ["env"]
    return False


if not _bug_report_command():
    from .versions import UnsupportedTRLError, check_trl

    try:  # before anything imports TRL: an unsupported TRL gets one line, not an ImportError deep inside hir-trl
        check_trl()
    except UnsupportedTRLError as _exc:
        if _os.path.basename(_sys.argv[0]) == "hir-trl":  # the console script: one line, exit status 2, no traceback
            print(_exc, file=_sys.stderr)
            raise SystemExit(2) from None
        raise

    from .configs import HiRConfig, HiRScriptArguments
    from .data.loading import DatasetFormatError, load_hir_dataset, load_rows
    from .judge import JudgeError, LiteLLMJudge, build_judge
    from .rewards import ConstraintReward, VerdictMatrix
    from .trainer import HiRTrainer
    from .verifiers import register_verifier

__version__ = "0.2.0"

__all__ = [
    "ConstraintReward",
    "DatasetFormatError",
    "HiRConfig",
    "HiRScriptArguments",
    "HiRTrainer",
    "JudgeError",
    "LiteLLMJudge",
    "UnsupportedTRLError",
    "VerdictMatrix",
    "build_judge",
    "load_hir_dataset",
    "load_rows",
    "register_verifier",
]
