"""Every place HiR reads or changes `trl.GRPOTrainer`'s private state, in one object: `TRLPasses`.

TRL (1.16) has no public hook for what HiR needs here: appending rows to the completion log, generating one
completion per prompt inside a training step, knowing whether it ran its own old-log-prob pass, moving ``beta`` into
the reward (``kl_in_reward``), TRL's tokenizer, metrics, checkpoint folder and async event loop, or calling a reward
function on a replay with the arguments TRL would pass. `TRLPasses` is the one surface for all of it: `HiRTrainer`
holds one (``hir_passes``) and calls its methods from its hooks, and the step (`hir_trl.step.StepPasses`) gets it as
its passes; it also owns HiR's per-trainer state (the replay RNG, the step timer, the current `HiRCapture`, and why
sampling cannot record). Each method names the private attribute it relies on; TRL's internal helpers come from
`hir_trl.trl_internals`. `tests/trainer/test_trl_adapter.py` runs them against the installed TRL and fails loudly when
TRL's behaviour changes.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict, deque
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: Completion-log buffers of ``GRPOTrainer._logs`` that hold one value per logged row.
ROW_BUFFERS = ("prompt", "completion", "advantages")


def _empty_log() -> dict[str, Any]:
    return {"images": deque(), "prompt": deque(), "completion": deque(), "rewards": defaultdict(deque),
            "advantages": deque(), "extra": defaultdict(deque)}


def _ignore(*args: Any, **kwargs: Any) -> None:
    """The ``log_extra`` / ``log_metric`` a replay's reward functions get: the completion log has no column for them."""


class TRLPasses:
    """HiR's side of one `HiRTrainer`: its per-trainer state, and every read or change of TRL's private state.

    It implements `hir_trl.step.StepPasses` (the step's settings, passes and records) and the calls of
    `HiRTrainer`'s ``__init__`` and hooks, and has no other public member (`tests/trainer/test_trl_adapter.py` lists
    the trainer's). It reads the trainer's HiR settings (``args``, ``kl_coef``, ``constraint_reward``,
    ``extra_reward_funcs``) and TRL's state (the models, the accelerator, ``_tokenizer``, ``_metrics``, ``_logs``,
    ``async_loop``); runs no-grad passes through TRL's ``_get_per_token_logps_and_entropies`` and supplementary
    samples through `GRPOTrainer`'s own ``_generate_and_score_completions`` (not HiR's override). The records a save
    writes and what an upload carries are not TRL's state: `hir_trl.models.adapter_base`,
    `hir_trl.run_folder.hub_upload`.

    Args:
        trainer: the `HiRTrainer` (built before ``GRPOTrainer.__init__`` runs: nothing of TRL is read here).
        seed: the replay RNG's seed (``HiRConfig.seed``).

    Attributes:
        replay_rng: the RNG of ``replay_selection="random"``, saved with every checkpoint and restored on resume
            (`hir_trl.step.replay.save_checkpoint_state`).
        timer: the step's `hir_trl.step.log.StepTimer` (synchronizing CUDA once TRL placed the model on a GPU,
            `after_trl_init`).
        capture: the `hir_trl.step.state.HiRCapture` of the current TRL call of a HiR step (`capturing`), else None.
        no_recording_reason: None when ``generate`` can record entropies and log-probs while sampling, else why not
            (`_sampling_record_problem`, set by `after_trl_init`).
    """

    def __init__(self, trainer: Any, seed: int) -> None:
        from .step.log import StepTimer

        self._trainer = trainer
        self.replay_rng = random.Random(seed)
        self.timer = StepTimer()
        self.capture: Any = None
        self.no_recording_reason: str | None = None

    def after_trl_init(self) -> str | None:
        """Once ``GRPOTrainer.__init__`` has run: a CUDA-synchronizing step timer on a CUDA device, and
        `no_recording_reason` (`_sampling_record_problem`). Returns `no_recording_reason`."""
        import torch

        from .step.log import StepTimer

        if self._trainer.accelerator.device.type == "cuda":
            self.timer = StepTimer(torch.cuda.synchronize)
        self.no_recording_reason = self._sampling_record_problem()
        return self.no_recording_reason

    # ---------------------------------------------------------------- settings
    args = property(lambda self: self._trainer.args)
    num_generations = property(lambda self: self._trainer.num_generations)
    kl_coef = property(lambda self: self._trainer.kl_coef)
    model = property(lambda self: self._trainer.model)
    global_step = property(lambda self: self._trainer.state.global_step)
    eos_token_ids = property(lambda self: self._trainer.eos_token_ids)
    pad_to_multiple_of = property(lambda self: self._trainer.pad_to_multiple_of)
    scale_rewards = property(lambda self: self._trainer.scale_rewards)
    reward_weights = property(lambda self: self._trainer.reward_weights.tolist())
    judge = property(lambda self: self._trainer.constraint_reward.judge)
    device = property(lambda self: self._trainer.accelerator.device)

    @property
    def pad_token_id(self) -> int:
        """The pad token id TRL pads completions with (``GRPOTrainer._tokenizer``, the processing class's
        tokenizer)."""
        return self._trainer._tokenizer.pad_token_id

    @staticmethod
    def vllm_available() -> bool:
        """Whether vLLM is installed (TRL's ``trl.import_utils.is_vllm_available``)."""
        from .trl_internals import is_vllm_available

        return bool(is_vllm_available())

    def _trl_computes_old_logps(self) -> bool:
        """True when `GRPOTrainer._generate_and_score_completions` runs its own no-grad old-log-prob pass.

        TRL's condition (trl/trainer/grpo_trainer.py, "generate_every"): the optimizer step is not aligned with the
        generation (``gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0``), or vLLM's
        importance-sampling correction is on.
        """
        trainer = self._trainer
        generate_every = trainer.args.steps_per_generation * trainer.num_iterations
        return trainer.args.gradient_accumulation_steps % generate_every != 0 or bool(
            trainer.use_vllm and trainer.vllm_importance_sampling_correction)

    def tokenize_prompts(self, prompts: Sequence[Any]) -> list[list[int]]:
        """Prompt token ids as TRL tokenizes them for generation (chat template applied), via
        ``GRPOTrainer._tokenize_prompts`` (its first return value)."""
        return self._trainer._tokenize_prompts(list(prompts))[0]

    def move_kl_to_reward(self) -> float:
        """``kl_in_reward``: take TRL's ``beta`` as the KL-in-reward coefficient and set ``trainer.beta`` to 0, which
        turns TRL's KL loss term off (TRL loaded the reference model at construction because beta > 0; its loss
        reads ``self.beta``). Returns the coefficient."""
        trainer = self._trainer
        coefficient, trainer.beta = trainer.beta, 0.0
        return coefficient

    def checkpoint_folder(self, trial: Any) -> str:
        """``checkpoint-<global_step>`` under the run's output folder, where `Trainer._save_checkpoint` saved
        (``Trainer._get_output_dir``)."""
        import os

        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        trainer = self._trainer
        return os.path.join(trainer._get_output_dir(trial=trial),
                            f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")

    # ---------------------------------------------------------------- the completion log (``GRPOTrainer._logs``)
    def resize_completion_log(self, size: int) -> None:
        """Make ``GRPOTrainer._logs`` hold ``size`` rows (TRL sizes it to one generation batch; HiR adds k rows per
        group)."""
        self._trainer._logs = {
            "images": deque(maxlen=size),
            "prompt": deque(maxlen=size),
            "completion": deque(maxlen=size),
            "rewards": defaultdict(lambda: deque(maxlen=size)),
            "advantages": deque(maxlen=size),
            "extra": defaultdict(lambda: deque(maxlen=size)),
        }

    def start_completion_log(self) -> None:
        """Empty the completion log (``GRPOTrainer._logs``) before a generation batch, so that the file TRL writes at
        the next log (``completions/completions_<step>.parquet``, in `GRPOTrainer.log`) holds exactly this batch's
        rows.

        TRL keeps fixed-size buffers (one generation batch) and relies on every batch filling them; a HiR batch logs a
        varying number of rows (padding rows are not logged), so rows of the previous batch would stay. The buffers
        keep their size (`resize_completion_log`); the columns (``rewards``, ``extra``) are dropped and refilled."""
        logs = self._trainer._logs
        for name in ("images", *ROW_BUFFERS):
            logs[name].clear()
        for part in ("rewards", "extra"):
            logs[part].clear()

    @contextmanager
    def separate_completion_log(self) -> Iterator[None]:
        """Within the block (an evaluation loop, `transformers.Trainer.evaluation_loop`), the completion log is a
        separate one, dropped on exit: TRL would otherwise add the evaluation batches' rows to the training step's
        log and rewrite that step's ``completions_<step>.parquet`` with them at the evaluation's log. Evaluation
        metrics (``_metrics["eval"]``) are untouched."""
        trainer = self._trainer
        saved = trainer._logs
        trainer._logs = _empty_log()
        try:
            yield
        finally:
            trainer._logs = saved

    @contextmanager
    def _discard_records(self, rows_per_rank: int) -> Iterator[None]:
        """Undo what one call of `GRPOTrainer._generate_and_score_completions` inside the block adds to the step's
        metrics (``_metrics["train"]``, except the ``num_tokens`` counter) and to the completion log (``_logs``, its
        extra columns included): ``rows_per_rank`` prompts on every rank, gathered."""
        trainer = self._trainer
        metrics = trainer._metrics["train"]
        lengths = {key: len(values) for key, values in metrics.items()}
        extra = {column: list(values) for column, values in trainer._logs["extra"].items()}  # e.g. ``verdicts``
        yield
        for key, values in metrics.items():
            if key != "num_tokens":
                del values[lengths.get(key, 0):]
        added = rows_per_rank * trainer.accelerator.num_processes
        logs = trainer._logs
        for buffer in [*(logs[name] for name in ROW_BUFFERS), *logs["rewards"].values()]:
            for _ in range(min(added, len(buffer))):
                buffer.pop()
        for column in list(logs["extra"]):  # TRL flushed the reward's ``log_extra`` columns for these rows too
            if column in extra:
                logs["extra"][column].clear()
                logs["extra"][column].extend(extra[column])
            else:
                del logs["extra"][column]

    def _replace_logged_advantages(self, advantages: Sequence[float]) -> None:
        """Replace the advantages of the last ``len(advantages)`` logged rows (TRL logged them before HiR changed
        them)."""
        buffer = self._trainer._logs["advantages"]
        for _ in advantages:
            buffer.pop()
        buffer.extend(advantages)

    def _log_completions(self, prompts: Sequence[Any], completions: Sequence[Any], rewards: Sequence[float],
                        advantages: Sequence[float], extra: dict[str, Sequence[Any]],
                        new_row_extra: dict[str, Sequence[Any]] | None = None) -> None:
        """Append rows (already gathered over ranks) to the completion log.

        Args:
            prompts, completions, rewards, advantages: one value per new row (``rewards`` goes to every reward
                column).
            extra: HiR's extra columns, each with values for the rows TRL already logged this step, then one per new
                row.
            new_row_extra: columns TRL already filled for its rows (e.g. ``verdicts``), with one value per new row.
                TRL's other extra columns get None for the new rows.
        """
        new_row_extra = new_row_extra or {}
        logs = self._trainer._logs
        logs["prompt"].extend(prompts)
        logs["completion"].extend(completions)
        for name in self._trainer.reward_func_names:
            logs["rewards"][name].extend(rewards)
        logs["advantages"].extend(advantages)
        for column in list(logs["extra"]):
            if column not in extra:
                logs["extra"][column].extend(new_row_extra.get(column, [None] * len(prompts)))
        for column, values in extra.items():
            logs["extra"][column].extend(values)

    def log_hindsight_rows(self, row_ids: Sequence[str], sampled_advantages: Sequence[float], entries: Sequence[Any],
                           new_advantages: Sequence[float]) -> None:
        """The completion log of a HiR step (all lists gathered over ranks): TRL logged the sampled rows before HiR
        changed their advantages, so those are replaced; then the new rows (`hir_trl.step.log.completion_log_rows`
        entries) are appended, and HiR's columns (``row_id``, ``hindsight``, ``supplementary``, ``kept_constraints``)
        cover both; the reward's ``verdicts`` column gets the new rows' entries (None for a replay, whose constraints
        are the kept ones)."""
        self._replace_logged_advantages(sampled_advantages)
        n = len(row_ids)
        self._log_completions(
            [e.prompt for e in entries], [e.completion for e in entries], [e.reward for e in entries],
            new_advantages,
            extra={"row_id": list(row_ids) + [e.row_id for e in entries],
                   "hindsight": [False] * n + [e.hindsight for e in entries],
                   "supplementary": [False] * n + [e.supplementary for e in entries],
                   "kept_constraints": [None] * n + [e.kept_constraints for e in entries]},
            new_row_extra={"verdicts": [e.verdicts for e in entries]})

    def has_log_columns(self, columns: Sequence[str]) -> bool:
        """Whether the completion log already has any of ``columns`` as extra columns."""
        return any(column in self._trainer._logs["extra"] for column in columns)

    def extend_log_columns(self, values: dict[str, Sequence[Any]]) -> None:
        """Append values to extra columns of the completion log (rows TRL logged)."""
        for column, column_values in values.items():
            self._trainer._logs["extra"][column].extend(column_values)

    # ---------------------------------------------------------------- generation
    @contextmanager
    def _generation_group_size(self, size: int) -> Iterator[None]:
        """Within the block, `GRPOTrainer._generate_and_score_completions` treats every ``size`` consecutive prompts
        as one group: TRL reads ``trainer.num_generations`` there (its advantages and reward statistics, and its vLLM
        path, which samples ``size`` completions for each group's prompt)."""
        trainer = self._trainer
        saved = trainer.num_generations
        trainer.num_generations = size
        try:
            yield
        finally:
            trainer.num_generations = saved

    def _one_completion_per_prompt(self):
        """Within the block, `GRPOTrainer._generate_and_score_completions` samples one completion per prompt (and
        computes its advantages over groups of 1): `_generation_group_size` 1."""
        return self._generation_group_size(1)

    def _sampling_record_problem(self) -> str | None:
        """None when `HiRTrainer._generate_single_turn` can record entropies and log-probs while sampling, else why
        not (reads TRL's ``use_vllm``, ``use_transformers_continuous_batching``, ``tools``, ``rollout_func`` and
        ``generation_config``)."""
        from .step.sampling import sampling_changes_policy

        trainer = self._trainer
        if trainer.use_vllm:
            return "vLLM generates: its sampling_per_token_logps are used"
        if getattr(trainer, "use_transformers_continuous_batching", False):
            return "transformers continuous batching has no logits-processor hook"
        if trainer.tools or getattr(trainer, "rollout_func", None) is not None:
            return "tools or a rollout_func generate"
        model = trainer.accelerator.unwrap_model(trainer.model)
        reason = sampling_changes_policy(trainer.generation_config, getattr(model, "generation_config", None))
        return None if reason is None else f"a logit processor changes the policy's logits: {reason}"

    # ---------------------------------------------------------------- one generation call's capture
    @contextmanager
    def capturing(self, *, share_old_pass: bool = False, entropies: bool = True, step_start: bool = False,
                  inputs: Sequence[dict[str, Any]] | None = None) -> Iterator[Any]:
        """Within the block, HiR's hooks record into a fresh `hir_trl.step.state.HiRCapture` (yielded, and
        `capture` meanwhile): log-probs while sampling when the step needs them (replays, ``kl_in_reward``) and
        ``generate`` can record them; entropies too for F_div when ``entropies``. ``step_start``: the first call of a
        step (its timings start). ``inputs``: the call's dataset rows (`judge_ahead`)."""
        from .step.state import HiRCapture

        args = self.args
        if step_start:
            self.timer.seconds.clear()
            # TRL's own old-log-prob pass also gives the entropies when nothing records them while sampling
            share_old_pass = (args.num_replays > 0 and args.diversity_entropy == "exact"
                              and self.no_recording_reason is not None and self._trl_computes_old_logps())
        record = self.no_recording_reason is None and bool(args.num_replays or self.kl_coef)
        self.capture = HiRCapture(share_old_pass=share_old_pass, record_logps=record,
                                  record_entropies=record and entropies and args.diversity_entropy == "exact",
                                  inputs=None if inputs is None else list(inputs))
        try:
            yield self.capture
        finally:
            self.capture = None

    # ---------------------------------------------------------------- passes
    def policy_pass(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, entropy=False,
                    timer: str | None = None):
        """One no-grad forward: per-token log-probs (N, T) and, optionally, entropies (N, T) in nats (timed as
        ``hir/seconds_<timer>`` when given), through ``GRPOTrainer._get_per_token_logps_and_entropies`` (TRL's
        ``disable_gradient_checkpointing`` around it)."""
        import contextlib

        import torch

        from .trl_internals import disable_gradient_checkpointing

        trainer = self._trainer
        if completion_ids.size(0) == 0:
            empty = completion_ids.new_zeros(completion_ids.shape, dtype=torch.float32)
            return empty, (empty if entropy else None)
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs), \
                (self.timer.timed(timer) if timer else contextlib.nullcontext()):
            logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
                model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1),
                completion_ids.size(1), batch_size=trainer.args.per_device_train_batch_size, compute_entropy=entropy)
        return logps, entropies

    def reference_logps(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
        """Reference-model log-probs (N, T) of completions under the given prompts (PEFT: the base model, TRL's
        ``use_adapter``)."""
        trainer = self._trainer
        if trainer.ref_model is not None:
            return self.policy_pass(trainer.ref_model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]
        from .trl_internals import use_adapter

        model = trainer.accelerator.unwrap_model(trainer.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self.policy_pass(trainer.model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]

    def supplementary_samples(self, inputs, fill, need_old_logps):
        """Generate ``fill[g]`` ordinary samples under q for each group g, through TRL's own pipeline.

        Every rank calls `GRPOTrainer._generate_and_score_completions` with the same number of prompts (the largest
        need over ranks): a rank that needs fewer adds filler prompts whose results are dropped, so collective
        generation (vLLM server/colocate, ZeRO-3) and TRL's gathers stay in step. Within the call TRL samples one
        completion per prompt; its metrics and completion-log rows from the call are discarded (HiR logs the kept
        rows itself). Old log-probs, when ``need_old_logps``, come from the same source as the sampled rows'
        (recorded while sampling, vLLM's, else a no-grad pass).

        Returns:
            None when no rank needs a sample; else the kept rows' `hir_trl.step.state.SupplementarySamples`.
        """
        import torch
        from trl import GRPOTrainer

        from .rewards import VerdictMatrix
        from .step.sampling import sampling_logps
        from .step.state import SupplementarySamples

        trainer, need = self._trainer, sum(fill)
        most = int(self.gather(torch.tensor([need], device=self.device)).max().item())
        if most == 0:
            return None
        m = self.num_generations
        extra = [inputs[g * m] for g, c in enumerate(fill) for _ in range(c)] + [inputs[0]] * (most - need)
        with self.capturing(entropies=False, inputs=extra) as capture, self._one_completion_per_prompt(), \
                self._discard_records(len(extra)):  # no F_div for supplementary samples
            out = GRPOTrainer._generate_and_score_completions(trainer, extra)
        generated = int(self.gather(out["completion_mask"].sum()).sum().item())
        if need_old_logps and "old_per_token_logps" not in out:
            old = sampling_logps(out, capture.recorded)
            if old is None:
                old, _ = self.policy_pass(trainer.model, out["prompt_ids"], out["prompt_mask"], out["completion_ids"],
                                          out["completion_mask"], timer="extra_pass")
            out["old_per_token_logps"] = old
        kept = {key: value[:need] for key, value in out.items()
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == len(extra)}
        return SupplementarySamples(tensors=kept, prompts=capture.prompts[:need],
                                    completions=capture.completions[:need],
                                    verdicts=VerdictMatrix(capture.verdicts.verdicts[:need]),
                                    rewards_per_func=capture.rewards_per_func[:need], fillers=most - need,
                                    generated_tokens=generated)

    # ---------------------------------------------------------------- rewards
    def judge_ahead(self, generated: tuple) -> tuple:
        """After `GRPOTrainer._generate` in a HiR call (`capture` set, with its rows): send the rows' soft
        constraints to the judge now (`hir_trl.rewards.ConstraintReward.judge_ahead`), so that its wait
        overlaps TRL's old-log-prob and reference passes, which run before TRL's reward call collects the verdicts.
        Returns ``generated`` (super's tuple; its 4th item: the decoded completions) unchanged."""
        capture, reward = self.capture, self._trainer.constraint_reward
        completions = generated[3] if len(generated) > 3 else None
        if capture is None or capture.inputs is None or not isinstance(completions, list) \
                or len(completions) != len(capture.inputs) or getattr(reward, "judge", None) is None:
            return generated
        reward.judge_ahead([row["prompt"] for row in capture.inputs], completions,
                           [row["constraints"] for row in capture.inputs])
        return generated

    def keep_reward_call(self, prompts: Sequence[Any], completions: Sequence[Any], rewards_per_func: Any) -> Any:
        """After `GRPOTrainer._calculate_rewards`: check that `ConstraintReward` recorded one verdict row per
        completion and, in a HiR call (`capture` set), keep the prompts, completions, verdicts, this rank's (B, F)
        rows of ``rewards_per_func`` and TRL's ``environments``. Returns ``rewards_per_func`` unchanged.

        Raises:
            RuntimeError: `ConstraintReward` did not record one verdict row per completion.
        """
        trainer = self._trainer
        verdicts = trainer.constraint_reward.last_verdicts
        if verdicts is None or len(verdicts) != len(prompts):
            raise RuntimeError("ConstraintReward did not record one verdict row per completion")
        for name, seconds in trainer.constraint_reward.pop_seconds().items():  # verification, judge wait
            self.timer.add(name, seconds)
        capture = self.capture
        if capture is not None:
            rank = trainer.accelerator.process_index
            capture.prompts, capture.completions = prompts, completions
            capture.verdicts = verdicts
            capture.rewards_per_func = rewards_per_func[rank * len(prompts):(rank + 1) * len(prompts)].tolist()
            capture.environments = self._reward_environments()
        return rewards_per_func

    def _reward_environments(self) -> list[Any] | None:
        """TRL's per-completion environment instances of the current generation call (``GRPOTrainer.environments``,
        one per prompt of the call on this rank, passed to reward functions as ``environments``), or None."""
        return getattr(self._trainer, "environments", None)

    def replay_reward_kwargs(self, rows: Sequence[dict[str, Any]], sources: Sequence[int],
                             environments: Sequence[Any] | None) -> dict[str, Any]:
        """The keyword arguments (beside ``prompts``, ``completions``, ``completion_ids``) of a reward function's call
        on replay rows, as `GRPOTrainer._calculate_rewards` builds them for sampled rows: every dataset column of the
        rows but ``prompt`` / ``completion`` / ``completion_ids``, ``trainer_state``, ``log_extra`` and ``log_metric``
        (which do nothing here: the log has no column for a replay's extra values) and, when TRL has them,
        ``environments``: each replay gets its source row's environment (``sources``: the rows' indices in TRL's
        call)."""
        keys = [key for key in rows[0] if key not in ("prompt", "completion", "completion_ids")]
        kwargs: dict[str, Any] = {key: [row[key] for row in rows] for key in keys}
        kwargs.update(trainer_state=self._trainer.state, log_extra=_ignore, log_metric=_ignore)
        if environments is not None:
            kwargs["environments"] = [environments[source] for source in sources]
        return kwargs

    def run_together(self, awaitables: Sequence[Awaitable[Any]]) -> list[Any]:
        """The results of ``awaitables``, awaited together (``asyncio.gather``, in order), as
        `GRPOTrainer._calculate_rewards` runs its async reward functions: on TRL's event loop (``async_loop``, the
        daemon thread TRL starts when a reward function or tool is async), else in one ``asyncio.run``.

        Raises:
            whatever an awaitable raises (the first, as ``asyncio.gather`` does).
        """
        async def together() -> list[Any]:
            return list(await asyncio.gather(*awaitables))

        loop = getattr(self._trainer, "async_loop", None)
        if loop is not None and loop.is_running():
            return asyncio.run_coroutine_threadsafe(together(), loop).result()
        return asyncio.run(together())

    def extra_rewards(self, capture, new_rows, prompts, completions, completion_ids, rows):
        """The extra reward functions on replays (q', y) (`hir_trl.step.rewards.extra_rewards`), with the keyword
        arguments TRL passes (`replay_reward_kwargs`; each replay's environment is its source's); async functions
        run together on TRL's event loop (`run_together`); a reward model scores the text of (q', y) as
        `GRPOTrainer._calculate_rewards` scores (q, y) (`score_with_model`).

        Called once per HiR step on every rank, with R >= 0 replays: a rank without replays runs each reward model
        on one of its sampled rows (result dropped), so that every rank makes the same forward passes (a
        collective under DeepSpeed ZeRO-3). Logs ``hir/replay_rewards/<name>/mean`` of each extra reward over the
        replays of every rank (TRL logs ``rewards/<name>/mean`` of the sampled rows).

        Returns:
            (R, F - 1) rewards of the R replays, NaN where a function returned None.
        """
        import math

        from .step.rewards import extra_rewards

        trainer = self._trainer
        functions = [self._model_reward(1 + i, f) if _is_reward_module(f) else f
                     for i, f in enumerate(trainer.extra_reward_funcs)]
        if not prompts:
            for i, f in enumerate(trainer.extra_reward_funcs):
                if _is_reward_module(f):
                    self.score_with_model(1 + i, capture.prompts[:1], capture.completions[:1])
            table = []
        else:
            sources = [row.source for row in new_rows if row.kind == "replay"]
            table = extra_rewards(functions, prompts, completions, completion_ids,
                                  self.replay_reward_kwargs(rows, sources, capture.environments),
                                  run_together=self.run_together)
        if functions:
            gathered = self.gather_object([list(row) for row in table])  # (R over all ranks, F - 1)
            names = trainer.reward_func_names[1:]
            for i, name in enumerate(names):
                values = [row[i] for row in gathered if not math.isnan(row[i])]
                if values:
                    self.log_metric(f"hir/replay_rewards/{name}/mean", math.fsum(values) / len(values))
        return table

    def _model_reward(self, index: int, model: Any):
        """A reward function ``fn(prompts, completions, **kwargs) -> list[float]`` that scores with the reward
        model at ``trainer.reward_funcs[index]`` (`score_with_model`), named as TRL names it."""
        def reward(prompts, completions, **_):
            return self.score_with_model(index, prompts, completions)

        reward.__name__ = self._trainer.reward_func_names[index]
        return reward

    def score_with_model(self, index: int, prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
        """(N,) rewards of a reward model: ``logits[:, 0]`` of ``trainer.reward_funcs[index]`` on each prompt +
        completion, as `GRPOTrainer._calculate_rewards` scores the sampled rows: chat messages through the reward
        tokenizer's chat template (``reward_processing_classes[index]``, with ``chat_template_kwargs``), text
        concatenated; right padding, no special tokens added, no gradient.
        """
        import torch
        from transformers import Trainer

        from .trl_internals import apply_chat_template, is_conversational

        trainer = self._trainer
        model, tokenizer = trainer.reward_funcs[index], trainer.reward_processing_classes[index]
        if is_conversational({"prompt": prompts[0]}):
            texts = [apply_chat_template({"messages": list(p) + list(c)}, tokenizer,
                                         **(getattr(trainer, "chat_template_kwargs", None) or {}))["text"]
                     for p, c in zip(prompts, completions, strict=True)]
        else:
            texts = [p + c for p, c in zip(prompts, completions, strict=True)]
        inputs = tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right",
                           add_special_tokens=False)
        inputs = Trainer._prepare_inputs(trainer, inputs)  # to the device, as GRPOTrainer's super() call does
        with torch.inference_mode():
            return model(**inputs).logits[:, 0].float().tolist()

    # ---------------------------------------------------------------- the loss
    @contextmanager
    def replay_ratio_logging(self, inputs: dict[str, Any]) -> Iterator[None]:
        """Around one `GRPOTrainer._compute_loss` call: log ``hir/replay_ratio_mean`` and ``hir/replay_clip_ratio`` of
        the micro-batch's replay rows from the loss's own log-probs (no extra forward pass).

        Within the block, the first call of the trainer's ``_get_per_token_logps_and_entropies`` (TRL's loss forward)
        is seen through: its log-probs, with the batch's ``old_per_token_logps``, ``advantages`` and loss mask, give
        `hir_trl.step.log.replay_ratio_counts` (TRL's ``epsilon_low``, ``epsilon_high`` and
        ``importance_sampling_level``), summed over ranks with ``accelerator.reduce`` (every rank computes the loss of
        each micro-batch, so the reduction stays in step), appended to ``_metrics[mode]``. A batch without HiR's
        ``replay_mask`` (evaluation, or a step HiR does not complete) logs nothing, nor does a micro-batch of no
        replay token on any rank.
        """
        from .step.log import replay_ratio_counts, replay_ratio_metrics
        from .step.loss_weighting import REPLAY_MASK

        if inputs.get(REPLAY_MASK) is None:
            yield
            return
        trainer = self._trainer
        seen: list[Any] = []
        inner = trainer._get_per_token_logps_and_entropies  # the class's method, or a wrapper set on the instance
        patched = "_get_per_token_logps_and_entropies" in vars(trainer)

        def seeing(*args: Any, **kwargs: Any):
            out = inner(*args, **kwargs)
            if not seen:
                seen.append(out[0])
            return out

        trainer._get_per_token_logps_and_entropies = seeing
        try:
            yield
        finally:
            if patched:
                trainer._get_per_token_logps_and_entropies = inner
            else:
                del trainer._get_per_token_logps_and_entropies
        if not seen:  # a loss computed without TRL's forward (none in TRL 1.16): nothing to measure
            return
        mask = inputs["completion_mask"] if inputs.get("tool_mask") is None else \
            inputs["completion_mask"] * inputs["tool_mask"]
        counts = replay_ratio_counts(seen[0], inputs.get("old_per_token_logps"), mask, inputs[REPLAY_MASK],
                                     inputs["advantages"], epsilon_low=trainer.epsilon_low,
                                     epsilon_high=trainer.epsilon_high, level=trainer.importance_sampling_level)
        totals = trainer.accelerator.reduce(counts, reduction="sum").tolist()
        mode = "train" if trainer.model.training else "eval"
        for name, value in replay_ratio_metrics(totals).items():
            trainer._metrics[mode][name].append(value)

    # ---------------------------------------------------------------- ranks and records
    def gather(self, tensor):
        """Concatenate over ranks along dim 0 (``accelerator.gather``)."""
        return self._trainer.accelerator.gather(tensor)

    def gather_object(self, values):
        """Concatenate Python lists over ranks (``accelerate.utils.gather_object``)."""
        from accelerate.utils import gather_object

        return gather_object(values)

    def log_metric(self, name: str, value: float, training: bool = True) -> None:
        """Append a value to TRL's metrics of the current step (``GRPOTrainer._metrics``, averaged when logged)."""
        self._trainer._metrics["train" if training else "eval"][name].append(value)

    def pop_judge_metrics(self):
        """The judge's metrics since the last call, or None without a judge that keeps them."""
        judge = self._trainer.constraint_reward.judge
        return judge.pop_metrics() if hasattr(judge, "pop_metrics") else None


def _is_reward_module(function: Any) -> bool:
    """A reward model as `GRPOTrainer` holds it: a ``torch.nn.Module`` (TRL's own test)."""
    import torch

    return isinstance(function, torch.nn.Module)


__all__ = ["ROW_BUFFERS", "TRLPasses"]
