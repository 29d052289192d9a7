"""``hir-trl eval``: score responses, or generate them from a model and score them, against benchmarks.

::

    hir-trl eval score    --benchmark IFEVAL.jsonl [NAME=PATH ...] --responses responses.jsonl [--output report.json]
    hir-trl eval generate --model_name_or_path CHECKPOINT --benchmark PATH [...] --output_dir DIR
                          [--num_samples 5 --temperature 0.6 --max_tokens 4096 --seed 0]
    hir-trl eval compare  base.json trained.json        (also: hir-trl eval --compare base.json trained.json)

Options are the fields of the dataclasses below, parsed as ``hir-trl train`` and ``trl grpo`` parse theirs (TRL's
`TrlParser`; `hir_trl.cli.parser.command_parser`): ``--snake_case`` as TRL spells them, ``--kebab-case`` accepted too,
``--config FILE`` (or ``--config=FILE``) a YAML file of the same keys. The names are those of ``hir-trl train``
for the same things: ``model_name_or_path`` (also ``--model``), ``output_dir``, ``seed``, ``run_name``,
``verifier_modules`` and every ``judge_*`` option; ``max_completion_length``, ``num_generations``,
``vllm_tensor_parallel_size`` and ``vllm_gpu_memory_utilization`` are accepted for ``max_tokens``,
``num_samples``, ``tensor_parallel_size`` and ``gpu_memory_utilization``.

The ``judge_*`` options are `hir_trl.judge.arguments.JudgeArguments`, the class `hir_trl.HiRConfig` takes them from:
the same defaults (the paper's judge, ``deepseek/deepseek-chat`` with its key in ``DEEPSEEK_API_KEY``) and help. The
judge is built only for benchmarks with constraints only it can check (soft ones, MulDimIF requirements no rule
parses); rule-only benchmarks (IFEval, IFBench) need neither litellm nor a key. A benchmark that needs it while it
cannot run (litellm not installed, the key variable unset) stops with one line naming the fixes; ``--judge_model ''``
reports such constraints as unjudged instead.

Output rules (docs/evaluation.md "Where the outputs go"): nothing is written over an input (a benchmark, responses
or module file, by any spelling or link); ``generate`` checks every input and output before the first token is
generated; its ``output_dir`` holds one evaluation, and one already there is replaced only with
``--overwrite_output_dir true``.

Each run writes a JSON report (every figure and the per-row verdicts) and the same readable table it prints.
Exit status: 0 on success, 2 when an input cannot be used (the message says which file, row, field or flag).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import one_line
from ..evaluation.benchmarks import FORMATS, Benchmark, _slug, load_benchmark
from ..evaluation.generation import BACKENDS, DTYPES, GenerationSettings, choose_backend, generate_responses, lora_base
from ..evaluation.report import format_comparison, format_report, plot_categories
from ..evaluation.scoring import ResponseSet, check_known, check_responses_fit, read_responses, score
from ..judge import JudgeError, MissingJudgeKeyError, MissingJudgePackageError, build_judge
from ..judge.arguments import JudgeArguments, judge_problem
from ..verifiers.registry import import_verifier_modules
from ..verifiers.text import SPLITTERS, SentenceTokenizerError, sentence_tokenizer_name, set_sentence_splitter
from .parser import UsageError, command_parser, parse_command


@dataclass
class BenchmarkArguments:
    """The benchmarks and how they are scored (``score`` and ``generate``)."""

    benchmark: list[str] = field(metadata={
        "aliases": ["-b"], "metavar": "[NAME=]PATH",
        "help": "benchmark files: IFEval/IFBench .jsonl, MulDimIF test.json, or HIR-16K/native data; or 'ifeval' / "
                "'ifbench': the public Hub dataset (google/IFEval, allenai/IFBench_test, cached by datasets); "
                "NAME=PATH names one (default: IFEval, IFBench, MulDimIF, else the file stem)"})
    format: str = field(default="auto", metadata={
        "choices": ["auto", *FORMATS], "help": "benchmark format of every --benchmark (default: detected from the rows)"})
    limit: int | None = field(default=None, metadata={
        "aliases": ["--dataset_max_rows", "--dataset-max-rows"], "metavar": "N",
        "help": "use the first N rows of each benchmark"})
    allow_unknown: bool = field(default=False, metadata={
        "help": "count constraints with an unknown instruction id as failures (default: stop with an error naming "
                "the rows)"})
    pass_k: list[int] | None = field(default=None, metadata={
        "metavar": "K", "help": "pass@k budgets (default: 1, 2, 4, ... up to the number of samples)"})
    run_name: str | None = field(default=None, metadata={
        "help": "name of this run in the report and in compare tables (default: score: <folder>/<stem> of the "
                "responses file; generate: the model's folder name)"})
    plot: str | None = field(default=None, metadata={
        "nargs": "?", "const": "", "metavar": "PNG",
        "help": "also write a PNG of per-category accuracy (needs matplotlib); default path: next to the report"})
    no_rows: bool = field(default=False, metadata={"help": "leave the per-row verdicts out of the JSON report"})
    verifier_modules: list[str] | None = field(default=None, metadata={
        "metavar": "MODULE",
        "help": "modules to import first, so that their hir_trl.register_verifier calls add your own constraints "
                "(dotted names, found on sys.path or in the current directory, or .py files); benchmark rows name "
                "them as family/instruction_id (HIR/native data) or 'family:instruction_id' (IFEval-format "
                "instruction_id_list)"})
    sentence_splitter: str | None = field(default=None, metadata={
        "choices": list(SPLITTERS),
        "help": "sentence splitter: punkt (default: NLTK's own Punkt, as the official scorers) or fallback (a regex "
                "splitter; reported, and its figures are not official)"})


@dataclass
class ScoreArguments:
    """``hir-trl eval score``: responses files to score."""

    responses: list[str] = field(metadata={
        "aliases": ["-r"], "metavar": "JSONL",
        "help": "responses files: one {\"prompt\": ..., \"response\": ...} object per line, matched to the benchmark "
                "by 'key' when the line has one, else by prompt text (whitespace runs collapsed); several lines for "
                "a prompt are its samples (optional 'sample')"})
    allow_missing: bool = field(default=False, metadata={
        "help": "score even when more than a few prompts (3, or 1%% of a benchmark) have no response; they count "
                "as failures (default: stop with an error, as the file likely answers other prompts)"})
    num_samples: int | None = field(default=None, metadata={
        "aliases": ["--num_generations", "--num-generations"],
        "help": "samples per prompt; fewer count as failures, extra ones are ignored (default: every answered "
                "prompt must have the same number of responses, else an error)"})
    output: str | None = field(default=None, metadata={
        "aliases": ["-o"], "metavar": "JSON",
        "help": "report path (default: <first responses file>.report.json); the table goes beside it (.txt); never "
                "an input file"})


@dataclass
class GenerateArguments:
    """``hir-trl eval generate``: the model, where its responses go and how they are sampled."""

    model_name_or_path: str = field(metadata={
        "aliases": ["--model", "-m"],
        "help": "checkpoint folder (a full model, or a LoRA adapter folder: merged into its base with peft) or Hub "
                "model id"})
    output_dir: str = field(metadata={
        "aliases": ["-o"],
        "help": "folder of this evaluation: <benchmark>.responses.jsonl, report.json and report.txt; a folder that "
                "holds another evaluation is refused unless --overwrite_output_dir true"})
    base_model_name_or_path: str | None = field(default=None, metadata={
        "help": "for a LoRA adapter folder: the base to merge it into instead of the exact base trained on (the "
                "folder its _hir_adapter_base.json names, while it is here) or else the one its adapter_config.json "
                "names (e.g. a local copy of that Hub model, offline)"})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "replace the evaluation already in output_dir (its report and responses files are deleted first)"})
    num_samples: int = field(default=1, metadata={
        "aliases": ["--num_generations", "--num-generations"], "help": "responses per prompt (paper: 5)"})
    temperature: float = field(default=0.6, metadata={"help": "sampling temperature (paper: 0.6; 0: greedy)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling (default 1.0: off)"})
    top_k: int = field(default=0, metadata={"help": "top-k sampling (default 0: off)"})
    max_tokens: int = field(default=4096, metadata={
        "aliases": ["--max_completion_length", "--max-completion-length"],
        "help": "most new tokens per response (paper: 4096)"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})
    backend: str = field(default="auto", metadata={
        "choices": list(BACKENDS), "help": "auto: vLLM when installed and a GPU is present, else transformers generate"})
    batch_size: int = field(default=16, metadata={"help": "sequences per generate call (transformers)"})
    dtype: str = field(default="auto", metadata={"choices": list(DTYPES), "help": "model dtype"})
    tensor_parallel_size: int = field(default=1, metadata={
        "aliases": ["--vllm_tensor_parallel_size", "--vllm-tensor-parallel-size"], "help": "GPUs per model (vLLM)"})
    gpu_memory_utilization: float = field(default=0.9, metadata={
        "aliases": ["--vllm_gpu_memory_utilization", "--vllm-gpu-memory-utilization"],
        "help": "GPU memory fraction (vLLM)"})
    max_model_len: int | None = field(default=None, metadata={"help": "context length (vLLM; default: the model's)"})
    no_progress: bool = field(default=False, metadata={"help": "hide the progress bar"})


@dataclass
class CompareArguments:
    """``hir-trl eval compare``: reports side by side (the report files are also taken as positional arguments)."""

    reports: list[str] | None = field(default=None, metadata={
        "metavar": "REPORT_JSON",
        "help": "report files; the first run is the baseline; reports with the same run name are merged (one "
                "benchmark each: two reports of one name with the same benchmark are an error)"})
    names: list[str] | None = field(default=None, metadata={
        "help": "a name per report (default: its run name or file stem)"})
    metric: str = field(default="headline", metadata={
        "help": "figure per benchmark: headline (Table 1: prompt-level strict / ILA) or a metric name, e.g. "
                "prompt_level_loose_acc (IFEval, IFBench), cla (MulDimIF, HIR data); a benchmark without it shows "
                "n/a, and a metric no benchmark has is an error"})


#: Each subcommand: its dataclasses and its one-line description.
COMMANDS: dict[str, tuple[tuple[type, ...], str]] = {
    "score": ((BenchmarkArguments, ScoreArguments, JudgeArguments),
              "score a JSONL of {prompt, response} lines against benchmarks"),
    "generate": ((BenchmarkArguments, GenerateArguments, JudgeArguments),
                 "generate responses from a model, then score them"),
    "compare": ((CompareArguments,), "runs side by side in the layout of the paper's Table 1, with deltas"),
}

USAGE = """usage: hir-trl eval {score,generate,compare} [options]

Instruction-following evaluation with the official IFEval conventions (strict/loose, prompt/instruction level),
MulDimIF and HIR-format data, and pass@k.

commands:
""" + "".join(f"  {name:9s} {description}\n" for name, (_, description) in COMMANDS.items()) + """
hir-trl eval COMMAND --help lists the options of one command.
"""


def make_parser(command: str):
    """The parser of ``hir-trl eval COMMAND``: a `TrlParser` over the command's dataclasses (`COMMANDS`).

    Raises:
        UsageError: an unknown command.
    """
    if command not in COMMANDS:
        raise UsageError(f"unknown command {command!r}: choose one of {', '.join(COMMANDS)} (hir-trl eval --help)")
    types, description = COMMANDS[command]
    parser = command_parser(types, f"hir-trl eval {command}", description)
    if command == "compare":
        parser.add_argument("report_files", nargs="*", metavar="REPORT_JSON", help="report files (as --reports)")
    return parser


class Arguments:
    """The parsed dataclasses of one command, read as one namespace (``args.benchmark``, ``args.judge_model``)."""

    def __init__(self, command: str, parts: Sequence[Any]) -> None:
        self.command = command
        for part in parts:
            vars(self).update(vars(part))


def parse_args(argv: Sequence[str]) -> Arguments:
    """Parse ``hir-trl eval COMMAND [options]``.

    Raises:
        UsageError: no or an unknown command, an unknown flag or a bad value (one line).
        ValueError: a key of a ``--config`` file that is no option of the command.
    """
    argv = list(argv)
    if argv and argv[0] == "--compare":
        argv = ["compare", *argv[1:]]
    if not argv or argv[0].startswith("-"):
        raise UsageError(f"give a command first: {', '.join(COMMANDS)} (hir-trl eval --help)")
    args = Arguments(argv[0], parse_command(make_parser(argv[0]), argv[1:]))
    if args.command == "compare":
        args.reports = [*vars(args).pop("report_files", []), *(args.reports or [])]
        if not args.reports:
            raise UsageError("compare needs report files: hir-trl eval compare base.json trained.json")
    return args


def _benchmark_spec(spec: str) -> tuple[str | None, str]:
    """``NAME=PATH`` -> (NAME, PATH); a path that exists and holds ``=`` is a path.

    Raises:
        ValueError: an empty spec, or ``NAME=PATH`` with an empty (or blank) name or path, naming it.
    """
    if not spec.strip():
        raise ValueError("--benchmark: an empty benchmark: give a file, a folder, a Hub id or NAME=PATH")
    if "=" not in spec or Path(spec).exists():
        return None, spec
    name, path = spec.split("=", 1)
    if not name.strip() or not path.strip():
        raise ValueError(f"--benchmark {spec!r}: NAME=PATH needs both a name and a path "
                         f"({'the path' if name.strip() else 'the name'} is empty), e.g. ifeval=data/ifeval.jsonl")
    return name, path


def _load_benchmarks(args: Arguments) -> list[Benchmark]:
    """The benchmarks of ``--benchmark``, refusing two of one name or one output file name (before anything else
    is done with them).

    Raises:
        ValueError: two benchmarks of one name, or whose names give one responses file (`responses_file_name`).
    """
    benchmarks = []
    for spec in args.benchmark:
        name, path = _benchmark_spec(spec)
        benchmarks.append(load_benchmark(path, format=args.format, name=name, limit=args.limit))
    seen: dict[str, str] = {}
    for benchmark in benchmarks:
        file_name = responses_file_name(benchmark.name)
        if file_name.lower() in seen:
            first = seen[file_name.lower()]
            same = first == benchmark.name
            raise ValueError(f"--benchmark: {first!r} and {benchmark.name!r} "
                             + ("are one name" if same else f"give one responses file name ({file_name}, as a file "
                                "system that ignores case sees it)" if file_name != responses_file_name(first)
                                else f"give one responses file name ({file_name})")
                             + ": name them apart with NAME=PATH, e.g. --benchmark ifeval_a=A.jsonl ifeval_b=B.jsonl")
        seen[file_name.lower()] = benchmark.name
    return benchmarks


def responses_file_name(benchmark_name: str) -> str:
    """The file ``eval generate`` writes a benchmark's responses to: ``<slug of its name>.responses.jsonl`` (two names
    are refused when these differ only in case, as a file system that ignores case would see one file)."""
    return f"{_slug(benchmark_name)}.responses.jsonl"


def _judged_constraints(benchmarks: Sequence[Benchmark]) -> dict[str, int]:
    """Benchmark name -> how many of its constraints only an LLM judge can check (soft ones, and MulDimIF
    requirements no rule can parse), for the benchmarks that have any."""
    counts = {b.name: sum(c.needs_judge for row in b.rows for c in row.constraints) for b in benchmarks}
    return {name: n for name, n in counts.items() if n}


def _build_judge(args: Arguments, benchmarks: Sequence[Benchmark]):
    """The judge of the ``judge_*`` options (`hir_trl.judge.arguments.JudgeArguments`, as training's), built by
    `hir_trl.judge.build_judge` only when a benchmark has constraints only it can check (`_judged_constraints`): None
    for rule-only benchmarks (IFEval, IFBench: neither litellm nor a key is needed) and for an empty ``judge_model``
    (soft constraints are then reported as unjudged). The options are checked in any case (`judge_problem`).

    Raises:
        ValueError: a ``judge_*`` option out of range, or ``--judge_extra_kwargs`` that is not a JSON object; a judge
            that is needed and cannot be built (litellm not installed, its key variable unset): one line naming the
            benchmarks and the fixes, ``--judge_model ''`` among them.
        hir_trl.judge.JudgeCacheError: ``--judge_cache_dir`` cannot be opened or read.
    """
    if isinstance(args.judge_extra_kwargs, str):  # JSON on the command line; a mapping from a --config file
        try:
            args.judge_extra_kwargs = json.loads(args.judge_extra_kwargs)
        except ValueError as exc:
            raise ValueError(f"--judge_extra_kwargs is not valid JSON: {exc}") from None
    problem = judge_problem(args)
    if problem is not None:
        raise ValueError(problem)
    needing = _judged_constraints(benchmarks)
    if not args.judge_model or not needing:
        return None
    try:
        return build_judge(args)
    except (MissingJudgePackageError, MissingJudgeKeyError) as exc:
        count = sum(needing.values())
        them = "them" if count > 1 else "it"
        raise ValueError(f"--benchmark {', '.join(needing)}: {count} constraint{'s' if count > 1 else ''} only an LLM "
                         f"judge can check (soft, or no rule parses {them}), but {exc}; or pass --judge_model '' to "
                         f"report {them} as unjudged") from None


# ------------------------------------------------------------------------------------------- where outputs go
def _same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` are one file: one resolved path, or (both existing) one inode (a hard link)."""
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def input_paths(args: Arguments) -> list[tuple[str, Path]]:
    """Every local file or folder the command reads, with the flag that names it: benchmark files (not Hub
    names), responses files, verifier module files, the judge's cache database, the model folder."""
    found = []
    for spec in getattr(args, "benchmark", None) or []:
        path = Path(_benchmark_spec(spec)[1]).expanduser()
        if path.exists():
            found.append(("--benchmark", path))
    found += [("--responses", Path(p).expanduser()) for p in getattr(args, "responses", None) or []]
    found += [("--verifier_modules", Path(m).expanduser()) for m in getattr(args, "verifier_modules", None) or []
              if m.endswith(".py")]
    if getattr(args, "judge_cache_dir", None):
        found.append(("--judge_cache_dir", Path(args.judge_cache_dir).expanduser() / "judge_cache.sqlite3"))
    model = getattr(args, "model_name_or_path", None)
    if model and Path(model).expanduser().is_dir():
        found.append(("--model_name_or_path", Path(model).expanduser()))
    return found


def check_outputs(outputs: Sequence[tuple[str, Path]], inputs: Sequence[tuple[str, Path]],
                  destination: Path | None = None) -> None:
    """Refuse outputs that would destroy an input or each other, or write through a symbolic link, before anything
    is read, generated or judged.

    Args:
        outputs: (what it is, path) of every file the command writes.
        inputs: (flag, path) of every file or folder it reads (`input_paths`).
        destination: the folder the outputs are written in (``eval generate``'s ``--output_dir``), or None.

    Raises:
        ValueError: an output that is an input file (its path, another spelling, a symbolic or hard link), is an
            existing folder, is another output of this run, is a symbolic link, or leads outside ``destination``
            through one (`hir_trl.errors.write_target_problem`).
    """
    from ..errors import write_target_problem

    for what, out in outputs:
        for flag, source in inputs:
            if _same_file(out, source):
                raise ValueError(f"{what} {out} is the input {flag} {source} (the same file): writing it would destroy "
                                 "the input; choose another output path")
        if out.is_dir():
            raise ValueError(f"{what} {out} is a folder: give a file path")
    for i, (what, out) in enumerate(outputs):
        for other_what, other in outputs[:i]:
            if _same_file(out, other):
                raise ValueError(f"{what} and {other_what} are one file, {out}: choose another path for one of them")
    for what, out in outputs:  # after the checks above, which name an input written over more precisely
        problem = write_target_problem(out, destination)
        if problem is not None:
            raise ValueError(f"{what}: {problem}")


def _writable_folder(folder: Path, flag: str) -> None:
    """Create ``folder`` (with its parents) and write a probe file in it.

    Raises:
        ValueError: it cannot be created or written (a file in the way, no permission, a read-only disk), naming it.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".hir-trl-write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {folder} cannot be written ({one_line(exc)}): choose a folder you can write to") \
            from None


def report_paths(report: Path, plot: str | None) -> list[tuple[str, Path]]:
    """The files a report writes: the JSON, its table beside it (``.txt``) and, with ``--plot``, the PNG."""
    paths = [("the report", report), ("the report's table", report.with_suffix(".txt"))]
    if plot is not None:
        paths.append(("--plot", Path(plot) if plot else report.with_suffix(".png")))
    return paths


#: What an evaluation writes in its ``--output_dir`` (`previous_evaluation` looks for them).
EVALUATION_FILES = ("report.json", "report.txt", "report.png")


def previous_evaluation(output_dir: Path) -> list[Path]:
    """The files an earlier ``eval generate`` left in ``output_dir``: its report (`EVALUATION_FILES`) and its
    ``*.responses.jsonl`` files."""
    if not output_dir.is_dir():
        return []
    found = [output_dir / name for name in EVALUATION_FILES if (output_dir / name).is_file()]
    return found + sorted(p for p in output_dir.glob("*.responses.jsonl") if p.is_file())


def _evaluated_model(output_dir: Path) -> str | None:
    try:
        report = json.loads((output_dir / "report.json").read_text(encoding="utf-8"))
        return str(report["generation"]["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_output_dir(output_dir: Path, overwrite: bool, inputs: Sequence[tuple[str, Path]]) -> list[Path]:
    """Refuse an ``--output_dir`` holding another evaluation unless ``overwrite``; return what ``overwrite`` deletes.

    Raises:
        ValueError: ``output_dir`` is a file; it holds an evaluation (`previous_evaluation`) and ``overwrite`` is
            off (the message names the model it evaluated); ``overwrite`` would delete an input.
    """
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file, not a folder: give a folder (it is created when "
                         "missing)")
    previous = previous_evaluation(output_dir)
    if not previous:
        return []
    if not overwrite:
        model = _evaluated_model(output_dir)
        shown = ", ".join(p.name for p in previous[:3]) + (", ..." if len(previous) > 3 else "")
        raise ValueError(f"--output_dir {output_dir} already holds an evaluation"
                         + (f" of {model}" if model else "") + f" ({shown}): choose another --output_dir for this "
                         "one, or pass --overwrite_output_dir true to replace it")
    for path in previous:
        for flag, source in inputs:
            if _same_file(path, source):
                raise ValueError(f"--overwrite_output_dir true would delete {path}, the input {flag}: move it out of "
                                 f"{output_dir} first, or choose another --output_dir")
    return previous


# ------------------------------------------------------------------------------------------------ the commands
def _write_outputs(report: dict[str, Any], json_path: Path, plot: str | None) -> str:
    table = format_report(report)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    txt_path = json_path.with_suffix(".txt")
    txt_path.write_text(table, encoding="utf-8")
    print(table, end="")
    print(f"\nReport: {json_path}\nTable: {txt_path}")
    if plot is not None:
        png = Path(plot) if plot else json_path.with_suffix(".png")
        print(f"Plot: {plot_categories(report, png)}")
    return table


def _default_output(responses: Sequence[str]) -> Path:
    first = Path(responses[0])
    return first.with_name(first.name.removesuffix(".jsonl").removesuffix(".json") + ".report.json")


def _default_run_name(responses: Sequence[str]) -> str:
    """``<folder>/<stem>`` of the first responses file (``modelA/responses``), so runs scored from files of the
    same name in different folders keep different names in ``compare``."""
    first = Path(responses[0])
    stem = first.name.removesuffix(".jsonl").removesuffix(".json")
    return f"{first.resolve().parent.name}/{stem}" if first.resolve().parent.name else stem


def _check_plot(plot: str | None) -> None:
    """``--plot`` needs matplotlib: checked before the work whose report it draws."""
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ImportError("--plot needs matplotlib: pip install 'hir-trl[plot]', or leave --plot out") from None


def _check_pass_k(pass_k: Sequence[int] | None, num_samples: int | None) -> None:
    bad = [k for k in pass_k or () if k < 1 or (num_samples is not None and k > num_samples)]
    if bad:
        most = f" and --num_samples ({num_samples})" if num_samples is not None else ""
        raise ValueError(f"--pass_k: budgets must be between 1{most}, got {bad}")


def run_score(args: Arguments) -> int:
    output = Path(args.output) if args.output else _default_output(args.responses)
    check_outputs(report_paths(output, args.plot), input_paths(args))
    _check_plot(args.plot)
    _check_pass_k(args.pass_k, args.num_samples)
    benchmarks = _load_benchmarks(args)
    responses = read_responses(args.responses)
    check_responses_fit(benchmarks, responses, args.num_samples, args.allow_missing)
    judge = _build_judge(args, benchmarks)
    _writable_folder(output.parent, "--output's folder")  # before the judge is asked anything
    report = score(benchmarks, responses, judge=judge, allow_unknown=args.allow_unknown,
                   allow_missing=args.allow_missing,
                   num_samples=args.num_samples, ks=args.pass_k,
                   run_name=args.run_name or _default_run_name(args.responses), include_rows=not args.no_rows)
    _write_outputs(report, output, args.plot)
    return 0


def _check_model(model: str) -> None:
    """Refuse a ``--model_name_or_path`` that cannot be loaded, before anything is loaded: a path (``/``, ``./``,
    ``~``, or more than one ``/``) that does not exist (the Hub client would call it a malformed repo id), a file,
    or a folder with neither a model (``config.json``) nor a LoRA adapter (``adapter_config.json``), such as a
    training run's folder holding only checkpoints; offline (``HF_HUB_OFFLINE``), a name that is no local folder and
    no model in the local Hub cache.

    Raises:
        FileNotFoundError, ValueError: naming the folder and the fix.
    """
    from ..data.loading import _looks_local
    from ..evaluation.generation import _hub_cached, _hub_offline

    path = Path(model).expanduser()
    if not path.exists():
        if _looks_local(model):
            raise FileNotFoundError(f"--model_name_or_path {model}: no such checkpoint folder (give a local model "
                                    "directory or a Hub model id such as Qwen/Qwen2.5-7B-Instruct)")
        if _hub_offline() and not _hub_cached(model):
            raise FileNotFoundError(f"--model_name_or_path {model}: no such local folder ({path.absolute()}), and the "
                                    "Hub is offline (HF_HUB_OFFLINE) with no model of that id in its local cache: "
                                    "give the model folder's path, or download the model first")
        return
    if not path.is_dir():
        raise ValueError(f"--model_name_or_path {model} is a file: give the model's folder")
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        checkpoints = sorted((p for p in path.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                             key=lambda p: int(p.name.split("-")[-1]))
        hint = (f"; its latest checkpoint is {checkpoints[-1]}" if checkpoints else "")
        raise ValueError(f"--model_name_or_path {model} holds no model (no config.json) and no LoRA adapter (no "
                         f"adapter_config.json){hint}")


def run_generate(args: Arguments) -> int:
    settings = GenerationSettings(
        model=args.model_name_or_path, num_samples=args.num_samples, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, max_tokens=args.max_tokens, seed=args.seed, batch_size=args.batch_size,
        backend=args.backend, dtype=args.dtype, tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
        base_model=args.base_model_name_or_path)
    _check_model(args.model_name_or_path)
    base = lora_base(args.model_name_or_path, args.base_model_name_or_path)  # a base not found: refused now
    _check_pass_k(args.pass_k, settings.num_samples)
    _check_plot(args.plot)
    sentence_tokenizer_name()  # the sentence splitter the scoring needs (NLTK's Punkt): set up now
    if not str(args.output_dir).strip():
        raise ValueError("--output_dir is empty: give the folder to write the responses and the report in")
    out_dir = Path(args.output_dir)
    inputs = input_paths(args)
    stale = check_output_dir(out_dir, args.overwrite_output_dir, inputs)
    benchmarks = _load_benchmarks(args)
    response_paths = [out_dir / responses_file_name(b.name) for b in benchmarks]
    check_outputs([*((f"--benchmark {b.name}'s responses", p) for b, p in zip(benchmarks, response_paths)),
                   *report_paths(out_dir / "report.json", args.plot)], inputs, out_dir)
    if not args.allow_unknown:
        check_known(benchmarks)
    judge = _build_judge(args, benchmarks)
    backend = choose_backend(settings.backend)
    _writable_folder(out_dir, "--output_dir")
    for path in stale:
        path.unlink()
    if stale:
        print(f"hir-trl eval: --overwrite_output_dir: removed the earlier evaluation in {out_dir} "
              f"({', '.join(p.name for p in stale)})", file=sys.stderr)
    # One request per distinct conversation across all benchmarks; within a benchmark, one per prompt text
    # (responses are matched by prompt text).
    unique: dict[str, list[dict[str, Any]]] = {}
    per_benchmark: list[list[tuple[Any, str]]] = []
    for benchmark in benchmarks:
        rows, seen = [], set()
        for row in benchmark.rows:
            if row.prompt in seen:
                continue
            seen.add(row.prompt)
            key = json.dumps(row.messages, sort_keys=True, ensure_ascii=False)
            unique.setdefault(key, row.messages)
            rows.append((row, key))
        per_benchmark.append(rows)
    keys = list(unique)
    print(f"Generating {settings.num_samples} response(s) for each of {len(keys)} prompts with "
          f"{args.model_name_or_path} (temperature {settings.temperature}, max {settings.max_tokens} tokens, "
          f"seed {settings.seed}).", file=sys.stderr)
    settings.backend = backend
    outputs, backend = generate_responses([unique[k] for k in keys], settings, progress=not args.no_progress,
                                          workdir=out_dir,
                                          announce=lambda line: print(f"hir-trl eval: {line}", file=sys.stderr))
    by_key = dict(zip(keys, outputs))

    responses_by_benchmark = {}
    for benchmark, rows, path in zip(benchmarks, per_benchmark, response_paths):
        by_prompt = {}
        with path.open("w", encoding="utf-8") as handle:
            for row, key in rows:
                by_prompt[row.prompt] = list(by_key[key])
                for s, text in enumerate(by_key[key]):
                    handle.write(json.dumps({"benchmark": benchmark.name, "key": row.key, "sample": s,
                                             "prompt": row.prompt, "response": text}, ensure_ascii=False) + "\n")
        responses_by_benchmark[benchmark.name] = ResponseSet(by_prompt, [str(path)])
    print("Responses: " + ", ".join(map(str, response_paths)), file=sys.stderr)
    generation = {"model": args.model_name_or_path, "backend": backend,
                  **{k: v for k, v in settings.as_dict().items() if k not in ("model", "backend")},
                  "base_model": base}  # a LoRA adapter's base merged into (None: a full model)
    report = score(benchmarks, responses_by_benchmark=responses_by_benchmark, judge=judge,
                   allow_unknown=args.allow_unknown, num_samples=settings.num_samples, ks=args.pass_k,
                   run_name=args.run_name or Path(args.model_name_or_path.rstrip("/")).name, generation=generation,
                   include_rows=not args.no_rows)
    _write_outputs(report, out_dir / "report.json", args.plot)
    return 0


def read_report(path: str | Path) -> dict[str, Any]:
    """The report ``eval score`` / ``eval generate`` wrote at ``path`` (its ``report.json``).

    Raises:
        ValueError: a file that is no UTF-8 JSON object with ``benchmarks`` (a responses ``.jsonl``, a table, another
            JSON file, one nested too deep to read), naming the file and what to give instead.
        OSError: the file cannot be opened.
    """
    hint = "eval compare takes the report.json files that eval score or eval generate write"
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError; a document nested too deep
        why = (f"it does not parse as one JSON document ({exc.msg}, line {exc.lineno})"
               if isinstance(exc, json.JSONDecodeError) else "it is no UTF-8 text" if isinstance(
                   exc, UnicodeDecodeError) else "it is nested too deeply to read")
        looks = "; it looks like JSON Lines (a responses file?)" if str(path).endswith(".jsonl") else ""
        raise ValueError(f"{path} is not a hir-trl eval report: {why}{looks}; {hint}") from None
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), dict):
        raise ValueError(f"{path} is not a hir-trl eval report (no 'benchmarks'); {hint}")
    return report


def run_compare(args: Arguments) -> int:
    if args.names is not None and len(args.names) != len(args.reports):
        raise ValueError(f"--names gives {len(args.names)} names for {len(args.reports)} reports")
    runs = []
    for i, path in enumerate(args.reports):
        report = read_report(path)
        name = args.names[i] if args.names else (report.get("run_name") or Path(path).stem)
        runs.append((name, report))
    print(format_comparison(runs, metric=args.metric), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hir-trl eval``; returns the exit status (0; 2: a user error, printed as one line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    try:
        args = parse_args(argv)
        handler = {"score": run_score, "generate": run_generate, "compare": run_compare}[args.command]
        import_verifier_modules(getattr(args, "verifier_modules", None))
        if getattr(args, "sentence_splitter", None):
            set_sentence_splitter(args.sentence_splitter)
        return handler(args)
    # UsageError (a bad flag), BenchmarkFormatError, ResponsesFormatError, UnknownInstructionError,
    # DatasetFormatError and bad settings are ValueErrors whose message names the flag, file, row or field.
    # JudgeError: a judge cache that cannot be read, or every judge request failing with an error no retry fixes.
    except (ValueError, OSError, ImportError, SentenceTokenizerError, JudgeError) as exc:
        print(f"hir-trl eval: error: {one_line(exc)}", file=sys.stderr)
        return 2


__all__ = ["COMMANDS", "check_output_dir", "check_outputs", "main", "make_parser", "parse_args", "previous_evaluation",
           "read_report", "responses_file_name"]

if __name__ == "__main__":
    sys.exit(main())
