"""The ``hir-trl`` command (`main`): ``train``, ``synth``, ``eval``, ``recipes``, ``env`` and ``plan``, one module each
(`hir_trl.cli.train`, ...), run through one table (`hir_trl.cli.main.COMMANDS`); with its run-folder rules, console
output and end-of-run summary. ``python -m hir_trl.cli`` runs it too (as under ``accelerate launch``).
"""

from .main import main

__all__ = ["main"]
