"""How TRL's loss weighs the rows of a HiR generation batch (``HiRConfig.replay_loss_weighting``; torch, no trainer).

TRL's ``loss_type="dapo"`` sums the per-token losses of a micro-batch and divides by ``num_items_in_batch``, the loss
tokens of the whole generation batch (all ranks, all micro-batches; `GRPOTrainer._compute_loss`): one token mean
over the m + k rows of every group, so a long response weighs more than a short one. That is ``"token"``, the
released (verl) code's aggregation.

``"paper"`` is the objective the paper writes (eq. "hir", section "Reinforcement Learning Objective"): per group,

    J_g = 1/m sum_{i <= m} 1/|y_i| sum_t min(rho A, clip(rho) A)  +  1/k sum_{i <= k} 1/|y'_i| sum_t min(rho' A', ...)

averaged over the groups of the generation batch. It goes through TRL's own normaliser: each row's advantages are
multiplied by c_i = w_i x N / (G x |y_i|) (`paper_advantage_scale`), with w_i the row's weight in its group
(`paper_row_weights`), N = ``num_items_in_batch`` and G the groups of the generation batch over all ranks. For
c_i > 0, min(rho c A, clip(rho) c A) = c min(rho A, clip(rho) A), so TRL's dapo sum over a micro-batch divided by
N is that micro-batch's share of the mean over groups of J_g, and the micro-batches of a generation batch
(gradient accumulation, ``steps_per_generation``, ranks) add up to the whole batch's objective, exactly as TRL's
token mean does.

Rows the equation does not name: a supplementary sample (``replay_shortfall="resample"``) is a sample under q,
drawn from the same policy as the m, so it joins the first term, whose mean then runs over the group's m + s rows
under q (weight 1 / (m + s) each); a replay row keeps 1/k, so a group with z < k replays has a replay term of
z / k of a full one (as a zero-weight pad, ``replay_shortfall="pad"``, adds nothing: it has no loss token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import chosen
from .batch import loss_mask

#: The per-row key HiR adds to a training batch: (N,) True on the replay rows (read by the ``hir/replay_ratio_*``
#: metrics, `hir_trl.step.log.replay_ratio_counts`).
REPLAY_MASK = "replay_mask"


def _identity(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def paper_row_weights(new_rows: Sequence[Any], num_sampled: int, group_size: int, num_replays: int) -> torch.Tensor:
    """(B + len(new_rows),) float64 weight of every row in its group's term of eq. "hir".

    A sampled row of group g and each of g's supplementary samples: 1 / (m + s_g), s_g the group's supplementary
    samples; a replay: 1 / k; a pad: 0.

    Args:
        new_rows: the new rows (`hir_trl.step.batch.NewRow`, ``kind`` and ``group``), in batch order after the B sampled.
        num_sampled: B, a multiple of ``group_size``; group_size: m; num_replays: k (>= 1).

    Raises:
        ValueError: ``num_replays < 1`` or B not a multiple of m.
    """
    if num_replays < 1:
        raise ValueError(f"the paper's weighting needs num_replays >= 1 (1/k over the replays), got {num_replays}")
    if num_sampled % group_size:
        raise ValueError(f"{num_sampled} sampled rows are not whole groups of {group_size}")
    groups = num_sampled // group_size
    under_q = [group_size] * groups
    for row in new_rows:
        if row.kind == "supplementary":
            under_q[row.group] += 1
    weights = [1.0 / under_q[i // group_size] for i in range(num_sampled)]
    for row in new_rows:
        weights.append(1.0 / under_q[row.group] if row.kind == "supplementary"
                       else 1.0 / num_replays if row.kind == "replay" else 0.0)
    return torch.tensor(weights, dtype=torch.float64)


def paper_advantage_scale(weights: torch.Tensor, lengths: torch.Tensor, num_items_in_batch: float,
                          num_groups: int) -> torch.Tensor:
    """(N,) c_i = w_i x N / (G x |y_i|): the factor on row i's advantages that makes TRL's dapo loss eq. "hir".

    Args:
        weights: (N,) w_i (`paper_row_weights`).
        lengths: (N,) |y_i|, row i's loss tokens (``completion_mask`` times ``tool_mask``); c_i = 0 where it is 0.
        num_items_in_batch: N, the loss tokens of the generation batch over all ranks (TRL's normaliser).
        num_groups: G, the groups of the generation batch over all ranks.
    """
    lengths = lengths.to(torch.float64)
    scale = weights.to(torch.float64) * float(num_items_in_batch) / (num_groups * lengths.clamp(min=1.0))
    return torch.where(lengths > 0, scale, torch.zeros_like(scale))


def token_weighting(batch: dict[str, Any], new_rows: Sequence[Any], num_sampled: int, group_size: int,
                    num_replays: int, gather: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """``"token"``: TRL's dapo token mean over all m + k rows of every group (the released code's aggregation); the
    advantages stay as they are."""


def paper_weighting(batch: dict[str, Any], new_rows: Sequence[Any], num_sampled: int, group_size: int,
                    num_replays: int, gather: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """``"paper"``: the paper's written objective (eq. "hir"): row i's ``advantages`` ((N,) or (N, T)) times
    `paper_advantage_scale`'s c_i, with G counted over all ranks (``gather``).

    Raises:
        ValueError: ``num_replays < 1`` (`paper_row_weights`).
    """
    advantages = batch["advantages"]
    weights = paper_row_weights(new_rows, num_sampled, group_size, num_replays)
    groups = gather(torch.tensor([num_sampled // group_size], device=advantages.device)).sum().item()
    scale = paper_advantage_scale(weights, loss_mask(batch).sum(1).cpu(), float(batch["num_items_in_batch"]), groups)
    scale = scale.to(device=advantages.device, dtype=advantages.dtype)
    batch["advantages"] = advantages * (scale if advantages.dim() == 1 else scale.unsqueeze(1))


#: ``HiRConfig.replay_loss_weighting``: each choice and its function ``(batch, new_rows, num_sampled, group_size,
#: num_replays, gather) -> None``, which rescales ``batch["advantages"]`` in place.
LOSS_WEIGHTINGS: dict[str, Callable[..., None]] = {
    "token": token_weighting,
    "paper": paper_weighting,
}


def prepare_loss_batch(batch: dict[str, Any], new_rows: Sequence[Any], num_sampled: int, group_size: int, *,
                       weighting: str, num_replays: int,
                       gather: Callable[[torch.Tensor], torch.Tensor] = _identity) -> None:
    """Finish a HiR training batch for TRL's loss (in place), once its advantages and ``num_items_in_batch`` are set.

    Adds ``batch["replay_mask"]`` ((N,) bool, True on the replay rows), then applies the ``weighting`` of
    `LOSS_WEIGHTINGS`: ``"paper"`` multiplies row i's ``advantages`` ((N,) or (N, T)) by `paper_advantage_scale`'s
    c_i; ``"token"`` leaves them as they are (TRL's dapo token mean).

    Args:
        batch: the extended batch (``advantages``, ``completion_mask``, optional ``tool_mask``,
            ``num_items_in_batch``), B sampled rows then ``new_rows``.
        num_sampled: B; group_size: m; num_replays: k.
        weighting: ``HiRConfig.replay_loss_weighting``, a key of `LOSS_WEIGHTINGS`.
        gather: concatenates a tensor over ranks along dim 0 (``accelerator.gather``), to count G over all ranks.

    Raises:
        ValueError: an unknown ``weighting``, or ``"paper"`` with ``num_replays < 1``.
    """
    weigh = chosen(LOSS_WEIGHTINGS, "replay_loss_weighting", weighting)
    kinds = [False] * num_sampled + [row.kind == "replay" for row in new_rows]
    batch[REPLAY_MASK] = torch.tensor(kinds, dtype=torch.bool, device=batch["advantages"].device)
    weigh(batch, new_rows, num_sampled, group_size, num_replays, gather)
