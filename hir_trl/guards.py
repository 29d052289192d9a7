"""Guards that keep a run from training on nothing or on non-finite numbers, and from writing a credential.

Three kinds, each stopping the run with a message that names the cause (`NonFiniteTrainingError` or `RewardFunctionError`,
`ValueError` subclasses printed by ``hir-trl train`` as one line with exit status 2; nothing that looks like a result is saved):

- `config_problem`: settings that cannot train, checked when a `hir_trl.HiRConfig` is built (before
  `trl.GRPOConfig` converts anything): a non-finite ``learning_rate`` (or another optimizer number), ``reward_weights``
  holding NaN or inf, ``max_steps: -1`` with ``num_train_epochs <= 0``, a generation batch that is no whole number of
  groups (naming the fields the user sets), and a credential inside a dict option (`hir_trl.judge.config`).
- `checked_reward_function`: wraps a TRL-style reward function so that what it returns is checked on every call:
  one number (or None) per completion, each finite; a string, a scalar or NaN/inf names the function.
- `NonFiniteGuard`: a `transformers.TrainerCallback` that stops training before the optimizer applies a gradient
  that is not finite, and after a step that leaves a parameter or the logged loss non-finite.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transformers import TrainerCallback


class NonFiniteTrainingError(ValueError):
    """Training met a NaN or inf (a reward, the loss, a gradient or a parameter); the message names where."""


class RewardFunctionError(ValueError):
    """A reward function returned something TRL cannot read as one reward per completion; the message names it."""


#: Optimizer and schedule numbers of `transformers.TrainingArguments` that must be finite (a NaN learning rate
#: trains every weight to NaN without any error).
FINITE_FIELDS = ("learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
                 "warmup_ratio", "num_train_epochs", "beta", "epsilon", "temperature")


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def config_problem(args: Any) -> str | None:
    """What makes these settings unable to train (a message naming the field and the fix), or None.

    Called from `hir_trl.HiRConfig.__post_init__` before `trl.GRPOConfig.__post_init__`, so the world size is read
    from the ``WORLD_SIZE`` environment variable (1 when unset), as launchers set it.

    Checks: `FINITE_FIELDS` and every ``reward_weights`` entry are finite; ``max_steps: -1`` needs
    ``num_train_epochs > 0``; ``per_device_train_batch_size x (steps_per_generation or gradient_accumulation_steps)
    x processes`` is a multiple of ``num_generations`` (unless ``generation_batch_size`` is set: TRL's own check then
    names it); no dict option holds a credential (`hir_trl.judge.config.options_credential_problem`).
    """
    from .judge.config import options_credential_problem

    for name in FINITE_FIELDS:
        value = getattr(args, name, None)
        if _number(value) and not math.isfinite(value):
            return f"{name} must be a finite number, got {value}"
    weights = getattr(args, "reward_weights", None)
    if weights is not None:
        for index, weight in enumerate(weights):
            if not _number(weight) or not math.isfinite(weight):
                return (f"reward_weights[{index}] must be a finite number, got {weight!r} (one weight per reward: "
                        "the constraint reward first, then each reward function)")
    if getattr(args, "max_steps", None) == -1 and _number(getattr(args, "num_train_epochs", None)) \
            and args.num_train_epochs <= 0:
        return (f"max_steps is -1 and num_train_epochs is {args.num_train_epochs}: nothing would be trained; set "
                "num_train_epochs > 0 or max_steps >= 1")
    m = getattr(args, "num_generations", None)
    per_device = getattr(args, "per_device_train_batch_size", None)
    if isinstance(m, int) and m > 0 and isinstance(per_device, int) and getattr(args, "generation_batch_size",
                                                                                None) is None:
        spg = getattr(args, "steps_per_generation", None)
        steps, steps_name = ((spg, "steps_per_generation") if spg is not None
                             else (getattr(args, "gradient_accumulation_steps", 1), "gradient_accumulation_steps"))
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        rows = per_device * steps * world
        if isinstance(steps, int) and rows % m:
            processes = f" x {world} processes" if world > 1 else ""
            return (f"per_device_train_batch_size ({per_device}) x {steps_name} ({steps}){processes} = {rows} "
                    f"completions per generation batch, which is not a multiple of num_generations ({m}): every "
                    f"prompt needs its {m} completions in one batch; set per_device_train_batch_size to a multiple "
                    f"of {m} (or change num_generations)")
    return options_credential_problem(args)


# ------------------------------------------------------------------------------------------ reward functions


def check_rewards(name: str, rewards: Any, expected: int) -> list[float | None]:
    """``rewards`` as TRL reads them, or a `NonFiniteTrainingError`/`ValueError` naming the function ``name``.

    Args:
        name: the reward function's name (TRL's ``reward_func_names`` entry).
        rewards: what the function returned for ``expected`` completions.
        expected: the number of completions it was given.

    Raises:
        RewardFunctionError: not a sequence of ``expected`` numbers or None (a string, a scalar, a dict, a string
            item).
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
        if not _number(value):
            raise RewardFunctionError(f"{hint}; item {index} is {type(value).__name__} {value!r:.40}")
        if not math.isfinite(value):
            raise NonFiniteTrainingError(f"reward function {name!r} returned {value} for completion {index}: rewards "
                                         "must be finite (return None for a completion it does not score)")
    return values


def checked_reward_function(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a TRL-style reward function, sync or ``async def``) with its results checked on every call by
    `check_rewards`; the wrapper keeps its ``__name__`` (TRL's metric names) and signature."""
    from .trl_internals import get_callable_name, is_async_callable

    if getattr(function, "__hir_checked__", False):
        return function
    name = get_callable_name(function)

    if is_async_callable(function):
        @functools.wraps(function)
        async def checked_async(*args: Any, **kwargs: Any) -> list[float | None]:
            return check_rewards(name, await function(*args, **kwargs), len(kwargs.get("completions", ())))

        checked_async.__name__ = name
        checked_async.__hir_checked__ = True
        return checked_async

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> list[float | None]:
        return check_rewards(name, function(*args, **kwargs), len(kwargs.get("completions", ())))

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


__all__ = ["FINITE_FIELDS", "NonFiniteGuard", "NonFiniteTrainingError", "RewardFunctionError", "check_rewards", "checked_reward_function",
           "config_problem"]
