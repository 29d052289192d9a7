"""Which `GRPOConfig` options keep TRL's meaning with replays in the batch, and the combinations HiR refuses.

`HiRConfig` subclasses TRL's `GRPOConfig`, so a TRL user's options all parse. This module says, for every field of
the installed `GRPOConfig` (`FIELD_CLASSES`), how HiR treats it, and holds the refusals of the values and
combinations HiR cannot honour (`REFUSALS`): `hir_trl.configs.validate` (`refusal_problem`) raises the first one's
message as a `ValueError` (one line naming the option and the alternative) when a `HiRConfig` is built, before a model
is loaded; `trainer_argument_problem` does the same for `GRPOTrainer` arguments that are not config fields.
`compatibility_rows` is the table docs/configuration.md shows (`scripts/config_reference.py`), and
``tests/trainer/test_config_compat.py`` checks each supported cell's property on the tiny model and that every
`GRPOConfig` field is classified here (a new TRL release cannot slip a field past it).

Pure Python: the table is read by the docs generator and the config, no torch or TRL import at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``loss_type`` values `GRPOTrainer._compute_loss` implements in TRL 1.16.
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
#: Losses that divide by the number of rows of the micro-batch (``grpo``/``sapo``: mean of per-row means;
#: ``luspo``: mean of per-row sums; ``dr_grpo``: rows x max_completion_length), so an empty row (a pad) would shrink
#: every other row's loss. ``bnpo`` divides by the micro-batch's tokens and ``dapo``/``cispo``/``vespo`` by
#: ``num_items_in_batch`` (the generation batch's loss tokens), which a pad does not change.
ROW_NORMALIZED_LOSSES = ("grpo", "sapo", "luspo", "dr_grpo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
#: After TRL's conversion of a boolean (True -> "group", False -> "none").
SCALE_REWARDS = ("group", "batch", "none")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass(frozen=True)
class Refusal:
    """A value or combination of options HiR refuses, with the reason and what to set instead.

    Attributes:
        option: the option(s) as the compatibility table names them.
        value: the refused value or combination, as shown in the table.
        why: why HiR cannot honour it (shown in the table and in the message).
        applies: ``applies(config) -> bool``, True when ``config`` (a `HiRConfig`) is in this cell.
        message: ``message(config) -> str``, the one-line error naming the option, its value and the alternative.
    """

    option: str
    value: str
    why: str
    applies: Callable[[Any], bool]
    message: Callable[[Any], str]


def _choices(option: str, allowed: tuple[str, ...]) -> Refusal:
    return Refusal(
        option, "any other value", f"TRL {'/'.join(allowed)} only (TRL itself fails only once training starts)",
        lambda c: getattr(c, option) not in allowed,
        lambda c: f"{option} must be one of {', '.join(allowed)} (TRL's values), got {getattr(c, option)!r}")


def _pads(config: Any) -> bool:
    """Whether a generation batch can hold padding rows (``replay_shortfall="pad"`` with some replays)."""
    return config.num_replays > 0 and config.replay_shortfall == "pad"


#: Every refusal `HiRConfig` applies, in the order they are checked (`hir_trl.configs.refusal_problem`).
REFUSALS: tuple[Refusal, ...] = (
    _choices("loss_type", LOSS_TYPES),
    _choices("importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS),
    _choices("multi_objective_aggregation", MULTI_OBJECTIVE_AGGREGATIONS),
    _choices("scale_rewards", SCALE_REWARDS),
    Refusal(
        "remove_unused_columns", "true",
        "the trainer would drop the dataset's constraints column, which the constraint reward and the replays read",
        lambda c: bool(c.remove_unused_columns),
        lambda c: "remove_unused_columns: true would drop the dataset's 'constraints' column, which HiR's reward and "
                  "replays read: set remove_unused_columns: false (GRPOConfig's default)"),
    Refusal(
        "use_liger_kernel", "true without a CUDA GPU",
        "Liger's kernels are Triton kernels, which have no CPU driver (TRL fails at the first step)",
        lambda c: bool(c.use_liger_kernel) and not _cuda_available(),
        lambda c: "use_liger_kernel: true needs a CUDA GPU (Liger's Triton kernels have no CPU driver) and none is "
                  "available: set use_liger_kernel: false"),
    Refusal(
        "multi_objective_aggregation + advantage_estimator", "normalize_then_sum with reinforce_pp or "
        "reinforce_pp_baseline",
        "TRL's normalize_then_sum is a group-relative advantage; the Reinforce++ estimators have no group "
        "normalization to apply it to",
        lambda c: c.multi_objective_aggregation == "normalize_then_sum" and c.advantage_estimator != "grpo",
        lambda c: f"multi_objective_aggregation: normalize_then_sum is a group-relative advantage (TRL's), which "
                  f"advantage_estimator: {c.advantage_estimator} does not compute: set advantage_estimator: grpo, "
                  f"or multi_objective_aggregation: sum_then_normalize"),
    Refusal(
        "mask_truncated_completions + replay_truncated_completions", "both true (with num_replays > 0)",
        "TRL masks every truncated completion out of the loss, so a replay of one would carry no loss token",
        lambda c: bool(c.mask_truncated_completions) and bool(c.replay_truncated_completions) and c.num_replays > 0,
        lambda c: "mask_truncated_completions: true takes every truncated completion out of the loss, so with "
                  "replay_truncated_completions: true a replay of one would carry no loss token: set "
                  "replay_truncated_completions: false (only completions that ended are replayed) or "
                  "mask_truncated_completions: false"),
    Refusal(
        "loss_type + replay_shortfall", f"{', '.join(ROW_NORMALIZED_LOSSES)} with pad (and num_replays > 0)",
        "these losses divide by the micro-batch's row count, so an empty padding row would scale every other row's "
        "loss down (3 pads in 16 rows: by 13/16)",
        lambda c: c.loss_type in ROW_NORMALIZED_LOSSES and _pads(c),
        lambda c: f"loss_type: {c.loss_type} divides by the number of rows, so the empty padding rows of "
                  f"replay_shortfall: pad would scale every other row's loss down: set replay_shortfall: resample, or "
                  f"a loss normalized by tokens (loss_type: dapo or bnpo)"),
)


#: `GRPOTrainer` arguments (not config fields) that `HiRTrainer` refuses: name -> (why, the one-line message).
REFUSED_TRAINER_ARGUMENTS: dict[str, tuple[str, str]] = {
    "environment_factory": (
        "a replay (q', y) re-uses its source's completion, whose tool calls ran against the source's environment "
        "instance, and TRL keeps no environment for a row it did not sample (its reward functions read it)",
        "HiRTrainer does not support environment_factory: a replay (q', y) re-uses its source's completion, whose "
        "tool calls ran against an environment instance TRL keeps for sampled rows only; give the reward as "
        "reward_funcs (fn(prompts, completions, **kwargs)), or train with GRPOTrainer"),
}


def trainer_argument_problem(kwargs: dict[str, Any]) -> str | None:
    """The message of the first `REFUSED_TRAINER_ARGUMENTS` entry set (not None) in a `HiRTrainer` call's
    ``kwargs`` (the arguments it passes to `GRPOTrainer`), or None."""
    for name, (_, message) in REFUSED_TRAINER_ARGUMENTS.items():
        if kwargs.get(name) is not None:
            return message
    return None


def check_argument_order(reward_funcs: Any, args: Any) -> None:
    """Refuse a `HiRTrainer` call in the order it once took, ``(model, args, train_dataset, reward_funcs)``: its
    arguments are `GRPOTrainer`'s, in `GRPOTrainer`'s order ``(model, reward_funcs, args, train_dataset, ...)``, so a
    config given second arrives as ``reward_funcs``.

    Raises:
        TypeError: one line naming the fix, when ``reward_funcs`` is a `transformers.TrainingArguments` (a
            `HiRConfig`) or ``args`` is a dataset.
    """
    from transformers import TrainingArguments

    datasets_given = type(args).__module__.split(".")[0] == "datasets" or isinstance(args, list)
    if isinstance(reward_funcs, TrainingArguments) or (datasets_given and reward_funcs is not None):
        raise TypeError(f"HiRTrainer takes GRPOTrainer's arguments in GRPOTrainer's order (model, reward_funcs, args, "
                        f"train_dataset, ...), but got a {type(reward_funcs).__name__} as reward_funcs and a "
                        f"{type(args).__name__} as args: pass them by keyword, HiRTrainer(model, args=config, "
                        "train_dataset=dataset), or as HiRTrainer(model, reward_funcs, config, dataset)")


def check_trainer_arguments(kwargs: dict[str, Any]) -> None:
    """Raise the `trainer_argument_problem` of a `HiRTrainer` call's ``kwargs``, if any, before TRL starts.

    Raises:
        ValueError: one line naming the argument and the alternative.
    """
    problem = trainer_argument_problem(kwargs)
    if problem is not None:
        raise ValueError(problem)


#: Supported cells worth a row of the table: (option, value, what holds with replays). Each is a cell of
#: ``tests/trainer/test_config_compat.py``.
SUPPORTED: tuple[tuple[str, str, str], ...] = (
    ("loss_type", "dapo (default), bnpo, cispo, vespo", "any replay_shortfall; a padding row changes no other row's "
     "loss (it has no loss token, and these losses count tokens)"),
    ("loss_type", ", ".join(ROW_NORMALIZED_LOSSES), "with replay_shortfall: resample (no padding rows), or "
     "num_replays: 0"),
    ("importance_sampling_level", "token, sequence", "TRL's ratio per row; a replay's is pi(y | q') / pi_old(y | q) "
     "(replay_old_logps). TRL refuses sequence with bnpo, dr_grpo, dapo and cispo itself"),
    ("multi_objective_aggregation", "sum_then_normalize (default), normalize_then_sum",
     "with advantage_estimator: grpo the sampled rows get TRL's advantages when HiR adds no row to the estimate; "
     "normalize_then_sum with extra reward functions is refused by HiRTrainer (the replays' per-function "
     "normalization is not implemented)"),
    ("scale_rewards", "group (default), batch, none", "advantage_estimator: grpo only (the Reinforce++ estimators "
     "whiten over all tokens)"),
    ("mask_truncated_completions", "true", "with replay_truncated_completions: false: only completions that ended "
     "are replayed, so every replay carries loss tokens"),
    ("num_iterations, steps_per_generation, gradient_accumulation_steps", "> 1", "every row of the generation batch, "
     "replays included, is used once per iteration"),
    ("top_entropy_quantile", "< 1", "the entropy quantile is taken over loss tokens, which a pad has none of"),
    ("beta", "> 0", "a replay's reference log-probs are under q'"),
    ("reward_weights", "one per reward function", "TRL's weighted sum; a replay's extra rewards are computed on its "
     "own (q', y)"),
    ("per_device_eval_batch_size", "any", "evaluation batches are TRL's (no replay); when evaluation runs, TRL "
     "requires per_device_eval_batch_size x processes to be a multiple of num_generations_eval (or "
     "num_generations)"),
    ("use_liger_kernel", "true on a CUDA GPU", "passed to TRL, which applies Liger's layer kernels (needs the "
     "liger-kernel package); not covered by HiR's tests"),
    ("PEFT (peft_config / use_peft)", "LoRA", "only the adapter's weights train; the reference model is the base"),
)

# ----------------------------------------------------------------------------------- every GRPOConfig field

#: The classes of `FIELD_CLASSES`, with what each means for a field in it.
CLASSES: dict[str, str] = {
    "loss": "acts on each row's loss or advantages, replays included, with TRL's meaning; the table above lists "
            "the values the matrix checks and those refused",
    "layout": "sizes the generation batch; HiR checks that it holds whole groups (`HiRConfig`)",
    "sampling": "how TRL samples, scores or logs the m completions of a group; a replay re-uses a sampled "
                "completion, so it applies to replays through their source",
    "training": "transformers' or TRL's training loop, model loading, precision, logging, saving or distribution: "
                "TRL's meaning, unchanged by replays",
    "refused": "a value HiR cannot honour is refused (table above); the others keep TRL's meaning",
}

_LOSS = ("loss_type", "importance_sampling_level", "epsilon", "epsilon_high", "delta", "sapo_temperature_neg",
         "sapo_temperature_pos", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "beta",
         "num_iterations", "reward_weights", "multi_objective_aggregation", "scale_rewards",
         "mask_truncated_completions", "top_entropy_quantile", "entropy_coef", "use_adaptive_entropy",
         "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target",
         "vllm_importance_sampling_correction", "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max",
         "vllm_importance_sampling_clip_min", "vllm_importance_sampling_cap", "off_policy_mask_threshold",
         "use_bias_correction_kl", "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps",
         "gradient_accumulation_steps", "average_tokens_across_devices")
_LAYOUT = ("per_device_train_batch_size", "per_device_eval_batch_size", "num_generations", "num_generations_eval",
           "generation_batch_size", "steps_per_generation", "dataloader_drop_last", "auto_find_batch_size")
_SAMPLING = ("max_completion_length", "temperature", "top_p", "top_k", "min_p", "generation_kwargs",
             "chat_template_kwargs", "repetition_penalty", "cache_implementation", "use_vllm", "vllm_mode",
             "vllm_model_impl", "vllm_enable_sleep_mode", "vllm_structured_outputs_regex", "vllm_server_base_url",
             "vllm_server_host", "vllm_server_port", "vllm_server_timeout", "vllm_group_port",
             "vllm_gpu_memory_utilization", "vllm_max_model_length", "vllm_tensor_parallel_size",
             "max_tool_calling_iterations", "use_transformers_continuous_batching",
             "transformers_continuous_batching_config", "use_transformers_paged", "ds3_gather_for_generation",
             "pad_to_multiple_of", "shuffle_dataset", "log_completions", "log_multimodal", "num_completions_to_print",
             "log_unique_prompts", "log_completions_hub_repo")
_REFUSED = ("remove_unused_columns", "use_liger_kernel")
_TRAINING = (
    "model_init_kwargs", "trust_remote_code", "router_aux_loss_coef", "disable_dropout", "cast_lm_head_to_fp32",
    "output_dir", "num_train_epochs", "max_steps", "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs",
    "warmup_steps", "optim", "optim_args", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
    "optim_target_modules", "max_grad_norm", "label_smoothing_factor", "bf16", "fp16", "bf16_full_eval",
    "fp16_full_eval", "tf32", "activation_checkpointing", "activation_checkpointing_kwargs", "gradient_checkpointing",
    "gradient_checkpointing_kwargs", "torch_compile", "torch_compile_backend", "torch_compile_mode",
    "liger_kernel_config", "use_cache", "neftune_noise_alpha", "torch_empty_cache_steps", "logging_strategy",
    "logging_steps", "logging_first_step", "log_on_each_node", "logging_nan_inf_filter",
    "include_num_input_tokens_seen", "log_level", "log_level_replica", "disable_tqdm", "report_to", "run_name",
    "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "eval_strategy", "eval_steps",
    "eval_delay", "prediction_loss_only", "eval_on_start", "eval_do_concat_batches", "eval_use_gather_object",
    "eval_accumulation_steps", "include_for_metrics", "batch_eval_metrics", "save_only_model", "save_strategy",
    "save_steps", "save_on_each_node", "save_total_limit", "enable_jit_checkpoint", "push_to_hub", "hub_token",
    "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision", "load_best_model_at_end",
    "metric_for_best_model", "greater_is_better", "ignore_data_skip", "restore_callback_states_from_checkpoint",
    "full_determinism", "seed", "data_seed", "use_cpu", "accelerator_config", "parallelism_config",
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "dataloader_multiprocessing_context", "dataloader_in_order", "label_names", "train_sampling_strategy",
    "length_column_name", "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
    "ddp_static_graph", "ddp_backend", "ddp_timeout", "fsdp", "fsdp_config", "deepspeed", "debug",
    "skip_memory_metrics", "do_train", "do_eval", "do_predict", "resume_from_checkpoint", "local_rank")

#: Every field of TRL 1.16's `GRPOConfig` (with transformers' `TrainingArguments`) -> its class in `CLASSES`.
FIELD_CLASSES: dict[str, str] = {
    name: cls for cls, names in (("loss", _LOSS), ("layout", _LAYOUT), ("sampling", _SAMPLING),
                                 ("refused", _REFUSED), ("training", _TRAINING)) for name in names}


def compatibility_rows() -> list[tuple[str, str, str]]:
    """The compatibility table: ``(option, value, "supported: ..." or "refused: ...")`` rows, the supported cells
    first, then every refusal of `REFUSALS` and `REFUSED_TRAINER_ARGUMENTS`."""
    rows = [(option, value, f"supported: {what}") for option, value, what in SUPPORTED]
    rows += [(r.option, r.value, f"refused by `HiRConfig`: {r.why}") for r in REFUSALS]
    rows += [(f"{name} (`GRPOTrainer` argument)", "any", f"refused by `HiRTrainer`: {why}")
             for name, (why, _) in REFUSED_TRAINER_ARGUMENTS.items()]
    return rows


__all__ = ["CLASSES", "FIELD_CLASSES", "LOSS_TYPES", "REFUSALS", "REFUSED_TRAINER_ARGUMENTS", "Refusal", "SUPPORTED",
           "check_trainer_arguments", "compatibility_rows", "trainer_argument_problem"]
