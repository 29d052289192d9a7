"""Per-step cost instrumentation of a `HiRTrainer` from the outside (no hook in the trainer is needed).

`StepProfiler.attach(trainer)` wraps bound methods on the trainer instance with timers that keep *self* time
(a region's time minus the time of timed regions nested in it), so every second of a step lands in exactly one
bucket:

================== ===============================================================================================
bucket             what it times
================== ===============================================================================================
``generation``     ``_generate_single_turn``: sampling (HF ``generate`` or vLLM), supplementary samples included
``verification``   ``_calculate_rewards``: `ConstraintReward` (each constraint checked once) and TRL's reward code
``nograd_pass``    ``_get_per_token_logps_and_entropies`` under ``torch.no_grad``: HiR's entropy / old-log-prob pass
                   (``TRLPasses.policy_pass``), TRL's own old-log-prob pass when it runs one, reference passes
``selection``      ``hir_trl.step.algorithm.complete_groups`` self time: Algorithm 1 selection, the q' rewrite and re-tokenisation,
                   batch assembly, HiR's advantages and logging (HiR only)
``trl_scoring``    ``_generate_and_score_completions`` self time: TRL's prompt tokenisation, decoding, padding,
                   advantages, metrics (every method)
``optimizer``      the rest of the optimizer step: loss forward with grad, backward, clipping, ``optimizer.step``
================== ===============================================================================================

``step`` is the wall time from ``on_step_begin`` to ``on_step_end`` (TrainerCallback), i.e. one optimizer step
including generation; held-out evaluation runs after it and is not counted. Generated tokens are counted from the
completion ids ``_generate_single_turn`` returns (EOS included, as ``completion_mask`` counts them). Peak memory:
on CUDA ``torch.cuda.max_memory_allocated`` per step (stats reset at each step begin); on CPU the process's peak
resident set size during the step. On Linux that is the kernel's own high-water mark (``VmHWM`` in
``/proc/self/status``, reset by writing ``5`` to ``/proc/self/clear_refs`` at each step begin and bucket switch), so
a short-lived spike is never missed; where ``clear_refs`` cannot be written a thread samples the RSS every 5 ms
instead, which misses spikes shorter than its period (``peak_memory_source`` says which: ``hwm`` or ``sampled``).
Either includes the ~0.6 GiB of Python, torch and transformers, and memory glibc keeps after frees, so only
differences between methods are telling. On CPU the peak of each bucket is kept too (``peak_memory_mb_<bucket>``),
which says which phase holds the step's peak; ``generate_calls`` counts the decoding rounds of the step.
"""

from __future__ import annotations

import resource
import threading
import time
from collections import defaultdict
from typing import Any

import torch
from transformers import TrainerCallback

BUCKETS = ("generation", "verification", "nograd_pass", "selection", "trl_scoring", "optimizer")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def _hwm_bytes() -> int:
    """The kernel's peak resident set size of this process since the last reset (``VmHWM``), in bytes."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("/proc/self/status has no VmHWM line")


def _reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current RSS; False where the kernel does not allow it (not Linux, no procfs)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        _hwm_bytes()
    except OSError:
        return False
    return True


class _RssSampler:
    """Peak RSS over an interval, overall and per bucket: the kernel's high-water mark where it can be reset,
    else sampled by a daemon thread."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread: threading.Thread | None = None
        self.label = "optimizer"  # the bucket running now (set by StepProfiler)
        self.peaks: dict[str, int] = defaultdict(int)
        self.exact = False  # True while the kernel's high-water mark is used
        self._lifetime = 0  # the process's peak across resets of the high-water mark

    def _charge(self, rss: int) -> None:
        self.peak = max(self.peak, rss)
        self.peaks[self.label] = max(self.peaks[self.label], rss)

    def _reset(self) -> bool:
        """Fold the high-water mark into the process's peak, then reset it (see `_reset_hwm`)."""
        try:
            self._lifetime = max(self._lifetime, _hwm_bytes())
        except OSError:
            return False
        return _reset_hwm()

    def process_peak(self) -> int:
        """The process's peak RSS in bytes since it started: ``ru_maxrss`` covers the time since the last reset of
        the high-water mark, and the peaks folded in at each reset cover the time before."""
        return max(self._lifetime, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    def take(self) -> int:
        """The high-water mark since the last reset, in bytes, charged to the current bucket; then reset it.
        Only with ``exact``."""
        hwm = _hwm_bytes()
        self._charge(hwm)
        self._reset()
        return hwm

    def mark(self, label: str) -> None:
        """Switch the bucket the next memory is charged to."""
        if self.exact:
            self.take()
        else:
            self._charge(_rss_bytes())
        self.label = label
        self.peaks[label] = max(self.peaks[label], _rss_bytes())

    def start(self) -> None:
        self.peak = _rss_bytes()
        self.peaks = defaultdict(int)
        self.exact = self._reset()
        if self.exact:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._charge(_rss_bytes())

    def stop(self) -> int:
        if self.exact:
            self._charge(_hwm_bytes())
            return self.peak
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._charge(_rss_bytes())
        return self.peak


class StepProfiler(TrainerCallback):
    """Times the parts of every optimizer step and counts generated tokens; see the module docstring.

    Attributes:
        steps: one dict per optimizer step: ``step``, ``step_seconds``, each bucket in `BUCKETS` (seconds),
            ``generated_tokens``, ``generated_sequences``, ``generate_calls``, ``peak_memory_mb`` (with, on CPU,
            ``peak_memory_mb_<bucket>`` and ``peak_memory_source``), and ``micro_batches``: per micro-batch of the
            optimizer phase its ``rows``, padded ``prompt_tokens`` and ``completion_tokens``, ``longest_completion``
            and, with the kernel's high-water mark, its ``peak_memory_mb``.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.cuda = device.startswith("cuda")
        self.steps: list[dict[str, Any]] = []
        self._stack: list[list[float]] = []
        self._current: dict[str, float] = defaultdict(float)
        self._step_start = 0.0
        self._rss = _RssSampler()
        self._shape: dict[str, int] = {}
        self._micro_batches: list[dict[str, Any]] = []

    # ---------------------------------------------------------------- wrapping
    def attach(self, trainer) -> StepProfiler:
        self._wrap(trainer, "_generate_single_turn", lambda *a, **k: "generation", count=True)
        self._wrap(trainer, "_calculate_rewards", lambda *a, **k: "verification")
        self._wrap(trainer, "_get_per_token_logps_and_entropies",
                   lambda *a, **k: None if torch.is_grad_enabled() else "nograd_pass")
        self._wrap(trainer, "_generate_and_score_completions", lambda *a, **k: "trl_scoring")
        if hasattr(trainer, "hir_passes"):  # HiR's step is a module function, `hir_trl.step.algorithm.complete_groups`
            import hir_trl.step.algorithm as hir_step

            original = getattr(hir_step.complete_groups, "__wrapped__", hir_step.complete_groups)
            hir_step.complete_groups = original  # a later profiler's timer replaces an earlier one's
            self._wrap(hir_step, "complete_groups", lambda *a, **k: "selection")
            hir_step.complete_groups.__wrapped__ = original
        self._wrap_micro_batches(trainer)
        trainer.add_callback(self)
        return self

    def process_peak_mb(self) -> float:
        """The process's peak RSS since it started, in MiB (CPU; the step peaks reset the kernel's high-water mark,
        so ``ru_maxrss`` alone would cover only the time since the last reset)."""
        return self._rss.process_peak() / 2**20

    def _wrap_micro_batches(self, trainer) -> None:
        """Record each micro-batch of the optimizer phase: its shape (``rows``, ``prompt_tokens`` and
        ``completion_tokens``: the padded widths; ``longest_completion``: the most completion tokens of a row) from
        ``compute_loss``'s inputs, and the peak RSS of its ``training_step`` (loss forward and backward), in MiB."""
        compute_loss, training_step = trainer.compute_loss, trainer.training_step
        profiler = self

        def shaped(model, inputs, *args, **kwargs):
            if isinstance(inputs, dict) and "completion_ids" in inputs and "prompt_ids" in inputs:
                profiler._shape = {"rows": int(inputs["completion_ids"].size(0)),
                                   "prompt_tokens": int(inputs["prompt_ids"].size(1)),
                                   "completion_tokens": int(inputs["completion_ids"].size(1)),
                                   "longest_completion": int(inputs["completion_mask"].sum(1).max())}
            return compute_loss(model, inputs, *args, **kwargs)

        def stepped(*args, **kwargs):
            profiler._shape = {}
            exact = not profiler.cuda and profiler._rss.exact
            if exact:
                profiler._rss.take()  # what came before this micro-batch is charged, the mark starts afresh
            result = training_step(*args, **kwargs)
            record = dict(profiler._shape)
            if exact:
                record["peak_memory_mb"] = profiler._rss.take() / 2**20
            profiler._micro_batches.append(record)
            return result

        trainer.compute_loss, trainer.training_step = shaped, stepped

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _wrap(self, trainer, name: str, bucket_of, count: bool = False) -> None:
        original = getattr(trainer, name)
        profiler = self

        def timed(*args, **kwargs):
            bucket = bucket_of(*args, **kwargs)
            if bucket is None:  # e.g. the loss forward: part of "optimizer"
                return original(*args, **kwargs)
            profiler._sync()
            frame = [time.perf_counter(), 0.0, bucket]
            profiler._stack.append(frame)
            if not profiler.cuda:
                profiler._rss.mark(bucket)
            try:
                result = original(*args, **kwargs)
            finally:
                profiler._sync()
                elapsed = time.perf_counter() - frame[0]
                profiler._stack.pop()
                if not profiler.cuda:
                    profiler._rss.mark(profiler._stack[-1][2] if profiler._stack else "optimizer")
                profiler._current[bucket] += elapsed - frame[1]
                if profiler._stack:
                    profiler._stack[-1][1] += elapsed
                else:
                    profiler._current["_scoring_inclusive"] += elapsed
            if count:
                completion_ids = result[0]
                profiler._current["generated_tokens"] += sum(len(c) for c in completion_ids)
                profiler._current["generated_sequences"] += len(completion_ids)
                profiler._current["generate_calls"] += 1
            return result

        setattr(trainer, name, timed)

    # ---------------------------------------------------------------- callback
    def on_step_begin(self, args, state, control, **kwargs):
        self._current = defaultdict(float)
        self._micro_batches = []
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        else:
            self._rss.start()
        self._sync()
        self._step_start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._sync()
        total = time.perf_counter() - self._step_start
        if self.cuda:
            peak = torch.cuda.max_memory_allocated() / 2**20
        else:
            peak = self._rss.stop() / 2**20
        cur = self._current
        record = {"step": state.global_step, "step_seconds": total}
        for bucket in BUCKETS[:-1]:
            record[bucket] = cur.get(bucket, 0.0)
        # Everything outside generation-and-scoring: loss forward, backward, clipping, optimizer.step.
        record["optimizer"] = max(0.0, total - cur.get("_scoring_inclusive", 0.0))
        record["generated_tokens"] = int(cur.get("generated_tokens", 0))
        record["generated_sequences"] = int(cur.get("generated_sequences", 0))
        record["generate_calls"] = int(cur.get("generate_calls", 0))
        record["peak_memory_mb"] = peak
        if not self.cuda:
            for bucket, value in self._rss.peaks.items():
                record[f"peak_memory_mb_{bucket}"] = value / 2**20
            record["peak_memory_source"] = "hwm" if self._rss.exact else "sampled"
        record["micro_batches"] = self._micro_batches
        self.steps.append(record)
