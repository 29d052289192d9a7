"""The readable summary ``hir-trl train`` prints at the end of a run.

It has four parts:

1. per logged step: ILA and CLA of the sampled completions (``reward/ila``, ``reward/cla``), the hindsight
   replays made (``hir/replayed_rows``), the supplementary samples (``hir/supplementary_samples``) and the
   zero-weight padding rows (``hir/padded_rows``), read from the trainer's log history;
2. the judge's failures (``judge/failures`` of ``judge/verdicts``), when it had any, and where a step's time went
   (``hir/seconds_*``: the largest share named);
3. example replays from the completion log (``log_completions: true``): for each, the original instruction q,
   the hindsight instruction q' it was trained on (the constraints the completion met; with ``hindsight_relabel:
   achieved``, a failed count relabelled to what it achieved), and the start of the completion y; or that replay is
   off (``num_replays: 0``);
4. where the final model, the latest checkpoint, the completion log and the model card are.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Most step rows shown; longer runs show evenly spaced steps (always the first and the last).
MAX_STEP_ROWS = 25


def _steps(log_history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [entry for entry in log_history if "reward/ila" in entry or "hir/replayed_rows" in entry]


def _pick(rows: list[Any], limit: int) -> list[Any]:
    if len(rows) <= limit:
        return rows
    keep = sorted({round(i * (len(rows) - 1) / (limit - 1)) for i in range(limit)})
    return [rows[i] for i in keep]


def _pct(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def _count(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


def _last_step(steps: Sequence[Mapping[str, Any]]) -> int:
    previous = 0
    for entry in steps:
        previous = entry.get("step", previous + 1)
    return previous


def totals(log_history: Sequence[Mapping[str, Any]], keys: Sequence[str],
           generations_per_step: float = 1.0) -> list[float]:
    """The run's total of each per-generation-batch count ``keys`` (``hir/replayed_rows``, ``judge/failures``, ...):
    each logged entry holds the mean over the generation batches since the previous entry, so it is weighed by
    their number (the steps since the previous entry times ``generations_per_step``)."""
    steps = _steps(log_history)
    weights, previous = [], 0
    for entry in steps:
        step = entry.get("step", previous + 1)
        weights.append(max(step - previous, 1) * generations_per_step)
        previous = step
    return [sum(w * (e.get(key) or 0) for w, e in zip(weights, steps)) for key in keys]


def judge_line(log_history: Sequence[Mapping[str, Any]], generations_per_step: float = 1.0) -> str | None:
    """The summary's line on the judge's failures (``judge/failures`` of ``judge/verdicts``), or None when the judge
    judged nothing or never failed."""
    failures, verdicts = totals(log_history, ("judge/failures", "judge/verdicts"), generations_per_step)
    if verdicts <= 0 or failures <= 0:
        return None
    share = min(failures / verdicts, 1.0)
    line = (f"Judge: {round(failures):d} of {round(verdicts):d} soft-constraint verdicts failed ({100 * share:.1f}%); "
            "each counted as an unmet constraint (judge/failures in the metrics)")
    if share >= 1.0:
        line += (". The judge never gave a verdict, so no soft constraint could be met: check judge_model, "
                 "judge_api_base and judge_api_key_env (docs/judge.md), or set judge_failure_policy: raise to stop "
                 "at the first failure")
    return line + "."


#: How `step_time_line` names each part of a step's timed wall time (``hir/seconds_<part>``).
STEP_PART_NAMES = {"generation": "generation", "verification": "rule verification", "judge": "judge wait",
                   "extra_rewards": "replays' extra rewards", "extra_pass": "extra passes", "selection": "selection",
                   "supplementary": "supplementary samples (other work)", "assembly": "assembly",
                   "replay_passes": "replay passes"}


def step_time_line(log_history: Sequence[Mapping[str, Any]], generations_per_step: float = 1.0) -> str | None:
    """The summary's line on where a step's time went: each timed part's share of the timed wall time
    (``hir/seconds_<part>`` of `hir_trl.step.log.STEP_PARTS`, the slowest rank's, summed over the run as `totals`
    does), largest first, the largest named; None when no step logged them (replay off with TRL's own batch). TRL's
    loss, backward pass and optimizer step are not among the parts."""
    from ..step.log import STEP_PARTS

    if not any(f"hir/seconds_{part}" in entry for entry in log_history for part in STEP_PARTS):
        return None
    seconds = dict(zip(STEP_PARTS, totals(log_history, [f"hir/seconds_{part}" for part in STEP_PARTS],
                                          generations_per_step)))
    whole = sum(seconds.values())
    if whole <= 0:
        return None
    parts = sorted(((value, part) for part, value in seconds.items() if value > 0), reverse=True)
    shares = ", ".join(f"{STEP_PART_NAMES[part]} {100 * value / whole:.0f}%" for value, part in parts[:5])
    largest = STEP_PART_NAMES[parts[0][1]]
    return (f"Step time: the largest share is {largest} ({100 * parts[0][0] / whole:.0f}% of {whole:.1f} s timed "
            f"over the run, the loss excluded; {shares}; hir/seconds_* in the metrics).")


def step_table(log_history: Sequence[Mapping[str, Any]], generations_per_step: float = 1.0) -> list[str]:
    """Lines of the per-step table (ILA %, CLA %, replays, supplementary samples, padding rows), plus totals.

    A logged entry holds the mean of its metrics over the generation batches since the previous entry
    (``logging_steps`` > 1), so the totals weigh each by its number of generation batches: the steps since the
    previous entry times ``generations_per_step`` (``gradient_accumulation_steps / steps_per_generation``; 1 by
    default).
    """
    steps = _steps(log_history)
    if not steps:
        return ["No training step was logged."]
    header = ("step", "ILA %", "CLA %", "replays", "supplementary", "padded")
    rows = [(str(e.get("step", "?")), _pct(e.get("reward/ila")), _pct(e.get("reward/cla")),
             _count(e.get("hir/replayed_rows")), _count(e.get("hir/supplementary_samples")),
             _count(e.get("hir/padded_rows")))
            for e in _pick(steps, MAX_STEP_ROWS)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if len(rows) < len(steps):
        lines.append(f"({len(rows)} of {len(steps)} logged steps shown)")
    replays, supplementary, padded = totals(log_history, ("hir/replayed_rows", "hir/supplementary_samples",
                                                          "hir/padded_rows"), generations_per_step)
    previous = _last_step(steps)
    mean = "; each row is the mean over the steps since the previous row" if previous > len(steps) else ""
    lines.append(f"Replays made: {round(replays):d}; supplementary samples: {round(supplementary):d}; padding rows: "
                 f"{round(padded):d} (over {previous} steps{mean}).")
    return lines


def _text(message_list: Any) -> str:
    """The content of the last turn of a logged prompt/completion (a list of chat messages, or a string)."""
    if isinstance(message_list, str):
        return message_list
    try:
        last = list(message_list)[-1]
        return str(last.get("content", ""))
    except (IndexError, TypeError, AttributeError):
        return str(message_list)


def _clip(text: str, width: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def _step_of(path: Path) -> int | None:
    """N of ``checkpoint-N`` or ``completions_N.parquet``; None for another name."""
    tail = path.name.removesuffix(".parquet").rsplit("-" if path.name.startswith("checkpoint-") else "_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _until(paths: Any, last_step: int | None) -> list[Path]:
    """``paths`` named by a step (`_step_of`) no later than ``last_step`` (all when None), by step."""
    stepped = [(step, p) for p in paths if (step := _step_of(p)) is not None]
    return [p for step, p in sorted(stepped) if last_step is None or step <= last_step]


def example_replays(completions_dir: str | os.PathLike, rows_by_id: Mapping[str, Mapping[str, Any]] | None = None,
                    count: int = 2, last_step: int | None = None) -> list[dict[str, Any]]:
    """Up to ``count`` hindsight replays from the newest completion-log file that has some (distinct source rows).

    Args:
        completions_dir: ``<output_dir>/completions`` (TRL's ``completions_<step>.parquet`` files).
        rows_by_id: normalized dataset rows by ``row_id``, to name the kept constraints by their text.
        last_step: the run's last step: files of later steps (left by a run this one resumed from an earlier
            checkpoint) are not read.

    Returns:
        Dicts with ``step``, ``row_id``, ``q`` (the original instruction: the prompt of the source row's sampled
        completions), ``q_prime`` (the hindsight instruction the replay was trained on, as logged: with
        ``hindsight_relabel: achieved``, its relabelled constraints as rewritten), ``kept`` (the indices of the
        constraints q' keeps) and ``y`` (the completion).
    """
    import pandas as pd

    files = _until(Path(completions_dir).glob("completions_*.parquet"), last_step)[::-1]
    for path in files:
        table = pd.read_parquet(path)
        if "hindsight" not in table.columns or not table["hindsight"].any():
            continue
        originals = table[~table["hindsight"] & ~table.get("supplementary", False)]
        q_by_id = {str(r["row_id"]): _text(r["prompt"]) for _, r in originals.iterrows()}
        examples, seen = [], set()
        for _, r in table[table["hindsight"]].iterrows():
            row_id = str(r["row_id"])
            if row_id in seen:
                continue
            seen.add(row_id)
            kept = json.loads(r["kept_constraints"]) if isinstance(r["kept_constraints"], str) else []
            source = (rows_by_id or {}).get(row_id)
            q = _text(source["prompt"]) if source is not None else q_by_id.get(row_id, "(not in the completion log)")
            examples.append({"step": int(r.get("step", 0)), "row_id": row_id, "q": q, "q_prime": _text(r["prompt"]),
                             "kept": kept, "y": _text(r["completion"])})
            if len(examples) == count:
                break
        return examples
    return []


def training_summary(output_dir: str | os.PathLike, log_history: Sequence[Mapping[str, Any]],
                     dataset: Any = None, log_completions: bool = True, count: int = 2,
                     last_step: int | None = None, generations_per_step: float = 1.0,
                     num_replays: int | None = None) -> str:
    """The end-of-run summary of a ``hir-trl train`` run (see the module docstring).

    Args:
        output_dir: the run's ``output_dir`` (the final model, ``checkpoint-*``, ``completions/``, ``README.md``).
        log_history: ``trainer.state.log_history``.
        dataset: the training rows (`hir_trl.load_hir_dataset`), to show the kept constraints' texts.
        log_completions: whether the run wrote completion logs (else the examples are skipped, with a hint).
        count: example replays to show.
        last_step: the run's last step (``trainer.state.global_step``): completion logs and checkpoints of later
            steps, left by an earlier run this one resumed from an older checkpoint, are not shown.
        generations_per_step: see `step_table`.
        num_replays: the run's ``num_replays`` (0: replay is off, an RL-IR run, said instead of an example).

    Returns:
        The summary text (several lines, ending with a newline).
    """
    output_dir = Path(output_dir)
    lines = ["", "=" * 30 + " HiR run summary " + "=" * 30, "", "Per step (ILA, CLA: sampled completions under q):"]
    lines += ["  " + line for line in step_table(log_history, generations_per_step)]
    judged = judge_line(log_history, generations_per_step)
    if judged is not None:
        lines += ["", judged]
    step_time = step_time_line(log_history, generations_per_step)
    if step_time is not None:
        lines += ["", step_time]
    completions = output_dir / "completions"
    lines += ["", "Example replays (the hindsight instruction q' keeps the constraints the completion y met, as "
              "trained on):"]
    if num_replays == 0:
        lines.append("  (replay is off: num_replays is 0, so this run made no hindsight replay; set num_replays >= 1 "
                     "for HiR)")
    elif not log_completions:
        lines.append("  (set log_completions: true to see example replays)")
    else:
        rows_by_id: dict[str, Mapping[str, Any]] = {}
        for row in dataset if dataset is not None else []:
            rows_by_id.setdefault(str(row["row_id"]), row)
        examples = example_replays(completions, rows_by_id, count, last_step) if completions.is_dir() else []
        if not examples:
            lines.append("  (no replay in the completion log: no failed completion met any constraint)")
        for n, ex in enumerate(examples, start=1):
            lines.append(f"  [{n}] step {ex['step']}, row {ex['row_id']}")
            lines.append(f"      q : {_clip(ex['q'], 300)}")
            lines.append(f"      q': {_clip(ex['q_prime'], 600)}")
            lines.append(f"      y : {_clip(ex['y'], 160)!r}")
    from ..verifiers.registry import checker_failures

    failures = checker_failures()
    if failures:
        lines += ["", "Verifiers of your own that failed (each failure counts as an unmet constraint, verify/errors):"]
        lines += [f"  {family}/{instruction_id}: {count} failed check(s); first: {_clip(first, 150)}"
                  for (family, instruction_id), (count, first) in failures.items()]
    checkpoints = _until(output_dir.glob("checkpoint-*"), last_step)
    lines += ["", "Where things are:", f"  final model     : {output_dir}"]
    lines.append(f"  last checkpoint : {checkpoints[-1] if checkpoints else '(none saved)'}")
    lines.append(f"  completion log  : {completions if completions.is_dir() else '(none: log_completions is off)'}")
    card = output_dir / "README.md"
    lines.append(f"  model card      : {card if card.is_file() else '(none)'}")
    lines.append(f"  metrics         : {output_dir / 'trainer_state.json'} (log_history)")
    return "\n".join(lines) + "\n"


__all__ = ["example_replays", "judge_line", "step_table", "step_time_line", "totals", "training_summary"]
