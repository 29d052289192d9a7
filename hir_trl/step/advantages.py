"""Advantages of a HiR generation batch: the estimators and the replay terms (torch only, no trainer).

- `ESTIMATORS`: the advantage estimators by ``advantage_estimator`` name (``grpo``: TRL's group baseline and
  ``scale_rewards``; ``reinforce_pp`` / ``reinforce_pp_baseline``: the paper's Reinforce++, verl's
  ``reinforce_plus_plus`` / ``reinforce_plus_plus_baseline``); `group_advantages` runs the chosen one on rewards and
  group membership.
- `REPLAY_ADVANTAGES`: how replays enter the advantages, by ``replay_advantage`` name (``group``: one more row of
  their source's group under the estimator; ``positive`` / ``paired``: the estimator over the sampled rows only,
  then `add_replay_advantages`, +w r' on each replay and (paired) -w r' on its source); `hir_advantages` runs the
  chosen one.
- `kl_return_to_go`: the per-token KL penalty of ``kl_in_reward`` as a return-to-go (gamma 1).

Every function takes ``gather`` (the trainer's ``accelerator.gather``) where a statistic spans all ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import chosen
from ..trl_internals import nanstd
from .batch import group_members, loss_mask

#: The estimator `GRPOTrainer` itself computes (KL, if any, in TRL's loss): with it, no replay and no KL in the
#: reward, a HiR generation batch is TRL's own; ``kl_in_reward`` needs one of the others.
TRL_ESTIMATOR = "grpo"


def _identity(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def grpo_advantages(rewards: torch.Tensor, members: Sequence[Sequence[int]], loss_mask: torch.Tensor, *,
                    scale_rewards: str = "group", kl: torch.Tensor | None = None, kl_coef: float = 0.0,
                    gather: Callable[[torch.Tensor], torch.Tensor] = _identity) -> torch.Tensor:
    """``grpo``: (N,) reward minus the group mean, divided by the group's std (``scale_rewards="group"``) or the
    batch's (``"batch"``) plus 1e-4, as `GRPOTrainer._generate_and_score_completions` computes them; 0 for a NaN
    reward. ``kl`` is not used (TRL's loss holds the KL term).

    Raises:
        ValueError: an unknown ``scale_rewards``.
    """
    advantages = torch.zeros_like(rewards)
    batch_std = nanstd(gather(rewards)) if scale_rewards == "batch" else None
    for rows in members:
        idx = torch.tensor(rows, device=rewards.device, dtype=torch.long)
        r = rewards[idx]
        centred = r - torch.nanmean(r)
        if scale_rewards == "group":
            centred = centred / (nanstd(r) + 1e-4)
        elif scale_rewards == "batch":
            centred = centred / (batch_std + 1e-4)
        elif scale_rewards != "none":
            raise ValueError(f"Invalid value for scale_rewards: {scale_rewards}")
        advantages[idx] = centred
    return torch.nan_to_num(advantages, nan=0.0)


def normalize_then_sum_advantages(rewards: torch.Tensor, members: Sequence[Sequence[int]], *,
                                  reward_weight: float = 1.0,
                                  gather: Callable[[torch.Tensor], torch.Tensor] = _identity) -> torch.Tensor:
    """``grpo`` under ``multi_objective_aggregation="normalize_then_sum"`` with one reward function: (N,) the
    reward normalized within its group, (r - mean) / (std + 1e-4), times its weight, then normalized over the
    batch of all ranks, (x - mean) / (std + 1e-4), as `GRPOTrainer._generate_and_score_completions` computes it
    (``scale_rewards`` is not used there either); 0 for a NaN reward (a row outside every estimate).

    Args:
        rewards: (N,) weighted rewards ``reward_weight x r`` (`hir_trl.step.rewards.weighted_rewards` of the one
            function), NaN for rows outside the estimate; the group statistics are of r, recovered from them.
        members: row indices of each group.
        reward_weight: the function's weight (``reward_weights[0]``).
        gather: concatenates a tensor over ranks along dim 0 (every rank holds N rows).
    """
    normalized = torch.full_like(rewards, float("nan"))
    for rows in members:
        idx = torch.tensor(rows, device=rewards.device, dtype=torch.long)
        r = rewards[idx]
        # w (r - mean r) / (std r + 1e-4) from the weighted rewards R = w r: (R - mean R) / (std R / |w| + 1e-4)
        normalized[idx] = (torch.zeros_like(r).masked_fill(torch.isnan(r), float("nan")) if reward_weight == 0 else
                           (r - torch.nanmean(r)) / (nanstd(r) / abs(reward_weight) + 1e-4))
    every = gather(normalized)
    advantages = (normalized - torch.nanmean(every)) / (nanstd(every) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def reinforce_pp_advantages(rewards: torch.Tensor, members: Sequence[Sequence[int]], loss_mask: torch.Tensor, *,
                            scale_rewards: str = "group", kl: torch.Tensor | None = None, kl_coef: float = 0.0,
                            gather: Callable[[torch.Tensor], torch.Tensor] = _identity) -> torch.Tensor:
    """``reinforce_pp`` (the paper's Reinforce++, Hu 2025; verl's ``reinforce_plus_plus``): (N, T) token returns
    (reward at the last token, gamma 1, minus beta x KL return-to-go) whitened over all valid tokens of all ranks.
    ``members`` and ``scale_rewards`` are not used."""
    mask = loss_mask.to(torch.float32) * (~torch.isnan(rewards)).unsqueeze(1)
    returns = torch.nan_to_num(rewards, nan=0.0).unsqueeze(1).expand_as(mask).clone()
    if kl is not None:
        returns = returns - kl_coef * kl_return_to_go(kl)
    return _whiten(returns, mask, gather)


def reinforce_pp_baseline_advantages(rewards: torch.Tensor, members: Sequence[Sequence[int]],
                                     loss_mask: torch.Tensor, *, scale_rewards: str = "group",
                                     kl: torch.Tensor | None = None, kl_coef: float = 0.0,
                                     gather: Callable[[torch.Tensor], torch.Tensor] = _identity) -> torch.Tensor:
    """``reinforce_pp_baseline`` (verl's ``reinforce_plus_plus_baseline``): (N, T) reward minus its group's mean
    (KL summed into the reward), broadcast over tokens and whitened over all valid tokens of all ranks.
    ``scale_rewards`` is not used."""
    valid = ~torch.isnan(rewards)
    mask = loss_mask.to(torch.float32) * valid.unsqueeze(1)
    scores = torch.nan_to_num(rewards, nan=0.0)
    if kl is not None:
        scores = scores - kl_coef * kl.sum(1)
    centred = scores.clone()
    for rows in members:
        idx = torch.tensor([i for i in rows if valid[i]], device=rewards.device, dtype=torch.long)
        if len(idx):
            centred[idx] = scores[idx] - scores[idx].mean()
    return _whiten(centred.unsqueeze(1).expand_as(mask).clone(), mask, gather)


def _whiten(returns: torch.Tensor, mask: torch.Tensor, gather: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """(N, T) ``returns`` minus their mean, over their std (+1e-8), both over the ``mask`` tokens of all ranks."""
    stats = torch.stack([(returns * mask).sum(), (returns.pow(2) * mask).sum(), mask.sum()]).double()
    total, total_sq, count = gather(stats.unsqueeze(0)).sum(0).tolist()
    mean = total / max(count, 1.0)
    # E[x^2] - mean^2 in floats can fall just below 0 when every return is equal: clamp, never a complex std
    var = max((total_sq - count * mean * mean) / max(count - 1.0, 1.0), 0.0)
    return ((returns - mean) * (var + 1e-8) ** -0.5) * mask


#: ``HiRConfig.advantage_estimator``: each name and its function ``(rewards (N,), members, loss_mask (N, T), *,
#: scale_rewards, kl, kl_coef, gather) -> advantages``, (N,) or (N, T). A new estimator is one entry here.
ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
}


def group_advantages(rewards: torch.Tensor, members: Sequence[Sequence[int]], loss_mask: torch.Tensor, *,
                     estimator: str = "grpo", scale_rewards: str = "group", kl: torch.Tensor | None = None,
                     kl_coef: float = 0.0, aggregation: str = "sum_then_normalize", reward_weight: float = 1.0,
                     gather: Callable[[torch.Tensor], torch.Tensor] = _identity) -> torch.Tensor:
    """Advantages of every row from its reward and group (paper eq. 6 with the chosen estimator, `ESTIMATORS`).

    Args:
        rewards: (N,) per-row reward; NaN marks a row outside every estimate (padding, or a replay under
            ``replay_advantage`` 'positive' / 'paired'): its advantage is 0.
        members: row indices of each group (its m samples, supplementary samples and, under 'group', replays).
        loss_mask: (N, T) valid completion tokens.
        estimator: a name in `ESTIMATORS`: ``grpo``, ``reinforce_pp`` or ``reinforce_pp_baseline``.
        scale_rewards: TRL's ``GRPOConfig.scale_rewards`` (``grpo`` only): ``group``, ``batch`` or ``none``.
        kl: (N, T) per-token KL for ``kl_in_reward`` (Reinforce++ estimators only), else None.
        kl_coef: the KL coefficient beta of ``kl_in_reward``.
        aggregation: TRL's ``GRPOConfig.multi_objective_aggregation``: ``"sum_then_normalize"`` (the estimator
            on the weighted rewards) or ``"normalize_then_sum"`` (``grpo`` with one reward function only:
            `normalize_then_sum_advantages`).
        reward_weight: the reward function's weight under ``"normalize_then_sum"``.
        gather: concatenates a tensor over ranks along dim 0 (``accelerator.gather``); identity on one process.

    Returns:
        ``grpo``: (N,) advantages (`grpo_advantages`, or `normalize_then_sum_advantages`); ``reinforce_pp`` and ``reinforce_pp_baseline``: (N, T)
        whitened token advantages (`reinforce_pp_advantages`, `reinforce_pp_baseline_advantages`).

    Raises:
        ValueError: an unknown ``estimator``, ``scale_rewards`` or ``aggregation``, or ``"normalize_then_sum"``
            with an estimator other than ``grpo``.
    """
    estimate = chosen(ESTIMATORS, "advantage_estimator", estimator)
    if aggregation == "normalize_then_sum":
        if estimator != TRL_ESTIMATOR:
            raise ValueError(f"multi_objective_aggregation 'normalize_then_sum' needs advantage_estimator "
                             f"{TRL_ESTIMATOR!r}, got {estimator!r}")
        return normalize_then_sum_advantages(rewards, members, reward_weight=reward_weight, gather=gather)
    if aggregation != "sum_then_normalize":
        raise ValueError(f"unknown multi_objective_aggregation {aggregation!r}")
    return estimate(rewards, members, loss_mask, scale_rewards=scale_rewards, kl=kl, kl_coef=kl_coef, gather=gather)


def kl_return_to_go(kl: torch.Tensor) -> torch.Tensor:
    """(N, T) sum of the per-token KL from each token to the end of its completion (gamma 1)."""
    return torch.flip(torch.cumsum(torch.flip(kl, [1]), 1), [1])


def add_replay_advantages(advantages: torch.Tensor, rewards: torch.Tensor, replays: Sequence[tuple[int, int]],
                          loss_mask: torch.Tensor, weight: float, paired: bool) -> None:
    """``replay_advantage`` 'positive' / 'paired': add w r' to each replay row and (paired) -w r' to its source.

    With 'paired' the pair's gradient is w r' (grad log pi(y | q') - grad log pi(y | q)), the paper's
    instruction-level contrast; with 'positive' only the first term.

    Args:
        advantages: (N,) or (N, T) advantages of the sampled rows (replay rows 0); changed in place.
        rewards: (N,) per-row rewards; r' = ``rewards[row]`` of a replay (1 unless re-judged).
        replays: (row, source) per replay: its row in the extended batch and its source's row.
        loss_mask: (N, T) valid completion tokens (token-level advantages stay 0 outside it).
        weight: w = ``HiRConfig.replay_weight`` (>= 0), in the estimator's units.
        paired: True for 'paired'.
    """
    for row, source in replays:
        value = weight * float(rewards[row])
        if advantages.dim() == 2:
            advantages[row] += value * loss_mask[row]
            if paired:
                advantages[source] -= value * loss_mask[source]
        else:
            advantages[row] += value
            if paired:
                advantages[source] -= value


def group_replay_advantages(rewards: torch.Tensor, new_rows: Sequence[Any], num_sampled: int, group_size: int,
                            loss_mask: torch.Tensor, *, replay_weight: float = 1.0, **estimator: Any) -> torch.Tensor:
    """``"group"`` (paper eq. "hir"): each replay is one more row of its source's group, under the estimator
    (``replay_weight`` is not used)."""
    members = group_members(new_rows, num_sampled, group_size, replays_in_group=True)
    return group_advantages(rewards, members, loss_mask, **estimator)


def _sampled_then_replays(rewards: torch.Tensor, new_rows: Sequence[Any], num_sampled: int, group_size: int,
                          loss_mask: torch.Tensor, replay_weight: float, paired: bool,
                          estimator: dict[str, Any]) -> torch.Tensor:
    """The estimator over the rows sampled under q only (the replays' rewards NaN), then `add_replay_advantages`."""
    members = group_members(new_rows, num_sampled, group_size, replays_in_group=False)
    replays = [(num_sampled + o, row.source) for o, row in enumerate(new_rows) if row.kind == "replay"]
    index = torch.tensor([r for r, _ in replays], dtype=torch.long, device=rewards.device)
    advantages = group_advantages(rewards.index_fill(0, index, float("nan")), members, loss_mask, **estimator)
    add_replay_advantages(advantages, rewards, replays, loss_mask, replay_weight, paired)
    return advantages


def paired_replay_advantages(rewards: torch.Tensor, new_rows: Sequence[Any], num_sampled: int, group_size: int,
                             loss_mask: torch.Tensor, *, replay_weight: float = 1.0, **estimator: Any) -> torch.Tensor:
    """``"paired"``: the sampled rows get the estimator's advantages among themselves (exactly RL-IR's), each replay
    +w r' and its source -w r' on top of its own."""
    return _sampled_then_replays(rewards, new_rows, num_sampled, group_size, loss_mask, replay_weight, True, estimator)


def positive_replay_advantages(rewards: torch.Tensor, new_rows: Sequence[Any], num_sampled: int, group_size: int,
                               loss_mask: torch.Tensor, *, replay_weight: float = 1.0,
                               **estimator: Any) -> torch.Tensor:
    """``"positive"``: the sampled rows get the estimator's advantages among themselves (exactly RL-IR's), each replay
    +w r'."""
    return _sampled_then_replays(rewards, new_rows, num_sampled, group_size, loss_mask, replay_weight, False, estimator)


#: ``HiRConfig.replay_advantage``: each choice and its function ``(rewards (N,), new_rows, num_sampled, group_size,
#: loss_mask (N, T), *, replay_weight, **estimator) -> advantages``, (N,) or (N, T).
REPLAY_ADVANTAGES: dict[str, Callable[..., torch.Tensor]] = {
    "group": group_replay_advantages,
    "paired": paired_replay_advantages,
    "positive": positive_replay_advantages,
}


def hir_advantages(rewards: torch.Tensor, new_rows: Sequence[Any], num_sampled: int, group_size: int,
                   loss_mask: torch.Tensor, *, replay_advantage: str = "positive", replay_weight: float = 1.0,
                   **estimator: Any) -> torch.Tensor:
    """Advantages of a HiR batch: B sampled rows followed by the new rows (`hir_trl.step.batch.NewRow`), by the
    ``replay_advantage`` function of `REPLAY_ADVANTAGES`.

    ``replay_advantage="group"`` (paper): each replay is one more row of its source's group under the estimator.
    ``"positive"`` / ``"paired"``: the estimator runs over the rows sampled under q only (exactly RL-IR's
    advantages on a batch without replays), then `add_replay_advantages` adds the replay terms.

    Args:
        rewards: (N,) reward of every row (NaN for padding), N = B + len(new_rows).
        new_rows: the new rows; num_sampled: B; group_size: m; loss_mask: (N, T).
        **estimator: ``estimator``, ``scale_rewards``, ``kl``, ``kl_coef``, ``aggregation``, ``reward_weight``,
            ``gather`` of `group_advantages`.

    Returns:
        (N,) or (N, T) advantages, as `group_advantages`.

    Raises:
        ValueError: an unknown ``replay_advantage`` (or estimator setting).
    """
    enter = chosen(REPLAY_ADVANTAGES, "replay_advantage", replay_advantage)
    return enter(rewards, new_rows, num_sampled, group_size, loss_mask, replay_weight=replay_weight, **estimator)


def kl_in_reward_per_token(batch: dict[str, Any], ref_logps: torch.Tensor, new_rows: Sequence[Any],
                           num_sampled: int) -> torch.Tensor:
    """k1 KL estimate log pi_old - log pi_ref per token (N, T) for ``kl_in_reward`` (released code).

    Args:
        batch: the extended batch (``old_per_token_logps`` (N, T), ``completion_mask``, ``tool_mask``).
        ref_logps: (N, T) reference log-probs of every row under its own prompt.
        new_rows: the new rows; a replay or pad takes its source's KL (computed under q), as the released code copies
            the source's old and reference log-probs. num_sampled: B.

    Returns:
        (N, T) KL per token, 0 outside the loss tokens.
    """
    kl = batch["old_per_token_logps"] - ref_logps
    for offset, row in enumerate(new_rows):
        if row.kind in ("replay", "pad"):
            kl[num_sampled + offset] = kl[row.source]
    return kl * loss_mask(batch)
