"""hir-trl: Hindsight instruction Replay (HiR) as a TRL trainer."""

from .configs import HiRConfig, HiRScriptArguments
from .data import DatasetFormatError, load_hir_dataset, load_rows
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
    "VerdictMatrix",
    "build_judge",
    "load_hir_dataset",
    "load_rows",
    "register_verifier",
]
