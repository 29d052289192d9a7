"""Instruction-following evaluation that follows the official scorers: ``hir-trl eval``.

- `load_benchmark` reads IFEval / IFBench ``.jsonl``, MulDimIF ``test.json`` or any HIR-16K / native dataset.
- `read_responses` reads ``{"prompt", "response"}`` JSONL lines (several per prompt: its samples).
- `evaluate` / `score` give every figure (prompt- and instruction-level accuracy, strict and loose; ILA and
  CLA), their mean and standard deviation over samples, pass@k, breakdowns and the per-row verdicts.
- `generate_responses` samples responses with vLLM (GPU) or transformers ``generate``.
- `format_report`, `format_comparison` (the paper's Table 1 layout) and `plot_categories` render reports.
- The ``hir-trl eval`` command (``score``, ``generate``, ``compare`` / ``--compare``) is `hir_trl.cli.eval`.

Python use::

    from hir_trl.evaluation import load_benchmark, read_responses, score, format_report

    bench = load_benchmark("input_data.jsonl")                 # IFEval, detected from its rows
    report = score([bench], read_responses("responses.jsonl"), judge=None)
    print(format_report(report))
"""

from .benchmarks import (
    DISPLAY_NAMES,
    FORMATS,
    Benchmark,
    BenchmarkFormatError,
    EvalConstraint,
    EvalRow,
    detect_format,
    load_benchmark,
)
from .generation import GenerationSettings, choose_backend, generate_responses
from .report import TABLE1_BENCHMARKS, format_benchmark, format_comparison, format_report, plot_categories
from .scoring import (
    HEADLINE,
    ResponseSet,
    ResponsesFormatError,
    UnknownInstructionError,
    check_known,
    default_ks,
    evaluate,
    pass_at_k,
    read_responses,
    score,
)

__all__ = [
    "DISPLAY_NAMES",
    "FORMATS",
    "HEADLINE",
    "TABLE1_BENCHMARKS",
    "Benchmark",
    "BenchmarkFormatError",
    "EvalConstraint",
    "EvalRow",
    "GenerationSettings",
    "ResponseSet",
    "ResponsesFormatError",
    "UnknownInstructionError",
    "check_known",
    "choose_backend",
    "default_ks",
    "detect_format",
    "evaluate",
    "format_benchmark",
    "format_comparison",
    "format_report",
    "generate_responses",
    "load_benchmark",
    "pass_at_k",
    "plot_categories",
    "read_responses",
    "score",
]
