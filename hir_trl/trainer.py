"""`HiRTrainer`: Hindsight instruction Replay inside TRL's `GRPOTrainer`.

The trainer wraps `GRPOTrainer._generate_and_score_completions` (it copies no TRL method body): TRL
samples m = ``num_generations`` completions per instruction and scores them with `ConstraintReward`;
then, for every group, HiR selects k = ``num_replays`` failed completions (Algorithm 1), rewrites
their instruction to keep only the constraints they met, and appends them to the group with reward 1.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import textwrap
import time
from collections import Counter, defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanstd, pad

from .configs import HiRConfig
from .data import count_soft_constraints, drop_soft_constraints
from .judge import build_judge, has_soft_constraints
from .replay import allocate_shortfall, curriculum_lambda, hindsight_instruction, hindsight_messages, select_replays
from .rewards import ConstraintReward, Judge, VerdictMatrix, completion_text, instruction_text
from .sampling import SamplingRecorder, record_sampling, sampling_changes_policy
from .verifiers import sentence_backend
from .vllm_cpu import check_head_size, fix_colocate_weight_sync, vllm_runs_on_cpu

logger = logging.getLogger(__name__)

# Per-row output keys of `GRPOTrainer._generate_and_score_completions` that HiR extends (text-only models).
_ROW_KEYS = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "old_per_token_logps",
             "ref_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio", "tool_mask"}
# Right-padding values of token-level keys when rows of different completion widths are joined.
_PAD_VALUES = {"completion_mask": 0, "tool_mask": 1, "importance_sampling_ratio": 1.0}
# Completion-log columns HiR writes itself.
_LOG_COLUMNS = ("row_id", "hindsight", "supplementary", "kept_constraints")
HIR_STATE_FILE = "hir_state.json"
_MULTIMODAL_KEYS = {"pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes",
                    "token_type_ids", "mm_token_type_ids", "image_position_ids", "num_images", "num_tiles"}

HIR_PAPER = {
    "title": "Replay Failures as Successes: Sample-Efficient Reinforcement Learning for Instruction Following",
    "id": "2512.23457",
    # docstyle-ignore
    "citation": textwrap.dedent("""\
        @article{hir2025,
            title        = {{Replay Failures as Successes: Sample-Efficient Reinforcement Learning for Instruction Following}},
            author       = {Kongcheng Zhang and Qi Yao and Shunyu Liu and Wenjian Zhang and Min Cen and Yang Zhou and Wenkai Fang and Yiru Zhao and Baisheng Lai and Mingli Song},
            year         = 2025,
            eprint       = {arXiv:2512.23457},
        }"""),
}


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
            "silently: set judge_model (and judge_api_key_env, the NAME of the variable holding the key; README "
            "'Soft constraints'), or choose explicitly with soft_constraints: fail (they count as unmet) or "
            "soft_constraints: skip (they are removed and not rewarded)")


class HiRTrainer(GRPOTrainer):
    """Trainer for Hindsight instruction Replay (HiR), a `trl.GRPOTrainer` subclass.

    Each training generation batch holds, per instruction q, m = ``args.num_generations`` sampled
    completions (TRL) plus k = ``args.num_replays`` hindsight rows (HiR): a failed completion y,
    selected by F = F_div + lambda * F_int, paired with the rewritten instruction q' that keeps only the
    constraints y met, with reward 1 and the group of its source. Advantages are then computed over the
    m + k rows of each group with TRL's group baseline and ``scale_rewards``.

    With the paper's ratio (eq. 7-8) the old log-probs of a replay are those of y under the original q:
    pi_theta(y | q') / pi_old(y | q). Reference log-probs (``beta > 0``) of a replay are taken under q',
    since the KL term regularises the policy being trained, which is evaluated on (q', y).

    Args:
        model: a model id or local path, or a `PreTrainedModel` (as for `GRPOTrainer`).
        args: a `HiRConfig`; defaults to ``HiRConfig("<model>-HiR")``.
        train_dataset: normalized rows from `hir_trl.load_hir_dataset` (columns ``prompt``, ``task``,
            ``constraints``, ``template``).
        reward_funcs: leave ``None`` to verify the dataset's constraints with `ConstraintReward`, or pass one
            `ConstraintReward` (for instance with a judge). Other reward functions are not supported: the
            replay reward is defined by the constraints.
        judge: the soft-constraint judge for the default `ConstraintReward`.
        dataset_name: the training dataset's Hub id or path, recorded in every model card.
        **kwargs: passed to `GRPOTrainer` (``eval_dataset``, ``processing_class``, ``peft_config``, ...).

    Raises:
        TypeError: ``args`` is not a `HiRConfig`, or ``reward_funcs`` is not a single `ConstraintReward`.
        ValueError: the batch settings do not give every rank whole groups (see `check_batch_layout`).

    Example:

    ```python
    from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset

    dataset = load_hir_dataset("sastpg/HIR-16K")  # or a local .jsonl in HIR-16K or native format
    trainer = HiRTrainer(
        model="Qwen/Qwen2.5-7B-Instruct",
        args=HiRConfig(output_dir="Qwen2.5-7B-HiR", per_device_train_batch_size=6, num_generations=6),
        train_dataset=dataset,
    )
    trainer.train()
    ```
    """

    _tag_names = ["trl", "grpo", "hir"]
    _name = "HiR"
    _paper = HIR_PAPER

    def __init__(
        self,
        model: Any,
        args: HiRConfig | None = None,
        train_dataset: Any = None,
        reward_funcs: ConstraintReward | None = None,
        judge: Judge | None = None,
        dataset_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = HiRConfig(f"{str(name).split('/')[-1]}-HiR")
        if not isinstance(args, HiRConfig):
            raise TypeError(f"HiRTrainer needs a HiRConfig, got {type(args).__name__}")
        if isinstance(reward_funcs, list) and len(reward_funcs) == 1:
            reward_funcs = reward_funcs[0]
        if args.soft_constraints == "skip":
            train_dataset = drop_soft_constraints(train_dataset)
            if kwargs.get("eval_dataset") is not None:
                kwargs["eval_dataset"] = drop_soft_constraints(kwargs["eval_dataset"])
        if reward_funcs is None:
            if judge is None and (has_soft_constraints(train_dataset) or
                                  has_soft_constraints(kwargs.get("eval_dataset"))):
                judge = build_judge(args)  # None without judge_model; KeyError when the key's variable is unset
            reward_funcs = ConstraintReward(judge=judge, reward_mode=args.reward_mode)
        if not isinstance(reward_funcs, ConstraintReward):
            raise TypeError("HiRTrainer's reward is the constraint verdicts: pass reward_funcs=None or a single "
                            f"ConstraintReward, got {type(reward_funcs).__name__}")
        if reward_funcs.judge is None and args.soft_constraints == "judge":
            check_soft_constraints_judged(train_dataset, kwargs.get("eval_dataset"))
        check_batch_layout(args)
        if args.use_vllm and args.vllm_mode == "colocate" and vllm_runs_on_cpu():
            check_head_size(model)
        self.constraint_reward = reward_funcs
        self._hir_capture: dict[str, Any] | None = None
        self.last_replay: ReplayBatch | None = None
        self.dataset_name = dataset_name
        self._replay_rng = random.Random(args.seed)
        self._q_primes: dict[int, Any] = {}
        self._hir_seconds: dict[str, float] = defaultdict(float)
        self._timer_stack: list[float] = []
        super().__init__(model=model, reward_funcs=[reward_funcs], args=args, train_dataset=train_dataset, **kwargs)
        if self.use_vllm and self.vllm_mode == "colocate" and vllm_runs_on_cpu():
            fix_colocate_weight_sync(self.vllm_generation)  # vLLM's CPU build repacks its weights (hir_trl.vllm_cpu)
        # KL in the reward (released code): TRL loaded the reference model because beta > 0; HiR takes beta as the
        # KL-in-reward coefficient and turns TRL's KL loss term (and its own reference pass) off.
        self.kl_coef = 0.0
        if args.kl_in_reward:
            self.kl_coef, self.beta = self.beta, 0.0

        # TRL's completion-log buffers hold one generation batch; HiR adds k rows per group of m.
        groups = args.generation_batch_size // args.num_generations
        size = args.generation_batch_size + groups * args.num_replays
        self._logs = {
            "images": deque(maxlen=size),
            "prompt": deque(maxlen=size),
            "completion": deque(maxlen=size),
            "rewards": defaultdict(lambda: deque(maxlen=size)),
            "advantages": deque(maxlen=size),
            "extra": defaultdict(lambda: deque(maxlen=size)),
        }
        logger.info("HiR verifiers: sentence splitter = %s", sentence_backend())
        self._no_recording_reason = self._sampling_record_problem()
        logger.info("HiR token entropies / sampling log-probs: %s",
                    "recorded while generate samples" if self._no_recording_reason is None
                    else f"not recorded ({self._no_recording_reason})")

    # ------------------------------------------------------------------ TRL hooks (each calls super())

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """Override of `GRPOTrainer._calculate_rewards`: keep this rank's verdicts and log ILA / CLA.

        Calls super (which calls `ConstraintReward` once per row), then records ``reward/ila`` and
        ``reward/cla`` over all ranks' original rows and ``verify/errors`` (failed checks, a count).

        Returns:
            super's (B_global, 1) rewards tensor, unchanged.
        """
        self.constraint_reward.last_verdicts = None
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        verdicts = self.constraint_reward.last_verdicts
        if verdicts is None or len(verdicts) != len(prompts):
            raise RuntimeError("ConstraintReward did not record one verdict row per completion")
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        local = torch.tensor([sum(verdicts.ila()), sum(verdicts.cla()), len(prompts), verdicts.num_errors()],
                             dtype=torch.float64, device=device)
        ila, cla, count, errors = self.accelerator.gather(local).view(-1, 4).sum(0).tolist()
        self._metrics[mode]["reward/ila"].append(ila / count)
        self._metrics[mode]["reward/cla"].append(cla / count)
        self._metrics[mode]["verify/errors"].append(errors)
        if self._hir_capture is not None:
            self._hir_capture.update(prompts=prompts, completions=completions, verdicts=verdicts)
        return rewards_per_func

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                           batch_size=None, compute_entropy=False, **kwargs):
        """Override of `GRPOTrainer._get_per_token_logps_and_entropies` that shares TRL's old-log-prob pass.

        When TRL computes ``old_per_token_logps`` itself during generation (its first call to this method),
        HiR asks that same no-grad pass for the token entropies F_div needs, instead of a second pass.

        Returns:
            ``(logps (B, T), entropies (B, T) or None, aux_loss)`` as super does.
        """
        capture = self._hir_capture
        if capture is not None and capture.get("share_old_pass") and "entropies" not in capture:
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, compute_entropy=True,
                **kwargs)
            capture["entropies"] = entropies
            return logps, (entropies if compute_entropy else None), aux
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
            compute_entropy=compute_entropy, **kwargs)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """Override of `GRPOTrainer._generate_single_turn`: record token entropies and log-probs while sampling.

        In a HiR generation batch with transformers ``generate`` (and no logit processor that changes the logits,
        see `hir_trl.sampling.sampling_changes_policy`), a `SamplingRecorder` joins ``generate``'s logits processors
        for this call: it stores, per completion token, the policy's entropy H_t (``diversity_entropy="exact"``)
        and the sampled token's log-prob log pi(y_t), in nats, so that F_div and a replay's old log-probs under q
        need no extra forward pass. Otherwise (vLLM, continuous batching, a repetition penalty, ..., evaluation)
        this is super's call unchanged.

        Returns:
            super's ``(completion_ids, logprobs)``, unchanged; the recorded values go to the current HiR capture
            (``"recorded"``: per completion, (n_i,) ``logps`` and ``entropies``).
        """
        capture = self._hir_capture
        if capture is None or self._no_recording_reason is not None or not (self.args.num_replays or self.kl_coef):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        recorder = SamplingRecorder(self.temperature,
                                    entropy=self.args.diversity_entropy == "exact" and capture.get("entropy", True))
        with record_sampling(self.accelerator.unwrap_model(self.model_wrapped), recorder):
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                     num_generations, has_tool_images)
        capture["recorded"] = recorder.per_row(completion_ids)
        self._hir_seconds["recording"] += recorder.seconds
        if capture["recorded"] is None:
            logger.warning("HiR's sampling recorder saw no decoding step; falling back to a no-grad pass")
        return completion_ids, logprobs

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Override of `GRPOTrainer._generate_and_score_completions`: complete every group to m + k rows.

        Calls super for the m sampled completions per instruction. In training (unless ``num_replays=0`` with
        the ``grpo`` estimator and no KL in the reward, where super's output is returned unchanged), it then
        appends, after the B original rows of this rank and group by group: supplementary samples under q
        (``replay_shortfall="resample"``, for groups with fewer than k candidates), the hindsight rows (q', the
        source's completion, reward 1) and zero-weight padding (``"pad"``). Every rank adds (B / m) x k rows.

        Args:
            inputs: this rank's B dataset rows, each instruction repeated m times in a row.

        Returns:
            super's dict with every per-row key extended to B' = B + (B / m) x k rows: ``prompt_ids`` (left-padded
            again to a common width), ``completion_ids``/``completion_mask`` (B', T), ``advantages`` (B',) for
            ``grpo`` or (B', T) for the Reinforce++ estimators, ``old_per_token_logps`` (B', T) when TRL stores them
            or the replays need them (see ``replay_old_logps`` and `_entropies_and_old_logps`; absent otherwise, as
            in TRL), ``ref_per_token_logps`` (under q' for replays, when ``beta > 0``), the vLLM
            keys ``sampling_per_token_logps``/``importance_sampling_ratio`` set explicitly for replays, and
            ``num_items_in_batch`` counting the loss tokens of all ranks.
        """
        args = self.args
        hir = self.model.training and (args.num_replays > 0 or args.advantage_estimator != "grpo" or self.kl_coef)
        if not hir:
            output = super()._generate_and_score_completions(inputs)
            self._log_judge_metrics()
            if any(column in self._logs["extra"] for column in _LOG_COLUMNS):
                # keep HiR's completion-log columns as long as TRL's (e.g. evaluation batches during HiR training)
                row_ids = gather_object([str(x.get("row_id")) for x in inputs])
                self._logs["extra"]["row_id"].extend(row_ids)
                self._logs["extra"]["hindsight"].extend([False] * len(row_ids))
                self._logs["extra"]["supplementary"].extend([False] * len(row_ids))
                self._logs["extra"]["kept_constraints"].extend([None] * len(row_ids))
            return output
        # TRL's own old-log-prob pass also gives the entropies when nothing else will (not recorded while sampling).
        share = (args.num_replays > 0 and args.diversity_entropy == "exact" and self._no_recording_reason is not None
                 and self._trl_computes_old_logps())
        self._hir_seconds.clear()
        self._hir_capture = {"share_old_pass": share}
        try:
            output = super()._generate_and_score_completions(inputs)
            capture = self._hir_capture
        finally:
            self._hir_capture = None
        with self._timed("total"):
            output = self._complete_groups(list(inputs), output, capture)
        self._log_timings()
        self._log_judge_metrics()
        return output

    @contextmanager
    def _timed(self, name: str):
        """Add the block's wall time to ``self._hir_seconds[name]``, minus the time of timed blocks nested in it
        (``"total"`` keeps its nested time: it is the whole of `_complete_groups`). Synchronises CUDA at both ends."""
        cuda = self.accelerator.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        self._timer_stack.append(0.0)
        try:
            yield
        finally:
            if cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            nested = self._timer_stack.pop()
            self._hir_seconds[name] += elapsed if name == "total" else elapsed - nested
            if self._timer_stack:
                self._timer_stack[-1] += elapsed

    def _log_timings(self) -> None:
        """Log this generation batch's ``hir/seconds_*`` (wall seconds, the slowest rank's), see README."""
        names = ("total", "extra_pass", "selection", "supplementary", "assembly", "replay_passes", "recording")
        local = torch.tensor([self._hir_seconds.get(name, 0.0) for name in names], dtype=torch.float64,
                             device=self.accelerator.device)
        slowest = self.accelerator.gather(local).view(-1, len(names)).max(0).values.tolist()
        for name, value in zip(names, slowest):
            self._metrics["train"][f"hir/seconds_{name}"].append(value)

    def _log_judge_metrics(self) -> None:
        """Log the judge's ``judge/*`` metrics since the last call: counters summed over ranks
        (``judge/seconds_per_step``: max over ranks), latency percentiles of this rank (seconds)."""
        judge = self.constraint_reward.judge
        if not hasattr(judge, "pop_metrics"):
            return
        metrics = judge.pop_metrics()
        names = sorted(k for k in metrics if "latency" not in k)  # the same keys on every rank
        mode = "train" if self.model.training else "eval"
        if names:
            local = torch.tensor([metrics[k] for k in names], dtype=torch.float64, device=self.accelerator.device)
            gathered = self.accelerator.gather(local).view(-1, len(names))
            for i, name in enumerate(names):
                column = gathered[:, i]
                value = column.max() if name == "judge/seconds_per_step" else column.sum()
                self._metrics[mode][name].append(value.item())
        for name in ("judge/latency_p50", "judge/latency_p95"):
            if name in metrics:
                self._metrics[mode][name].append(metrics[name])

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None,
                          tags: str | list[str] | None = None):
        """Override of `GRPOTrainer.create_model_card`: TRL's card (tagged ``hir``, citing the paper) plus a
        "HiR training" section with the replay hyperparameters, the dataset and the latest ``hir/*`` and
        reward metrics. Written to ``output_dir/README.md`` (and copied into each checkpoint)."""
        dataset_name = dataset_name or self.dataset_name
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        path = os.path.join(self.args.output_dir, "README.md")
        if os.path.isfile(path):
            with open(path, "a", encoding="utf-8") as handle:
                handle.write("\n" + hir_card_section(self.args, dataset_name, self.state.log_history))

    def _save_checkpoint(self, model, trial):
        """Override of `GRPOTrainer._save_checkpoint`: also save the replay RNG and the model card.

        Writes ``hir_state.json`` (the state of the RNG used by ``replay_selection="random"``) and a copy of
        the model card (tagged ``hir``) into ``checkpoint-N/``; TRL writes the card to ``output_dir`` only.
        lambda needs no state: it is derived from the restored step counter.
        """
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            if os.path.isdir(folder):
                version, internal, gauss = self._replay_rng.getstate()
                with open(os.path.join(folder, HIR_STATE_FILE), "w") as handle:
                    json.dump({"replay_rng": [version, list(internal), gauss]}, handle)
                card = os.path.join(self.args.output_dir, "README.md")
                if os.path.isfile(card):
                    shutil.copyfile(card, os.path.join(folder, "README.md"))

    def _load_optimizer_and_scheduler(self, checkpoint):
        """Override of `GRPOTrainer._load_optimizer_and_scheduler`: also restore the replay RNG on resume.

        A checkpoint without ``hir_state.json`` (saved by another trainer, or copied without it) resumes with a
        warning: the replay RNG (``replay_selection="random"`` only) restarts from ``seed``; lambda, the model, the
        optimizer and the step counter resume exactly.
        """
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and os.path.isfile(os.path.join(checkpoint, HIR_STATE_FILE)):
            with open(os.path.join(checkpoint, HIR_STATE_FILE)) as handle:
                version, internal, gauss = json.load(handle)["replay_rng"]
            self._replay_rng.setstate((version, tuple(internal), gauss))
        elif checkpoint is not None:
            logger.warning("%s has no %s: resuming, but the replay RNG (used by replay_selection='random') restarts "
                           "from seed=%d; lambda, the model, the optimizer and the step counter resume exactly",
                           checkpoint, HIR_STATE_FILE, self.args.seed)

    # ------------------------------------------------------------------ HiR

    def _trl_computes_old_logps(self) -> bool:
        """True when GRPOTrainer itself runs the no-grad old-log-prob pass during generation (TRL's condition)."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        return self.args.gradient_accumulation_steps % generate_every != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction)

    def _sampling_record_problem(self) -> str | None:
        """None when `_generate_single_turn` can record entropies and log-probs while sampling, else why not."""
        if self.use_vllm:
            return "vLLM generates: its sampling_per_token_logps are used"
        if getattr(self, "use_transformers_continuous_batching", False):
            return "transformers continuous batching has no logits-processor hook"
        if self.tools or getattr(self, "rollout_func", None) is not None:
            return "tools or a rollout_func generate"
        model = self.accelerator.unwrap_model(self.model)
        reason = sampling_changes_policy(self.generation_config, getattr(model, "generation_config", None))
        return None if reason is None else f"a logit processor changes the policy's logits: {reason}"

    def _recorded(self, capture, key: str, like: torch.Tensor) -> torch.Tensor | None:
        """The recorded ``logps`` or ``entropies`` of a capture as a (B, T) tensor shaped like ``like`` (zeros past
        each completion), or None when nothing was recorded."""
        recorded = capture.get("recorded")
        if not recorded or key not in recorded:
            return None
        rows = recorded[key]
        out = like.new_zeros(like.shape, dtype=torch.float32)
        for i, values in enumerate(rows):
            out[i, : values.numel()] = values.to(out.device)
        return out

    def _entropies_and_old_logps(self, output: dict[str, Any], capture: dict[str, Any]) -> torch.Tensor | None:
        """Step 1: the token entropies behind F_div and, where needed, ``output["old_per_token_logps"]`` under q.

        Sources, cheapest first (a no-grad pass over the B sampled rows runs only for what none gives):

        - entropies, ``diversity_entropy="exact"``: recorded while sampling, else TRL's own old-log-prob pass;
          ``"sampled"``: -log pi(y_t) from the recorded log-probs, vLLM's ``sampling_per_token_logps`` or TRL's
          ``old_per_token_logps``. Not needed (None, unless free) for ``replay_selection`` random or integrity.
        - old log-probs: TRL's when it computed them. Otherwise they are needed only for replays with
          ``replay_old_logps="original"`` (pi_old(y | q), paper eq. 7-8) and for ``kl_in_reward``; they are then the
          sampling log-probs (recorded, or vLLM's), for every row. With ``"hindsight"`` (or without replays) none
          are set and TRL's loss uses the detached current log-probs, the on-policy value at the first iteration.

        Returns:
            (B, T) token entropies in nats (estimates with ``"sampled"``), or None when F_div is not computed.
        """
        args, k = self.args, self.args.num_replays
        mask = output["completion_mask"]
        sampled = self._recorded(capture, "logps", mask)
        if sampled is None and output.get("sampling_per_token_logps") is not None:
            sampled = output["sampling_per_token_logps"]
        if sampled is not None and torch.isnan(sampled[mask.bool()]).any():  # vLLM could not score some tokens
            sampled = None
        need_old = "old_per_token_logps" not in output and bool(
            self.kl_coef or (k > 0 and args.replay_old_logps == "original"))
        need_f_div = k > 0 and args.replay_selection in ("curriculum", "diversity")
        entropies = None
        if k > 0 and args.diversity_entropy == "exact":
            entropies = capture.get("entropies")  # TRL's shared pass
            if entropies is None:
                entropies = self._recorded(capture, "entropies", mask)
        elif k > 0:
            logps = sampled if sampled is not None else output.get("old_per_token_logps")
            entropies = None if logps is None else -logps
        old = sampled if need_old else None
        if (need_old and old is None) or (need_f_div and entropies is None):
            exact = need_f_div and entropies is None and args.diversity_entropy == "exact"
            with self._timed("extra_pass"):
                logps, pass_entropies = self._policy_pass(self.model, output["prompt_ids"], output["prompt_mask"],
                                                          output["completion_ids"], mask, entropy=exact)
            if need_old and old is None:
                old = logps
            if need_f_div and entropies is None:
                entropies = pass_entropies if exact else -logps
        if need_old:
            output["old_per_token_logps"] = old
        return entropies

    def _policy_pass(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, entropy=False):
        """One no-grad forward: per-token log-probs (N, T) and, optionally, entropies (N, T) in nats."""
        if completion_ids.size(0) == 0:
            empty = completion_ids.new_zeros(completion_ids.shape, dtype=torch.float32)
            return empty, (empty if entropy else None)
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1),
                completion_ids.size(1), batch_size=self.args.per_device_train_batch_size, compute_entropy=entropy)
        return logps, entropies

    def _reference_logps(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """Reference-model log-probs (N, T) of completions under the given prompts."""
        if self.ref_model is not None:
            return self._policy_pass(self.ref_model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]
        from trl.trainer.utils import use_adapter  # PEFT: the reference is the base model, as in GRPOTrainer

        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self._policy_pass(self.model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]

    def _complete_groups(self, inputs, output, capture) -> dict[str, Any]:
        unsupported = _MULTIMODAL_KEYS.intersection(output)
        if unsupported:
            raise NotImplementedError(f"HiRTrainer does not support multimodal inputs (got {sorted(unsupported)})")
        args, device = self.args, self.accelerator.device
        m, k = self.num_generations, args.num_replays
        prompts, completions = capture["prompts"], capture["completions"]
        verdicts: VerdictMatrix = capture["verdicts"]
        B = len(prompts)
        if B % m:
            raise RuntimeError(f"this rank holds {B} completions, not whole groups of {m}")
        groups = B // m
        for key, value in output.items():
            if key not in _ROW_KEYS and key != "num_items_in_batch" and value is not None:
                raise NotImplementedError(f"HiRTrainer cannot extend the batch key {key!r}")

        # 1. Token entropies (F_div) and old log-probs under q: recorded while sampling or from TRL's own pass;
        #    one no-grad pass only for what neither gives (see `_entropies_and_old_logps`).
        entropies = self._entropies_and_old_logps(output, capture)

        # 2. Algorithm 1: select per group (or over the batch).
        lam = curriculum_lambda(self.state.global_step, args.lambda_0, args.eta)
        if k > 0:
            with self._timed("selection"):
                if entropies is None:  # random / integrity selection: F_div unused, logged as NaN
                    diversity = [float("nan")] * B
                else:
                    mask = _loss_mask(output).to(entropies.dtype)
                    div = (entropies * mask).sum(1)
                    if args.diversity_aggregation == "mean":
                        div = div / mask.sum(1).clamp(min=1.0)
                    diversity = div.float().cpu().tolist()
                eligible = None
                if not args.replay_truncated_completions:  # a completion with no EOS was cut off at the length limit
                    eos = torch.tensor(self.eos_token_ids, device=device)
                    ended = torch.isin(output["completion_ids"], eos) & output["completion_mask"].bool()
                    eligible = ended.any(1).tolist()
                picked = select_replays([verdicts.passed(r) for r in range(B)], diversity, m, k, lam,
                                        scope=args.replay_scope, selection=args.replay_selection,
                                        min_satisfied=args.replay_min_satisfied, rng=self._replay_rng,
                                        eligible=eligible)
                fill = allocate_shortfall([len(p) for p in picked], k)
        else:
            picked, fill = [[] for _ in range(groups)], [0] * groups

        # 3. Supplementary samples under q for groups short of candidates (every rank joins the call).
        supplement = None
        if args.replay_shortfall == "resample" and k > 0:
            with self._timed("supplementary"):
                supplement = self._supplementary_samples(inputs, fill, output)

        # 4. The new rows, group by group: (kind, source row, group, choice).
        rows: list[tuple[str, int, int, Any]] = []
        s_next = 0
        for g in range(groups):
            for _ in range(fill[g] if supplement is not None else 0):
                rows.append(("supplementary", s_next, g, None))
                s_next += 1
        for g in range(groups):
            rows.extend(("replay", g * m + c.index, g, c) for c in picked[g])
        for g in range(groups):
            rows.extend(("pad", g * m, g, None) for _ in range(fill[g] if supplement is None else 0))

        with self._timed("assembly"):
            extended = self._assemble(inputs, output, prompts, rows, supplement)

        # 5. Rewards and advantages over each group's rows (pads: NaN, weight 0).
        reward_of = verdicts.ila() if self.constraint_reward.reward_mode == "ila" else verdicts.cla()
        supp_rewards = []
        if supplement is not None:
            sv = supplement["verdicts"]
            supp_rewards = sv.ila() if self.constraint_reward.reward_mode == "ila" else sv.cla()
        replay_reward = self._rejudge_replays(inputs, completions, rows) if args.rejudge_replays else {}
        rewards = list(reward_of)
        members = [list(range(g * m, (g + 1) * m)) for g in range(groups)]
        grouped = args.replay_advantage == "group"
        for offset, (kind, src, g, _) in enumerate(rows):
            rewards.append({"supplementary": supp_rewards[src] if kind == "supplementary" else 0.0,
                            "replay": replay_reward.get(offset, 1.0), "pad": float("nan")}[kind])
            if grouped or kind != "replay":
                members[g].append(B + offset)
        rewards_t = torch.tensor(rewards, dtype=torch.float32, device=device)
        kl = self._kl_per_token(extended, B, rows) if self.kl_coef else None
        loss_mask = _loss_mask(extended)
        if grouped:
            extended["advantages"] = self._advantages(rewards_t, members, loss_mask, kl)
        else:  # the estimator over the rows sampled under q, then the replay pairs
            outside = torch.tensor([B + o for o, row in enumerate(rows) if row[0] == "replay"], dtype=torch.long,
                                   device=device)
            sampled = rewards_t.index_fill(0, outside, float("nan"))
            extended["advantages"] = self._advantages(sampled, members, loss_mask, kl)
            self._add_replay_advantages(extended["advantages"], rewards_t, rows, B, loss_mask)
        extended["num_items_in_batch"] = self.accelerator.gather(_loss_mask(extended).sum()).sum()

        self._log_step(inputs, extended, rows, picked, supplement, prompts, completions, lam, rewards, B, groups)
        return extended

    def _add_replay_advantages(self, advantages, rewards, rows, B, loss_mask) -> None:
        """``replay_advantage`` 'paired' / 'positive': add w * r' to each replay row and (paired) -w * r' to its source.

        Args:
            advantages: (N,) or (N, T) advantages of the sampled rows (replay rows 0); changed in place.
            rewards: (N,) per-row rewards; r' = ``rewards[B + offset]`` of a replay (1 unless re-judged).
            rows: the new rows (kind, source, group, choice); row ``B + offset`` is entry ``offset``.
            loss_mask: (N, T) valid completion tokens (token-level advantages stay 0 outside it).
        """
        w = self.args.replay_weight
        paired = self.args.replay_advantage == "paired"
        for offset, (kind, src, _, _) in enumerate(rows):
            if kind != "replay":
                continue
            value = w * rewards[B + offset]
            if advantages.dim() == 2:
                advantages[B + offset] += value * loss_mask[B + offset]
                if paired:
                    advantages[src] -= value * loss_mask[src]
            else:
                advantages[B + offset] += value
                if paired:
                    advantages[src] -= value

    def _rejudge_replays(self, inputs, completions, rows) -> dict[int, float]:
        """``rejudge_replays``: re-judge each replay's kept soft constraints under q'.

        Returns:
            the reward of each replay row (by its offset among the new rows): ILA or CLA over the kept constraints,
            counting the rule verdicts (met by construction) and the new judge verdicts.
        """
        judge = self.constraint_reward.judge
        cells, triples = [], []
        for offset, (kind, src, _, choice) in enumerate(rows):
            if kind != "replay" or judge is None:
                continue
            constraints = inputs[src]["constraints"]
            for j, kept in enumerate(choice.satisfied):
                if kept and constraints[j]["kind"] == "soft":
                    cells.append(offset)
                    triples.append((instruction_text(self._q_primes[offset]), completion_text(completions[src]),
                                    constraints[j]["text"]))
        if not triples:
            return {}
        failed = Counter(o for o, v in zip(cells, getattr(judge, "rejudge", judge)(triples)) if not v.passed)
        ila = self.constraint_reward.reward_mode == "ila"
        return {o: float(failed[o] == 0) if ila else 1.0 - failed[o] / sum(c.satisfied)
                for o, (kind, _, _, c) in enumerate(rows) if kind == "replay"}

    def _supplementary_samples(self, inputs, fill, output):
        """Generate ``fill[g]`` ordinary samples under q for each group g, through TRL's own pipeline.

        Every rank calls super's ``_generate_and_score_completions`` with the same number of prompts (the
        largest need over ranks): a rank that needs fewer adds filler prompts whose results are dropped, so
        collective generation (vLLM server/colocate, ZeRO-3) and TRL's gathers stay in step. Within the call
        ``num_generations`` is 1 (one completion per prompt); TRL's metrics and completion-log rows from the
        call are removed (HiR logs the kept rows itself).

        Returns:
            None when no rank needs a sample; else a dict with the kept rows' per-row tensors, ``prompts``,
            ``completions``, ``verdicts`` and the counts ``fillers`` and ``generated_tokens``.
        """
        need = sum(fill)
        most = int(self.accelerator.gather(torch.tensor([need], device=self.accelerator.device)).max().item())
        if most == 0:
            return None
        m = self.num_generations
        extra = [inputs[g * m] for g, c in enumerate(fill) for _ in range(c)]
        extra += [inputs[0]] * (most - need)
        metrics = {key: len(values) for key, values in self._metrics["train"].items()}
        self._hir_capture = {"share_old_pass": False, "entropy": False}  # no F_div for supplementary samples
        self.num_generations = 1
        try:
            out = super()._generate_and_score_completions(extra)
            capture = self._hir_capture
        finally:
            self.num_generations = m
            self._hir_capture = None
        for key, values in self._metrics["train"].items():  # keep TRL's per-step metrics about the m samples
            if key != "num_tokens":
                del values[metrics.get(key, 0):]
        added = len(extra) * self.accelerator.num_processes  # every rank sent the same number of prompts
        for buffer in [self._logs["prompt"], self._logs["completion"], self._logs["advantages"],
                       *self._logs["rewards"].values()]:
            for _ in range(min(added, len(buffer))):
                buffer.pop()
        generated = int(self.accelerator.gather(out["completion_mask"].sum()).sum().item())
        if "old_per_token_logps" in output and "old_per_token_logps" not in out:
            # the same source as the originals' (step 1): the sampling log-probs, else a pass
            old = self._recorded(capture, "logps", out["completion_mask"])
            if old is None and out.get("sampling_per_token_logps") is not None:
                old = out["sampling_per_token_logps"]
            if old is None or torch.isnan(old[out["completion_mask"].bool()]).any():
                with self._timed("extra_pass"):
                    old, _ = self._policy_pass(self.model, out["prompt_ids"], out["prompt_mask"],
                                               out["completion_ids"], out["completion_mask"])
            out["old_per_token_logps"] = old
        kept = {key: value[:need] for key, value in out.items()
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == len(extra)}
        kept.update(prompts=capture["prompts"][:need], completions=capture["completions"][:need],
                    verdicts=VerdictMatrix(capture["verdicts"].verdicts[:need]),
                    fillers=most - need, generated_tokens=generated)
        return kept

    def _assemble(self, inputs, output, prompts, rows, supplement) -> dict[str, Any]:
        """Build the extended batch tensors for the B original rows followed by ``rows``."""
        args, device = self.args, self.accelerator.device
        B = len(prompts)
        hindsight_mode = args.replay_old_logps == "hindsight"

        # Prompts: unpadded token rows, left-padded again to a common width.
        def unpadded(ids, mask):
            return [ids[i][mask[i].bool()] for i in range(ids.size(0))]

        prompt_rows = unpadded(output["prompt_ids"], output["prompt_mask"])
        supp_prompt_rows = unpadded(supplement["prompt_ids"], supplement["prompt_mask"]) if supplement else []
        q_primes = {}
        for offset, (kind, src, _, choice) in enumerate(rows):
            if kind == "replay":
                row = inputs[src]
                texts = [c["text"] for c in row["constraints"]]
                q_prime = hindsight_instruction(row["task"], texts, choice.satisfied, row["template"])
                q_primes[offset] = (hindsight_messages(prompts[src], q_prime) if isinstance(prompts[src], list)
                                    else q_prime)
        tokenized = iter(self._tokenize_prompts(list(q_primes.values()))[0]) if q_primes else iter(())
        new_prompt_rows = list(prompt_rows)
        for kind, src, _, _ in rows:
            if kind == "supplementary":
                new_prompt_rows.append(supp_prompt_rows[src])
            elif kind == "replay":
                new_prompt_rows.append(torch.tensor(next(tokenized), device=device))
            else:
                new_prompt_rows.append(prompt_rows[src])
        extended: dict[str, Any] = {
            "prompt_ids": pad(new_prompt_rows, padding_value=self._tokenizer.pad_token_id, padding_side="left",
                              pad_to_multiple_of=self.pad_to_multiple_of).to(device),
            "prompt_mask": pad([torch.ones_like(r) for r in new_prompt_rows], padding_value=0, padding_side="left",
                               pad_to_multiple_of=self.pad_to_multiple_of).to(device),
        }
        self._q_primes = q_primes

        # Completion-side keys: originals, then each new row's values.
        src_index = torch.tensor([src for kind, src, _, _ in rows if kind != "supplementary"], dtype=torch.long,
                                 device=device)
        for key in _ROW_KEYS - {"prompt_ids", "prompt_mask", "advantages"}:
            if output.get(key) is None or (key == "ref_per_token_logps" and self.kl_coef):
                continue
            base = output[key]
            copied = iter(base[src_index]) if len(src_index) else iter(())
            supp = iter(supplement[key]) if supplement is not None and key in supplement else None
            parts = [base]
            for kind, _, _, _ in rows:
                if kind == "supplementary":
                    if supp is None:
                        raise RuntimeError(f"supplementary samples lack the batch key {key!r}")
                    parts.append(next(supp).unsqueeze(0))
                else:
                    value = next(copied).unsqueeze(0)
                    if key == "completion_mask" and kind == "pad":
                        value = torch.zeros_like(value)
                    parts.append(value)
            pad_value = self._tokenizer.pad_token_id if key == "completion_ids" else _PAD_VALUES.get(key, 0)
            extended[key] = _cat_rows(parts, pad_value)

        # Passes under q' run over ALL new rows, a count that is the same on every rank ((B / m) x k), so that
        # ZeRO-3 ranks run the same number of forward passes; only the replays' results are kept.
        is_replay = torch.tensor([kind == "replay" for kind, _, _, _ in rows], dtype=torch.bool, device=device)
        # "hindsight" needs pi_old(y | q') only where old or sampling log-probs are stored: without them (aligned
        # steps, transformers generation) TRL's loss uses the detached current log-probs, which are exactly that.
        hindsight_pass = hindsight_mode and any(
            key in extended for key in ("old_per_token_logps", "sampling_per_token_logps"))
        if rows and (hindsight_pass or "ref_per_token_logps" in extended):
            sub = [extended[key][B:] for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")]
            keep = is_replay.unsqueeze(1)
            if hindsight_pass:
                # pi_old(y | q'): the replay is on-policy under q', so the vLLM correction is the identity.
                with self._timed("replay_passes"):
                    old_q_prime, _ = self._policy_pass(self.model, *sub)
                if "old_per_token_logps" in extended:
                    old = extended["old_per_token_logps"]
                    old[B:] = torch.where(keep, old_q_prime, old[B:])
                if "sampling_per_token_logps" in extended:
                    sampling = extended["sampling_per_token_logps"]
                    sampling[B:] = torch.where(keep, old_q_prime, sampling[B:])
                if "importance_sampling_ratio" in extended:
                    ratio = extended["importance_sampling_ratio"]
                    ratio[B:] = torch.where(keep, torch.ones_like(ratio[B:]), ratio[B:])
            if "ref_per_token_logps" in extended:
                ref = extended["ref_per_token_logps"]
                with self._timed("replay_passes"):
                    ref_q_prime = self._reference_logps(*sub)
                ref[B:] = torch.where(keep, ref_q_prime, ref[B:])
        return extended

    def _kl_per_token(self, extended, B, rows) -> torch.Tensor:
        """k1 KL estimate log pi_old - log pi_ref per token (N, T) for the KL-in-reward mode (released code).

        Originals and supplementary samples are scored under q; a replay takes its source's KL (computed under
        q), as the released code copies the source's old and reference log-probs.
        """
        ref = self._reference_logps(extended["prompt_ids"], extended["prompt_mask"], extended["completion_ids"],
                                    extended["completion_mask"])
        kl = extended["old_per_token_logps"] - ref
        for offset, (kind, src, _, _) in enumerate(rows):
            if kind in ("replay", "pad"):
                kl[B + offset] = kl[src]
        return kl * _loss_mask(extended)

    def _advantages(self, rewards, members, loss_mask, kl) -> torch.Tensor:
        """Advantages of every row from its reward and group, per ``advantage_estimator``.

        Args:
            rewards: (N,) per-row reward; NaN marks padding (advantage 0).
            members: row indices of each group (its m samples, supplementary samples and replays).
            loss_mask: (N, T) valid completion tokens.
            kl: (N, T) per-token KL for ``kl_in_reward``, else None.

        Returns:
            ``grpo``: (N,) TRL's group baseline and ``scale_rewards`` over each group's rows.
            ``reinforce_pp``: (N, T) token returns (reward at the last token, gamma 1, minus beta x KL
            return-to-go) whitened over all valid tokens of all ranks (Reinforce++, Hu 2025; verl
            ``reinforce_plus_plus``). ``reinforce_pp_baseline``: (N,) reward minus group mean (KL summed into the
            reward), broadcast over tokens and whitened the same way (verl ``reinforce_plus_plus_baseline``).
        """
        estimator = self.args.advantage_estimator
        valid = ~torch.isnan(rewards)
        if estimator == "grpo":
            advantages = torch.zeros_like(rewards)
            batch_std = None
            if self.scale_rewards == "batch":
                batch_std = nanstd(self.accelerator.gather(rewards))
            for rows in members:
                idx = torch.tensor(rows, device=rewards.device)
                r = rewards[idx]
                centred = r - torch.nanmean(r)
                if self.scale_rewards == "group":
                    centred = centred / (nanstd(r) + 1e-4)
                elif self.scale_rewards == "batch":
                    centred = centred / (batch_std + 1e-4)
                elif self.scale_rewards != "none":
                    raise ValueError(f"Invalid value for scale_rewards: {self.scale_rewards}")
                advantages[idx] = centred
            return torch.nan_to_num(advantages, nan=0.0)

        mask = loss_mask.to(torch.float32) * valid.unsqueeze(1)
        scores = torch.nan_to_num(rewards, nan=0.0)
        if estimator == "reinforce_pp":
            returns = scores.unsqueeze(1).expand_as(mask).clone()
            if kl is not None:  # return-to-go of the per-token KL penalty
                returns = returns - self.kl_coef * torch.flip(torch.cumsum(torch.flip(kl, [1]), 1), [1])
        else:
            if kl is not None:
                scores = scores - self.kl_coef * kl.sum(1)
            centred = scores.clone()
            for rows in members:
                idx = torch.tensor([i for i in rows if valid[i]], device=rewards.device)
                if len(idx):
                    centred[idx] = scores[idx] - scores[idx].mean()
            returns = centred.unsqueeze(1).expand_as(mask).clone()
        stats = torch.stack([(returns * mask).sum(), (returns.pow(2) * mask).sum(), mask.sum()]).double()
        total, total_sq, count = self.accelerator.gather(stats.unsqueeze(0)).sum(0).tolist()
        mean = total / max(count, 1.0)
        var = (total_sq - count * mean * mean) / max(count - 1.0, 1.0)
        return ((returns - mean) * (var + 1e-8) ** -0.5) * mask

    def _log_step(self, inputs, extended, rows, picked, supplement, prompts, completions, lam, rewards, B, groups):
        device, m = self.accelerator.device, self.num_generations
        k = self.args.num_replays
        choices = [c for kind, _, _, c in rows if kind == "replay"]
        n_supp = sum(kind == "supplementary" for kind, _, _, _ in rows)
        n_pad = sum(kind == "pad" for kind, _, _, _ in rows)
        all_failed = sum(1 for g in range(groups) if all(rewards[g * m + j] == 0 for j in range(m)))
        generated = int(extended["completion_mask"][:B].sum().item())
        fillers = supplement["fillers"] if supplement is not None else 0
        local = torch.tensor([
            len(choices), groups * k, all_failed, groups, sum(c.integrity for c in choices),
            sum(c.diversity for c in choices), n_supp, n_pad, fillers, generated,
        ], dtype=torch.float64, device=device)
        (n_real, n_slots, n_failed, n_groups, integrity, entropy, n_supp_all, n_pad_all, n_fill,
         tokens) = self.accelerator.gather(local).view(-1, 10).sum(0).tolist()
        if supplement is not None:  # already summed over ranks, fillers included
            tokens += supplement["generated_tokens"]
        metrics = self._metrics["train"]
        metrics["hir/lambda"].append(lam)
        metrics["hir/replayed_rows"].append(n_real)
        metrics["hir/replayed_fraction"].append(n_real / n_slots if n_slots else 0.0)
        metrics["hir/supplementary_samples"].append(n_supp_all)
        metrics["hir/filler_samples"].append(n_fill)
        metrics["hir/padded_rows"].append(n_pad_all)
        metrics["hir/rows_per_group"].append((n_groups * m + n_real + n_supp_all) / n_groups)
        metrics["hir/generated_tokens"].append(tokens)
        metrics["hir/groups_all_failed"].append(n_failed / n_groups)
        metrics["hir/replay_integrity_mean"].append(integrity / n_real if n_real else float("nan"))
        metrics["hir/replay_entropy_mean"].append(entropy / n_real if n_real else float("nan"))

        # Completion log: TRL logged the original rows; correct their advantages and add the new rows, marked by
        # `hindsight` / `supplementary`, with q' as a replay's prompt and the kept constraint indices.
        advantages = extended["advantages"]
        if advantages.dim() == 2:
            mask = _loss_mask(extended).to(advantages.dtype)
            advantages = (advantages * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        original_adv = gather_object(advantages[:B].tolist())
        for _ in original_adv:
            self._logs["advantages"].pop()
        self._logs["advantages"].extend(original_adv)
        shown = [i for i, (kind, _, _, _) in enumerate(rows) if kind != "pad"]
        supp_prompts = supplement["prompts"] if supplement is not None else []
        supp_completions = supplement["completions"] if supplement is not None else []
        new = []
        for i in shown:
            kind, src, g, choice = rows[i]
            if kind == "replay":
                new.append((self._q_primes[i], completions[src], str(inputs[src].get("row_id")), True, False,
                            json.dumps([j for j, ok in enumerate(choice.satisfied) if ok]), 1.0))
            else:
                new.append((supp_prompts[src], supp_completions[src], str(inputs[g * m].get("row_id")), False, True,
                            None, rewards[B + i]))
        new = gather_object(new)
        adv_new = gather_object([advantages[B + i].item() for i in shown])
        row_ids = gather_object([str(x.get("row_id")) for x in inputs])
        self._logs["prompt"].extend(r[0] for r in new)
        self._logs["completion"].extend(r[1] for r in new)
        for name in self.reward_func_names:
            self._logs["rewards"][name].extend(r[6] for r in new)
        self._logs["advantages"].extend(adv_new)
        for column in list(self._logs["extra"]):
            if column not in _LOG_COLUMNS:
                self._logs["extra"][column].extend([None] * len(new))
        n_orig = len(row_ids)
        self._logs["extra"]["row_id"].extend(row_ids + [r[2] for r in new])
        self._logs["extra"]["hindsight"].extend([False] * n_orig + [r[3] for r in new])
        self._logs["extra"]["supplementary"].extend([False] * n_orig + [r[4] for r in new])
        self._logs["extra"]["kept_constraints"].extend([None] * n_orig + [r[5] for r in new])

        self.last_replay = ReplayBatch(
            kinds=[kind for kind, _, _, _ in rows], sources=[src for _, src, _, _ in rows],
            groups=[g for _, _, g, _ in rows], q_prime=[self._q_primes.get(i) for i in range(len(rows))],
            rewards=rewards, lam=lam, choices=[c for _, _, _, c in rows],
            supplementary_verdicts=supplement["verdicts"] if supplement is not None else None)


def _loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    mask = batch["completion_mask"]
    return mask if batch.get("tool_mask") is None else mask * batch["tool_mask"]


def _cat_rows(parts: list[torch.Tensor], pad_value: float) -> torch.Tensor:
    """Concatenate per-row tensors along dim 0, right-padding dim 1 to the widest (token-level keys)."""
    if parts[0].dim() == 1:
        return torch.cat(parts)
    width = max(p.size(1) for p in parts)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.size(1)), value=pad_value) for p in parts])


@dataclass
class ReplayBatch:
    """What the latest generation batch added on this rank (for inspection and tests).

    Row ``B + i`` of the extended batch is described by entry i of each list.

    Attributes:
        kinds: ``"supplementary"``, ``"replay"`` or ``"pad"``.
        sources: for a replay or pad, the index of its source among the B original rows; for a supplementary
            sample, its index among the supplementary samples.
        groups: the group each row belongs to.
        q_prime: the hindsight prompt of each replay (None otherwise).
        rewards: (B + new rows,) reward of every row: verdict reward of originals and supplementary samples, 1 for
            replays, NaN for padding.
        lam: lambda_s used for the selection.
        choices: the `ReplayChoice` of each replay (None otherwise).
        supplementary_verdicts: the `VerdictMatrix` of the supplementary samples, or None.
    """

    kinds: list[str]
    sources: list[int]
    groups: list[int]
    q_prime: list[Any]
    rewards: list[float]
    lam: float
    choices: list[Any]
    supplementary_verdicts: VerdictMatrix | None = None


#: HiRConfig fields reported in the model card.
CARD_FIELDS = ("num_generations", "num_replays", "lambda_0", "eta", "replay_selection", "replay_scope",
               "replay_shortfall", "replay_old_logps", "replay_min_satisfied", "diversity_aggregation",
               "diversity_entropy", "advantage_estimator", "kl_in_reward", "reward_mode", "beta", "learning_rate",
               "temperature", "max_completion_length")


def hir_card_section(args: HiRConfig, dataset_name: str | None, log_history: list[dict[str, Any]]) -> str:
    """Markdown section for the model card: HiR hyperparameters, dataset and the latest metrics.

    Only configuration values and logged metrics are written: never environment variables or keys.
    """
    lines = ["## HiR training", "", "Trained with Hindsight instruction Replay "
             "([arXiv:2512.23457](https://arxiv.org/abs/2512.23457)) using `hir-trl`.", ""]
    if dataset_name:
        lines += [f"- Dataset: `{dataset_name}`"]
    lines += [f"- `{name}`: `{getattr(args, name)}`" for name in CARD_FIELDS if hasattr(args, name)]
    lines += [f"- Sentence splitter of the rule verifiers: `{sentence_backend()}` (NLTK Punkt when installed)"]
    latest: dict[str, float] = {}
    for entry in log_history:
        for key, value in entry.items():
            if (key.startswith(("hir/", "reward/")) or key in ("reward", "loss")) and value is not None:
                latest[key] = value
    if latest:
        step = max((e.get("step", 0) for e in log_history), default=0)
        lines += ["", f"Latest metrics (step {step}):", "", "| metric | value |", "|---|---|"]
        lines += [f"| `{key}` | {value:.4g} |" for key, value in sorted(latest.items())
                  if isinstance(value, (int, float))]
    return "\n".join(lines) + "\n"


def check_batch_layout(args: HiRConfig) -> None:
    """Check that every rank's generation batch holds whole groups and splits evenly after replay.

    Each rank generates B = ``per_device_train_batch_size * steps_per_generation`` rows; HiR needs
    B % m == 0 (whole groups per rank) and ``(B + (B / m) * k) % steps_per_generation == 0`` (TRL's
    `split_tensor_dict` floors, so a remainder would silently drop rows).

    Raises:
        ValueError: naming the settings and a fix.
    """
    m, k, spg = args.num_generations, args.num_replays, args.steps_per_generation
    local = args.per_device_train_batch_size * spg
    if local % m:
        raise ValueError(
            f"HiRTrainer needs whole groups on every rank: per_device_train_batch_size "
            f"({args.per_device_train_batch_size}) x steps_per_generation ({spg}) = {local} must be a multiple of "
            f"num_generations ({m}). Set per_device_train_batch_size to a multiple of {m}.")
    total = local + (local // m) * k
    if total % spg:
        raise ValueError(
            f"With num_replays={k}, each rank's generation batch grows to {total} rows, which does not split into "
            f"steps_per_generation={spg} equal micro-batches. Choose per_device_train_batch_size so that "
            f"(per_device_train_batch_size / num_generations) * num_replays is a whole number.")
