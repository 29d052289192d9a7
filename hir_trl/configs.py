"""Configuration dataclasses: `HiRConfig` (training) and `HiRScriptArguments` (the CLI's dataset options)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig, ScriptArguments


@dataclass
class HiRConfig(GRPOConfig):
    r"""Configuration for `HiRTrainer`: TRL's `GRPOConfig` plus the Hindsight instruction Replay fields.

    Defaults are the paper's (Appendix A): m = ``num_generations`` = 6 sampled responses per instruction,
    k = ``num_replays`` = 2 hindsight replays per group, lambda_0 = 2 and eta = 0.05.

    Parameters:
        num_replays (`int`, defaults to `2`):
            k: hindsight samples appended to each group of ``num_generations`` completions (Algorithm 1).
            0 turns replay off (RL-IR with ``reward_mode="ila"``).
        lambda_0 (`float`, defaults to `2.0`):
            Initial curriculum weight on constraint integrity (paper eq. "lambda").
        eta (`float`, defaults to `0.05`):
            Curriculum pace: lambda_s = lambda_0 * (1 + eta)^s at optimizer step s.
        replay_min_satisfied (`int`, defaults to `1`):
            Fewest satisfied constraints a failed completion needs to be a replay candidate.
        diversity_aggregation (`str`, defaults to `"mean"`):
            How token entropies form F_div: ``"mean"`` over completion tokens (released code) or ``"sum"``
            (the paper's formula).
        reward_mode (`str`, defaults to `"ila"`):
            ``"ila"``: binary reward, 1 when every constraint is met (HiR, RL-IR). ``"cla"``: fraction of
            constraints met (RL-CR).

    Raises:
        ValueError: a field out of range (negative ``num_replays``, ``eta`` or ``replay_min_satisfied``, an
            unknown ``diversity_aggregation`` or ``reward_mode``).
    """

    num_generations: int | None = field(
        default=6,
        metadata={"help": "m: completions sampled per instruction (paper default 6). The generation batch "
                  "(per_device_train_batch_size * steps_per_generation) must hold whole groups on every rank."},
    )
    num_replays: int = field(
        default=2,
        metadata={"help": "k: hindsight replays appended to each group of num_generations completions "
                  "(paper default 2). 0 turns replay off."},
    )
    lambda_0: float = field(
        default=2.0,
        metadata={"help": "Initial curriculum weight on constraint integrity, lambda_0 (paper default 2)."},
    )
    eta: float = field(
        default=0.05,
        metadata={"help": "Curriculum pace eta: lambda_s = lambda_0 * (1 + eta)^s (paper default 0.05)."},
    )
    replay_min_satisfied: int = field(
        default=1,
        metadata={"help": "Fewest satisfied constraints a failed completion needs to be replayed (released code: 1)."},
    )
    diversity_aggregation: str = field(
        default="mean",
        metadata={"help": "F_div from token entropies: 'mean' over completion tokens (released code) or 'sum' "
                  "(paper formula).", "choices": ["mean", "sum"]},
    )
    reward_mode: str = field(
        default="ila",
        metadata={"help": "'ila': 1 when all constraints are met (HiR, RL-IR); 'cla': fraction met (RL-CR).",
                  "choices": ["ila", "cla"]},
    )

    # ---------------------------------------------------------------- judge (soft constraints), issue 4
    # (fields of the LLM judge go here)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._validate_judge_fields()
        if self.num_replays < 0:
            raise ValueError(f"num_replays must be >= 0, got {self.num_replays}")
        if self.eta < 0:
            raise ValueError(f"eta must be >= 0, got {self.eta}")
        if self.replay_min_satisfied < 0:
            raise ValueError(f"replay_min_satisfied must be >= 0, got {self.replay_min_satisfied}")
        if self.diversity_aggregation not in ("mean", "sum"):
            raise ValueError(f"diversity_aggregation must be 'mean' or 'sum', got {self.diversity_aggregation!r}")
        if self.reward_mode not in ("ila", "cla"):
            raise ValueError(f"reward_mode must be 'ila' or 'cla', got {self.reward_mode!r}")


    def _validate_judge_fields(self) -> None:
        """Validate the judge fields (see `hir_trl.judge`)."""


@dataclass
class HiRScriptArguments(ScriptArguments):
    """Dataset and model-building options of ``hir-trl train`` (besides `HiRConfig` and TRL's `ModelConfig`).

    ``dataset_name`` may be a Hub dataset id (``sastpg/HIR-16K``), a local dataset directory, or a local
    ``.json``/``.jsonl``/``.parquet`` file in HIR-16K or native format (see `hir_trl.data`).
    """

    dataset_max_rows: int | None = field(
        default=None, metadata={"help": "Use only the first N rows of the training split."},
    )
    dataset_on_unverifiable: str = field(
        default="soft",
        metadata={"help": "A MulDimIF requirement no rule verifier can parse: 'soft' keeps it as an LLM-judged "
                  "constraint (with a warning), 'error' stops loading.", "choices": ["soft", "error"]},
    )
    build_tiny_model: bool = field(
        default=False,
        metadata={"help": "When model_name_or_path is a local directory without a model, build a random-init "
                  "tiny model there first (tokenizer trained on the training data). For CPU smoke runs."},
    )
