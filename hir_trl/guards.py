"""Guards that keep a run from training on non-finite numbers, checked while it runs.

Two kinds, each stopping the run with a message that names the cause (`NonFiniteTrainingError` or `RewardFunctionError`,
`ValueError` subclasses printed by ``hir-trl train`` as one line with exit status 2; nothing that looks like a result is saved):

- `checked_reward_function`: wraps a TRL-style reward function so that it gets its own copies of the rows (what it
  changes in them stays its own) and what it returns is checked on every call: one number (or None) per completion,
  each finite (a boolean is 1.0/0.0, as TRL reads it); a string, a scalar or NaN/inf names the function.
- `NonFiniteGuard`: a `transformers.TrainerCallback` that stops training before the optimizer applies a gradient
  that is not finite, and after a step that leaves a parameter or the logged loss non-finite.

Settings that cannot train (a non-finite ``learning_rate`` or reward weight, nothing to train, a credential in an
option) are refused before a run starts, when the `hir_trl.HiRConfig` is built (`hir_trl.configs.validate`); training
data with fewer rows than one step's prompts when the trainer is built (`check_enough_rows`), and a run that still
ends without an optimizer step (`NothingTrainedGuard`) or with a zero gradient at every step (`ZeroGradientGuard`)
when it ends.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transformers import TrainerCallback


class NonFiniteTrainingError(ValueError):
    """Training met a NaN or inf (a reward, the loss, a gradient or a parameter); the message names where."""


class NothingTrainedError(ValueError):
    """Training would train, or trained, no optimizer step (the data holds fewer prompts than one step samples), or
    every step's gradient was zero (`ZeroGradientGuard`)."""


class RewardFunctionError(ValueError):
    """A reward function returned something TRL cannot read as one reward per completion; the message names it."""


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# ------------------------------------------------------------------------------------------ reward functions


def check_rewards(name: str, rewards: Any, expected: int) -> list[float | None]:
    """``rewards`` as TRL reads them, or a `NonFiniteTrainingError`/`ValueError` naming the function ``name``.

    Args:
        name: the reward function's name (TRL's ``reward_func_names`` entry).
        rewards: what the function returned for ``expected`` completions.
        expected: the number of completions it was given.

    Returns:
        The rewards as a list, a boolean (``True``/``False``, a NumPy or torch boolean) as 1.0/0.0, as TRL reads
        a boolean result (``torch.tensor`` of it).

    Raises:
        RewardFunctionError: not a sequence of ``expected`` numbers, booleans or None (a string, a scalar, a dict, a
            string item).
        NonFiniteTrainingError: an item that is NaN or inf.
    """
    hint = (f"reward function {name!r} must return a list of {expected} numbers (or None for a completion it does "
            "not score), one per completion")
    if isinstance(rewards, (str, bytes, Mapping)) or not isinstance(rewards, Sequence) and not hasattr(
            rewards, "tolist"):
        raise RewardFunctionError(f"{hint}; it returned {type(rewards).__name__} {rewards!r:.60}")
    values = rewards.tolist() if hasattr(rewards, "tolist") else list(rewards)
    if not isinstance(values, list):
        raise RewardFunctionError(f"{hint}; it returned a scalar {values!r:.60}")
    if len(values) != expected:
        raise RewardFunctionError(f"{hint}; it returned {len(values)}")
    for index, value in enumerate(values):
        if value is None:
            continue
        if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", None) == "b":
            values[index] = value = float(value)  # True/False as 1.0/0.0, as TRL reads them (torch.tensor)
        if not _number(value):
            raise RewardFunctionError(f"{hint}; item {index} is {type(value).__name__} {value!r:.40}")
        if not math.isfinite(value):
            raise NonFiniteTrainingError(f"reward function {name!r} returned {value} for completion {index}: rewards "
                                         "must be finite (return None for a completion it does not score)")
    return values


#: Reward-function arguments shared with the trainer, never copied: TRL's state, its logging callbacks and the
#: rows' environments (objects a function may act on).
SHARED_REWARD_ARGUMENTS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})


def own_copies(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A reward function's own copies of its call's arguments: every list, tuple or dict (``prompts``,
    ``completions``, ``completion_ids``, the dataset columns) deep-copied, `SHARED_REWARD_ARGUMENTS` as they are; so
    that a function that changes its input (``completions[i] = ...``, ``c[0]["content"] += ...``) changes neither
    the next function's input nor the completion log, nor a replay's rewards."""
    def own(value: Any) -> Any:
        return copy.deepcopy(value) if isinstance(value, (list, tuple, dict)) else value

    return [own(a) for a in args], {k: v if k in SHARED_REWARD_ARGUMENTS else own(v) for k, v in kwargs.items()}


def checked_reward_function(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a TRL-style reward function, sync or ``async def``) called with its own copies of its arguments
    (`own_copies`), with its results checked on every call by `check_rewards`; the wrapper keeps its ``__name__``
    (TRL's metric names) and signature."""
    from .trl_internals import get_callable_name, is_async_callable

    if getattr(function, "__hir_checked__", False):
        return function
    name = get_callable_name(function)

    if is_async_callable(function):
        @functools.wraps(function)
        async def checked_async(*args: Any, **kwargs: Any) -> list[float | None]:
            expected = len(kwargs.get("completions", ()))
            args, kwargs = own_copies(args, kwargs)
            return check_rewards(name, await function(*args, **kwargs), expected)

        checked_async.__name__ = name
        checked_async.__hir_checked__ = True
        return checked_async

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> list[float | None]:
        expected = len(kwargs.get("completions", ()))
        args, kwargs = own_copies(args, kwargs)
        return check_rewards(name, function(*args, **kwargs), expected)

    checked.__name__ = name
    checked.__hir_checked__ = True
    return checked


# ------------------------------------------------------------------------------------------ the training loop


def _first_non_finite(named: Any, grads: bool) -> str | None:
    """The name of the first trainable parameter whose gradient (``grads``) or value is not finite, or None; one
    device sync per call. Parameters without a gradient (frozen, or held by DeepSpeed), empty shards (ZeRO-3) and
    meta tensors are skipped; a DTensor (FSDP2) is checked through its local shard."""
    import torch

    items = []
    for name, p in named:
        tensor = p.grad if grads else p
        if not p.requires_grad or tensor is None:
            continue
        tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if tensor.device.type != "meta" and tensor.numel():
            items.append((name, tensor.detach()))
    if not items:
        return None
    device = items[0][1].device
    flags = torch.stack([torch.isfinite(t).all().to(device) for _, t in items])
    if bool(flags.all()):
        return None
    return items[int((~flags).nonzero()[0])][0]


class NonFiniteGuard(TrainerCallback):
    """Stop training on a non-finite gradient, parameter or logged loss (`NonFiniteTrainingError`), naming the step
    and the first parameter concerned, before anything is saved.

    ``on_pre_optimizer_step`` (after gradient clipping, before `torch.optim.Optimizer.step`) checks every gradient,
    so a NaN loss never reaches the weights; ``on_optimizer_step`` checks the parameters (a step that overflowed);
    ``on_log`` checks ``loss`` and ``grad_norm``.
    """

    _CAUSES = ("check that the reward functions and reward_weights give finite numbers, and lower learning_rate "
               "(or set max_grad_norm)")

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        bad = None if model is None else _first_non_finite(model.named_parameters(), grads=True)
        if bad is not None:
            raise NonFiniteTrainingError(f"step {state.global_step + 1}: the gradient of {bad} is NaN or inf; "
                                         f"training stopped before the optimizer step; {self._CAUSES}")

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        bad = None if model is None else _first_non_finite(model.named_parameters(), grads=False)
        if bad is not None:
            raise NonFiniteTrainingError(f"step {state.global_step + 1}: parameter {bad} became NaN or inf after the "
                                         f"optimizer step; {self._CAUSES}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "grad_norm"):
            value = (logs or {}).get(key)
            if _number(value) and not math.isfinite(value):
                raise NonFiniteTrainingError(f"step {state.global_step}: {key} is {value}; {self._CAUSES}")


def prompts_per_step(args: Any) -> int:
    """Prompts one generation batch samples, all ranks together: ``generation_batch_size / num_generations``
    (``generation_batch_size`` = per_device_train_batch_size x processes x steps_per_generation, as TRL derives it).
    TRL's sampler drops a partial batch, so data with fewer rows trains no step."""
    return args.generation_batch_size // args.num_generations


def check_enough_rows(args: Any, train_dataset: Any) -> None:
    """Refuse training data with fewer rows than one step's prompts (`prompts_per_step`), which would train no step
    and still save a model; a dataset without a length (streaming) is left to `NothingTrainedGuard`.

    Raises:
        NothingTrainedError: naming both numbers and the settings that make the step's.
    """
    if train_dataset is None or not hasattr(train_dataset, "__len__"):
        return
    rows, needed = len(train_dataset), prompts_per_step(args)
    if rows < needed:
        raise NothingTrainedError(
            f"the training data has {rows} row(s), fewer than the {needed} prompts one step samples "
            f"(generation_batch_size {args.generation_batch_size} / num_generations {args.num_generations}; "
            f"generation_batch_size = per_device_train_batch_size {args.per_device_train_batch_size} x "
            f"{args.world_size} process(es) x steps_per_generation {args.steps_per_generation}): no step would be "
            "trained; add rows, or lower per_device_train_batch_size (or steps_per_generation / "
            "gradient_accumulation_steps)")


class NothingTrainedGuard(TrainerCallback):
    """Stop a run that ends without an optimizer step while it had steps to train (`NothingTrainedError`): the data
    ran out before the first full batch (a streaming dataset shorter than one step's prompts, `prompts_per_step`).
    Raised at ``on_train_end``, so that nothing looks like a result; a resumed run already at ``max_steps`` is not
    an error (it has nothing to do)."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.stepped = False

    def on_step_end(self, args, state, control, **kwargs):
        self.stepped = True

    def on_train_end(self, args, state, control, **kwargs):
        finished = state.max_steps > 0 and state.global_step >= state.max_steps
        if not getattr(self, "stepped", True) and not finished:
            raise NothingTrainedError(
                f"trained no optimizer step (stopped at step {state.global_step} of {state.max_steps}): the training "
                f"data gave no full batch of {prompts_per_step(args)} prompts (generation_batch_size / "
                "num_generations; a partial batch is dropped); add rows, or lower per_device_train_batch_size")


class ZeroGradientGuard(TrainerCallback):
    """Tell a run whose every optimizer step had a gradient of exactly zero: its weights never moved, so nothing it
    saves is a result. At ``on_train_end`` it logs one warning (`problem` holds the message); ``hir-trl train`` then
    stops with that line and exit status 2 before the final save (`NothingTrainedError`), and a Python caller can
    read `problem` (or `check`) after ``trainer.train()``.

    That happens when every group's completions get the same reward (greedy-like sampling, a reward that never
    varies, no replays to tell them apart): every advantage is 0 (and, with ``beta`` 0 or a policy that never left
    the reference, so is the KL term's gradient). ``on_pre_optimizer_step`` looks at the gradients until the first
    step with one non-zero entry (one device sync per step until then, none after). Gradients the model does not
    hold (DeepSpeed keeps them in its own buffers) are not judged.
    """

    def __init__(self) -> None:
        self.zero_steps, self.moved, self.problem = 0, False, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.zero_steps, self.moved, self.problem = 0, False, None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.moved or model is None:
            return
        import torch

        grads = []
        for p in model.parameters():
            grad = p.grad if p.requires_grad else None
            grad = grad.to_local() if hasattr(grad, "to_local") else grad
            if grad is not None and grad.device.type != "meta" and grad.numel():
                grads.append(grad.detach())
        if not grads:
            return
        device = grads[0].device
        if bool(torch.stack([g.ne(0).any().to(device) for g in grads]).any()):
            self.moved = True
        else:
            self.zero_steps += 1

    def on_train_end(self, args, state, control, **kwargs):
        if not self.moved and self.zero_steps > 0:
            self.problem = (
                f"every optimizer step ({self.zero_steps}) had a gradient of exactly zero: the weights never moved, "
                "so nothing was trained; every group's completions got the same reward (all advantages 0): check "
                "that the constraints and reward functions score completions apart, sample at a higher temperature, "
                "or set num_replays >= 1")
            import logging

            logging.getLogger(__name__).warning("%s", self.problem)

    def check(self) -> None:
        """Raise `problem`, if the run that ended trained nothing.

        Raises:
            NothingTrainedError: every optimizer step of the run had a gradient of exactly zero.
        """
        if self.problem is not None:
            raise NothingTrainedError(self.problem)


__all__ = ["NonFiniteGuard", "NonFiniteTrainingError", "NothingTrainedError", "NothingTrainedGuard",
           "RewardFunctionError", "ZeroGradientGuard", "check_enough_rows", "check_rewards", "checked_reward_function", "own_copies",
           "prompts_per_step"]
