"""What a group short of replay candidates gets (``HiRConfig.replay_shortfall``): one small interface, two policies.

A group with z < k candidates (Algorithm 1 found fewer than k failed completions to replay) needs k - z more rows so
that every group holds m + k (`hir_trl.step.replay.allocate_shortfall` says how many per group):

- `PadShortfall` (``"pad"``, the default): k - z zero-weight padding rows, no generation;
- `ResampleShortfall` (``"resample"``, paper §3.2: "we additionally generate k - z supplementary samples"): k - z
  ordinary samples under q, drawn through TRL's own generation in a second call that every rank joins.

`SHORTFALLS` holds them by ``replay_shortfall`` name (its keys are `hir_trl.HiRConfig`'s choices);
`shortfall_policy` picks one from the config once, when the trainer is built; the step (`hir_trl.step`) calls its
``fill`` and never looks at ``replay_shortfall`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import chosen
from .state import SupplementarySamples


@dataclass(frozen=True)
class ShortfallFill:
    """How the shortfall of one step is filled: per group, its supplementary samples and its padding rows (the
    arguments of `hir_trl.step.batch.plan_new_rows`), and the samples themselves (None when none were drawn)."""

    supplementary: list[int]
    padding: list[int]
    samples: SupplementarySamples | None = None


class ShortfallPolicy(Protocol):
    """The rows a group short of replay candidates gets."""

    def fill(self, passes: Any, inputs: Sequence[dict[str, Any]], shortfall: Sequence[int],
             need_old_logps: bool) -> ShortfallFill:
        """Fill ``shortfall[g]`` rows of each group g (per group k - z, from `hir_trl.step.replay.allocate_shortfall`).

        Args:
            passes: the trainer's passes (`hir_trl.step.StepPasses`).
            inputs: this rank's B dataset rows, each instruction repeated m times in a row.
            shortfall: (B / m,) rows each group lacks.
            need_old_logps: whether new samples need ``old_per_token_logps`` (the sampled rows have them).
        """
        ...  # pragma: no cover - protocol


class PadShortfall:
    """``replay_shortfall="pad"``: k - z zero-weight padding rows per group (a copy of the group's first row with an
    empty completion mask, `hir_trl.step.batch.extend_batch`); no generation call."""

    def fill(self, passes: Any, inputs: Sequence[dict[str, Any]], shortfall: Sequence[int],
             need_old_logps: bool) -> ShortfallFill:
        return ShortfallFill(supplementary=[0] * len(shortfall), padding=list(shortfall))


class ResampleShortfall:
    """``replay_shortfall="resample"`` (paper §3.2): k - z supplementary samples under q per group, from one more
    generation call that every rank joins (`hir_trl.trl_adapter.TRLPasses.supplementary_samples`), timed as
    ``hir/seconds_supplementary``."""

    def fill(self, passes: Any, inputs: Sequence[dict[str, Any]], shortfall: Sequence[int],
             need_old_logps: bool) -> ShortfallFill:
        with passes.timer.timed("supplementary"):
            samples = passes.supplementary_samples(inputs, list(shortfall), need_old_logps)
        return ShortfallFill(supplementary=list(shortfall), padding=[0] * len(shortfall), samples=samples)


#: ``HiRConfig.replay_shortfall``: each choice and its policy class (a `ShortfallPolicy`, built with no argument).
SHORTFALLS: dict[str, Callable[[], ShortfallPolicy]] = {
    "pad": PadShortfall,
    "resample": ResampleShortfall,
}


def shortfall_policy(replay_shortfall: str, num_replays: int) -> ShortfallPolicy:
    """The policy of ``HiRConfig.replay_shortfall`` (`SHORTFALLS`; `PadShortfall` whenever ``num_replays`` is 0: no
    group is ever short, and no rank joins a generation call).

    Raises:
        ValueError: an unknown ``replay_shortfall``.
    """
    policy = chosen(SHORTFALLS, "replay_shortfall", replay_shortfall)
    return PadShortfall() if num_replays == 0 else policy()


__all__ = ["SHORTFALLS", "PadShortfall", "ResampleShortfall", "ShortfallFill", "ShortfallPolicy", "shortfall_policy"]
