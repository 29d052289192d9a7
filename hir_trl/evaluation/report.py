"""Rendering ``hir-trl eval`` reports: the terminal table, the run comparison (Table 1 layout), the PNG plot."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .scoring import METRIC_LABELS

#: The benchmark columns of the paper's Table 1, in its order; other benchmarks follow them.
TABLE1_BENCHMARKS: tuple[str, ...] = ("IFEval", "IFBench", "CFBench", "InfoBench", "ComplexBench", "MulDimIF",
                                      "FollowBench")

_MAX_LISTED = 10


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}"


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A plain-text table: ``align`` has one ``l``/``r`` per column (default: first left, others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]])


def _count(n: int, singular: str, plural: str) -> str:
    return f"{n} {singular if n == 1 else plural}"


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f", ... ({len(items) - _MAX_LISTED} more in the JSON report)" if len(items) > _MAX_LISTED else "")


def issue_lines(bench: Mapping[str, Any]) -> list[str]:
    """One line per kind of problem found while scoring a benchmark (missing responses, unknown ids, ...)."""
    issues = bench["issues"]
    n = bench["num_samples"]
    # (issue kind, how one is shown, singular/plural subject, what the line says of them)
    kinds = (
        ("missing_responses", lambda m: f"{m['key']} {m['prompt']!r}", ("prompt has", "prompts have"),
         "no response (counted as failures)"),
        ("incomplete_responses", lambda m: f"{m['key']} ({m['responses']})", ("prompt has", "prompts have"),
         f"fewer than {n} responses (the missing samples count as failures)"),
        ("extra_responses", lambda m: f"{m['key']} ({m['responses']})", ("prompt has", "prompts have"),
         f"more than {n} responses (the extra ones are not scored)"),
        ("unknown_instructions", lambda m: f"row {m['key']} {m['instruction_id']!r}",
         ("constraint names", "constraints name"), "an unknown instruction id (counted as failures)"),
        ("unverifiable", lambda m: f"row {m['key']} {m['instruction_id']!r}", ("requirement", "requirements"),
         "cannot be parsed by the rule checker (unverifiable: judged when a judge is configured, else unjudged)"),
    )
    lines = []
    for kind, show, (singular, plural), says in kinds:
        if issues[kind]:
            items = [show(m) for m in issues[kind]]
            lines.append(f"{_count(len(items), singular, plural)} {says}: {_listed(items)}")
    unjudged = issues["unjudged"]
    if unjudged["constraints"]:
        text = (f"{_count(unjudged['constraints'], 'constraint is', 'constraints are')} unjudged (no judge configured: "
                f"{unjudged['soft']} soft, {unjudged['unverifiable']} unverifiable); the figures cover the "
                "rule-checked constraints only")
        if unjudged["rows_without_scored_constraints"]:
            text += f", and {unjudged['rows_without_scored_constraints']} rows with no other constraint are left out"
        lines.append(text)
    for kind, label in (("checker_errors", "rule checks"), ("judge_errors", "judge calls")):
        if issues[kind]:
            items = [f"row {m['key']} sample {m['sample']} {m['instruction_id']!r}: {m['error']}" for m in issues[kind]]
            lines.append(f"{len(items)} {label} failed with an error (counted as failures): {_listed(items)}")
    return lines


def format_benchmark(bench: Mapping[str, Any]) -> str:
    """The readable report of one benchmark: figures, pass@k, breakdowns, issues."""
    n = bench["num_samples"]
    out = [f"== {bench['name']}  ({bench['format']} format, {bench['num_rows']} prompts, "
           f"{bench['num_constraints']} constraints, {n} sample{'s' if n != 1 else ''} per prompt) =="]
    headline = bench["headline"]["metric"]
    rows = []
    for name, stats in bench["metrics"].items():
        label = METRIC_LABELS.get(name, name) + (" *" if name == headline else "")
        rows.append([label, _pct(stats["mean"]), _pct(stats["std"]) if n > 1 else "-"])
    out.append(format_table(["metric (%)", "mean", "std"], rows))
    out.append(f"* headline figure, the one the paper's Table 1 reports: prompts whose constraints are all met "
               f"(mean over {n} sample{'s' if n != 1 else ''})")
    for name, values in bench["pass_at_k"].items():
        ks = ", ".join(f"pass@{k} {_pct(v)}" for k, v in values.items())
        out.append(f"pass@k ({METRIC_LABELS.get(name, name)}, unbiased estimator, %): {ks}")
    loose = any("loose_acc" in stats for stats in bench["by_category"].values())
    for title, key in (("category", "by_category"), ("instruction id", "by_instruction")):
        breakdown = bench[key]
        if not breakdown:
            continue
        header = [title, "n", "strict %", "loose %"] if loose else [title, "n", "accuracy %"]
        table_rows = []
        for label, stats in breakdown.items():
            row = [label, stats["n"], _pct(stats["acc"])]
            if loose:
                row.append(_pct(stats["loose_acc"]))
            table_rows.append(row)
        out.append(f"\nBy {title} (constraint-level accuracy, pooled over samples):")
        out.append(format_table(header, table_rows))
    for group, values in bench["by_group"].items():
        out.append(f"\nBy {group} (pooled over samples):")
        out.append(format_table([group, "prompts", "ILA %", "CLA %"],
                                [[value, s["rows"], _pct(s["ila"]), _pct(s["cla"])] for value, s in values.items()]))
    lines = issue_lines(bench)
    if lines:
        out.append("\nIssues:")
        out.extend(f"  - {line}" for line in lines)
    return "\n".join(out)


def format_report(report: Mapping[str, Any]) -> str:
    """The readable report of a run: its settings, then every benchmark (see `format_benchmark`)."""
    out = []
    if report.get("run_name"):
        out.append(f"Run: {report['run_name']}")
    tokenizer = report.get("sentence_tokenizer") or report["sentence_backend"]
    out.append(f"Sentence tokenizer: {report['sentence_backend']}: {tokenizer} ({report['sentence_backend_note']})")
    unjudged = any(bench["issues"]["unjudged"]["constraints"] for bench in report["benchmarks"].values())
    none = "none (soft constraints are reported as unjudged)" if unjudged else "none (no constraint needs one)"
    out.append(f"Judge: {report['judge'] or none}")
    generation = report.get("generation")
    if generation:
        settings = ", ".join(f"{k}={v}" for k, v in generation.items() if k != "model")
        out.append(f"Generation: {generation.get('model')} ({settings})")
    unmatched = report.get("unmatched_responses") or {}
    if unmatched.get("count"):
        out.append(f"{unmatched['count']} prompts of the responses file match no benchmark prompt and are ignored: "
                   f"{_listed([repr(p) for p in unmatched['prompts']])}")
    for bench in report["benchmarks"].values():
        out.append("")
        out.append(format_benchmark(bench))
    return "\n".join(out) + "\n"


def _figure(bench: Mapping[str, Any], metric: str | None) -> float | None:
    if metric in (None, "headline"):
        return bench["headline"]["mean"]
    stats = bench["metrics"].get(metric)
    return None if stats is None else stats["mean"]


def _ordered_benchmarks(names: Sequence[str]) -> list[str]:
    order = {name.lower(): i for i, name in enumerate(TABLE1_BENCHMARKS)}
    known = sorted((n for n in names if n.lower() in order), key=lambda n: order[n.lower()])
    return known + [n for n in names if n.lower() not in order]


def format_comparison(runs: Sequence[tuple[str, Mapping[str, Any]]], metric: str | None = None) -> str:
    """Runs side by side in the layout of the paper's Table 1, with deltas against the first run.

    Args:
        runs: ``(run name, report)`` pairs; reports of the same name are merged (one file per benchmark is
            fine). The first run is the baseline.
        metric: the figure per benchmark: None or ``"headline"`` for the Table 1 figure (prompt-level strict
            accuracy for IFEval/IFBench, ILA for MulDimIF/HIR data), or a metric name such as ``"cla"``; a
            benchmark that does not report it shows ``n/a`` and is named in the note.

    Returns:
        The table: one row per run, one column per benchmark present (Table 1's columns first, in its
        order), cells like ``83.6 (+12.4)`` (percentages; the delta is taken between the rounded figures, so
        it matches the figures shown). A benchmark whose runs have different numbers of prompts without a
        response (counted as failures), or runs whose responses files have different numbers of lines matching
        no prompt, is flagged: its cells end in ``*`` and a note gives the counts.

    Raises:
        ValueError: two reports of the same run name have the same benchmark (one would silently hide the other),
            or ``metric`` applies to none of the benchmarks.
    """
    merged: dict[str, dict[str, Mapping[str, Any]]] = {}
    samples: dict[str, set[int]] = {}
    unmatched: dict[str, int] = {}
    first_report: dict[tuple[str, str], int] = {}
    for position, (name, report) in enumerate(runs, start=1):
        for bench_name, bench in report["benchmarks"].items():
            if (name, bench_name) in first_report:
                raise ValueError(f"reports {first_report[name, bench_name]} and {position} are both named {name!r} and "
                                 f"both have {bench_name}, so one would hide the other; give each report its own "
                                 "name (--names, or --run-name when scoring)")
            first_report[name, bench_name] = position
            merged.setdefault(name, {})[bench_name] = bench
            samples.setdefault(name, set()).add(bench["num_samples"])
        unmatched[name] = unmatched.get(name, 0) + int((report.get("unmatched_responses") or {}).get("count") or 0)
    if not merged:
        raise ValueError("no runs to compare")
    not_applicable = _check_metric(merged, metric)
    names = list(merged)
    benchmarks = _ordered_benchmarks(list(dict.fromkeys(b for run in merged.values() for b in run)))
    base = merged[names[0]]
    missing = {b: {name: len(run[b].get("issues", {}).get("missing_responses", [])) for name, run in merged.items()
                   if b in run} for b in benchmarks}
    flagged = {b for b, counts in missing.items() if len(set(counts.values())) > 1}
    rows = []
    for name in names:
        row = [name]
        for bench_name in benchmarks:
            bench = merged[name].get(bench_name)
            value = None if bench is None else _figure(bench, metric)
            if value is None:
                row.append("n/a" if bench is not None and bench_name in not_applicable else "-")
                continue
            cell = f"{100 * value:.1f}"
            base_bench = base.get(bench_name)
            base_value = None if base_bench is None else _figure(base_bench, metric)
            if base_value is not None:
                delta = round(round(100 * value, 1) - round(100 * base_value, 1), 1)
                cell += f" ({'+' if delta >= 0 else '-'}{abs(delta):.1f})"
            row.append(cell + ("*" if bench_name in flagged else ""))
        rows.append(row)
    figure = ("prompt-level strict accuracy (IFEval, IFBench) / ILA (MulDimIF, HIR data)"
              if metric in (None, "headline") else METRIC_LABELS.get(metric, metric))
    counts = sorted({n for s in samples.values() for n in s})
    note = (f"Figure: {figure}, %, mean over {'/'.join(map(str, counts))} samples per prompt; "
            f"(+x) = difference from {names[0]}.")
    for bench_name, available in not_applicable.items():
        note += f"\n{metric} does not apply to {bench_name} (n/a); its metrics: {', '.join(available)}."
    for bench_name in benchmarks:
        if bench_name in flagged:
            counts = ", ".join(f"{name} {n}" for name, n in missing[bench_name].items())
            note += (f"\n* {bench_name}: the runs have different numbers of prompts without a response ({counts}), "
                     "counted as failures: the difference may come from the responses files, not the models.")
    if len(set(unmatched.values())) > 1:
        counts = ", ".join(f"{name} {n}" for name, n in unmatched.items())
        note += (f"\nThe runs' responses files have different numbers of lines matching no benchmark prompt "
                 f"({counts}).")
    return format_table(["Model", *benchmarks], rows) + "\n" + note + "\n"


def _check_metric(merged: Mapping[str, Mapping[str, Mapping[str, Any]]], metric: str | None) -> dict[str, list[str]]:
    """The benchmarks ``metric`` does not apply to, with the metrics they have.

    Raises:
        ValueError: ``metric`` applies to none of the benchmarks.
    """
    if metric in (None, "headline"):
        return {}
    available: dict[str, list[str]] = {}
    for run in merged.values():
        for bench_name, bench in run.items():
            names = available.setdefault(bench_name, [])
            names.extend(m for m in bench.get("metrics", {}) if m not in names)
    missing = {b: names for b, names in available.items() if metric not in names}
    if len(missing) == len(available):
        every = sorted({m for names in available.values() for m in names})
        raise ValueError(f"--metric {metric!r} applies to none of these benchmarks; they report: "
                         f"{', '.join(every)} (or headline)")
    return missing


def plot_categories(report: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write a PNG of per-category constraint accuracy (strict), one panel per benchmark of ``report``.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'hir-trl[plot]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("the category plot needs matplotlib: pip install 'hir-trl[plot]'") from exc
    benches = list(report["benchmarks"].values())
    heights = [max(2.0, 0.3 * len(b["by_category"]) + 1.2) for b in benches]
    fig, axes = plt.subplots(len(benches), 1, figsize=(8, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, bench in zip(axes[:, 0], benches):
        labels = list(bench["by_category"])
        values = [100 * (bench["by_category"][c]["acc"] or 0.0) for c in labels]
        ax.barh(labels, values, color="#4c72b0")
        ax.set_xlim(0, 100)
        ax.invert_yaxis()
        ax.set_xlabel("constraint accuracy (strict, %)")
        metric = METRIC_LABELS.get(bench["headline"]["metric"], bench["headline"]["metric"]).split(" (")[0]
        title = f"{bench['name']}: {metric} {100 * (bench['headline']['mean'] or 0.0):.1f}%"
        ax.set_title(title + (f" ({report['run_name']})" if report.get("run_name") else ""), fontsize=10)
        for y, v in enumerate(values):
            ax.text(min(v + 1, 92), y, f"{v:.1f}", va="center", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = [
    "TABLE1_BENCHMARKS",
    "format_benchmark",
    "format_comparison",
    "format_report",
    "format_table",
    "issue_lines",
    "plot_categories",
]
