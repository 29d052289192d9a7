"""The experiments' folders as a whole: pack their records, decide them, and generate every report and table.

Each experiment is ``benchmarks/experiments/<name>/`` (`benchmarks.learning.records`); every decision is an entry
of ``benchmarks/experiments/decision.json``. Three commands, run from the repository root::

    python -m benchmarks.learning.experiments pack      # fold every loose runs/*.json into its runs.jsonl (plain)
    python -m benchmarks.learning.experiments decide    # recompute decision.json from the records (minutes)
    python -m benchmarks.learning.experiments report    # every report.md, the generated README tables, pictures
    python -m benchmarks.learning.experiments report --check   # exit 1 if any of them is out of date

``report`` reads ``decision.json``, the derived files beside the records (``constraints.json``,
``replay-audit.json``) and, for the pictures (`benchmarks.learning.figures`: the forest plot ``decision.svg``, each
report's ``curves.svg``), the records, so it takes seconds; ``--check`` compares each picture by the data it shows,
not its bytes, and needs no matplotlib. ``decide`` reruns every experiment's decision rule on its records
(`benchmarks.learning.decisive`, the rounds' modules `one_round`, `relabel`, `ended_replays`, and `rounds` for the
rounds after the decisive experiment). ``pack`` also packs the record folders inside an experiment's folder
(a round's ``pairing-check/`` and fallback baselines).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.learning import decisive, ended_replays, figures, one_round, records, relabel, replay_audit, rounds

REPORT_FILE = one_round.REPORT_FILE
README = records.REPO_ROOT / "README.md"
BENCH_README = records.REPO_ROOT / "benchmarks" / "README.md"
#: The rounds: experiment -> (what decides it: writes its entry of decision.json, how its report is written from
#: its decision entry, the difference it decides, "A - B": `records.ROUND_DIFFERENCES`).
ROUNDS: dict[str, tuple[Callable[[], Any], Callable[[dict[str, Any]], str], str]] = {
    name: (write, markdown, records.ROUND_DIFFERENCES[name]) for name, (write, markdown) in {
        "one-round-synthetic": (lambda: one_round.main([]), one_round._markdown),
        "relabel-synthetic": (lambda: relabel.main([]), relabel._markdown),
        "ended-replays-paper-synthetic": (lambda: ended_replays.main([]), ended_replays._markdown),
        "equal-sampling": (lambda: rounds.write_decisions(["equal-sampling"]), rounds.markdown),
        "written-objective": (lambda: rounds.write_decisions(["written-objective"]), rounds.markdown),
        "replay-ratio": (lambda: rounds.write_decisions(["replay-ratio"]), rounds.markdown),
        "binary-hir": (lambda: rounds.write_decisions(["binary-hir"]), rounds.markdown),
        "sparse-binary": (lambda: rounds.write_decisions(["sparse-binary"]), rounds.markdown),
    }.items()
}
ARM_NAMES = records.ARM_NAMES
FAMILY_NAMES = records.FAMILY_NAMES


def experiment_folders() -> list[Path]:
    """Every ``benchmarks/experiments/<name>/``, by name."""
    return sorted(p for p in records.EXPERIMENTS.iterdir() if p.is_dir())


def decisive_specs() -> list[dict[str, Any]]:
    return [decisive.load_preregistration(p) for p in sorted(records.EXPERIMENTS.glob(decisive.DECISIVE_GLOB))]


def decide() -> list[dict[str, Any]]:
    """Recompute every entry of ``decision.json`` from the records, then the reports."""
    decisive.write_decisions(decisive_specs())
    for name, (write, _, _) in ROUNDS.items():
        if (records.experiment_dir(name) / records.PREREGISTRATION_FILE).is_file():
            write()
    return records.read_decisions()


# ================================================================================================ reports


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def reports(decisions: Sequence[dict[str, Any]], pictures: Sequence[figures.Picture] = ()) -> dict[Path, str]:
    """Every experiment's ``report.md`` (path -> text), from its decision entries and derived files, and the section
    that shows its learning curves where ``pictures`` has them (`figures.curves_markdown`)."""
    out = {}
    for spec in decisive_specs():
        folder = spec["folder"]
        text = decisive.report_markdown(spec["experiment"], decisions,
                                        _read_json(folder / decisive.CONSTRAINTS_FILE) or [])
        audit = _read_json(folder / "replay-audit.json")
        if audit:
            text += "\n" + replay_audit._markdown(audit).replace("# Replay audit", "## Replay audit", 1)
        out[folder / REPORT_FILE] = text
    by_name = {d.get("experiment"): d for d in decisions}
    for name, (_, markdown, _) in ROUNDS.items():
        if name in by_name:
            out[records.experiment_dir(name) / REPORT_FILE] = markdown(by_name[name])
    for picture in pictures:
        report = picture.path.parent / REPORT_FILE
        if picture.path.name == figures.CURVES_FILE and report in out:
            out[report] += figures.curves_markdown(picture.data)
    return out


def pictures(decisions: Sequence[dict[str, Any]]) -> list[figures.Picture]:
    """Every generated picture: the forest plot of ``decision.json`` and the learning curves of each experiment that
    has a report and records (`benchmarks.learning.figures`)."""
    out, cache = [figures.forest_picture(decisions)], {}
    for report in reports(decisions):
        curves = figures.curves_picture(report.parent.name, decisions, cache)
        if curves is not None:
            out.append(curves)
    return out


def _interval(d: dict[str, Any]) -> tuple[str, str]:
    if d.get("mean_diff_points") is None:
        return "-", "-"
    return f"{d['mean_diff_points']:+.1f}", f"[{d['ci95_low']:+.1f}, {d['ci95_high']:+.1f}]"


def pair_name(d: dict[str, Any]) -> str:
    """"HiR default − RL-CR (GRPO)": the two arms of a decisive pair and its objective family."""
    names = ARM_NAMES[d["family"]]
    return f"{names[d['hir_arm']]} − {names[d['baseline_arm']]} ({FAMILY_NAMES[d['family']]})"


def readme_table(decisions: Sequence[dict[str, Any]]) -> str:
    """README's "Does it work?" table: per task, each family's HiR arm minus RL-CR, and RL-CR minus RL-IR in the
    default (GRPO) family: what the graded reward alone gains over the binary one. Every other pair (HiR minus RL-IR,
    the paper family's RL-CR minus RL-IR) is in benchmarks/README.md's table; README's section has room for 6 rows."""
    lines = ["| task | pair | seeds | mean difference | 95% interval | decision |", "|---|---|---|---|---|---|"]
    for d in decisions:
        if "family" not in d or not (d["baseline_arm"] == "rl_cr" or d["hir_arm"] == "rl_cr" and d["family"] == "trl"):
            continue
        mean, ci = _interval(d)
        lines.append(f"| {d['task']} | {pair_name(d)} | {len(d['seeds'])} | {mean} | {ci} | {d['decision']} |")
    return "\n".join(lines)


def decisions_table(decisions: Sequence[dict[str, Any]]) -> str:
    """benchmarks/README.md's table: every entry of ``decision.json``, final held-out ILA in points."""
    lines = ["| experiment | difference (final held-out ILA, points) | pre-registered | seeds | mean | 95% interval "
             "| decision |", "|---|---|---|---|---|---|---|"]
    for d in decisions:
        name = d.get("experiment", "?")
        what = pair_name(d) if "family" in d else ROUNDS.get(name, (None, None, "?"))[2]
        registered = "no" if d.get("pair_preregistered") is False else "yes"
        mean, ci = _interval(d)
        lines.append(f"| [{name}](experiments/{name}/{REPORT_FILE}) | {what} | {registered} | {len(d['seeds'])} | "
                     f"{mean} | {ci} | {d['decision']} |")
    return "\n".join(lines)


def experiments_table(generated_reports: Sequence[Path] = ()) -> str:
    """benchmarks/README.md's list of experiment folders: what each holds (a report counts once it exists or is
    among ``generated_reports``, those `generated` is about to write)."""
    lines = ["| folder | pre-registered | packed records | report |", "|---|---|---|---|"]
    for folder in experiment_folders():
        runs = len(records.packed_records(folder)) or "-"
        prereg = "yes" if (folder / records.PREREGISTRATION_FILE).is_file() else "no"
        has_report = (folder / REPORT_FILE).is_file() or folder / REPORT_FILE in set(generated_reports)
        report = f"[report.md](experiments/{folder.name}/{REPORT_FILE})" if has_report else "-"
        lines.append(f"| `experiments/{folder.name}/` | {prereg} | {runs} | {report} |")
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with what stands between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` replaced by ``body``.

    Raises:
        ValueError: the markers are missing.
    """
    pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no <!-- {name}:start --> ... <!-- {name}:end --> block")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text, count=1)


def block(text: str, name: str) -> str:
    """What stands between the markers of ``name`` in ``text`` (`replace_block`'s inverse)."""
    match = re.search(rf"<!-- {name}:start -->\n(.*?)\n?<!-- {name}:end -->", text, re.S)
    if match is None:
        raise ValueError(f"no <!-- {name}:start --> ... <!-- {name}:end --> block")
    return match.group(1)


def generated(decisions: Sequence[dict[str, Any]] | None = None,
              drawn: Sequence[figures.Picture] | None = None) -> dict[Path, str]:
    """Every generated file's text: the reports (with the sections that show the ``drawn`` pictures, by default
    `pictures`), and README.md and benchmarks/README.md with their tables."""
    decisions = records.read_decisions() if decisions is None else decisions
    out = reports(decisions, pictures(decisions) if drawn is None else drawn)
    out[README] = replace_block(README.read_text(), "results-table", readme_table(decisions))
    text = replace_block(BENCH_README.read_text(), "decisions-table", decisions_table(decisions))
    out[BENCH_README] = replace_block(text, "experiments-table", experiments_table(list(out)))
    return out


def stale(files: dict[Path, str]) -> list[Path]:
    """The files whose text differs from ``files``."""
    return [path for path, text in files.items() if not path.is_file() or path.read_text() != text]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="fold loose runs/*.json records into runs.jsonl")
    pack.add_argument("names", nargs="*", help="experiment folder names (default: all)")
    sub.add_parser("decide", help="recompute decision.json from every experiment's records, then report")
    report = sub.add_parser("report", help="write every report.md and the README tables from decision.json")
    report.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    ns = parser.parse_args(argv)
    if ns.command == "pack":
        folders = [records.experiment_dir(n) for n in ns.names] or experiment_folders()
        for folder in folders:
            if not folder.is_dir():
                parser.error(f"no experiment folder {folder}; the folders are "
                             f"{', '.join(p.name for p in experiment_folders())}")
            for where in records.record_folders(folder):
                print(f"{where.relative_to(records.EXPERIMENTS)}: {records.pack(where)} loose record(s) packed")
        return 0
    if ns.command == "decide":
        decide()
    decisions = records.read_decisions()
    drawn = pictures(decisions)
    files = generated(decisions, drawn)
    if getattr(ns, "check", False):
        old = stale(files) + figures.stale(drawn)  # a picture by the data it shows (figures.py), not its bytes
        for path in old:
            print(f"{path.relative_to(records.REPO_ROOT)} is out of date: run "
                  "python -m benchmarks.learning.experiments report", file=sys.stderr)
        return 1 if old else 0
    for path, text in files.items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(records.REPO_ROOT)}")
    for path in figures.write(drawn):
        print(f"wrote {path.relative_to(records.REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
