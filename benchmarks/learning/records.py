"""Where an experiment's files live, and its run records: packed in ``runs.jsonl`` (gzipped once finished), or
loose in ``runs/``.

An experiment is one folder, ``benchmarks/experiments/<name>/``, named after the pre-registration's
``experiment:`` key:

- ``preregistration.yaml``: committed before any of its runs start, never edited after;
- ``runs.jsonl``: the run records (`benchmarks.learning.run`), one JSON object per line;
- ``runs.jsonl.gz``: a finished experiment's records, its ``runs.jsonl`` gzipped (``gzip -n -9``, the same bytes
  decompressed), read as they are; where both files stand, the gzipped records come first (`packed_records`);
- ``runs/<method>-seed<seed>.json``: a record a run has just written (loose); ``pack`` folds it into ``runs.jsonl``
  (a loose record replaces the packed one of the same method and seed) and removes the file;
- record folders inside it (a round's ``pairing-check/``, its fallback baselines): each its own ``runs.jsonl`` (or
  ``runs.jsonl.gz``) and ``runs/``, packed with the experiment (`record_folders`);
- ``report.md``: generated (`benchmarks.learning.experiments report`), never edited by hand.

Every decision of every experiment is one entry of ``benchmarks/experiments/decision.json`` (a list; each entry
names its ``experiment``). No torch, TRL or model import here: the harness, the reports and the tests read records
through this module.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO_ROOT / "benchmarks" / "experiments"
DECISION_FILE = EXPERIMENTS / "decision.json"
PREREGISTRATION_FILE = "preregistration.yaml"
RUNS_FILE = "runs.jsonl"
#: A finished experiment's records: its `RUNS_FILE` gzipped (``gzip -n -9``), read directly (`packed_records`).
RUNS_GZ_FILE = "runs.jsonl.gz"
LOOSE_DIR = "runs"
#: Where pre-registrations lived before each experiment had its own folder: the records written then name this path
#: (``record["preregistration"]["path"]``, with its commit), and still belong to the experiment of that name.
FORMER_PREREGISTRATION = "benchmarks/preregistered/{experiment}.yaml"
#: How the tables and pictures name each family's arms, and each family's estimator.
ARM_NAMES = {"trl": {"hir_default": "HiR default", "rl_cr": "RL-CR", "rl_ir": "RL-IR"},
             "paper": {"hir_paper": "HiR paper", "rl_cr": "RL-CR", "rl_ir": "RL-IR"}}
FAMILY_NAMES = {"trl": "GRPO", "paper": "Reinforce++"}
#: The difference each round after the decisive experiment decides, "A - B" (its name in the tables and pictures).
ROUND_DIFFERENCES = {
    "one-round-synthetic": "HiR default: pad - resample",
    "relabel-synthetic": "HiR default: relabel achieved - drop",
    "ended-replays-paper-synthetic": "HiR paper: ended-only replays - any failure",
    "equal-sampling": "HiR default (6 + 2) - RL-CR with 6 samples",
    "written-objective": "HiR paper: written objective - as run",
    "replay-ratio": "HiR default: hindsight ratio - original",
    "binary-hir": "HiR on the binary reward (ILA) - RL-IR (GRPO)",
    "sparse-binary": "HiR on ILA - RL-IR, sparse task (GRPO)",
}


def experiment_dir(name: str) -> Path:
    """``benchmarks/experiments/<name>``."""
    return EXPERIMENTS / name


def preregistration_paths(spec: dict[str, Any]) -> set[str]:
    """The repository-relative paths a record of the experiment ``spec`` may name as its pre-registration: the file's
    path now (``spec["path"]``) and its path before the experiments had folders."""
    return {spec["path"], FORMER_PREREGISTRATION.format(experiment=spec["experiment"])}


def record_key(record: dict[str, Any]) -> str:
    """``<method>-seed<seed>``: the name of a record's loose file, unique within an experiment."""
    return f"{record['method']}-seed{record['seed']}"


def loose_path(folder: Path, method: str, seed: int) -> Path:
    """Where a run of ``method`` and ``seed`` writes its record in the experiment ``folder``."""
    return Path(folder) / LOOSE_DIR / f"{method}-seed{seed}.json"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order, decompressed when its name ends in ``.gz`` (gzip); ``[]``
    when it does not exist.

    Raises:
        ValueError: a line is not valid JSON (names the file and line).
    """
    path = Path(path)
    if not path.is_file():
        return []
    text = gzip.decompress(path.read_bytes()).decode("utf-8") if path.suffix == ".gz" else path.read_text()
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not a JSON object ({error.msg}); fix or remove the line") from error
    return out


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """One compact JSON object per line (the records' content unchanged)."""
    Path(path).write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))


def _loose(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(path, record) of every readable loose record; a file a run is still writing (not valid JSON) is skipped."""
    out = []
    for path in sorted((Path(folder) / LOOSE_DIR).glob("*.json")):
        try:
            out.append((path, json.loads(path.read_text())))
        except json.JSONDecodeError:
            continue
    return out


def packed_records(folder: Path) -> list[dict[str, Any]]:
    """The packed run records of ``folder``, in file order: those of its ``runs.jsonl.gz`` (gzipped, a finished
    experiment's), then those of its ``runs.jsonl`` (plain, where `pack` folds what a running round writes), each
    file where it exists."""
    return [r for name in (RUNS_GZ_FILE, RUNS_FILE) for r in read_jsonl(Path(folder) / name)]


def load_records(folder: Path) -> list[dict[str, Any]]:
    """Every run record of the experiment ``folder``: the packed ones (`packed_records`; a plain one replaces a
    gzipped one of the same method and seed), each replaced by a loose record of the same method and seed where there
    is one, then the loose ones not packed yet, sorted by `record_key`."""
    merged = {record_key(r): r for r in packed_records(folder)}
    merged.update({record_key(r): r for _, r in _loose(folder)})
    return [merged[key] for key in sorted(merged)]


def by_method(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Method -> its records, in the order given (`load_records`: by `record_key`, the loose files' name order)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        out.setdefault(record["method"], []).append(record)
    return out


def find(folder: Path, method: str, seed: int) -> dict[str, Any] | None:
    """The record of ``method`` and ``seed`` in the experiment ``folder`` (loose first, then packed), or ``None``."""
    key = f"{method}-seed{seed}"
    return next((r for r in reversed(load_records(folder)) if record_key(r) == key), None)


def record_folders(folder: Path) -> list[Path]:
    """The experiment ``folder`` and the record folders inside it (each holding ``runs.jsonl``, ``runs.jsonl.gz``
    or ``runs/``), by name."""
    inside = [p for p in sorted(Path(folder).iterdir()) if p.is_dir() and p.name != LOOSE_DIR
              and ((p / RUNS_FILE).is_file() or (p / RUNS_GZ_FILE).is_file() or (p / LOOSE_DIR).is_dir())]
    return [Path(folder), *inside]


def pack(folder: Path) -> int:
    """Fold the loose records of ``folder`` into its plain ``runs.jsonl`` (sorted by `record_key`; a loose record
    replaces the packed one of the same method and seed) and remove their files (and ``runs/`` once empty); a
    ``runs.jsonl.gz`` is never rewritten. Returns how many were folded in. A record's content is not changed."""
    folder = Path(folder)
    loose = _loose(folder)
    if not loose:
        return 0
    plain = {record_key(r): r for r in read_jsonl(folder / RUNS_FILE)}
    plain.update({record_key(r): r for _, r in loose})
    write_jsonl(folder / RUNS_FILE, [plain[key] for key in sorted(plain)])
    for path, _ in loose:
        path.unlink()
    runs = folder / LOOSE_DIR
    if runs.is_dir() and not any(runs.iterdir()):
        runs.rmdir()
    return len(loose)


def read_decisions(path: Path = DECISION_FILE) -> list[dict[str, Any]]:
    """The entries of ``decision.json`` (``[]`` when absent)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else []


def upsert_decisions(experiments: Sequence[str], entries: Sequence[dict[str, Any]],
                     path: Path = DECISION_FILE) -> list[dict[str, Any]]:
    """Replace the entries of ``experiments`` in ``decision.json`` by ``entries`` (each naming its ``experiment``),
    at the place the first of the old ones stood (at the end for a new experiment); the other experiments' entries
    are kept as they are. Returns the whole list written.

    Raises:
        ValueError: an entry names no experiment, or one not in ``experiments``.
    """
    for entry in entries:
        if entry.get("experiment") not in experiments:
            raise ValueError(f"decision entry names experiment {entry.get('experiment')!r}, not one of "
                             f"{list(experiments)}")
    old = read_decisions(path)
    at = next((i for i, e in enumerate(old) if e.get("experiment") in experiments), None)
    kept = [e for e in old if e.get("experiment") not in experiments]
    at = len(kept) if at is None else sum(1 for e in old[:at] if e.get("experiment") not in experiments)
    out = kept[:at] + list(entries) + kept[at:]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
    return out
