"""``hir-trl eval``: score responses, or generate them from a model and score them, against benchmarks.

::

    hir-trl eval score    --benchmark IFEVAL.jsonl [NAME=PATH ...] --responses responses.jsonl [--output report.json]
    hir-trl eval generate --model CHECKPOINT --benchmark PATH [...] --output-dir DIR
                          [--num-samples 5 --temperature 0.6 --max-tokens 4096 --seed 0]
    hir-trl eval compare  base.json trained.json        (also: hir-trl eval --compare base.json trained.json)

Each run writes a JSON report (every figure and the per-row verdicts) and the same readable table it prints.
Exit status: 0 on success, 2 when an input cannot be used (the message says which file, row or field).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import one_line
from ..judge import JudgeError
from ..verifiers.registry import import_verifier_modules
from ..verifiers.text import SPLITTERS, SentenceTokenizerError, set_sentence_splitter
from .benchmarks import FORMATS, Benchmark, _slug, load_benchmark
from .generation import BACKENDS, GenerationSettings, generate_responses
from .report import format_comparison, format_report, plot_categories
from .scoring import ResponseSet, check_known, check_responses_fit, read_responses, score


def _add_benchmark_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmark", "-b", nargs="+", required=True, metavar="[NAME=]PATH",
                        help="benchmark files: IFEval/IFBench .jsonl, MulDimIF test.json, or HIR-16K/native data; "
                             "or 'ifeval' / 'ifbench': the public Hub dataset (google/IFEval, allenai/IFBench_test, "
                             "cached by datasets); "
                             "NAME=PATH names one (default: IFEval, IFBench, MulDimIF, else the file stem)")
    parser.add_argument("--format", default="auto", choices=("auto", *FORMATS),
                        help="benchmark format of every --benchmark (default: detected from the rows)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="use the first N rows of each benchmark")
    parser.add_argument("--allow-unknown", action="store_true",
                        help="count constraints with an unknown instruction id as failures (default: stop with an "
                             "error naming the rows)")
    parser.add_argument("--pass-k", type=int, nargs="+", default=None, metavar="K",
                        help="pass@k budgets (default: 1, 2, 4, ... up to the number of samples)")
    parser.add_argument("--run-name", default=None,
                        help="name of this run in the report and in --compare tables (default: score: "
                             "<folder>/<stem> of the responses file; generate: the model's folder name)")
    parser.add_argument("--plot", nargs="?", const="", default=None, metavar="PNG",
                        help="also write a PNG of per-category accuracy (needs matplotlib); default path: next to "
                             "the report")
    parser.add_argument("--no-rows", action="store_true", help="leave the per-row verdicts out of the JSON report")
    parser.add_argument("--verifier-modules", "--verifier_modules", nargs="+", default=None, metavar="MODULE",
                        help="modules to import first, so that their hir_trl.register_verifier calls add your own "
                             "constraints (dotted names, found on sys.path or in the current directory, or .py "
                             "files); benchmark rows name them as family/instruction_id (HIR/native data) or "
                             "'family:instruction_id' (IFEval-format instruction_id_list)")
    parser.add_argument("--sentence-splitter", default=None, choices=SPLITTERS,
                        help="sentence splitter: punkt (default: NLTK's own Punkt, as the official scorers) or "
                             "fallback (a regex splitter; reported, and its figures are not official)")
    judge = parser.add_argument_group("judge (soft constraints; without one they are reported as unjudged)")
    judge.add_argument("--judge-model", default=None,
                       help="litellm model string of the judge, e.g. deepseek/deepseek-chat (the paper's), or "
                            "hosted_vllm/<name> with --judge-api-base")
    judge.add_argument("--judge-api-base", default=None, help="judge endpoint, e.g. http://host:8000/v1")
    judge.add_argument("--judge-api-key-env", default=None,
                       help="NAME of the environment variable holding the judge's API key ('' for none)")
    judge.add_argument("--judge-cache-dir", default=None, help="on-disk cache of judge verdicts")
    judge.add_argument("--judge-max-concurrency", type=int, default=None, help="judge requests in flight at once")
    judge.add_argument("--judge-timeout", type=float, default=None, help="seconds per judge request attempt")


def make_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hir-trl eval``."""
    parser = argparse.ArgumentParser(
        prog="hir-trl eval", description="Instruction-following evaluation with the official IFEval conventions "
        "(strict/loose, prompt/instruction level), MulDimIF and HIR-format data, and pass@k.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{score,generate,compare}")

    p = sub.add_parser("score", help="score a JSONL of {prompt, response} lines against benchmarks")
    _add_benchmark_args(p)
    p.add_argument("--responses", "-r", nargs="+", required=True, metavar="JSONL",
                   help="responses files: one {\"prompt\": ..., \"response\": ...} object per line, matched to the "
                        "benchmark by 'key' when the line has one, else by prompt text (whitespace runs collapsed); "
                        "several lines for a prompt are its samples (optional 'sample')")
    p.add_argument("--allow-missing", action="store_true",
                   help="score even when more than a few prompts (3, or 1%% of a benchmark) have no response; they "
                        "count as failures (default: stop with an error, as the file likely answers other prompts)")
    p.add_argument("--num-samples", type=int, default=None,
                   help="samples per prompt; fewer count as failures, extra ones are ignored (default: every "
                        "answered prompt must have the same number of responses, else an error)")
    p.add_argument("--output", "-o", default=None, metavar="JSON",
                   help="report path (default: <first responses file>.report.json); the table goes beside it (.txt)")

    p = sub.add_parser("generate", help="generate responses from a model, then score them")
    _add_benchmark_args(p)
    p.add_argument("--model", "-m", required=True, help="checkpoint directory or Hub model id")
    p.add_argument("--output-dir", "-o", required=True,
                   help="where the responses (<benchmark>.responses.jsonl), report.json and report.txt go")
    p.add_argument("--num-samples", type=int, default=1, help="responses per prompt (paper: 5)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (paper: 0.6; 0: greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1.0: off)")
    p.add_argument("--top-k", type=int, default=0, help="top-k sampling (default 0: off)")
    p.add_argument("--max-tokens", type=int, default=4096, help="most new tokens per response (paper: 4096)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto: vLLM when installed and a GPU is present, else transformers generate")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per generate call (transformers)")
    p.add_argument("--dtype", default="auto", help="model dtype (auto, bfloat16, float16, float32)")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs per model (vLLM)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="GPU memory fraction (vLLM)")
    p.add_argument("--max-model-len", type=int, default=None, help="context length (vLLM; default: the model's)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    p = sub.add_parser("compare", help="runs side by side in the layout of the paper's Table 1, with deltas")
    p.add_argument("reports", nargs="+", metavar="REPORT_JSON",
                   help="report files; the first run is the baseline; reports with the same run name are merged "
                        "(one benchmark each: two reports of one name with the same benchmark are an error)")
    p.add_argument("--names", nargs="+", default=None, help="a name per report (default: its run name or file stem)")
    p.add_argument("--metric", default="headline",
                   help="figure per benchmark: headline (Table 1: prompt-level strict / ILA) or a metric name, e.g. "
                        "prompt_level_loose_acc (IFEval, IFBench), cla (MulDimIF, HIR data); a benchmark without it "
                        "shows n/a, and a metric no benchmark has is an error")
    return parser


def _load_benchmarks(args: argparse.Namespace) -> list[Benchmark]:
    benchmarks = []
    for spec in args.benchmark:
        name, path = (spec.split("=", 1) if "=" in spec and not Path(spec).exists() else (None, spec))
        benchmarks.append(load_benchmark(path, format=args.format, name=name, limit=args.limit))
    return benchmarks


def _build_judge(args: argparse.Namespace):
    if not args.judge_model:
        return None
    try:
        from ..judge import LiteLLMJudge
    except ImportError as exc:  # pragma: no cover - depends on the judge module being present
        raise ImportError("--judge-model needs hir_trl.judge (the litellm judge)") from exc
    options = {"api_base": args.judge_api_base, "api_key_env": args.judge_api_key_env,
               "cache_dir": args.judge_cache_dir, "max_concurrency": args.judge_max_concurrency,
               "timeout": args.judge_timeout}
    try:
        return LiteLLMJudge(args.judge_model, **{k: v for k, v in options.items() if v is not None})
    except KeyError as exc:  # the API key variable is not set
        raise ValueError(exc.args[0] if exc.args else str(exc)) from None


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
    same name in different folders keep different names in ``--compare``."""
    first = Path(responses[0])
    stem = first.name.removesuffix(".jsonl").removesuffix(".json")
    return f"{first.resolve().parent.name}/{stem}" if first.resolve().parent.name else stem


def run_score(args: argparse.Namespace) -> int:
    benchmarks = _load_benchmarks(args)
    responses = read_responses(args.responses)
    check_responses_fit(benchmarks, responses, args.num_samples, args.allow_missing)
    judge = _build_judge(args)
    report = score(benchmarks, responses, judge=judge, allow_unknown=args.allow_unknown,
                   allow_missing=args.allow_missing,
                   num_samples=args.num_samples, ks=args.pass_k,
                   run_name=args.run_name or _default_run_name(args.responses), include_rows=not args.no_rows)
    _write_outputs(report, Path(args.output) if args.output else _default_output(args.responses), args.plot)
    return 0


def _check_model(model: str) -> None:
    """Refuse a ``--model`` that can only be a local folder (a path: ``/``, ``./``, ``~``, or more than one ``/``)
    and does not exist, before anything is loaded (the Hub client would call it a malformed repo id).

    Raises:
        FileNotFoundError: naming the folder.
    """
    from ..data.loading import _looks_local

    if not Path(model).expanduser().exists() and _looks_local(model):
        raise FileNotFoundError(f"--model {model}: no such checkpoint folder (give a local model directory or a Hub "
                                "model id such as Qwen/Qwen2.5-7B-Instruct)")


def run_generate(args: argparse.Namespace) -> int:
    _check_model(args.model)
    benchmarks = _load_benchmarks(args)
    if not args.allow_unknown:
        check_known(benchmarks)  # before spending time on generation
    judge = _build_judge(args)
    settings = GenerationSettings(
        model=args.model, num_samples=args.num_samples, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, max_tokens=args.max_tokens, seed=args.seed, batch_size=args.batch_size,
        backend=args.backend, dtype=args.dtype, tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len)
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
    print(f"Generating {settings.num_samples} response(s) for each of {len(keys)} prompts with {args.model} "
          f"(temperature {settings.temperature}, max {settings.max_tokens} tokens, seed {settings.seed}).",
          file=sys.stderr)
    outputs, backend = generate_responses([unique[k] for k in keys], settings, progress=not args.no_progress)
    by_key = dict(zip(keys, outputs))

    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    responses_by_benchmark, files = {}, []
    for benchmark, rows in zip(benchmarks, per_benchmark):
        path = out_dir / f"{_slug(benchmark.name)}.responses.jsonl"
        by_prompt = {}
        with path.open("w", encoding="utf-8") as handle:
            for row, key in rows:
                by_prompt[row.prompt] = list(by_key[key])
                for s, text in enumerate(by_key[key]):
                    handle.write(json.dumps({"benchmark": benchmark.name, "key": row.key, "sample": s,
                                             "prompt": row.prompt, "response": text}, ensure_ascii=False) + "\n")
        responses_by_benchmark[benchmark.name] = ResponseSet(by_prompt, [str(path)])
        files.append(path)
    print("Responses: " + ", ".join(map(str, files)), file=sys.stderr)
    generation = {"model": args.model, "backend": backend, **{k: v for k, v in settings.as_dict().items()
                                                              if k not in ("model", "backend")}}
    report = score(benchmarks, responses_by_benchmark=responses_by_benchmark, judge=judge,
                   allow_unknown=args.allow_unknown, num_samples=settings.num_samples, ks=args.pass_k,
                   run_name=args.run_name or Path(args.model.rstrip("/")).name, generation=generation,
                   include_rows=not args.no_rows)
    _write_outputs(report, out_dir / "report.json", args.plot)
    return 0


def run_compare(args: argparse.Namespace) -> int:
    if args.names is not None and len(args.names) != len(args.reports):
        raise ValueError(f"--names gives {len(args.names)} names for {len(args.reports)} reports")
    runs = []
    for i, path in enumerate(args.reports):
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
        if not isinstance(report, dict) or "benchmarks" not in report:
            raise ValueError(f"{path} is not a hir-trl eval report (no 'benchmarks')")
        name = args.names[i] if args.names else (report.get("run_name") or Path(path).stem)
        runs.append((name, report))
    print(format_comparison(runs, metric=args.metric), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hir-trl eval``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--compare":
        argv = ["compare", *argv[1:]]
    args = make_parser().parse_args(argv)
    handler = {"score": run_score, "generate": run_generate, "compare": run_compare}[args.command]
    try:
        import_verifier_modules(getattr(args, "verifier_modules", None))
        if getattr(args, "sentence_splitter", None):
            set_sentence_splitter(args.sentence_splitter)
        return handler(args)
    # BenchmarkFormatError, ResponsesFormatError, UnknownInstructionError, DatasetFormatError and bad settings
    # are ValueErrors whose message names the file, row or field.
    # JudgeError: a judge cache that cannot be read, or every judge request failing with an error no retry fixes.
    except (ValueError, OSError, ImportError, SentenceTokenizerError, JudgeError) as exc:
        print(f"hir-trl eval: error: {one_line(exc)}", file=sys.stderr)
        return 2


__all__ = ["main", "make_parser"]

if __name__ == "__main__":
    sys.exit(main())
