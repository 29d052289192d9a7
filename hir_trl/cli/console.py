"""One readable console line per logged training step, in place of the dict of every metric.

`StepLineCallback` is transformers' `ProgressCallback` (the same tqdm bar) whose ``on_log`` prints, for a training
step, one line such as::

    step 3/6  ILA 16.7%  CLA 54.2%  replays 4/4  41.2 s

instead of the 50-key dict. Every metric still reaches ``trainer_state.json`` (``log_history``) and the trackers
(``report_to``): only the console changes. Logs that are no training step (evaluation, the end-of-training totals)
keep `ProgressCallback`'s own rendering.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from transformers import ProgressCallback


def _pct(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}%"


def step_line(logs: Mapping[str, Any], step: int, max_steps: int, seconds: float | None,
              slots: int | None = None) -> str:
    """The console line of one logged step.

    Args:
        logs: the step's logged metrics (TRL's GRPO metrics and HiR's ``hir/*``): ``reward/ila`` and ``reward/cla``
            (fractions of the sampled completions), ``hir/replayed_rows`` (hindsight replays made, per generation
            batch) and ``hir/replayed_fraction`` (replays / replay slots).
        step: the optimizer step (``state.global_step``); max_steps: the run's last step.
        seconds: wall seconds since the previous logged step (None: not known).
        slots: replay slots per generation batch (``num_replays`` x groups), used when ``hir/replayed_fraction`` is
            0 or missing.

    Returns:
        ``"step 3/6  ILA 16.7%  CLA 54.2%  replays 4/4  41.2 s"``; a metric that was not logged shows as ``-``,
        the replays as made/slots (slots: ``replayed_rows / replayed_fraction``, else ``slots``), else as made.
    """
    parts = [f"step {step}/{max_steps}", f"ILA {_pct(logs.get('reward/ila'))}", f"CLA {_pct(logs.get('reward/cla'))}"]
    made, fraction = logs.get("hir/replayed_rows"), logs.get("hir/replayed_fraction")
    if made is not None:
        slots = made / fraction if fraction else slots
        parts.append(f"replays {made:g}/{slots:g}" if slots else f"replays {made:g}")
    if seconds is not None:
        parts.append(f"{seconds:.1f} s")
    return "  ".join(parts)


class StepLineCallback(ProgressCallback):
    """`ProgressCallback` with one line per logged training step (`step_line`) instead of the metrics dict.

    Overrides ``ProgressCallback.on_log`` (transformers): a log with ``reward/ila`` or ``hir/replayed_rows`` is a
    training step and prints `step_line`; any other log (evaluation, training totals) is passed to
    ``ProgressCallback.on_log`` unchanged. Seconds are wall time from the first ``on_step_begin`` after the previous
    logged step to this log (generation, loss, backward and optimizer; not a checkpoint saved after the log).
    """

    def __init__(self, max_str_len: int = 100) -> None:
        super().__init__(max_str_len)
        self._since: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self._since is None:
            self._since = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward/ila" not in logs and "hir/replayed_rows" not in logs:
            return super().on_log(args, state, control, logs=logs, **kwargs)
        seconds = None if self._since is None else time.perf_counter() - self._since
        self._since = None
        if state.is_world_process_zero and self.training_bar is not None:
            self.training_bar.write(step_line(logs, state.global_step, state.max_steps, seconds, _slots(args)))


def _slots(args) -> int | None:
    """Replay slots per generation batch: ``num_replays`` x the groups of one generation batch (None: not HiR)."""
    try:
        rows = args.per_device_train_batch_size * args.steps_per_generation * args.world_size
        return args.num_replays * (rows // args.num_generations)
    except (AttributeError, TypeError, ZeroDivisionError):
        return None


def use_step_lines(trainer) -> None:
    """Swap ``trainer``'s `ProgressCallback` (present unless ``disable_tqdm``) for a `StepLineCallback`."""
    if any(type(c) is ProgressCallback for c in trainer.callback_handler.callbacks):
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(StepLineCallback())
