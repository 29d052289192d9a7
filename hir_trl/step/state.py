"""The state of one HiR generation batch, in plain sight (no torch work here, no TRL import).

`HiRTrainer` completes TRL's generation batch in `_generate_and_score_completions`, but what it needs from inside
TRL's call (the decoded completions, their verdicts, the token entropies, ...) is produced by other TRL hooks that
HiR overrides. Each call of ``GRPOTrainer._generate_and_score_completions`` in a HiR step therefore gets one
`HiRCapture`: the step sets what the hooks should do, the hooks fill in what they saw, the step reads it after
the call. `SupplementarySamples` are the ordinary samples a ``replay_shortfall="resample"`` step draws for groups
short of candidates; `HiRStep` is what the finished step added on this rank (`HiRTrainer.last_replay`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class HiRCapture:
    """What HiR's overrides of TRL's hooks record during one call of ``GRPOTrainer._generate_and_score_completions``.

    Set by the step before the call:
        share_old_pass: `HiRTrainer._get_per_token_logps_and_entropies` asks TRL's own old-log-prob pass for the token
            entropies too (F_div, ``diversity_entropy="exact"``), when nothing records them while sampling.
        record_logps: `HiRTrainer._generate_single_turn` records, while ``generate`` samples, each completion
            token's log-prob (the replays' old log-probs, F_div's ``"sampled"`` estimate, ``kl_in_reward``).
        record_entropies: ... and its policy entropy (F_div, ``diversity_entropy="exact"``); False for the
            supplementary samples, which need no F_div.
        inputs: the call's dataset rows (their constraints go to the judge as soon as TRL has generated,
            `hir_trl.trl_adapter.TRLPasses.judge_ahead`), or None.

    Filled in during the call (None until then):
        prompts: (B,) the prompts TRL passed to the reward functions (chat messages or text).
        completions: (B,) the decoded completions, as TRL passed them.
        verdicts: the `hir_trl.rewards.VerdictMatrix` of `ConstraintReward` on those B rows.
        rewards_per_func: (B, F) this rank's rows of TRL's rewards, the constraint reward first
            (`HiRTrainer._calculate_rewards`).
        recorded: the values recorded while sampling (`hir_trl.step.sampling.SamplingRecorder.per_row`: per completion,
            (n_i,) ``logps`` and ``entropies`` in nats), or None when nothing was recorded.
        entropies: (B, T) token entropies in nats from TRL's old-log-prob pass (``share_old_pass``), or None.
        environments: TRL's per-completion environment instances of the call (``GRPOTrainer.environments``), or
            None; a replay's extra rewards get its source's (`hir_trl.trl_adapter.TRLPasses.replay_reward_kwargs`).
    """

    share_old_pass: bool = False
    record_logps: bool = False
    record_entropies: bool = False
    inputs: list[dict[str, Any]] | None = None
    prompts: list[Any] | None = None
    completions: list[Any] | None = None
    verdicts: Any = None
    rewards_per_func: list[list[float]] | None = None
    recorded: dict[str, list[Any]] | None = None
    entropies: Any = None
    environments: list[Any] | None = None


@dataclass
class SupplementarySamples:
    """The supplementary samples of one step on this rank (paper §3.2, ``replay_shortfall="resample"``): S ordinary
    samples under q, group by group (group 0's first), drawn through TRL's own generation and reward call.

    Attributes:
        tensors: their per-row tensors (the keys of `hir_trl.step.batch.ROW_KEYS` TRL returned), each (S, ...); with
            ``old_per_token_logps`` (S, T) whenever the sampled rows have them.
        prompts: (S,) their prompts (q), as TRL passed them to the reward functions.
        completions: (S,) their decoded completions.
        verdicts: the `hir_trl.rewards.VerdictMatrix` of `ConstraintReward` on those S rows.
        rewards_per_func: (S, F) their rewards, the constraint reward first.
        fillers: samples generated on this rank only to keep the ranks in step (dropped).
        generated_tokens: completion tokens of the whole call, all ranks, fillers included.
    """

    tensors: dict[str, Any]
    prompts: list[Any]
    completions: list[Any]
    verdicts: Any
    rewards_per_func: list[list[float]]
    fillers: int = 0
    generated_tokens: int = 0


@dataclass
class HiRStep:
    """What the latest HiR generation batch added on this rank (``HiRTrainer.last_replay``, for inspection and tests).

    Attributes:
        new_rows: the `hir_trl.step.batch.NewRow` appended to the B sampled rows: row ``B + i`` of the extended batch is
            ``new_rows[i]`` (its ``kind``, ``source``, ``group``, ``choice`` and ``q_prime``).
        rewards: (B + len(new_rows),) reward of every row: the verdict reward of sampled rows and supplementary
            samples, 1 for replays (unless re-judged), NaN for padding.
        lam: lambda_s used for the selection (paper eq. "lambda").
        supplementary_verdicts: the `hir_trl.rewards.VerdictMatrix` of the supplementary samples, or None.
    """

    new_rows: list[Any]
    rewards: list[float]
    lam: float
    supplementary_verdicts: Any = None

    @property
    def q_prime(self) -> list[Any]:
        """The hindsight prompt (q') of each new row, in order: a replay's rewritten instruction, None otherwise."""
        return [row.q_prime for row in self.new_rows]


__all__ = ["HiRCapture", "HiRStep", "SupplementarySamples"]
