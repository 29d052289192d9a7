"""Batch surgery for HiR: the rows appended to TRL's generation batch, and the joined tensors (torch, no trainer).

After `GRPOTrainer._generate_and_score_completions` returns the B sampled rows of a rank, HiR appends, group by
group, its new rows (`NewRow`): supplementary samples under q, hindsight replays (q', y) and zero-weight padding.
`plan_new_rows` orders them, `group_members` says which rows each group's advantage estimate spans, and
`extend_batch` builds every per-row tensor of the extended batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..trl_internals import pad
from .replay import ReplayChoice

#: Per-row output keys of `GRPOTrainer._generate_and_score_completions` that HiR extends (text-only models).
ROW_KEYS = frozenset({"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages",
                      "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps",
                      "importance_sampling_ratio", "tool_mask"})
#: Right-padding values of token-level keys when rows of different completion widths are joined.
PAD_VALUES = {"completion_mask": 0, "tool_mask": 1, "importance_sampling_ratio": 1.0}
#: Batch keys of multimodal models, which HiR does not support.
MULTIMODAL_KEYS = frozenset({"pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes",
                             "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids", "num_images",
                             "num_tiles"})
KINDS = ("supplementary", "replay", "pad")


@dataclass(frozen=True)
class NewRow:
    """One row HiR appends to a rank's generation batch (row ``B + i`` for the i-th new row).

    Attributes:
        kind: ``"supplementary"`` (an ordinary sample under q, paper §3.2), ``"replay"`` (a hindsight row: q' and
            its source's completion, reward 1) or ``"pad"`` (zero weight, ``replay_shortfall="pad"``).
        source: a replay's or pad's source row among the B sampled rows; a supplementary sample's index among the
            supplementary samples.
        group: the group (instruction) the row belongs to.
        choice: a replay's `hir_trl.step.replay.ReplayChoice` (``q_prime`` included), else None.
    """

    kind: str
    source: int
    group: int
    choice: ReplayChoice | None = None

    @property
    def q_prime(self) -> Any:
        """A replay's hindsight prompt (string or messages), else None."""
        return None if self.choice is None else self.choice.q_prime


def plan_new_rows(picked: Sequence[Sequence[ReplayChoice]], supplementary: Sequence[int], padding: Sequence[int],
                  group_size: int) -> list[NewRow]:
    """The new rows in batch order: all supplementary samples, then all replays, then all padding, group by group.

    Args:
        picked: per group, its replay choices (``index`` within the group), from `hir_trl.step.replay.select_rewrite`.
        supplementary: per group, its supplementary samples (the supplement's rows are in this order: group 0's,
            then group 1's, ...).
        padding: per group, its zero-weight padding rows (``replay_shortfall="pad"``; a pad copies the group's
            first row with an empty completion mask).
        group_size: m, sampled rows per group.
    """
    rows: list[NewRow] = []
    rows += [NewRow("supplementary", s, g)
             for s, g in enumerate(g for g, n in enumerate(supplementary) for _ in range(n))]
    for g, choices in enumerate(picked):
        rows += [NewRow("replay", g * group_size + c.index, g, c) for c in choices]
    rows += [NewRow("pad", g * group_size, g) for g, n in enumerate(padding) for _ in range(n)]
    return rows


def group_members(new_rows: Sequence[NewRow], num_sampled: int, group_size: int,
                  replays_in_group: bool) -> list[list[int]]:
    """Row indices of each group's advantage estimate: its m samples, its supplementary samples, its pads and, when
    ``replays_in_group`` (``replay_advantage="group"``, the paper), its replays."""
    members = [list(range(g * group_size, (g + 1) * group_size)) for g in range(num_sampled // group_size)]
    for offset, row in enumerate(new_rows):
        if replays_in_group or row.kind != "replay":
            members[row.group].append(num_sampled + offset)
    return members


def loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    """(N, T) tokens that enter the loss: ``completion_mask`` times ``tool_mask`` when TRL sets one."""
    mask = batch["completion_mask"]
    return mask if batch.get("tool_mask") is None else mask * batch["tool_mask"]


def batch_inputs(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(prompt_ids, prompt_mask, completion_ids, completion_mask)`` of a batch, the arguments of a policy pass."""
    return batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]


def sequence_advantages(batch: dict[str, Any]) -> torch.Tensor:
    """(N,) advantage per row: ``batch["advantages"]`` itself, or the mean over loss tokens of (N, T) token-level
    advantages (Reinforce++ estimators)."""
    advantages = batch["advantages"]
    if advantages.dim() == 2:
        mask = loss_mask(batch).to(advantages.dtype)
        advantages = (advantages * mask).sum(1) / mask.sum(1).clamp(min=1.0)
    return advantages


def cat_rows(parts: Sequence[torch.Tensor], pad_value: float) -> torch.Tensor:
    """Concatenate per-row tensors along dim 0, right-padding dim 1 to the widest (token-level keys)."""
    if parts[0].dim() == 1:
        return torch.cat(list(parts))
    width = max(p.size(1) for p in parts)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.size(1)), value=pad_value) for p in parts])


def unpadded(ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """The tokens of each row of a padded (N, T) batch."""
    return [ids[i][mask[i].bool()] for i in range(ids.size(0))]


def extend_batch(output: dict[str, Any], new_rows: Sequence[NewRow], supplement: dict[str, Any] | None,
                 q_prime_ids: Iterable[Sequence[int]], *, pad_token_id: int, pad_to_multiple_of: int | None = None,
                 skip: Iterable[str] = ()) -> dict[str, Any]:
    """The per-row tensors of the extended batch: the B sampled rows of ``output`` followed by ``rows``.

    Args:
        output: super's `_generate_and_score_completions` output (B rows).
        new_rows: the new rows (`plan_new_rows`).
        supplement: the supplementary samples' per-row tensors (keys of `ROW_KEYS`,
            the ``tensors`` of a `hir_trl.step.state.SupplementarySamples`), or None.
        q_prime_ids: the token ids of each replay's q', in the order of the replays in ``rows``.
        pad_token_id: the tokenizer's pad token (prompts are left-padded, completions right-padded with it).
        pad_to_multiple_of: TRL's ``pad_to_multiple_of`` for the prompt width.
        skip: keys not to extend (e.g. ``ref_per_token_logps`` under ``kl_in_reward``).

    Returns:
        ``prompt_ids``/``prompt_mask`` (B', P') left-padded again to a common width, and every other key of
        `ROW_KEYS` that ``output`` holds except ``advantages`` (the caller computes them), as (B', ...) with
        B' = B + len(new_rows): a replay or pad copies its source's completion-side values (a pad's completion mask is
        zero), a supplementary sample brings its own.

    Raises:
        RuntimeError: a supplementary sample lacks a key the sampled rows have.
    """
    device = output["prompt_ids"].device
    prompt_rows = unpadded(output["prompt_ids"], output["prompt_mask"])
    supp_prompts = unpadded(supplement["prompt_ids"], supplement["prompt_mask"]) if supplement else []
    q_prime_ids = iter(q_prime_ids)
    new_prompts = list(prompt_rows)
    for row in new_rows:
        if row.kind == "supplementary":
            new_prompts.append(supp_prompts[row.source])
        elif row.kind == "replay":
            new_prompts.append(torch.tensor(next(q_prime_ids), device=device))
        else:
            new_prompts.append(prompt_rows[row.source])
    extended: dict[str, Any] = {
        "prompt_ids": pad(new_prompts, padding_value=pad_token_id, padding_side="left",
                          pad_to_multiple_of=pad_to_multiple_of).to(device),
        "prompt_mask": pad([torch.ones_like(r) for r in new_prompts], padding_value=0, padding_side="left",
                           pad_to_multiple_of=pad_to_multiple_of).to(device),
    }
    copied_from = torch.tensor([row.source for row in new_rows if row.kind != "supplementary"], dtype=torch.long,
                               device=device)
    for key in ROW_KEYS - {"prompt_ids", "prompt_mask", "advantages"} - set(skip):
        if output.get(key) is None:
            continue
        base = output[key]
        copied = iter(base[copied_from]) if len(copied_from) else iter(())
        supp = iter(supplement[key]) if supplement is not None and key in supplement else None
        parts = [base]
        for row in new_rows:
            if row.kind == "supplementary":
                if supp is None:
                    raise RuntimeError(f"supplementary samples lack the batch key {key!r}")
                parts.append(next(supp).unsqueeze(0))
            else:
                value = next(copied).unsqueeze(0)
                parts.append(torch.zeros_like(value) if key == "completion_mask" and row.kind == "pad" else value)
        extended[key] = cat_rows(parts, pad_token_id if key == "completion_ids" else PAD_VALUES.get(key, 0))
    return extended


def row_rewards(sampled: Sequence[float], new_rows: Sequence[NewRow], supplementary: Sequence[float] = (),
                replays: dict[int, float] | None = None) -> list[float]:
    """(B + len(new_rows),) reward of every row: the B sampled rows' own, then a supplementary sample's own, 1 for a
    replay (or its re-judged reward, by offset among the new rows, from ``replays``) and NaN for padding."""
    replays = replays or {}
    out = list(sampled)
    for offset, row in enumerate(new_rows):
        out.append(supplementary[row.source] if row.kind == "supplementary" else
                   replays.get(offset, 1.0) if row.kind == "replay" else float("nan"))
    return out
