"""``hir-trl`` as tests/recipes/recipes_run.py launches it: with ``HIR_RECIPES_KILL_AT_SAVE=N`` set, the main process
SIGKILLs itself (no clean-up, as a node failure or ``scancel`` does) while it saves ``checkpoint-N``: after the model
weights, before the optimizer and the trainer state (`transformers.Trainer._save_checkpoint`'s order). With
``HIR_RECIPES_ZERO_GRADIENT=report`` (tests/recipes/recipes_cpu_changes.yaml's environment), a run whose every gradient
was zero (a random tiny model scoring its completions alike) prints the zero-gradient guard's line instead of stopping
with exit 2."""

from __future__ import annotations

import os
import signal
import sys


def _kill_during_save(step: int) -> None:
    from transformers import Trainer

    save = Trainer._save_optimizer_and_scheduler

    def killing(self, output_dir):
        if self.state.global_step == step and self.args.process_index == 0:
            sys.stderr.write(f"recipes_entry: SIGKILL while saving {output_dir}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return save(self, output_dir)

    Trainer._save_optimizer_and_scheduler = killing


def _report_zero_gradient() -> None:
    from hir_trl.guards import ZeroGradientGuard

    def report(self) -> None:
        if self.problem is not None:
            sys.stderr.write(f"recipes_entry: zero-gradient guard (reported, not fatal): {self.problem}\n")

    ZeroGradientGuard.check = report


if __name__ == "__main__":
    if os.environ.get("HIR_RECIPES_ZERO_GRADIENT") == "report":
        _report_zero_gradient()
    if os.environ.get("HIR_RECIPES_KILL_AT_SAVE"):
        _kill_during_save(int(os.environ["HIR_RECIPES_KILL_AT_SAVE"]))
    from hir_trl.cli.main import main

    sys.exit(main(sys.argv[1:]))
