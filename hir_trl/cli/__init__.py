"""The ``hir-trl`` command (`main`): ``train``, ``synth``, ``eval``, ``recipes`` and ``env``, with its run-folder
rules, console output and end-of-run summary. ``python -m hir_trl.cli`` runs it too (as under ``accelerate launch``).
"""

from .main import main

__all__ = ["main"]
