"""`HiRTrainer`: Hindsight instruction Replay inside TRL's `GRPOTrainer`, as a thin adapter.

The class holds `__init__` (the checks, `GRPOTrainer.__init__`, the set-up: `hir_trl.trainer_setup`) and TRL's hooks,
each calling super() and handing HiR's part to one function: TRL samples
m = ``num_generations`` completions per instruction and scores them with `ConstraintReward`; `hir_trl.step` then
completes every group as the paper's Algorithm 2 (Select-Rewrite, Algorithm 1, in `hir_trl.step.replay`; the shortfall
policy in `hir_trl.step.shortfall`; the new rows in `hir_trl.step.batch`; advantages in `hir_trl.step.advantages`). The step
reaches the trainer through `hir_trl.trl_adapter.TRLPasses` (``hir_passes``), the one place that touches TRL's
private state and the holder of HiR's per-trainer state (replay RNG, step timer, the current capture), which the
hooks call too; the step's state is typed in `hir_trl.step.state`, the model card is `hir_trl.card`'s and the
platform workarounds are `hir_trl.models.workarounds`'.
"""

from __future__ import annotations

import os
from typing import Any

from trl import GRPOTrainer

from .card import HIR_PAPER, add_hir_section, card_dataset_name, card_fields, hir_card_section
from .configs import HiRConfig, check_batch_layout
from .judge import Judge
from .models.adapter_base import write_adapter_base
from .models.workarounds import gloo_teardown_pause, weights_on_each_node
from .run_folder import hub_upload, resume_settings, training_run
from .step.advantages import TRL_ESTIMATOR
from .step.algorithm import hir_generation_batch, trl_generation_batch
from .step.replay import HIR_STATE_FILE, restore_checkpoint_state, save_checkpoint_state
from .step.sampling import record_while_sampling
from .step.state import HiRStep
from .trainer_setup import (
    SoftConstraintsWithoutJudgeError,
    check_soft_constraints_judged,
    grpo_arguments,
    prepare_trainer,
)
from .trl_adapter import TRLPasses


class HiRTrainer(GRPOTrainer):
    """Trainer for Hindsight instruction Replay (HiR): a `trl.GRPOTrainer` whose hooks hand each step to `hir_trl.step`.

    Each training generation batch holds, per instruction q, m = ``args.num_generations`` sampled completions (TRL)
    plus k = ``args.num_replays`` hindsight rows: a failed completion y, selected by F = F_div + lambda * F_int and
    paired with the rewritten instruction q' that keeps only the constraints y met, with reward 1 (Algorithm 1,
    `hir_trl.step.replay.select_rewrite`); `hir_trl.step.complete_groups` completes the groups as Algorithm 2 (a group
    short of candidates: ``replay_shortfall``, `hir_trl.step.shortfall`). ``replay_advantage`` says how replays enter the
    advantages
    (`hir_trl.step.advantages.hir_advantages`); a replay's old log-probs are those of y under q (paper eq. 7-8) and its
    reference log-probs (``beta > 0``) those under q'.

    Args:
        `GRPOTrainer`'s, in its order (``model, reward_funcs, args, train_dataset, eval_dataset, processing_class,
        reward_processing_classes, callbacks, optimizers, quantization_config, peft_config, tools, rollout_func,
        environment_factory``), then HiR's own, keyword-only (``judge``, ``dataset_name``).

        model: a model id or local path, or a `PreTrainedModel` (as for `GRPOTrainer`).
        reward_funcs: leave ``None`` to verify the dataset's constraints with `ConstraintReward`; or pass a
            `ConstraintReward` (for instance with a judge), TRL-style reward functions ``fn(prompts, completions,
            **kwargs) -> list[float | None]``, reward models (a model id or folder, loaded as `GRPOTrainer` loads
            it: a sequence-classification model with its tokenizer; or a loaded model), or a list of them (the `ConstraintReward` first; one is built and put
            first when only functions are given). A row's reward is TRL's weighted sum,
            ``reward_weights[0] x constraint reward + sum_i reward_weights[i] x fn_i`` (weights 1 when unset), where
            the constraint reward is ``HiRConfig.reward_mode``'s (ILA or CLA; 1 for a replay, which meets every
            constraint q' keeps). A replay is a new row: its functions' rewards are computed on its own (q', y),
            with the keyword arguments TRL passes (`hir_trl.trl_adapter.TRLPasses.replay_reward_kwargs`); a reward
            model scores the text of (q', y) as TRL scores (q, y) (`hir_trl.trl_adapter.TRLPasses.score_with_model`).
        args: a `HiRConfig`; defaults to ``HiRConfig("<model>-HiR")``.
        train_dataset: rows from `hir_trl.load_hir_dataset` (columns ``prompt``, ``task``, ``constraints``,
            ``template``, ``row_id``), or any rows it reads (HIR-16K or native, e.g. ``Dataset.from_list``):
            normalized here (`hir_trl.data.loading.normalize_dataset`).
        eval_dataset: rows as ``train_dataset`` (or a dict of them); evaluated as TRL does, without replays.
        processing_class, reward_processing_classes, callbacks, optimizers, quantization_config, peft_config, tools,
        rollout_func, environment_factory: passed to `GRPOTrainer` (``environment_factory`` is refused,
            `hir_trl.compat.REFUSED_TRAINER_ARGUMENTS`).
        judge: the soft-constraint judge for the default `ConstraintReward`.
        dataset_name: the training dataset's Hub id or path, recorded in every model card.

    Raises:
        TypeError: the old order ``(model, args, train_dataset, reward_funcs)``, positionally
            (`hir_trl.compat.check_argument_order`, naming the fix); ``args`` is not a `HiRConfig`; a reward model
            (not a function) or two `ConstraintReward` in ``reward_funcs``.
        ValueError: a `ConstraintReward` whose ``reward_mode`` is not ``args.reward_mode``, one that is not first,
            ``reward_weights`` of the wrong length, or extra functions with ``multi_objective_aggregation`` other
            than ``"sum_then_normalize"`` (`hir_trl.trainer_setup.trainer_reward`).
        hir_trl.guards.NothingTrainedError: (a `ValueError`) fewer training rows than one step's prompts
            (`hir_trl.guards.check_enough_rows`); raised by ``train()`` too when a run ends without an optimizer step
            (`hir_trl.guards.NothingTrainedGuard`, a streaming dataset too short). A run whose every step had a
            gradient of exactly zero logs a warning (``trainer.zero_gradient_guard``, `hir_trl.guards.ZeroGradientGuard`;
            ``hir-trl train`` stops on it).
        hir_trl.models.MissingDependencyError: (an `ImportError`) ``use_vllm`` without vLLM installed.
        DatasetFormatError: (a `ValueError`) a training or evaluation row of no schema `load_hir_dataset` reads, or
            with a malformed field: the message names the row and the field; or a prompt too long to sample from
            (`hir_trl.data.loading.check_prompt_lengths`), with its token count.
        SoftConstraintsWithoutJudgeError: soft constraints and no judge (`hir_trl.trainer_setup.trainer_reward`).

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
    hir_passes: TRLPasses  # HiR's per-trainer state and its one way to TRL (set up by `grpo_arguments`)
    last_replay: HiRStep | None  # what the latest HiR generation batch added on this rank

    def __init__(self, model: Any, reward_funcs: Any = None, args: HiRConfig | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, reward_processing_classes: Any = None,
                 callbacks: Any = None, optimizers: Any = (None, None), quantization_config: Any = None,
                 peft_config: Any = None, tools: Any = None, rollout_func: Any = None,
                 environment_factory: Any = None, *, judge: Judge | None = None,
                 dataset_name: str | None = None) -> None:
        trl_kwargs = grpo_arguments(self, model, reward_funcs, args, train_dataset, dict(
            eval_dataset=eval_dataset, processing_class=processing_class,
            reward_processing_classes=reward_processing_classes, callbacks=callbacks, optimizers=optimizers,
            quantization_config=quantization_config, peft_config=peft_config, tools=tools, rollout_func=rollout_func,
            environment_factory=environment_factory), judge=judge, dataset_name=dataset_name)  # checks, in order
        super().__init__(model=model, **trl_kwargs)
        prepare_trainer(self)  # guards, KL in the reward, prompt lengths, completion log size

    @property
    def hir_step(self) -> bool:
        """Whether HiR completes the current generation batch (the one place that decides it): in training, unless
        ``num_replays=0`` with TRL's own estimator (``grpo``) and no KL in the reward, where TRL's batch is used as
        it is (`_generate_and_score_completions`)."""
        args = self.args
        return self.model.training and (args.num_replays > 0 or args.advantage_estimator != TRL_ESTIMATOR
                                        or bool(self.kl_coef))

    # ------------------------------------------------------------------ TRL hooks (each calls super())

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """Override of `GRPOTrainer._calculate_rewards`: keep, in a HiR step, what the step needs from TRL's reward
        call and TRL does not return: the prompts and decoded completions, `ConstraintReward`'s verdicts, this
        rank's (B, F) rows of ``rewards_per_func`` and TRL's ``environments``
        (`hir_trl.trl_adapter.TRLPasses.keep_reward_call`).

        Calls super (which calls `ConstraintReward` and each extra reward function once per row; `ConstraintReward`
        logs ``reward/ila``, ``reward/cla`` and ``verify/errors`` through TRL's ``log_metric``).

        Returns:
            super's (B_global, F) rewards tensor (F reward functions, the constraint reward first), unchanged.

        Raises:
            RuntimeError: `ConstraintReward` did not record one verdict row per completion.
        """
        self.constraint_reward.last_verdicts = None
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self.hir_passes.keep_reward_call(prompts, completions, rewards_per_func)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                           batch_size=None, compute_entropy=False, **kwargs):
        """Override of `GRPOTrainer._get_per_token_logps_and_entropies` that shares TRL's old-log-prob pass.

        When TRL computes ``old_per_token_logps`` itself during generation (its first call to this method), HiR asks
        that same no-grad pass for the token entropies F_div needs, instead of a second pass.

        Returns:
            ``(logps (B, T), entropies (B, T) or None, aux_loss)`` as super does.
        """
        capture = self.hir_passes.capture
        share = capture is not None and capture.share_old_pass and capture.entropies is None
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
            compute_entropy=compute_entropy or share, **kwargs)
        if share:
            capture.entropies = entropies
        return logps, (entropies if compute_entropy else None), aux

    def _generate(self, prompts):
        """Override of `GRPOTrainer._generate`: super's generation, then, in a HiR step with a judge, the rows' soft
        constraints go to the judge at once (`hir_trl.trl_adapter.TRLPasses.judge_ahead`), so that its wait overlaps
        TRL's old-log-prob and reference passes; the reward call then collects the verdicts.

        Returns:
            super's tuple, unchanged.
        """
        return self.hir_passes.judge_ahead(super()._generate(prompts))

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """Override of `GRPOTrainer._generate_single_turn`: record token entropies and log-probs while sampling.

        In a HiR generation batch with transformers ``generate`` (and no logit processor that changes the logits,
        see `hir_trl.step.sampling.sampling_changes_policy`), a `SamplingRecorder` joins ``generate``'s logits processors
        for this call (`hir_trl.step.sampling.record_while_sampling`): per completion token, the policy's entropy H_t
        (``diversity_entropy="exact"``) and the sampled token's log-prob log pi(y_t), in nats, so that F_div and a
        replay's old log-probs under q need no extra forward pass. Otherwise (vLLM, continuous batching, a
        repetition penalty, ..., evaluation) this is super's call unchanged.

        Returns:
            super's ``(completion_ids, logprobs)``, unchanged; the recorded values go to the current
            `HiRCapture` (``recorded``: per completion, (n_i,) ``logps`` and ``entropies``).
        """
        return record_while_sampling(super()._generate_single_turn, self.hir_passes.capture,
                                     self.accelerator.unwrap_model(self.model_wrapped), self.temperature,
                                     self.hir_passes.timer, prompt_ids, images, multimodal_fields, num_generations,
                                     has_tool_images)

    def _compute_loss(self, model, inputs):
        """Override of `GRPOTrainer._compute_loss`: super's loss, unchanged, and the ``hir/replay_ratio_mean`` and
        ``hir/replay_clip_ratio`` of the micro-batch's replays from that same forward pass
        (`hir_trl.trl_adapter.TRLPasses.replay_ratio_logging`).

        Returns:
            super's scalar loss tensor.
        """
        with self.hir_passes.replay_ratio_logging(inputs):
            return super()._compute_loss(model, inputs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Override of `GRPOTrainer._generate_and_score_completions`: complete every group to m + k rows.

        Calls super for the m sampled completions per instruction (Algorithm 2, lines 7-10). In a HiR step
        (`hir_step`; otherwise super's output is returned unchanged, `hir_trl.step.algorithm.trl_generation_batch`),
        `hir_trl.step.complete_groups` then appends, after the B original rows of this rank and group by group:
        supplementary samples under q (``replay_shortfall="resample"``, for groups with fewer than k candidates), the
        hindsight rows (q', the source's completion, reward 1) and zero-weight padding (``"pad"``). Every rank adds
        (B / m) x k rows; `last_replay` is what they were.

        Args:
            inputs: this rank's B dataset rows, each instruction repeated m times in a row.

        Returns:
            super's dict with every per-row key extended to B' = B + (B / m) x k rows: ``prompt_ids`` (left-padded
            again to a common width), ``completion_ids``/``completion_mask`` (B', T), ``advantages`` (B',) for
            ``grpo`` or (B', T) for the Reinforce++ estimators, ``old_per_token_logps`` (B', T) when TRL stores them
            or the replays need them (``replay_old_logps``, `hir_trl.step.sampling.entropies_and_old_logps`; absent
            otherwise, as in TRL), ``ref_per_token_logps`` (under q' for replays, when ``beta > 0``), the vLLM keys
            ``sampling_per_token_logps``/``importance_sampling_ratio`` set explicitly for replays, and
            ``num_items_in_batch`` counting the loss tokens of all ranks.

        Raises:
            NotImplementedError: a multimodal batch, or a batch key HiR cannot extend.
        """
        self.hir_passes.start_completion_log()  # the completion log holds exactly this generation batch's rows
        if not self.hir_step:
            return trl_generation_batch(self.hir_passes, inputs, super()._generate_and_score_completions(inputs),
                                        self.model.training)
        inputs = list(inputs)
        with self.hir_passes.capturing(step_start=True, inputs=inputs) as capture:
            output = super()._generate_and_score_completions(inputs)
        output, self.last_replay = hir_generation_batch(self.hir_passes, self._shortfall, inputs, output, capture)
        return output

    def evaluation_loop(self, *args: Any, **kwargs: Any) -> Any:
        """Override of `transformers.Trainer.evaluation_loop`: super's, with the evaluation batches' completions kept
        out of the training steps' completion log (`hir_trl.trl_adapter.TRLPasses.separate_completion_log`)."""
        with self.hir_passes.separate_completion_log():
            return super().evaluation_loop(*args, **kwargs)

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None,
                          tags: str | list[str] | None = None):
        """Override of `GRPOTrainer.create_model_card`: TRL's card (tagged ``hir``, citing the paper) plus a
        "HiR training" section (`hir_trl.card.add_hir_section`), written to ``output_dir/README.md``.

        The model is named after ``output_dir`` unless ``model_name`` is given; a local base model, a local dataset
        and a model not pushed to the Hub are named by their paths instead of Hub links (`hir_trl.card.local_card`).
        """
        dataset_name = dataset_name or self.dataset_name
        super().create_model_card(model_name=model_name or os.path.basename(os.path.normpath(self.args.output_dir)),
                                  dataset_name=card_dataset_name(dataset_name), tags=tags)
        if self.is_world_process_zero():
            add_hir_section(os.path.join(self.args.output_dir, "README.md"),
                            base_model=self.accelerator.unwrap_model(self.model).config._name_or_path,
                            model_path=self.hub_model_id or self.args.output_dir, args=self.args,
                            dataset_name=dataset_name, log_history=self.state.log_history,
                            reward_func_names=list(self.reward_func_names),
                            resumed_from=getattr(self, "resumed_from", None))

    def push_to_hub(self, *args: Any, **kwargs: Any) -> Any:
        """Override of `transformers.Trainer.push_to_hub`: super's, leaving the completion logs out of the upload
        when ``push_completions`` is off (`hir_trl.run_folder.hub_upload`)."""
        with hub_upload(self.args):
            return super().push_to_hub(*args, **kwargs)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """Override of `transformers.Trainer._push_from_checkpoint` (``hub_strategy`` uploads at each save): super's,
        leaving the completion logs out when ``push_completions`` is off (`hir_trl.run_folder.hub_upload`)."""
        with hub_upload(self.args):
            super()._push_from_checkpoint(checkpoint_folder)

    def end(self) -> None:
        """Override of `transformers.Trainer.end` (present from transformers 5.18; before it,
        `accelerate.Accelerator.end_training`): finish the trackers and destroy the process group, then, on a
        multi-process gloo (CPU) run, pause briefly before returning (`hir_trl.models.workarounds.gloo_teardown_pause`,
        a PyTorch teardown race)."""
        with gloo_teardown_pause():
            super().end() if hasattr(super(), "end") else self.accelerator.end_training()

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """Override of `transformers.Trainer.train`: super's, holding ``output_dir`` while it trains and checking the
        checkpoint it resumes from first (`hir_trl.run_folder.training_run`): a second run on the folder is refused,
        naming the holder's pid; so is a checkpoint with no model weights, of the other kind (LoRA or full), with
        other optimizer, schedule or data settings, or inside a generation cycle (each a `ValueError`, one line).
        ``True`` resumes from the latest complete ``checkpoint-N`` of ``output_dir``."""
        with training_run(self, resume_from_checkpoint) as checkpoint:
            self.resumed_from = checkpoint  # the model card names it
            return super().train(checkpoint, *args, **kwargs)

    def _save_checkpoint(self, model, trial):
        """Override of `GRPOTrainer._save_checkpoint`: also save the replay RNG and the model card.

        Writes ``hir_state.json`` (the state of the RNG used by ``replay_selection="random"``, and the settings a
        resume must keep, `hir_trl.run_folder.resume_settings`) and a copy of the
        model card (tagged ``hir``) into ``checkpoint-N/`` (`hir_trl.step.replay.save_checkpoint_state`); TRL writes the
        card to ``output_dir`` only. lambda needs no state: it is derived from the restored step counter.
        """
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            save_checkpoint_state(self.hir_passes.checkpoint_folder(trial), self.hir_passes.replay_rng,
                                  os.path.join(self.args.output_dir, "README.md"), resume_settings(self.args))

    def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
        """Override of `transformers.Trainer._save` (every save of the model: the final one, each ``checkpoint-N``,
        ``push_to_hub``'s): super's, then beside a LoRA adapter ``_hir_adapter_base.json``, the exact base it was
        trained on, which ``hir-trl eval generate`` merges it into while that base is here
        (`hir_trl.models.adapter_base.write_adapter_base`). With ``save_on_each_node``, every node's copy holds
        the model's weights (`hir_trl.models.workarounds.weights_on_each_node`)."""
        with weights_on_each_node(self.model, self.args, state_dict):
            super()._save(output_dir, state_dict)
        write_adapter_base(self.model, self.args, output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """Override of `GRPOTrainer._load_optimizer_and_scheduler`: also restore the replay RNG on resume.

        A checkpoint without ``hir_state.json`` (saved by another trainer, or copied without it) resumes with a
        warning: the replay RNG (``replay_selection="random"`` only) restarts from ``seed``; lambda, the model, the
        optimizer and the step counter resume exactly (`hir_trl.step.replay.restore_checkpoint_state`).
        """
        super()._load_optimizer_and_scheduler(checkpoint)
        restore_checkpoint_state(checkpoint, self.hir_passes.replay_rng, self.args.seed)


__all__ = ["HIR_PAPER", "HIR_STATE_FILE", "card_fields", "HiRStep", "HiRTrainer", "SoftConstraintsWithoutJudgeError",
           "check_batch_layout", "check_soft_constraints_judged", "hir_card_section"]
