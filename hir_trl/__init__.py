"""hir-trl: Hindsight instruction Replay (HiR) as a TRL trainer."""

from .configs import HiRConfig, HiRScriptArguments
from .data import DatasetFormatError, load_hir_dataset, load_rows
from .rewards import ConstraintReward, VerdictMatrix
from .trainer import HiRTrainer

__version__ = "0.1.0"

__all__ = [
    "ConstraintReward",
    "DatasetFormatError",
    "HiRConfig",
    "HiRScriptArguments",
    "HiRTrainer",
    "VerdictMatrix",
    "load_hir_dataset",
    "load_rows",
]
