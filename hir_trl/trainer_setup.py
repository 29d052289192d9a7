"""How a `HiRTrainer` is set up: its arguments checked before `GRPOTrainer.__init__`, itself prepared after, and its
reward functions.

`HiRTrainer.__init__` is `grpo_arguments` (the checks, in order, and the arguments TRL gets: normalized datasets, the
`hir_trl.rewards.ConstraintReward` first of ``reward_funcs``), then `GRPOTrainer.__init__`, then `prepare_trainer`
(the guards, KL in the reward, the prompt-length check, the completion log's size, the log lines). `trainer_reward`
assembles the reward functions (the `ConstraintReward`, then any TRL-style functions or reward models, named as
``trl grpo`` names them: `named_reward_functions`), refusing soft constraints without a judge
(`check_soft_constraints_judged`) and any function TRL's call would fail on (`extra_rewards_problem`, which
``hir-trl train`` asks before the model loads).
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .compat import check_argument_order, check_trainer_arguments
from .configs import HiRConfig
from .data.loading import (
    check_prompt_lengths,
    count_soft_constraints,
    drop_soft_constraints,
    normalize_dataset,
    prompt_length_limits,
)
from .guards import NonFiniteGuard, NothingTrainedGuard, ZeroGradientGuard, check_enough_rows, checked_reward_function
from .judge import DeferredJudge, Judge, build_judge
from .models.adapter_base import record_adapter_base
from .models.workarounds import check_head_size, fix_colocate_weight_sync, vllm_runs_on_cpu
from .rewards import ConstraintReward
from .run_folder import warn_hub_upload
from .step.shortfall import shortfall_policy
from .trl_adapter import TRLPasses
from .verifiers import sentence_backend

logger = logging.getLogger("hir_trl.trainer")  # what the trainer's set-up reports is the trainer's log


def grpo_arguments(trainer: Any, model: Any, reward_funcs: Any, args: HiRConfig | None, train_dataset: Any,
                   kwargs: dict[str, Any], *, judge: Judge | None, dataset_name: str | None) -> dict[str, Any]:
    """`HiRTrainer.__init__`'s checks and set-up before `GRPOTrainer.__init__`, in this order: the argument order
    (`hir_trl.compat.check_argument_order`), ``args`` (default ``HiRConfig("<model>-HiR")``), the `GRPOTrainer`
    arguments replays cannot honour (`hir_trl.compat.check_trainer_arguments`), vLLM installed when ``use_vllm``, the
    datasets normalized (`hir_trl.data.loading.normalize_dataset`), the reward functions (`trainer_reward`), enough
    training rows (`hir_trl.guards.check_enough_rows`), the head size vLLM's CPU build takes (colocated on CPU).

    Sets on ``trainer``: ``hir_passes`` (its `hir_trl.trl_adapter.TRLPasses`), ``extra_reward_funcs``,
    ``constraint_reward``, ``dataset_name``, ``last_replay`` (None) and ``_shortfall`` (the
    `hir_trl.step.shortfall.shortfall_policy` of ``args``).

    Args:
        trainer: the `HiRTrainer` being built (before `GRPOTrainer.__init__`).
        model, reward_funcs, args, train_dataset, judge, dataset_name: `HiRTrainer`'s arguments.
        kwargs: `HiRTrainer`'s other `GRPOTrainer` arguments by name (``eval_dataset``, ``processing_class``, ...,
            ``environment_factory``); its ``eval_dataset`` is replaced by the normalized one.

    Returns:
        `GRPOTrainer.__init__`'s keyword arguments but ``model``: ``reward_funcs`` (the `ConstraintReward` first),
        ``args``, ``train_dataset`` and ``kwargs``.

    Raises:
        As `HiRTrainer` (its "Raises"), in the order above.
    """
    check_argument_order(reward_funcs, args)
    if args is None:
        name = model if isinstance(model, str) else model.config._name_or_path
        args = HiRConfig(f"{str(name).split('/')[-1]}-HiR")
    if not isinstance(args, HiRConfig):
        raise TypeError(f"HiRTrainer needs a HiRConfig, got {type(args).__name__}")
    check_trainer_arguments(kwargs)  # GRPOTrainer arguments replays cannot honour (`hir_trl.compat`)
    # HiR's per-trainer state and its one way to TRL (the hooks' and the step's, `hir_trl.step.StepPasses`)
    trainer.hir_passes = TRLPasses(trainer, seed=args.seed)
    if args.use_vllm:
        from .models.smollm2 import MissingDependencyError

        if not trainer.hir_passes.vllm_available():
            raise MissingDependencyError("use_vllm: true needs vLLM, which is not installed: pip install "
                                         "'hir-trl[vllm]' (a vLLM in TRL's supported range; on CPU: docs/scale-out.md "
                                         "'vLLM on CPU'), or set use_vllm: false to sample with transformers "
                                         "generate")
    train_dataset = normalize_dataset(train_dataset, "train_dataset")
    eval_dataset = normalize_dataset(kwargs.get("eval_dataset"), "eval_dataset")
    reward_funcs, train_dataset, eval_dataset = trainer_reward(args, train_dataset, eval_dataset, reward_funcs, judge)
    check_enough_rows(args, train_dataset)  # fewer rows than one step's prompts would train nothing
    if eval_dataset is not None:
        kwargs["eval_dataset"] = eval_dataset
    reward_funcs, trainer.extra_reward_funcs = reward_funcs[0], reward_funcs[1:]
    if args.use_vllm and args.vllm_mode == "colocate" and vllm_runs_on_cpu():
        check_head_size(model)
    trainer.constraint_reward = reward_funcs
    trainer.dataset_name = dataset_name
    trainer.last_replay = None  # what the latest HiR generation batch added on this rank
    trainer._shortfall = shortfall_policy(args.replay_shortfall, args.num_replays)  # chosen once (`hir_trl.step.shortfall`)
    return dict(reward_funcs=[reward_funcs, *trainer.extra_reward_funcs], args=args, train_dataset=train_dataset,
                **kwargs)


def prepare_trainer(trainer: Any) -> None:
    """`HiRTrainer.__init__`'s set-up after `GRPOTrainer.__init__`: ``extra_reward_funcs`` as TRL loaded them (a
    reward model prepared), the weight sync of vLLM's CPU build (colocated), the guards
    (`hir_trl.guards.NonFiniteGuard`, `hir_trl.guards.NothingTrainedGuard`, ``zero_gradient_guard``, a
    `hir_trl.guards.ZeroGradientGuard`), ``kl_coef`` (``beta`` moved into the reward under ``kl_in_reward``, else 0),
    every training and evaluation prompt's length (`hir_trl.data.loading.check_prompt_lengths`), the completion log
    resized to hold a generation batch's replays, and the log lines (sentence splitter, recording while sampling).

    Raises:
        DatasetFormatError: a prompt too long to sample from, with its token count.
    """
    args = trainer.args
    trainer.extra_reward_funcs = list(trainer.reward_funcs[1:])  # a reward model as TRL loaded and prepared it
    if trainer.use_vllm and trainer.vllm_mode == "colocate" and vllm_runs_on_cpu():
        fix_colocate_weight_sync(trainer.vllm_generation)  # vLLM's CPU build repacks its weights
    trainer.add_callback(NonFiniteGuard())  # stop on a NaN/inf gradient, parameter or loss (`hir_trl.guards`)
    trainer.add_callback(NothingTrainedGuard())  # a run that ends without an optimizer step is an error
    trainer.zero_gradient_guard = ZeroGradientGuard()  # a run whose every step's gradient was zero: told
    trainer.add_callback(trainer.zero_gradient_guard)
    # KL in the reward (released code): HiR takes beta as the KL-in-reward coefficient, TRL's KL loss term off
    trainer.kl_coef = trainer.hir_passes.move_kl_to_reward() if args.kl_in_reward else 0.0
    limits = prompt_length_limits(  # a prompt must leave room to sample (`hir_trl.data.loading.check_prompt_lengths`)
        args.max_prompt_length,
        getattr(trainer.accelerator.unwrap_model(trainer.model).config, "max_position_embeddings", None),
        trainer.max_completion_length)
    for name, dataset in (("train_dataset", trainer.train_dataset), ("eval_dataset", trainer.eval_dataset)):
        for part, split in (dataset.items() if isinstance(dataset, dict) else [(None, dataset)]):
            check_prompt_lengths(split, name if part is None else f"{name}[{part!r}]",
                                 trainer.hir_passes.tokenize_prompts, limits)
    groups = args.generation_batch_size // args.num_generations  # the log holds k more rows per group
    trainer.hir_passes.resize_completion_log(args.generation_batch_size + groups * args.num_replays)
    logger.info("HiR verifiers: sentence splitter = %s", sentence_backend())
    no_recording = trainer.hir_passes.after_trl_init()  # the step timer on CUDA; can generate record while sampling?
    record_adapter_base(trainer.model)  # a LoRA adapter's adapter_config.json names a base that loads elsewhere
    warn_hub_upload(args, trainer.accelerator.is_main_process)  # do the completion logs go up with the model?
    logger.info("HiR token entropies / sampling log-probs: %s", "recorded while generate samples"
                if no_recording is None else f"not recorded ({no_recording})")


class SoftConstraintsWithoutJudgeError(ValueError):
    """The data has soft (LLM-judged) constraints, no judge is configured and ``soft_constraints`` is 'judge'."""


def check_soft_constraints_judged(train_dataset: Any, eval_dataset: Any = None) -> None:
    """Refuse to train when soft constraints would silently get reward 0 (HiRConfig ``soft_constraints: judge``).

    Raises:
        SoftConstraintsWithoutJudgeError: (a `ValueError`) the training or evaluation data holds soft constraints
            (or is a streaming dataset, which cannot be checked) and no judge is configured.
    """
    for split, dataset in (("training", train_dataset), ("evaluation", eval_dataset)):
        counts = count_soft_constraints(dataset)
        if counts is not None and counts[0] == 0:
            continue
        what = (f"{counts[0]} soft (LLM-judged) constraint(s) in {counts[1]} row(s)" if counts is not None else
                "a streaming dataset, which may hold soft (LLM-judged) constraints")
        raise SoftConstraintsWithoutJudgeError(
            f"the {split} data has {what} but no judge is configured (judge_model is empty), so they would all fail "
            "silently: set judge_model (and judge_api_key_env, the NAME of the variable holding the key; "
            "docs/judge.md), or choose explicitly with soft_constraints: fail (they count as unmet) or "
            "soft_constraints: skip (they are removed and not rewarded)")


#: Rows of a streaming dataset read before training to see whether it holds soft constraints (`judge_for`).
PEEK_ROWS = 64


def judge_for(args: Any, train_dataset: Any, eval_dataset: Any = None) -> Any:
    """The judge a built `ConstraintReward` gets: `hir_trl.judge.build_judge` of ``args`` when the data has soft
    constraints, None when it has none; for data that cannot be counted (a streaming `datasets.IterableDataset`), the
    judge when one of its first `PEEK_ROWS` rows has a soft constraint, else a `hir_trl.judge.DeferredJudge`, built
    only if a soft constraint comes (so that rule-checked data never needs the judge's key).

    Raises:
        hir_trl.judge.MissingJudgeKeyError: the judge is needed now and its key variable is unset.
    """
    unknown = False
    for dataset in (train_dataset, eval_dataset):
        for split in (dataset.values() if isinstance(dataset, Mapping) else [dataset]):
            counts = count_soft_constraints(split)
            if counts is None:
                rows = list(itertools.islice(iter(split), PEEK_ROWS))
                counts = count_soft_constraints(rows)
                unknown = True
            if counts[0] > 0:
                return build_judge(args)  # None without judge_model
    return DeferredJudge(args) if unknown and args.judge_model else None


def trainer_reward(args: Any, train_dataset: Any, eval_dataset: Any = None, reward_funcs: Any = None,
                   judge: Any = None) -> tuple[list[Any], Any, Any]:
    """The reward functions of a `HiRTrainer`, the `ConstraintReward` first, and its datasets after
    ``soft_constraints: skip``.

    Args:
        args: the `HiRConfig` (``soft_constraints``, ``reward_mode``, ``reward_weights``, the judge fields).
        train_dataset, eval_dataset: normalized datasets (`hir_trl.load_hir_dataset`), or None.
        reward_funcs: None (build the constraint reward), one reward function, or a list: at most one
            `ConstraintReward`, first, and TRL-style reward functions ``fn(prompts, completions, **kwargs) ->
            list[float | None]`` (see `hir_trl.step.rewards.extra_rewards`) or reward models (`is_reward_model`: a model id or folder,
            which `GRPOTrainer` loads as a sequence-classification model with its tokenizer, or a loaded model).
            Without a `ConstraintReward`, one is built and put first.
        judge: the soft-constraint judge for a built reward; None builds one from ``judge_model`` when the data has
            soft constraints.

    Returns:
        ``(reward_funcs, train_dataset, eval_dataset)``; ``reward_funcs[0]`` is the `ConstraintReward`, its
        ``reward_mode`` set to ``args.reward_mode``; the other functions are wrapped so that each call's result is
        checked (`hir_trl.guards.checked_reward_function`: one finite number or None per completion); reward models
        are passed on as they are, for `GRPOTrainer` to load.

    Raises:
        TypeError: a reward that is neither a function nor a reward model, or a second `ConstraintReward`.
        ValueError: ``soft_constraints: skip`` leaves no training row; a reward function TRL's call would fail on
            (`reward_call_problem`); a `ConstraintReward` whose ``reward_mode``
            differs from ``args.reward_mode`` (both named), a
            `ConstraintReward` that is not first, ``reward_weights`` of the wrong length, or extra reward functions
            with ``multi_objective_aggregation`` other than ``"sum_then_normalize"``.
        SoftConstraintsWithoutJudgeError: see `check_soft_constraints_judged`.
        KeyError: ``judge_api_key_env`` names an unset variable.
    """
    funcs = [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [
        reward_funcs]
    constraint = [f for f in funcs if isinstance(f, ConstraintReward)]
    if len(constraint) > 1:
        raise TypeError(f"HiRTrainer takes one ConstraintReward, got {len(constraint)}")
    if constraint and funcs[0] is not constraint[0]:
        raise ValueError("the ConstraintReward must be the first of reward_funcs (reward_weights[0] is its weight)")
    extras = funcs[1:] if constraint else funcs
    for f in extras:
        if not (is_reward_model(f) or callable(f)):
            raise TypeError("HiRTrainer adds TRL-style reward functions fn(prompts, completions, **kwargs) -> "
                            "list[float | None] and reward models (a model id or folder, or a loaded sequence-"
                            f"classification model) to the constraint reward; got {type(f).__name__} {f!r:.60}")
    if args.soft_constraints == "skip":
        train_dataset = drop_soft_constraints(train_dataset)
        eval_dataset = None if eval_dataset is None else drop_soft_constraints(eval_dataset)
        if hasattr(train_dataset, "__len__") and len(train_dataset) == 0:
            raise ValueError("soft_constraints: skip removed every row of the training data (each held only soft "
                             "constraints, which no rule verifier checks): nothing is left to train on; set "
                             "judge_model and soft_constraints: judge (docs/judge.md), or add rows with hard "
                             "constraints")
    if constraint:
        reward = constraint[0]
        if reward.reward_mode is not None and reward.reward_mode != args.reward_mode:
            raise ValueError(f"the ConstraintReward passed in has reward_mode={reward.reward_mode!r} but "
                             f"HiRConfig.reward_mode={args.reward_mode!r}: the config owns the reward mode; set "
                             "reward_mode in HiRConfig and build ConstraintReward without it")
    else:
        if judge is None:
            judge = judge_for(args, train_dataset, eval_dataset)
        reward = ConstraintReward(judge=judge)
    reward.reward_mode = args.reward_mode
    problem = extra_rewards_problem(extras, getattr(train_dataset, "column_names", None) or [],
                                    getattr(args, "reward_weights", None))
    if problem is not None:
        raise ValueError(problem)
    aggregation = getattr(args, "multi_objective_aggregation", "sum_then_normalize")
    if extras and aggregation != "sum_then_normalize":
        raise ValueError("HiRTrainer sums the weighted rewards of every row, replays included "
                         f"(multi_objective_aggregation='sum_then_normalize'), got {aggregation!r}")
    if reward.judge is None and args.soft_constraints == "judge":
        check_soft_constraints_judged(train_dataset, eval_dataset)
    return ([reward, *(f if is_reward_model(f) else checked_reward_function(f) for f in extras)], train_dataset,
            eval_dataset)


#: The reward functions ``trl grpo`` knows by name (its ``reward_funcs_registry``), each built as it builds it
#: (``get_soft_overlong_punishment`` with ``max_completion_len=1280, soft_punish_cache=256``).
TRL_REWARD_FUNCTIONS: dict[str, Callable[[], Callable[..., Any]]] = {
    "accuracy_reward": lambda: _trl_reward("accuracy_reward"),
    "reasoning_accuracy_reward": lambda: _trl_reward("reasoning_accuracy_reward"),
    "think_format_reward": lambda: _trl_reward("think_format_reward"),
    "get_soft_overlong_punishment": lambda: _trl_reward("get_soft_overlong_punishment")(max_completion_len=1280,
                                                                                          soft_punish_cache=256),
}


def _trl_reward(name: str) -> Callable[..., Any]:
    from .trl_internals import trl_rewards

    return getattr(trl_rewards, name)


def names_reward_model(name: str) -> bool:
    """Whether a ``reward_funcs`` entry names a reward model rather than a function: a local folder, or a Hub id
    (a ``/`` in it: ``org/model``), as `GRPOTrainer` takes a string in ``reward_funcs``."""
    import os

    return os.path.isdir(os.path.expanduser(name)) or "/" in name or "\\" in name


def is_reward_model(function: Any) -> bool:
    """Whether an entry of ``reward_funcs`` is a reward model: a model id or folder (a string), or a loaded model
    (a ``torch.nn.Module``), which `GRPOTrainer` scores with ``logits[:, 0]``."""
    return isinstance(function, str) or _is_module(function)


def named_reward_functions(names: Sequence[str] | None) -> list[Any]:
    """The reward functions of ``reward_funcs`` names, as ``trl grpo`` resolves them (``trl/scripts/grpo.py``): a
    name of `TRL_REWARD_FUNCTIONS` (TRL's ``trl.rewards``), a dotted path ``module.function`` imported from
    ``sys.path`` or the current directory (``trl.rewards.think_format_reward`` too), or a reward model's Hub id or
    folder (`names_reward_model`), kept as the string `GRPOTrainer` loads. `HiRTrainer` adds them after the
    constraint reward, weighted by ``reward_weights``, and scores each replay's own (q', y) with them.

    Returns:
        The functions (a model as its id or folder), in the order of ``names`` ([] for None).

    Raises:
        ValueError: one line naming the entry: a name that is neither TRL's nor dotted, a module that cannot be
            imported (with the first line of its error), a module without that attribute, or an attribute that
            is not callable.
    """
    import importlib
    import os
    import sys

    functions: list[Any] = []
    for name in names or ():
        if name in TRL_REWARD_FUNCTIONS:
            functions.append(TRL_REWARD_FUNCTIONS[name]())
            continue
        if names_reward_model(name):
            functions.append(name)  # GRPOTrainer loads it (AutoModelForSequenceClassification, num_labels=1)
            continue
        module_name, _, attribute = name.rpartition(".")
        if not module_name or not attribute:
            raise ValueError(f"reward_funcs: {name!r} is neither a reward function TRL names "
                             f"({', '.join(TRL_REWARD_FUNCTIONS)}) nor a dotted path module.function")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as trl grpo: a module of the current directory
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported as one line
            reason = (str(exc).strip().splitlines() or [""])[0]
            raise ValueError(f"reward_funcs: {name}: cannot import module {module_name!r}: {type(exc).__name__}: "
                             f"{reason}") from exc
        function = getattr(module, attribute, None)
        if function is None:
            raise ValueError(f"reward_funcs: {name}: module {module_name!r} has no {attribute!r}")
        if not callable(function):
            raise ValueError(f"reward_funcs: {name} is a {type(function).__name__}, not a reward function "
                             "fn(prompts, completions, **kwargs) -> list[float | None]")
        functions.append(function)
    return functions


#: What TRL passes every reward function besides the dataset columns (`GRPOTrainer._calculate_rewards`).
_REWARD_CALL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


def reward_call_problem(function: Callable[..., Any], columns: Sequence[str]) -> str | None:
    """Why TRL's call of ``function`` would fail, or None: it is called with the keywords ``prompts``,
    ``completions``, ``completion_ids``, ``trainer_state``, ``log_extra``, ``log_metric`` and one per dataset column
    but ``prompt`` (`GRPOTrainer._calculate_rewards`; a replay's call, `hir_trl.trl_adapter.TRLPasses
    .replay_reward_kwargs`, passes the same); a function that cannot bind them (no ``**kwargs``, or a required
    parameter no column holds, such as ``accuracy_reward``'s ``solution``) would fail at the first step."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: leave it to the call
        return None
    names = [*_REWARD_CALL_KEYWORDS, *(c for c in columns if c not in ("prompt", "completion", "completion_ids"))]
    if "environments" in signature.parameters:
        names.append("environments")
    try:
        signature.bind(**dict.fromkeys(names))
    except TypeError as exc:
        return (f"reward function {getattr(function, '__name__', function)!r} cannot take TRL's call "
                f"fn({', '.join(_REWARD_CALL_KEYWORDS[:3])}, **columns) on these rows (columns: "
                f"{', '.join(sorted(set(names) - set(_REWARD_CALL_KEYWORDS)))}): {exc}; give it **kwargs, and "
                "no required parameter the rows do not hold")
    return None


def extra_rewards_problem(functions: Sequence[Callable[..., Any]], columns: Sequence[str],
                          reward_weights: Sequence[float] | None) -> str | None:
    """The first problem of the extra reward functions of a `HiRTrainer`, as one line, or None: ``reward_weights``
    whose count is not one per reward (the constraint reward's first), or a function TRL's call would fail on
    (`reward_call_problem`). `trainer_reward` and ``hir-trl train`` (before the model loads) ask it."""
    if reward_weights is not None and len(reward_weights) != 1 + len(functions):
        return (f"reward_weights has {len(reward_weights)} weight(s) for {1 + len(functions)} reward(s): one per "
                "reward, the constraint reward first, then each of reward_funcs' functions")
    for function in functions:
        if is_reward_model(function):  # scored as GRPOTrainer scores a model: prompt + completion text
            continue
        problem = reward_call_problem(function, columns)
        if problem is not None:
            return problem
    return None


def _is_module(function: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of training
        return False
    return isinstance(function, torch.nn.Module)
