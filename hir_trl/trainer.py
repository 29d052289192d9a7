"""`HiRTrainer`: Hindsight instruction Replay inside TRL's `GRPOTrainer`, as a thin adapter.

The trainer wraps `GRPOTrainer._generate_and_score_completions` (it copies no TRL method body): TRL samples
m = ``num_generations`` completions per instruction and scores them with `ConstraintReward`; then, for every group,
HiR selects k = ``num_replays`` failed completions and rewrites their instruction to keep only the constraints they
met (Algorithm 1, `hir_trl.replay.select_rewrite`), and appends them to the group with reward 1
(`hir_trl.batch`), with advantages from `hir_trl.advantages`. The step's state is typed in `hir_trl.step_state`,
logging lives in `hir_trl.step_log`, the model card in `hir_trl.card`, and every touch of TRL's private state in
`hir_trl.trl_adapter`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import shutil
import time
from collections import deque
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from . import trl_adapter
from .advantages import TRL_ESTIMATOR, hir_advantages, kl_in_reward_per_token
from .batch import (
    MULTIMODAL_KEYS,
    ROW_KEYS,
    NewRow,
    batch_inputs,
    extend_batch,
    join_rows,
    loss_mask,
    plan_new_rows,
    provisioned_inputs,
    provisioned_split,
    row_rewards,
    sequence_advantages,
    take_rows,
)
from .card import HIR_PAPER, card_fields, hir_card_section, local_card
from .chat import completion_text, instruction_text
from .compat import check_trainer_arguments
from .configs import HiRConfig, check_batch_layout
from .data import DatasetFormatError, normalize_dataset
from .guards import NonFiniteGuard
from .loss_weighting import prepare_loss_batch
from .replay import (
    PROVISION_WINDOW,
    allocate_shortfall,
    curriculum_lambda,
    hindsight_constraints,
    load_replay_rng,
    provision_count,
    save_replay_rng,
    select_rewrite,
)
from .rewards import (
    Judge,
    SoftConstraintsWithoutJudgeError,
    VerdictMatrix,
    check_soft_constraints_judged,
    extra_rewards,
    rejudge_replays,
    trainer_reward,
    weighted_rewards,
)
from .sampling import (
    SamplingRecorder,
    completion_ended,
    diversity_scores,
    entropies_and_old_logps,
    record_sampling,
    sampling_logps,
)
from .step_log import (
    COUNTS,
    LOG_COLUMNS,
    TIMINGS,
    StepTimer,
    completion_log_rows,
    judge_metrics,
    replay_counts,
    replay_metrics,
)
from .step_state import HiRCapture, HiRStep
from .verifiers import achieved_constraint, sentence_backend
from .vllm_cpu import check_head_size, fix_colocate_weight_sync, vllm_runs_on_cpu

logger = logging.getLogger(__name__)

HIR_STATE_FILE = "hir_state.json"
#: seconds `HiRTrainer.end` releases the GIL on a multi-process gloo run (see there); 0 turns the pause off
GLOO_TEARDOWN_PAUSE_SECONDS = 0.5

class HiRTrainer(GRPOTrainer):
    """Trainer for Hindsight instruction Replay (HiR), a `trl.GRPOTrainer` subclass (paper Algorithm 2).

    Each training generation batch holds, per instruction q, m = ``args.num_generations`` sampled completions (TRL)
    plus k = ``args.num_replays`` hindsight rows: a failed completion y, selected by F = F_div + lambda * F_int and
    paired with the rewritten instruction q' that keeps only the constraints y met, with reward 1 (Algorithm 1,
    `hir_trl.replay.select_rewrite`). ``replay_advantage`` says how replays enter the advantages
    (`hir_trl.advantages.hir_advantages`); a replay's old log-probs are those of y under q (paper eq. 7-8) and its
    reference log-probs (``beta > 0``) those under q'.

    Args:
        model: a model id or local path, or a `PreTrainedModel` (as for `GRPOTrainer`).
        args: a `HiRConfig`; defaults to ``HiRConfig("<model>-HiR")``.
        train_dataset: rows from `hir_trl.load_hir_dataset` (columns ``prompt``, ``task``, ``constraints``,
            ``template``, ``row_id``), or any rows it reads (HIR-16K or native, e.g. ``Dataset.from_list``):
            normalized here (`hir_trl.data.normalize_dataset`).
        reward_funcs: leave ``None`` to verify the dataset's constraints with `ConstraintReward`; or pass a
            `ConstraintReward` (for instance with a judge), TRL-style reward functions ``fn(prompts, completions,
            **kwargs) -> list[float | None]``, or a list of both (the `ConstraintReward` first; one is built and put
            first when only functions are given). A row's reward is TRL's weighted sum,
            ``reward_weights[0] x constraint reward + sum_i reward_weights[i] x fn_i`` (weights 1 when unset), where
            the constraint reward is ``HiRConfig.reward_mode``'s (ILA or CLA; 1 for a replay, which meets every
            constraint q' keeps). A replay is a new row: its functions' rewards are computed on its own (q', y)
            (`hir_trl.rewards.extra_rewards`). In a step that draws samples ahead (``supplementary_provision``),
            the functions also get a ``provisioned`` column (True for those samples).
        judge: the soft-constraint judge for the default `ConstraintReward`.
        dataset_name: the training dataset's Hub id or path, recorded in every model card.
        **kwargs: passed to `GRPOTrainer` (``eval_dataset``, ``processing_class``, ``peft_config``, ...).

    Raises:
        TypeError: ``args`` is not a `HiRConfig`; a reward model (not a function) or two `ConstraintReward` in
            ``reward_funcs``.
        ValueError: a `ConstraintReward` whose ``reward_mode`` is not ``args.reward_mode``, one that is not first,
            ``reward_weights`` of the wrong length, or extra functions with ``multi_objective_aggregation`` other
            than ``"sum_then_normalize"`` (`hir_trl.rewards.trainer_reward`).
        hir_trl.models.MissingDependencyError: (an `ImportError`) ``use_vllm`` without vLLM installed.
        DatasetFormatError: (a `ValueError`) a training or evaluation row of no schema `load_hir_dataset` reads, or
            with a malformed field: the message names the row and the field; or a prompt too long to sample from
            (`_check_prompt_lengths`), with its token count.
        SoftConstraintsWithoutJudgeError: soft constraints and no judge (`hir_trl.rewards.trainer_reward`).

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
    trainer.end()  # trackers and process group; needed under torchrun / accelerate launch (see `end`)
    ```
    """

    _tag_names = ["trl", "grpo", "hir"]
    _name = "HiR"
    _paper = HIR_PAPER

    def __init__(self, model: Any, args: HiRConfig | None = None, train_dataset: Any = None,
                 reward_funcs: Any = None, judge: Judge | None = None,
                 dataset_name: str | None = None, **kwargs: Any) -> None:
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = HiRConfig(f"{str(name).split('/')[-1]}-HiR")
        if not isinstance(args, HiRConfig):
            raise TypeError(f"HiRTrainer needs a HiRConfig, got {type(args).__name__}")
        check_trainer_arguments(kwargs)  # GRPOTrainer arguments replays cannot honour (`hir_trl.compat`)
        if args.use_vllm:
            from trl.import_utils import is_vllm_available

            from .models import MissingDependencyError

            if not is_vllm_available():
                raise MissingDependencyError("use_vllm: true needs vLLM, which is not installed: pip install vllm "
                                             "(on CPU: docs/scale-out.md 'vLLM on CPU'), or set use_vllm: false to sample "
                                             "with transformers generate")
        train_dataset = normalize_dataset(train_dataset, "train_dataset")
        eval_dataset = normalize_dataset(kwargs.get("eval_dataset"), "eval_dataset")
        reward_funcs, train_dataset, eval_dataset = trainer_reward(args, train_dataset, eval_dataset, reward_funcs,
                                                                   judge)
        if eval_dataset is not None:
            kwargs["eval_dataset"] = eval_dataset
        reward_funcs, self.extra_reward_funcs = reward_funcs[0], reward_funcs[1:]
        if args.use_vllm and args.vllm_mode == "colocate" and vllm_runs_on_cpu():
            check_head_size(model)
        self.constraint_reward = reward_funcs
        self.dataset_name = dataset_name
        self.last_replay: HiRStep | None = None  # what the latest HiR generation batch added on this rank
        self._capture: HiRCapture | None = None  # set during each TRL call of a HiR step (`hir_trl.step_state`)
        self._replay_rng = random.Random(args.seed)
        self._timer = StepTimer()
        self._shortfalls: deque[list[int]] = deque(maxlen=PROVISION_WINDOW)  # per-group k - z, all ranks
        super().__init__(model=model, reward_funcs=[reward_funcs, *self.extra_reward_funcs], args=args,
                         train_dataset=train_dataset, **kwargs)
        self.add_callback(NonFiniteGuard())  # stop on a NaN/inf gradient, parameter or loss (hir_trl.guards)
        if self.use_vllm and self.vllm_mode == "colocate" and vllm_runs_on_cpu():
            fix_colocate_weight_sync(self.vllm_generation)  # vLLM's CPU build repacks its weights (hir_trl.vllm_cpu)
        if self.accelerator.device.type == "cuda":
            self._timer = StepTimer(torch.cuda.synchronize)
        # KL in the reward (released code): TRL loaded the reference model because beta > 0; HiR takes beta as the
        # KL-in-reward coefficient and turns TRL's KL loss term (and its own reference pass) off.
        self.kl_coef = 0.0
        if args.kl_in_reward:
            self.kl_coef, self.beta = self.beta, 0.0
        for name, dataset in (("train_dataset", self.train_dataset), ("eval_dataset", self.eval_dataset)):
            for part, split in (dataset.items() if isinstance(dataset, dict) else [(None, dataset)]):
                self._check_prompt_lengths(split, name if part is None else f"{name}[{part!r}]")
        groups = args.generation_batch_size // args.num_generations  # the log holds k more rows per group
        trl_adapter.resize_completion_log(self, args.generation_batch_size + groups * args.num_replays)
        logger.info("HiR verifiers: sentence splitter = %s", sentence_backend())
        self._no_recording_reason = trl_adapter.sampling_record_problem(self)
        logger.info("HiR token entropies / sampling log-probs: %s", "recorded while generate samples"
                    if self._no_recording_reason is None else f"not recorded ({self._no_recording_reason})")

    def _check_prompt_lengths(self, dataset: Any, name: str, batch_size: int = 256) -> None:
        """Refuse a row whose prompt cannot be sampled from: longer than ``max_prompt_length`` tokens, or too long
        for the model's context (``max_position_embeddings``) together with ``max_completion_length``.

        Prompts are tokenized as TRL tokenizes them for generation (chat template applied); a streaming dataset is
        not checked.

        Raises:
            DatasetFormatError: naming the row (index and ``row_id``), its token count and the limit.
        """
        from datasets import Dataset

        if not isinstance(dataset, Dataset) or len(dataset) == 0:
            return
        context = getattr(self.accelerator.unwrap_model(self.model).config, "max_position_embeddings", None)
        limits = []
        if self.args.max_prompt_length is not None:
            limits.append((self.args.max_prompt_length, f"max_prompt_length ({self.args.max_prompt_length})"))
        if isinstance(context, int) and context > 0:
            completion = self.max_completion_length or 0
            limits.append((context - completion, f"the model's context of {context} tokens (max_position_embeddings) "
                           f"less max_completion_length ({completion})"))
        if not limits:
            return
        limit, why = min(limits)
        # the tokenizer warns of each sequence longer than its model_max_length: this check reports them itself
        quiet = logging.getLogger("transformers.tokenization_utils_base")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            lengths = [len(ids) for start in range(0, len(dataset), batch_size)
                       for ids in trl_adapter.tokenize_prompts(self, dataset[start:start + batch_size]["prompt"])]
        finally:
            quiet.setLevel(level)
        for index, length in enumerate(lengths):
            if length > limit:
                raise DatasetFormatError(index, "prompt", f"the prompt is {length:,} tokens (chat template applied), "
                                         f"more than {max(limit, 0):,}: {why}; shorten or remove the row, or raise "
                                         f"the limit", f"{name} row {index} (row_id {dataset[index]['row_id']!r})")

    # ------------------------------------------------------------------ the step's state (`hir_trl.step_state`)

    @property
    def hir_step(self) -> bool:
        """Whether HiR completes the current generation batch (the one place that decides it): in training, unless
        ``num_replays=0`` with TRL's own estimator (``grpo``) and no KL in the reward, where TRL's batch is used as
        it is (`_generate_and_score_completions`)."""
        args = self.args
        return self.model.training and (args.num_replays > 0 or args.advantage_estimator != TRL_ESTIMATOR
                                        or bool(self.kl_coef))

    def _new_capture(self, *, share_old_pass: bool = False, entropies: bool = True) -> HiRCapture:
        """The `HiRCapture` of one TRL call in a HiR step: record log-probs while sampling when the step needs them
        (replays, ``kl_in_reward``) and ``generate`` can record them; entropies too for F_div when ``entropies``."""
        record = self._no_recording_reason is None and bool(self.args.num_replays or self.kl_coef)
        return HiRCapture(share_old_pass=share_old_pass, record_logps=record,
                          record_entropies=record and entropies and self.args.diversity_entropy == "exact")

    # ------------------------------------------------------------------ TRL hooks (each calls super())

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """Override of `GRPOTrainer._calculate_rewards`: keep, in a HiR step, what the step needs from TRL's reward
        call and TRL does not return: the prompts and decoded completions, `ConstraintReward`'s verdicts and this
        rank's (B, F) rows of ``rewards_per_func`` (the extra reward functions' rewards enter the replays' groups).

        Calls super (which calls `ConstraintReward` and each extra reward function once per row; `ConstraintReward`
        logs ``reward/ila``, ``reward/cla`` and ``verify/errors`` through TRL's ``log_metric``).

        Returns:
            super's (B_global, F) rewards tensor (F reward functions, the constraint reward first), unchanged.

        Raises:
            RuntimeError: `ConstraintReward` did not record one verdict row per completion.
        """
        self.constraint_reward.last_verdicts = None
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        verdicts = self.constraint_reward.last_verdicts
        if verdicts is None or len(verdicts) != len(prompts):
            raise RuntimeError("ConstraintReward did not record one verdict row per completion")
        if self._capture is not None:
            local = slice(self.accelerator.process_index * len(prompts),
                          (self.accelerator.process_index + 1) * len(prompts))
            self._capture.prompts, self._capture.completions = prompts, completions
            self._capture.verdicts, self._capture.rewards_per_func = verdicts, rewards_per_func[local].tolist()
        return rewards_per_func

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                           batch_size=None, compute_entropy=False, **kwargs):
        """Override of `GRPOTrainer._get_per_token_logps_and_entropies` that shares TRL's old-log-prob pass.

        When TRL computes ``old_per_token_logps`` itself during generation (its first call to this method), HiR asks
        that same no-grad pass for the token entropies F_div needs, instead of a second pass.

        Returns:
            ``(logps (B, T), entropies (B, T) or None, aux_loss)`` as super does.
        """
        capture = self._capture
        share = capture is not None and capture.share_old_pass and capture.entropies is None
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
            compute_entropy=compute_entropy or share, **kwargs)
        if share:
            capture.entropies = entropies
        return logps, (entropies if compute_entropy else None), aux

    def _compute_loss(self, model, inputs):
        """Override of `GRPOTrainer._compute_loss`: super's loss, unchanged, and the ``hir/replay_ratio_mean`` and
        ``hir/replay_clip_ratio`` of the micro-batch's replays from that same forward pass
        (`hir_trl.trl_adapter.replay_ratio_logging`).

        Returns:
            super's scalar loss tensor.
        """
        with trl_adapter.replay_ratio_logging(self, inputs):
            return super()._compute_loss(model, inputs)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """Override of `GRPOTrainer._generate_single_turn`: record token entropies and log-probs while sampling.

        In a HiR generation batch with transformers ``generate`` (and no logit processor that changes the logits,
        see `hir_trl.sampling.sampling_changes_policy`), a `SamplingRecorder` joins ``generate``'s logits processors
        for this call: it stores, per completion token, the policy's entropy H_t (``diversity_entropy="exact"``)
        and the sampled token's log-prob log pi(y_t), in nats, so that F_div and a replay's old log-probs under q
        need no extra forward pass. Otherwise (vLLM, continuous batching, a repetition penalty, ..., evaluation)
        this is super's call unchanged.

        Returns:
            super's ``(completion_ids, logprobs)``, unchanged; the recorded values go to the current
            `HiRCapture` (``recorded``: per completion, (n_i,) ``logps`` and ``entropies``).
        """
        capture = self._capture
        if capture is None or not capture.record_logps:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        recorder = SamplingRecorder(self.temperature, entropy=capture.record_entropies)
        with record_sampling(self.accelerator.unwrap_model(self.model_wrapped), recorder):
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                     num_generations, has_tool_images)
        capture.recorded = recorder.per_row(completion_ids)
        self._timer.seconds["recording"] += recorder.seconds
        if capture.recorded is None:
            logger.warning("HiR's sampling recorder saw no decoding step; falling back to a no-grad pass")
        return completion_ids, logprobs

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Override of `GRPOTrainer._generate_and_score_completions`: complete every group to m + k rows.

        Calls super for the m sampled completions per instruction. In a HiR step (`hir_step`; otherwise super's
        output is returned unchanged), it then appends,
        after the B original rows of this rank and group by group: supplementary samples under q
        (``replay_shortfall="resample"``, for groups with fewer than k candidates), the hindsight rows (q', the
        source's completion, reward 1) and zero-weight padding (``"pad"``). Every rank adds (B / m) x k rows.

        Args:
            inputs: this rank's B dataset rows, each instruction repeated m times in a row.

        Returns:
            super's dict with every per-row key extended to B' = B + (B / m) x k rows: ``prompt_ids`` (left-padded
            again to a common width), ``completion_ids``/``completion_mask`` (B', T), ``advantages`` (B',) for
            ``grpo`` or (B', T) for the Reinforce++ estimators, ``old_per_token_logps`` (B', T) when TRL stores them
            or the replays need them (``replay_old_logps``, `hir_trl.sampling.entropies_and_old_logps`; absent otherwise, as
            in TRL), ``ref_per_token_logps`` (under q' for replays, when ``beta > 0``), the vLLM
            keys ``sampling_per_token_logps``/``importance_sampling_ratio`` set explicitly for replays, and
            ``num_items_in_batch`` counting the loss tokens of all ranks.

        Raises:
            NotImplementedError: a multimodal batch, or a batch key HiR cannot extend.
        """
        args = self.args
        trl_adapter.start_completion_log(self)  # the completion log holds exactly this generation batch's rows
        if not self.hir_step:
            output = super()._generate_and_score_completions(inputs)
            self._log_judge_metrics()
            if trl_adapter.has_log_columns(self, LOG_COLUMNS):  # e.g. evaluation batches during HiR training
                row_ids = gather_object([str(x.get("row_id")) for x in inputs])
                trl_adapter.extend_log_columns(self, {"row_id": row_ids, "hindsight": [False] * len(row_ids),
                                                      "supplementary": [False] * len(row_ids),
                                                      "kept_constraints": [None] * len(row_ids)})
            return output
        # TRL's own old-log-prob pass also gives the entropies when nothing else will (not recorded while sampling).
        share = (args.num_replays > 0 and args.diversity_entropy == "exact" and self._no_recording_reason is not None
                 and trl_adapter.trl_computes_old_logps(self))
        self._timer.seconds.clear()
        inputs, m = list(inputs), self.num_generations
        extra = provision_count([f for batch in self._shortfalls for f in batch], args.num_replays,
                                args.supplementary_provision, args.supplementary_provision_coverage)
        if len(inputs) % m:
            extra = 0  # not whole groups: `_complete_groups` says so
        self._capture = self._new_capture(share_old_pass=share)
        try:
            if extra:  # the first call also draws `extra` samples per group (``supplementary_provision``)
                sampled, provisioned_rows = provisioned_split(len(inputs) // m, m, extra)
                # the ``provisioned`` column: `ConstraintReward` leaves these rows out of reward/ila and reward/cla
                marked = [{**x, "provisioned": False} for x in provisioned_inputs(inputs, m, extra)]
                for i in provisioned_rows:
                    marked[i]["provisioned"] = True
                with trl_adapter.generation_group_size(self, m + extra), trl_adapter.keep_logged_rows(self) as keep:
                    output = super()._generate_and_score_completions(marked)
                    flags = [False] * len(output["completion_ids"])
                    for i in sampled:
                        flags[i] = True
                    keep.extend(gather_object(flags))  # TRL logged every rank's rows; the provisioned ones leave
            else:
                output = super()._generate_and_score_completions(inputs)
            capture = self._capture
        finally:
            self._capture = None
        provisioned = None
        if extra:
            output, capture, provisioned = self._split_provisioned(output, capture, sampled, provisioned_rows)
        with self._timer.timed("total"):
            output = self._complete_groups(inputs, output, capture, provisioned)
        slowest = self.accelerator.gather(torch.tensor(self._timer.values(), dtype=torch.float64,
                                                       device=self.accelerator.device)).view(-1, len(TIMINGS)).max(0)
        for name, value in zip(TIMINGS, slowest.values.tolist()):
            self._metrics["train"][f"hir/seconds_{name}"].append(value)
        self._log_judge_metrics()
        return output

    def evaluation_loop(self, *args: Any, **kwargs: Any) -> Any:
        """Override of `transformers.Trainer.evaluation_loop`: super's, with the evaluation batches' completions kept
        out of the training steps' completion log (`hir_trl.trl_adapter.separate_completion_log`)."""
        with trl_adapter.separate_completion_log(self):
            return super().evaluation_loop(*args, **kwargs)

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None,
                          tags: str | list[str] | None = None):
        """Override of `GRPOTrainer.create_model_card`: TRL's card (tagged ``hir``, citing the paper) plus a
        "HiR training" section (`hir_trl.card.hir_card_section`), written to ``output_dir/README.md``.

        The model is named after ``output_dir`` unless ``model_name`` is given; a local base model, a local dataset
        and a model not pushed to the Hub are named by their paths instead of Hub links (`hir_trl.card.local_card`).
        """
        dataset_name = dataset_name or self.dataset_name
        local_data = dataset_name is not None and os.path.exists(os.path.expanduser(str(dataset_name)))
        model_name = model_name or os.path.basename(os.path.normpath(self.args.output_dir))
        super().create_model_card(model_name=model_name, dataset_name=None if local_data else dataset_name, tags=tags)
        path = os.path.join(self.args.output_dir, "README.md")
        if self.is_world_process_zero() and os.path.isfile(path):
            base_model = self.accelerator.unwrap_model(self.model).config._name_or_path
            with open(path, encoding="utf-8") as handle:
                text = local_card(handle.read(), base_model=base_model,
                                  model_path=self.hub_model_id or self.args.output_dir)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text + "\n" + hir_card_section(self.args, dataset_name, self.state.log_history,
                                                           list(self.reward_func_names)))

    def end(self) -> None:
        """Override of `transformers.Trainer.end` (present from transformers 5.18; before it,
        `accelerate.Accelerator.end_training`): finish the trackers and destroy the process group, then, on a
        multi-process gloo (CPU) run, release the GIL for `GLOO_TEARDOWN_PAUSE_SECONDS` before returning.

        The pause works around a PyTorch teardown race. gloo's worker thread (``pt_gloo_runloop``) frees each
        collective after the caller has moved on, and freeing an all-gather's tensors takes the GIL. When the trainer
        is freed, the DDP reducer destroys the gloo process group while holding the GIL and joins that thread. A
        thread still freeing the last all-gather then deadlocks the rank; at interpreter exit the rank aborts
        instead ("terminate called without an active exception"). The pause gives that thread the GIL first.
        Measured with two CPU ranks on 2 cores (`benchmarks/gloo_teardown.py`; the counts are in
        benchmarks/README.md).
        """
        gloo = (torch.distributed.is_available() and torch.distributed.is_initialized()
                and torch.distributed.get_world_size() > 1 and torch.distributed.get_backend() == "gloo")
        if hasattr(super(), "end"):
            super().end()
        else:
            self.accelerator.end_training()
        if gloo and GLOO_TEARDOWN_PAUSE_SECONDS > 0:
            time.sleep(GLOO_TEARDOWN_PAUSE_SECONDS)

    def _save_checkpoint(self, model, trial):
        """Override of `GRPOTrainer._save_checkpoint`: also save the replay RNG and the model card.

        Writes ``hir_state.json`` (the state of the RNG used by ``replay_selection="random"``) and a copy of the
        model card (tagged ``hir``) into ``checkpoint-N/``; TRL writes the card to ``output_dir`` only. lambda needs
        no state: it is derived from the restored step counter.
        """
        super()._save_checkpoint(model, trial)
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self.args.should_save and os.path.isdir(folder):
            save_replay_rng(os.path.join(folder, HIR_STATE_FILE), self._replay_rng)
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
        if checkpoint is not None and not load_replay_rng(os.path.join(checkpoint, HIR_STATE_FILE), self._replay_rng):
            logger.warning("%s has no %s: resuming, but the replay RNG (used by replay_selection='random') restarts "
                           "from seed=%d; lambda, the model, the optimizer and the step counter resume exactly",
                           checkpoint, HIR_STATE_FILE, self.args.seed)

    # ------------------------------------------------------------------ one HiR step (Algorithm 2, lines 4-9)

    def _split_provisioned(self, output, capture: HiRCapture, sampled, provisioned_rows):
        """Split a first call that also drew provisioned samples (`hir_trl.batch.provisioned_inputs`) into the B
        sampled rows (``output``, ``capture``) and the provisioned ones: their per-row tensors, ``prompts``,
        ``completions``, ``verdict_rows`` and ``recorded_logps`` (or None), group 0's first."""
        n = len(capture.prompts)
        columns = {"prompts": capture.prompts, "completions": capture.completions,
                   "verdict_rows": capture.verdicts.verdicts, "rewards_per_func": capture.rewards_per_func}
        recorded = capture.recorded
        if recorded:
            columns.update({f"recorded_{key}": values for key, values in recorded.items()})
        if capture.entropies is not None:
            columns["entropies"] = capture.entropies
        table = {**{key: value for key, value in output.items() if value is not None}, **columns}
        kept, provisioned = take_rows(table, sampled, n), take_rows(table, provisioned_rows, n)
        capture = dataclasses.replace(
            capture, prompts=kept.pop("prompts"), completions=kept.pop("completions"),
            verdicts=VerdictMatrix(kept.pop("verdict_rows")), rewards_per_func=kept.pop("rewards_per_func"))
        if recorded:
            capture.recorded = {key: kept.pop(f"recorded_{key}") for key in recorded}
        if "entropies" in kept:
            capture.entropies = kept.pop("entropies")
        provisioned.pop("entropies", None)
        return {**output, **kept}, capture, provisioned

    def _complete_groups(self, inputs, output, capture: HiRCapture, provisioned=None) -> dict[str, Any]:
        """Steps 1-6 of a HiR generation batch on this rank's B sampled rows (see `_generate_and_score_completions`);
        ``provisioned``: the samples the first call drew beside them (`_split_provisioned`), or None."""
        unsupported = MULTIMODAL_KEYS.intersection(output)
        if unsupported:
            raise NotImplementedError(f"HiRTrainer does not support multimodal inputs (got {sorted(unsupported)})")
        for key, value in output.items():
            if key not in ROW_KEYS and key != "num_items_in_batch" and value is not None:
                raise NotImplementedError(f"HiRTrainer cannot extend the batch key {key!r}")
        args, m, k = self.args, self.num_generations, self.args.num_replays
        prompts, completions, verdicts = capture.prompts, capture.completions, capture.verdicts
        B = len(prompts)
        if B % m:
            raise RuntimeError(f"this rank holds {B} completions, not whole groups of {m}")

        # 1. Token entropies (F_div) and old log-probs under q: recorded while sampling, or TRL's own pass; a no-grad
        #    pass only for what neither gives (`hir_trl.sampling.entropies_and_old_logps`).
        need_old = "old_per_token_logps" not in output and bool(
            self.kl_coef or (k > 0 and args.replay_old_logps == "original"))
        entropies, old = entropies_and_old_logps(
            output, capture.recorded, capture.entropies, need_old=need_old,
            diversity_entropy=args.diversity_entropy if k > 0 else None,
            need_f_div=k > 0 and args.replay_selection in ("curriculum", "diversity"),
            policy_pass=lambda exact: self._policy_pass(self.model, output["prompt_ids"], output["prompt_mask"],
                                                        output["completion_ids"], output["completion_mask"],
                                                        entropy=exact, timer="extra_pass"))
        if need_old:
            output["old_per_token_logps"] = old

        # 2. Algorithm 1, Select-Rewrite, per group (or over the batch).
        lam = curriculum_lambda(self.state.global_step, args.lambda_0, args.eta)
        picked, fill = [[] for _ in range(B // m)], [0] * (B // m)
        if k > 0:
            with self._timer.timed("selection"):
                diversity = ([float("nan")] * B if entropies is None  # random / integrity: F_div unused
                             else diversity_scores(entropies, loss_mask(output), args.diversity_aggregation))
                eligible = None if args.replay_truncated_completions else completion_ended(
                    output["completion_ids"], output["completion_mask"], self.eos_token_ids)
                picked = select_rewrite(
                    [verdicts.passed(r) for r in range(B)], diversity, m, k, lam, prompts=prompts, inputs=inputs,
                    scope=args.replay_scope, selection=args.replay_selection, min_satisfied=args.replay_min_satisfied,
                    rng=self._replay_rng, eligible=eligible,
                    relabel=self._relabel(inputs, prompts, completions))
                fill = allocate_shortfall([len(p) for p in picked], k)

        # 3. Supplementary samples under q for groups short of candidates: the provisioned ones first, then a second
        #    generation call (every rank joins it) or padding for what they do not cover (``replay_shortfall``).
        extra = 0 if provisioned is None else len(provisioned["prompts"]) // (B // m)
        taken = [min(f, extra) for f in fill]
        rest = [f - t for f, t in zip(fill, taken)]
        resample = args.replay_shortfall == "resample" and k > 0
        second = None
        if resample:
            with self._timer.timed("supplementary"):
                second = self._supplementary_samples(inputs, rest, output)
        if k > 0 and args.supplementary_provision == "predicted":
            self._shortfalls.append(self.accelerator.gather(
                torch.tensor(fill, dtype=torch.long, device=self.accelerator.device)).tolist())
        supplement = self._supplement(provisioned, taken, second, rest if resample else [0] * len(rest), output)
        self._metrics["train"]["hir/generate_calls"].append(1 + (second is not None))
        self._metrics["train"]["hir/provisioned_samples"].append(
            float(self.accelerator.gather(torch.tensor([0 if provisioned is None else len(provisioned["prompts"])],
                                                       device=self.accelerator.device)).sum().item()))

        # 4. The extended batch: the sampled rows, then supplementary samples, replays (q', y) and padding.
        new_rows = plan_new_rows(picked, fill if resample else taken, [0] * len(rest) if resample else rest, m)
        with self._timer.timed("assembly"):
            q_primes = [row.q_prime for row in new_rows if row.kind == "replay"]
            extended = extend_batch(
                output, new_rows, supplement, trl_adapter.tokenize_prompts(self, q_primes) if q_primes else [],
                pad_token_id=self._tokenizer.pad_token_id, pad_to_multiple_of=self.pad_to_multiple_of,
                skip=("ref_per_token_logps",) if self.kl_coef else ())
            self._replay_passes(extended, new_rows, B)

        # 5. Rewards (`_row_rewards`: replays 1 plus their own extra rewards, pads NaN) and advantages
        #    (`hir_trl.advantages.hir_advantages`).
        rewards = self._row_rewards(inputs, output, capture, new_rows, supplement)
        extended["advantages"] = hir_advantages(
            torch.tensor(rewards, dtype=torch.float32, device=self.accelerator.device), new_rows, B, m,
            loss_mask(extended), replay_advantage=args.replay_advantage, replay_weight=args.replay_weight,
            estimator=args.advantage_estimator, scale_rewards=self.scale_rewards,
            kl=kl_in_reward_per_token(extended, self._reference_logps(*batch_inputs(extended)), new_rows, B)
            if self.kl_coef else None, kl_coef=self.kl_coef,
            aggregation=args.multi_objective_aggregation, reward_weight=float(self.reward_weights[0]),
            gather=self.accelerator.gather)
        extended["num_items_in_batch"] = self.accelerator.gather(loss_mask(extended).sum()).sum()

        # 6. Metrics, the completion log and `last_replay`.
        self._log_step(inputs, extended, new_rows, supplement, completions, lam, rewards, B,
                       0 if provisioned is None else int(provisioned["completion_mask"].sum().item()))
        prepare_loss_batch(extended, new_rows, B, m, weighting=args.replay_loss_weighting, num_replays=k,
                           gather=self.accelerator.gather)
        return extended

    def _relabel(self, inputs, prompts, completions):
        """``relabel(i, j)`` for `hir_trl.replay.select_rewrite` under ``hindsight_relabel="achieved"``: response i's
        failed constraint j with the bound it achieved (`hir_trl.verifiers.achieved_constraint`); None for "drop"."""
        if self.args.hindsight_relabel != "achieved":
            return None
        return lambda i, j: achieved_constraint(inputs[i]["constraints"][j], completion_text(completions[i]),
                                                instruction_text(prompts[i]))

    def _row_rewards(self, inputs, output, capture: HiRCapture, new_rows: list[NewRow], supplement) -> list[float]:
        """(B + len(new_rows),) reward of every row of the extended batch, each TRL's weighted sum over the reward
        functions (`hir_trl.rewards.weighted_rewards`, ``reward_weights``): the sampled and supplementary rows'
        from TRL's own reward call; a replay's constraint reward is 1 (or re-judged, ``rejudge_replays``) and its
        extra rewards are computed on its own (q', y), with its kept constraints (`hir_trl.rewards.extra_rewards`);
        a pad's is NaN."""
        weights, mode = self.reward_weights.tolist(), self.args.reward_mode

        def per_func(verdicts, rewards_per_func):  # the constraint reward from the verdicts (exact), the others
            return [[reward, *others[1:]]            # from TRL's call (float32)
                    for reward, others in zip(verdicts.rewards(mode), rewards_per_func, strict=True)]

        sampled = weighted_rewards(per_func(capture.verdicts, capture.rewards_per_func), weights)
        supplementary = (weighted_rewards(per_func(supplement["verdicts"], supplement["rewards_per_func"]), weights)
                         if supplement is not None else [])
        replays = [(offset, row) for offset, row in enumerate(new_rows) if row.kind == "replay"]
        constraint = {offset: 1.0 for offset, _ in replays}
        if self.args.rejudge_replays:
            constraint.update(rejudge_replays(self.constraint_reward.judge, self.args.reward_mode, inputs,
                                              capture.completions, new_rows))
        extras = extra_rewards(
            self.extra_reward_funcs, [row.q_prime for _, row in replays],
            [capture.completions[row.source] for _, row in replays],
            [output["completion_ids"][row.source][output["completion_mask"][row.source].bool()].tolist()
             for _, row in replays],
            [{**inputs[row.source], "prompt": row.q_prime,
              "constraints": hindsight_constraints(inputs[row.source]["constraints"], row.choice)}
             for _, row in replays],
            self.state) if self.extra_reward_funcs and replays else [[] for _ in replays]
        replay_rewards = weighted_rewards([[constraint[offset], *extra] for (offset, _), extra in zip(replays, extras)],
                                          weights)
        return row_rewards(sampled, new_rows, supplementary, dict(zip(constraint, replay_rewards)))

    def _policy_pass(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, entropy=False,
                     timer: str | None = None):
        """One no-grad forward: per-token log-probs (N, T) and, optionally, entropies (N, T) in nats (timed as
        ``hir/seconds_<timer>`` when given)."""
        if completion_ids.size(0) == 0:
            empty = completion_ids.new_zeros(completion_ids.shape, dtype=torch.float32)
            return empty, (empty if entropy else None)
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs), \
                (self._timer.timed(timer) if timer else contextlib.nullcontext()):
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1),
                completion_ids.size(1), batch_size=self.args.per_device_train_batch_size, compute_entropy=entropy)
        return logps, entropies

    def _reference_logps(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """Reference-model log-probs (N, T) of completions under the given prompts (PEFT: the base model)."""
        if self.ref_model is not None:
            return self._policy_pass(self.ref_model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]
        from trl.trainer.utils import use_adapter

        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self._policy_pass(self.model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]

    def _replay_passes(self, extended: dict[str, Any], new_rows: list[NewRow], B: int) -> None:
        """The passes under q' (in place): a replay's old log-probs for ``replay_old_logps="hindsight"`` (its vLLM
        correction then the identity) and its reference log-probs when ``beta > 0``.

        They run over ALL new rows, a count that is the same on every rank ((B / m) x k), so that ZeRO-3 ranks run the
        same number of forward passes; only the replays' results are kept. "hindsight" needs pi_old(y | q') only
        where old or sampling log-probs are stored: without them TRL's loss uses the detached current log-probs,
        which are exactly that.
        """
        hindsight = self.args.replay_old_logps == "hindsight" and any(
            key in extended for key in ("old_per_token_logps", "sampling_per_token_logps"))
        if not new_rows or not (hindsight or "ref_per_token_logps" in extended):
            return
        new = [tensor[B:] for tensor in batch_inputs(extended)]
        keep = torch.tensor([row.kind == "replay" for row in new_rows], device=new[0].device).unsqueeze(1)
        if hindsight:
            old_q_prime, _ = self._policy_pass(self.model, *new, timer="replay_passes")
            for key, value in (("old_per_token_logps", old_q_prime), ("sampling_per_token_logps", old_q_prime),
                               ("importance_sampling_ratio", None)):
                if key in extended:
                    tail = extended[key][B:]
                    tail.copy_(torch.where(keep, torch.ones_like(tail) if value is None else value, tail))
        if "ref_per_token_logps" in extended:
            with self._timer.timed("replay_passes"):
                ref_q_prime = self._reference_logps(*new)
            tail = extended["ref_per_token_logps"][B:]
            tail.copy_(torch.where(keep, ref_q_prime, tail))

    def _supplementary_samples(self, inputs, fill, output):
        """Generate ``fill[g]`` ordinary samples under q for each group g, through TRL's own pipeline.

        Every rank calls super's ``_generate_and_score_completions`` with the same number of prompts (the largest
        need over ranks): a rank that needs fewer adds filler prompts whose results are dropped, so collective
        generation (vLLM server/colocate, ZeRO-3) and TRL's gathers stay in step. Within the call TRL samples one
        completion per prompt; its metrics and completion-log rows from the call are discarded (HiR logs the kept
        rows itself), both through `hir_trl.trl_adapter`.

        Returns:
            None when no rank needs a sample; else a dict with the kept rows' per-row tensors, ``prompts``,
            ``completions``, ``verdicts`` and the counts ``fillers`` and ``generated_tokens``.
        """
        need = sum(fill)
        most = int(self.accelerator.gather(torch.tensor([need], device=self.accelerator.device)).max().item())
        if most == 0:
            return None
        m = self.num_generations
        extra = [inputs[g * m] for g, c in enumerate(fill) for _ in range(c)] + [inputs[0]] * (most - need)
        self._capture = self._new_capture(entropies=False)  # no F_div for supplementary samples
        try:
            with trl_adapter.one_completion_per_prompt(self), trl_adapter.discard_records(self, len(extra)):
                out = super()._generate_and_score_completions(extra)
            capture = self._capture
        finally:
            self._capture = None
        generated = int(self.accelerator.gather(out["completion_mask"].sum()).sum().item())
        if "old_per_token_logps" in output and "old_per_token_logps" not in out:
            out["old_per_token_logps"] = self._sampled_old_logps(out, capture.recorded)
        kept = {key: value[:need] for key, value in out.items()
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == len(extra)}
        kept.update(prompts=capture.prompts[:need], completions=capture.completions[:need],
                    verdicts=VerdictMatrix(capture.verdicts.verdicts[:need]),
                    rewards_per_func=capture.rewards_per_func[:need],
                    fillers=most - need, generated_tokens=generated)
        return kept

    def _supplement(self, provisioned, taken, second, rest, output):
        """The supplementary samples of the step, group by group: per group g, ``taken[g]`` provisioned samples, then
        ``rest[g]`` from the second call (`_supplementary_samples`, whose rows are in that order).

        Returns:
            None when there are none and no second call ran; else the dict `_supplementary_samples` returns (per-row
            tensors, ``prompts``, ``completions``, ``verdicts``, ``fillers``, ``generated_tokens``), over both.
        """
        parts = []
        if provisioned is not None and sum(taken):
            extra = len(provisioned["prompts"]) // len(taken)
            index = [g * extra + j for g, n in enumerate(taken) for j in range(n)]
            pool = take_rows(provisioned, index, len(provisioned["prompts"]))
            recorded = {"logps": pool.pop("recorded_logps")} if "recorded_logps" in pool else None
            pool.pop("recorded_entropies", None)
            if "old_per_token_logps" in output and "old_per_token_logps" not in pool:
                pool["old_per_token_logps"] = self._sampled_old_logps(pool, recorded)
            parts.append(pool)
        if second is not None:
            parts.append({**{key: value for key, value in second.items()
                             if key not in ("verdicts", "fillers", "generated_tokens")},
                          "verdict_rows": second["verdicts"].verdicts})
        if not parts:
            return None
        if len(parts) == 1 and second is None:
            joined = parts[0]
        else:
            joined = join_rows(parts, pad_token_id=self._tokenizer.pad_token_id)
        offset, later, order = 0, sum(taken), []
        for t, r in zip(taken, rest):
            order += list(range(offset, offset + t)) + list(range(later, later + r))
            offset, later = offset + t, later + r
        out = take_rows(joined, order, len(joined["prompts"]))
        out["verdicts"] = VerdictMatrix(out.pop("verdict_rows"))
        out.update(fillers=second["fillers"] if second is not None else 0,
                   generated_tokens=second["generated_tokens"] if second is not None else 0)
        return out

    def _sampled_old_logps(self, batch, recorded):
        """(N, T) old log-probs of sampled rows: recorded while sampling (or vLLM's), else a no-grad pass."""
        old = sampling_logps(batch, recorded)  # the same source as the originals' (step 1)
        if old is None:
            old, _ = self._policy_pass(self.model, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"],
                                       batch["completion_mask"], timer="extra_pass")
        return old

    def _log_step(self, inputs, extended, new_rows: list[NewRow], supplement, completions, lam, rewards, B,
                  provisioned_tokens: int = 0) -> None:
        """Step 6: the ``hir/*`` metrics (summed over ranks), the completion log's new rows and `last_replay`.
        ``provisioned_tokens``: completion tokens of this rank's provisioned samples, used or dropped."""
        m, device = self.num_generations, self.accelerator.device
        local = replay_counts(new_rows, rewards, B, m, self.args.num_replays,
                              fillers=supplement["fillers"] if supplement is not None else 0,
                              generated_tokens=int(extended["completion_mask"][:B].sum().item()) + provisioned_tokens,
                              sampled_lengths=extended["completion_mask"][:B].sum(1).tolist())
        counts = self.accelerator.gather(torch.tensor(local, dtype=torch.float64, device=device))
        counts = counts.view(-1, len(local)).sum(0).tolist()
        if supplement is not None:  # already summed over ranks, fillers included
            counts[COUNTS.index("generated_tokens")] += supplement["generated_tokens"]
        for name, value in replay_metrics(counts, lam, m).items():
            self._metrics["train"][name].append(value)
        advantages = sequence_advantages(extended)
        trl_adapter.log_hindsight_rows(
            self, gather_object([str(x.get("row_id")) for x in inputs]), gather_object(advantages[:B].tolist()),
            gather_object(completion_log_rows(new_rows, inputs, completions, supplement, rewards, B, m)),
            gather_object([advantages[B + i].item() for i, row in enumerate(new_rows) if row.kind != "pad"]))
        self.last_replay = HiRStep(new_rows=list(new_rows), rewards=rewards, lam=lam,
                                 supplementary_verdicts=supplement["verdicts"] if supplement else None)

    def _log_judge_metrics(self) -> None:
        """Log the judge's ``judge/*`` metrics since the last call (`hir_trl.step_log.judge_metrics`)."""
        if hasattr(self.constraint_reward.judge, "pop_metrics"):
            logged = self._metrics["train" if self.model.training else "eval"]
            for name, value in judge_metrics(self.constraint_reward.judge.pop_metrics(), self.accelerator.gather,
                                             self.accelerator.device).items():
                logged[name].append(value)


__all__ = ["HIR_PAPER", "card_fields", "HiRStep", "HiRTrainer", "SoftConstraintsWithoutJudgeError",
           "check_batch_layout", "check_soft_constraints_judged", "hir_card_section"]
