"""Every place HiR reads or changes `trl.GRPOTrainer`'s private state, in one small adapter.

TRL (1.16) has no public hook for what HiR needs here: appending rows to the completion log, generating one
completion per prompt inside a training step, or knowing whether it ran its own old-log-prob pass. Each function
below names the private attribute it relies on; `tests/test_trl_adapter.py` runs each against the installed TRL
and fails loudly when TRL's behaviour changes.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: Completion-log buffers of ``GRPOTrainer._logs`` that hold one value per logged row.
ROW_BUFFERS = ("prompt", "completion", "advantages")


def trl_computes_old_logps(trainer: Any) -> bool:
    """True when `GRPOTrainer._generate_and_score_completions` runs its own no-grad old-log-prob pass.

    TRL's condition (trl/trainer/grpo_trainer.py, "generate_every"): the optimizer step is not aligned with the
    generation (``gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0``), or vLLM's
    importance-sampling correction is on.
    """
    generate_every = trainer.args.steps_per_generation * trainer.num_iterations
    return trainer.args.gradient_accumulation_steps % generate_every != 0 or bool(
        trainer.use_vllm and trainer.vllm_importance_sampling_correction)


def tokenize_prompts(trainer: Any, prompts: Sequence[Any]) -> list[list[int]]:
    """Prompt token ids as TRL tokenizes them for generation (chat template applied), via
    ``GRPOTrainer._tokenize_prompts`` (its first return value)."""
    return trainer._tokenize_prompts(list(prompts))[0]


def resize_completion_log(trainer: Any, size: int) -> None:
    """Make ``GRPOTrainer._logs`` hold ``size`` rows (TRL sizes it to one generation batch; HiR adds k rows per
    group)."""
    trainer._logs = {
        "images": deque(maxlen=size),
        "prompt": deque(maxlen=size),
        "completion": deque(maxlen=size),
        "rewards": defaultdict(lambda: deque(maxlen=size)),
        "advantages": deque(maxlen=size),
        "extra": defaultdict(lambda: deque(maxlen=size)),
    }


def _empty_log() -> dict[str, Any]:
    return {"images": deque(), "prompt": deque(), "completion": deque(), "rewards": defaultdict(deque),
            "advantages": deque(), "extra": defaultdict(deque)}


def start_completion_log(trainer: Any) -> None:
    """Empty the completion log (``GRPOTrainer._logs``) before a generation batch, so that the file TRL writes at the
    next log (``completions/completions_<step>.parquet``, in `GRPOTrainer.log`) holds exactly this batch's rows.

    TRL keeps fixed-size buffers (one generation batch) and relies on every batch filling them; a HiR batch logs a
    varying number of rows (padding rows are not logged), so rows of the previous batch would stay. The buffers keep
    their size (`resize_completion_log`); the columns (``rewards``, ``extra``) are dropped and refilled."""
    for name in ("images", *ROW_BUFFERS):
        trainer._logs[name].clear()
    for part in ("rewards", "extra"):
        trainer._logs[part].clear()


@contextmanager
def separate_completion_log(trainer: Any) -> Iterator[None]:
    """Within the block (an evaluation loop, `transformers.Trainer.evaluation_loop`), the completion log is a
    separate one, dropped on exit: TRL would otherwise add the evaluation batches' rows to the training step's log and
    rewrite that step's ``completions_<step>.parquet`` with them at the evaluation's log. Evaluation metrics
    (``_metrics["eval"]``) are untouched."""
    saved = trainer._logs
    trainer._logs = _empty_log()
    try:
        yield
    finally:
        trainer._logs = saved


@contextmanager
def generation_group_size(trainer: Any, size: int) -> Iterator[None]:
    """Within the block, `GRPOTrainer._generate_and_score_completions` treats every ``size`` consecutive prompts as
    one group: TRL reads ``trainer.num_generations`` there (its advantages and reward statistics, and its vLLM path,
    which samples ``size`` completions for each group's prompt)."""
    saved = trainer.num_generations
    trainer.num_generations = size
    try:
        yield
    finally:
        trainer.num_generations = saved


def one_completion_per_prompt(trainer: Any):
    """Within the block, `GRPOTrainer._generate_and_score_completions` samples one completion per prompt (and
    computes its advantages over groups of 1): `generation_group_size` 1."""
    return generation_group_size(trainer, 1)


@contextmanager
def keep_logged_rows(trainer: Any) -> Iterator[list[bool]]:
    """Within the block, the completion log (``GRPOTrainer._logs``) fills fresh buffers; on exit, only the rows whose
    flag the block appended to the yielded list (one per row logged, gathered over ranks, in TRL's order) join the
    real log. A buffer of another length (e.g. ``images``, empty for text) joins whole; on an exception nothing
    joins."""
    saved = trainer._logs
    trainer._logs = _empty_log()
    keep: list[bool] = []
    fresh = trainer._logs
    try:
        yield keep
    except BaseException:
        trainer._logs = saved
        raise
    trainer._logs = saved

    def kept(values: deque) -> list[Any]:
        return [v for v, k in zip(values, keep) if k] if len(values) == len(keep) else list(values)

    for name in ("images", *ROW_BUFFERS):
        saved[name].extend(kept(fresh[name]))
    for part in ("rewards", "extra"):
        for column, values in fresh[part].items():
            saved[part][column].extend(kept(values))


@contextmanager
def discard_records(trainer: Any, rows_per_rank: int) -> Iterator[None]:
    """Undo what one call of `GRPOTrainer._generate_and_score_completions` inside the block adds to the step's
    metrics (``_metrics["train"]``, except the ``num_tokens`` counter) and to the completion log (``_logs``, its extra
    columns included): ``rows_per_rank`` prompts on every rank, gathered."""
    metrics = trainer._metrics["train"]
    lengths = {key: len(values) for key, values in metrics.items()}
    extra = {column: list(values) for column, values in trainer._logs["extra"].items()}  # e.g. ``verdicts``
    yield
    for key, values in metrics.items():
        if key != "num_tokens":
            del values[lengths.get(key, 0):]
    added = rows_per_rank * trainer.accelerator.num_processes
    logs = trainer._logs
    for buffer in [*(logs[name] for name in ROW_BUFFERS), *logs["rewards"].values()]:
        for _ in range(min(added, len(buffer))):
            buffer.pop()
    for column in list(logs["extra"]):  # TRL flushed the reward's ``log_extra`` columns for these rows too
        if column in extra:
            logs["extra"][column].clear()
            logs["extra"][column].extend(extra[column])
        else:
            del logs["extra"][column]


def replace_logged_advantages(trainer: Any, advantages: Sequence[float]) -> None:
    """Replace the advantages of the last ``len(advantages)`` logged rows (TRL logged them before HiR changed
    them)."""
    buffer = trainer._logs["advantages"]
    for _ in advantages:
        buffer.pop()
    buffer.extend(advantages)


def log_completions(trainer: Any, prompts: Sequence[Any], completions: Sequence[Any], rewards: Sequence[float],
                    advantages: Sequence[float], extra: dict[str, Sequence[Any]],
                    new_row_extra: dict[str, Sequence[Any]] | None = None) -> None:
    """Append rows (already gathered over ranks) to the completion log.

    Args:
        prompts, completions, rewards, advantages: one value per new row (``rewards`` goes to every reward column).
        extra: HiR's extra columns, each with values for the rows TRL already logged this step, then one per new
            row.
        new_row_extra: columns TRL already filled for its rows (e.g. ``verdicts``), with one value per new row.
            TRL's other extra columns get None for the new rows.
    """
    new_row_extra = new_row_extra or {}
    logs = trainer._logs
    logs["prompt"].extend(prompts)
    logs["completion"].extend(completions)
    for name in trainer.reward_func_names:
        logs["rewards"][name].extend(rewards)
    logs["advantages"].extend(advantages)
    for column in list(logs["extra"]):
        if column not in extra:
            logs["extra"][column].extend(new_row_extra.get(column, [None] * len(prompts)))
    for column, values in extra.items():
        logs["extra"][column].extend(values)


def has_log_columns(trainer: Any, columns: Sequence[str]) -> bool:
    """Whether the completion log already has any of ``columns`` as extra columns."""
    return any(column in trainer._logs["extra"] for column in columns)


def extend_log_columns(trainer: Any, values: dict[str, Sequence[Any]]) -> None:
    """Append values to extra columns of the completion log (rows TRL logged)."""
    for column, column_values in values.items():
        trainer._logs["extra"][column].extend(column_values)


def sampling_record_problem(trainer: Any) -> str | None:
    """None when `HiRTrainer._generate_single_turn` can record entropies and log-probs while sampling, else why not
    (reads TRL's ``use_vllm``, ``use_transformers_continuous_batching``, ``tools``, ``rollout_func`` and
    ``generation_config``)."""
    from .sampling import sampling_changes_policy

    if trainer.use_vllm:
        return "vLLM generates: its sampling_per_token_logps are used"
    if getattr(trainer, "use_transformers_continuous_batching", False):
        return "transformers continuous batching has no logits-processor hook"
    if trainer.tools or getattr(trainer, "rollout_func", None) is not None:
        return "tools or a rollout_func generate"
    model = trainer.accelerator.unwrap_model(trainer.model)
    reason = sampling_changes_policy(trainer.generation_config, getattr(model, "generation_config", None))
    return None if reason is None else f"a logit processor changes the policy's logits: {reason}"


def log_hindsight_rows(trainer: Any, row_ids: Sequence[str], sampled_advantages: Sequence[float],
                       entries: Sequence[tuple], new_advantages: Sequence[float]) -> None:
    """The completion log of a HiR step (all lists gathered over ranks): TRL logged the sampled rows before HiR
    changed their advantages, so those are replaced; then the new rows (`hir_trl.step_log.completion_log_rows`
    entries) are appended, and HiR's columns (``row_id``, ``hindsight``, ``supplementary``, ``kept_constraints``)
    cover both; the reward's ``verdicts`` column gets the new rows' entries (None for a replay, whose constraints
    are the kept ones)."""
    replace_logged_advantages(trainer, sampled_advantages)
    n = len(row_ids)
    log_completions(
        trainer, [e.prompt for e in entries], [e.completion for e in entries], [e.reward for e in entries],
        new_advantages,
        extra={"row_id": list(row_ids) + [e.row_id for e in entries],
               "hindsight": [False] * n + [e.hindsight for e in entries],
               "supplementary": [False] * n + [e.supplementary for e in entries],
               "kept_constraints": [None] * n + [e.kept_constraints for e in entries]},
        new_row_extra={"verdicts": [e.verdicts for e in entries]})


@contextmanager
def replay_ratio_logging(trainer: Any, inputs: dict[str, Any]) -> Iterator[None]:
    """Around one `GRPOTrainer._compute_loss` call: log ``hir/replay_ratio_mean`` and ``hir/replay_clip_ratio`` of
    the micro-batch's replay rows from the loss's own log-probs (no extra forward pass).

    Within the block, the first call of the trainer's ``_get_per_token_logps_and_entropies`` (TRL's loss forward)
    is seen through: its log-probs, with the batch's ``old_per_token_logps``, ``advantages`` and loss mask, give
    `hir_trl.step_log.replay_ratio_counts` (TRL's ``epsilon_low``, ``epsilon_high`` and
    ``importance_sampling_level``), summed over ranks with ``accelerator.reduce`` (every rank computes the loss of
    each micro-batch, so the reduction stays in step), appended to ``_metrics[mode]``. A batch without HiR's
    ``replay_mask`` (evaluation, or a step HiR does not complete) logs nothing, nor does a micro-batch of no
    replay token on any rank.
    """
    from .loss_weighting import REPLAY_MASK
    from .step_log import replay_ratio_counts, replay_ratio_metrics

    if inputs.get(REPLAY_MASK) is None:
        yield
        return
    seen: list[Any] = []
    inner = trainer._get_per_token_logps_and_entropies  # the class's method, or a wrapper set on the instance
    patched = "_get_per_token_logps_and_entropies" in vars(trainer)

    def seeing(*args: Any, **kwargs: Any):
        out = inner(*args, **kwargs)
        if not seen:
            seen.append(out[0])
        return out

    trainer._get_per_token_logps_and_entropies = seeing
    try:
        yield
    finally:
        if patched:
            trainer._get_per_token_logps_and_entropies = inner
        else:
            del trainer._get_per_token_logps_and_entropies
    if not seen:  # a loss computed without TRL's forward (none in TRL 1.16): nothing to measure
        return
    mask = inputs["completion_mask"] if inputs.get("tool_mask") is None else \
        inputs["completion_mask"] * inputs["tool_mask"]
    counts = replay_ratio_counts(seen[0], inputs.get("old_per_token_logps"), mask, inputs[REPLAY_MASK],
                                 inputs["advantages"], epsilon_low=trainer.epsilon_low,
                                 epsilon_high=trainer.epsilon_high, level=trainer.importance_sampling_level)
    totals = trainer.accelerator.reduce(counts, reduction="sum").tolist()
    mode = "train" if trainer.model.training else "eval"
    for name, value in replay_ratio_metrics(totals).items():
        trainer._metrics[mode][name].append(value)
