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
import shutil
import textwrap
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

import torch
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanstd, pad

from .configs import HiRConfig
from .replay import curriculum_lambda, hindsight_instruction, hindsight_messages, select_group_replays
from .rewards import ConstraintReward, Judge, VerdictMatrix
from .verifiers import sentence_backend

logger = logging.getLogger(__name__)

# Output keys of `GRPOTrainer._generate_and_score_completions` that HiR rebuilds rather than copies.
_REBUILT_KEYS = {"prompt_ids", "prompt_mask", "completion_mask", "advantages", "num_items_in_batch",
                 "ref_per_token_logps"}
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
        **kwargs: Any,
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = HiRConfig(f"{str(name).split('/')[-1]}-HiR")
        if not isinstance(args, HiRConfig):
            raise TypeError(f"HiRTrainer needs a HiRConfig, got {type(args).__name__}")
        if isinstance(reward_funcs, list) and len(reward_funcs) == 1:
            reward_funcs = reward_funcs[0]
        if reward_funcs is None:
            reward_funcs = ConstraintReward(judge=judge, reward_mode=args.reward_mode)
        if not isinstance(reward_funcs, ConstraintReward):
            raise TypeError("HiRTrainer's reward is the constraint verdicts: pass reward_funcs=None or a single "
                            f"ConstraintReward, got {type(reward_funcs).__name__}")
        check_batch_layout(args)
        self.constraint_reward = reward_funcs
        self._hir_capture: dict[str, Any] | None = None
        self.last_replay: ReplayBatch | None = None
        super().__init__(model=model, reward_funcs=[reward_funcs], args=args, train_dataset=train_dataset, **kwargs)

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

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Override of `GRPOTrainer._generate_and_score_completions`: add k hindsight rows per group.

        Calls super for the m sampled completions per instruction, then (training only, ``num_replays > 0``)
        appends ``(B / m) * k`` rows after the B original rows of this rank, group by group: rewritten prompt
        q', the source's completion, reward 1. When a group has z < k candidates, its last k - z rows are
        zero-weight padding (completion mask 0, advantage 0), so every rank adds the same number of rows.

        Args:
            inputs: this rank's B dataset rows, each instruction repeated m times in a row.

        Returns:
            super's dict with every per-row key extended to B + (B / m) * k rows: ``prompt_ids`` (left-padded
            again to a common width), ``completion_ids``/``completion_mask`` (B', T), ``advantages`` (B',),
            ``old_per_token_logps`` (B', T) (a replay's are its source's, under q), ``ref_per_token_logps``
            under q' when ``beta > 0``, and ``num_items_in_batch`` counting the new loss tokens of all ranks.
        """
        training = self.model.training
        replay = training and self.args.num_replays > 0
        if replay:
            generate_every = self.args.steps_per_generation * self.num_iterations
            share_old_pass = self.args.gradient_accumulation_steps % generate_every != 0 or (
                self.use_vllm and self.vllm_importance_sampling_correction)
            self._hir_capture = {"share_old_pass": share_old_pass}
        try:
            output = super()._generate_and_score_completions(inputs)
            capture = self._hir_capture
        finally:
            self._hir_capture = None
        if not replay:
            return output
        return self._append_hindsight_rows(inputs, output, capture)

    def _save_checkpoint(self, model, trial):
        """Override of `GRPOTrainer._save_checkpoint`: also put the model card (tagged ``hir``) in the checkpoint.

        TRL writes ``README.md`` to ``output_dir`` only; a copy in ``checkpoint-N/`` keeps every checkpoint
        self-describing when it is pushed or shared on its own.
        """
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            card = os.path.join(self.args.output_dir, "README.md")
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            if os.path.isfile(card) and os.path.isdir(folder):
                shutil.copyfile(card, os.path.join(folder, "README.md"))

    # ------------------------------------------------------------------ HiR

    def _append_hindsight_rows(self, inputs, output, capture) -> dict[str, Any]:
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

        prompt_ids, prompt_mask = output["prompt_ids"], output["prompt_mask"]
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        loss_mask = completion_mask if "tool_mask" not in output else completion_mask * output["tool_mask"]
        logits_to_keep = completion_ids.size(1)

        # One no-grad pass under q gives both the entropies (F_div) and the old log-probs.
        entropies = capture.get("entropies")
        if entropies is None:
            with torch.no_grad(), disable_gradient_checkpointing(self.model, args.gradient_checkpointing_kwargs):
                old_logps, entropies, _ = self._get_per_token_logps_and_entropies(
                    self.model, torch.cat([prompt_ids, completion_ids], 1),
                    torch.cat([prompt_mask, completion_mask], 1), logits_to_keep,
                    batch_size=args.per_device_train_batch_size, compute_entropy=True)
            output["old_per_token_logps"] = old_logps
        mask = loss_mask.to(entropies.dtype)
        diversity = (entropies * mask).sum(1)
        if args.diversity_aggregation == "mean":
            diversity = diversity / mask.sum(1).clamp(min=1.0)
        diversity = diversity.float().cpu().tolist()

        # Algorithm 1 per group: select, then rewrite.
        lam = curriculum_lambda(self.state.global_step, args.lambda_0, args.eta)
        sources, real, new_prompts, choices = [], [], [], []
        for g in range(groups):
            rows = range(g * m, (g + 1) * m)
            picked = select_group_replays([verdicts.passed(r) for r in rows], [diversity[r] for r in rows], k, lam,
                                          args.replay_min_satisfied)
            for slot in range(k):
                if slot < len(picked):
                    choice = picked[slot]
                    src = g * m + choice.index
                    row = inputs[src]
                    texts = [c["text"] for c in row["constraints"]]
                    q_prime = hindsight_instruction(row["task"], texts, choice.satisfied, row["template"])
                    new_prompts.append(hindsight_messages(prompts[src], q_prime) if isinstance(prompts[src], list)
                                       else q_prime)
                    sources.append(src)
                    real.append(True)
                    choices.append(choice)
                else:  # padding: a copy of the group's first row that carries no loss
                    sources.append(g * m)
                    real.append(False)
                    new_prompts.append(prompts[g * m])
                    choices.append(None)
        src_index = torch.tensor(sources, device=device)
        real_mask = torch.tensor(real, device=device)

        # Prompt ids: tokenize q' with the trainer's own chat-template path; padding rows reuse their source.
        replay_prompt_rows = [prompt_ids[s][prompt_mask[s].bool()] for s in sources]
        to_tokenize = [p for p, r in zip(new_prompts, real) if r]
        if to_tokenize:
            tokenized = iter(self._tokenize_prompts(to_tokenize)[0])
            replay_prompt_rows = [torch.tensor(next(tokenized), device=device) if r else row
                                  for row, r in zip(replay_prompt_rows, real)]
        old_rows = [prompt_ids[i][prompt_mask[i].bool()] for i in range(B)]
        all_rows = old_rows + replay_prompt_rows
        new_prompt_ids = pad(all_rows, padding_value=self._tokenizer.pad_token_id, padding_side="left",
                             pad_to_multiple_of=self.pad_to_multiple_of).to(device)
        new_prompt_mask = pad([torch.ones_like(r) for r in all_rows], padding_value=0, padding_side="left",
                              pad_to_multiple_of=self.pad_to_multiple_of).to(device)

        extended: dict[str, Any] = {"prompt_ids": new_prompt_ids, "prompt_mask": new_prompt_mask}
        replay_completion_mask = completion_mask[src_index] * real_mask.unsqueeze(1).to(completion_mask.dtype)
        extended["completion_mask"] = torch.cat([completion_mask, replay_completion_mask])
        for key, value in output.items():
            if key in _REBUILT_KEYS or key in extended:
                continue
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == B:
                # completion_ids, old_per_token_logps (paper: under q), sampling_per_token_logps,
                # importance_sampling_ratio, tool_mask: the replay's values are its source's.
                extended[key] = torch.cat([value, value[src_index]])
            elif value is None or (isinstance(value, torch.Tensor) and value.dim() == 0):
                extended[key] = value
            else:
                raise NotImplementedError(f"HiRTrainer cannot extend the batch key {key!r}")

        new_loss_mask = extended["completion_mask"]
        if "tool_mask" in extended:
            new_loss_mask = new_loss_mask * extended["tool_mask"]
        extended["num_items_in_batch"] = self.accelerator.gather(new_loss_mask.sum()).sum()

        if "ref_per_token_logps" in output:
            ref_replay = self._reference_logps(new_prompt_ids[B:], new_prompt_mask[B:], extended["completion_ids"][B:],
                                               extended["completion_mask"][B:])
            extended["ref_per_token_logps"] = torch.cat([output["ref_per_token_logps"], ref_replay])

        # Rewards and advantages over the m + k rows of each group.
        base = torch.tensor(verdicts.ila() if self.constraint_reward.reward_mode == "ila" else verdicts.cla(),
                            dtype=torch.float32, device=device)
        replay_rewards = torch.where(real_mask, 1.0, torch.nan)
        grouped = torch.cat([base.view(groups, m), replay_rewards.view(groups, k)], dim=1)
        advantages = self._group_advantages(grouped)
        extended["advantages"] = torch.cat([advantages[:, :m].reshape(-1), advantages[:, m:].reshape(-1)])

        self._log_hindsight(inputs, lam, groups, base, real, choices, new_prompts, completions, sources, extended)
        return extended

    def _group_advantages(self, grouped: torch.Tensor) -> torch.Tensor:
        """TRL's GRPO advantages over groups of m + k rows; NaN rewards mark padding and get advantage 0.

        Args:
            grouped: (G, m + k) rewards of this rank's groups.

        Returns:
            (G, m + k) advantages: reward minus the group mean, divided by the group std (``scale_rewards``
            ``"group"``), the std over all ranks' rows (``"batch"``), or not divided (``"none"``).
        """
        mean = torch.nanmean(grouped, dim=1, keepdim=True)
        advantages = grouped - mean
        if self.scale_rewards == "group":
            advantages = advantages / (nanstd(grouped, dim=1, keepdim=True) + 1e-4)
        elif self.scale_rewards == "batch":
            advantages = advantages / (nanstd(self.accelerator.gather(grouped.reshape(-1))) + 1e-4)
        elif self.scale_rewards != "none":
            raise ValueError(f"Invalid value for scale_rewards: {self.scale_rewards}")
        return torch.nan_to_num(advantages, nan=0.0)

    def _reference_logps(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """Reference-model log-probs (R, T) of the replay completions under their hindsight prompts q'."""
        input_ids = torch.cat([prompt_ids, completion_ids], 1)
        attention_mask = torch.cat([prompt_mask, completion_mask], 1)
        batch_size = self.args.per_device_train_batch_size
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if self.ref_model is not None:
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.ref_model, input_ids, attention_mask, completion_ids.size(1), batch_size=batch_size)
            else:  # PEFT: the reference is the base model (adapters disabled), as in GRPOTrainer
                from trl.trainer.utils import use_adapter

                model = self.accelerator.unwrap_model(self.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    logps, _, _ = self._get_per_token_logps_and_entropies(
                        self.model, input_ids, attention_mask, completion_ids.size(1), batch_size=batch_size)
        return logps

    def _log_hindsight(self, inputs, lam, groups, base, real, choices, new_prompts, completions, sources, extended):
        from accelerate.utils import gather_object

        device = self.accelerator.device
        m, B = self.num_generations, len(inputs)
        picked_choices = [c for c in choices if c is not None]
        all_failed = (base.view(groups, m) == 0).all(dim=1).sum()
        local = torch.tensor([
            len(picked_choices), len(choices), float(all_failed), groups,
            sum(c.integrity for c in picked_choices), sum(c.diversity for c in picked_choices),
        ], dtype=torch.float64, device=device)
        n_real, n_slots, n_failed, n_groups, integrity, entropy = self.accelerator.gather(local).view(-1, 6).sum(0).tolist()
        metrics = self._metrics["train"]
        metrics["hir/lambda"].append(lam)
        metrics["hir/replayed_fraction"].append(n_real / n_slots)
        metrics["hir/replayed_rows"].append(n_real)
        metrics["hir/groups_all_failed"].append(n_failed / n_groups)
        metrics["hir/replay_integrity_mean"].append(integrity / n_real if n_real else float("nan"))
        metrics["hir/replay_entropy_mean"].append(entropy / n_real if n_real else float("nan"))

        # Completion log: TRL logged the original rows; correct their advantages and add the hindsight rows,
        # marked by the `hindsight` column, with q' as their prompt and the kept constraint indices.
        advantages = extended["advantages"]
        original_adv = gather_object(advantages[:B].tolist())
        for _ in original_adv:
            self._logs["advantages"].pop()
        self._logs["advantages"].extend(original_adv)
        picked = [i for i, c in enumerate(choices) if c is not None]
        row_ids = gather_object([str(x.get("row_id")) for x in inputs] + [str(inputs[sources[i]].get("row_id"))
                                                                            for i in picked])
        replay_prompts = gather_object([new_prompts[i] for i in picked])
        replay_completions = gather_object([completions[sources[i]] for i in picked])
        replay_adv = gather_object([advantages[B + i].item() for i in picked])
        replay_kept = gather_object([json.dumps([j for j, ok in enumerate(choices[i].satisfied) if ok])
                                     for i in picked])
        n_orig, n_replay = len(original_adv), len(replay_prompts)
        self._logs["prompt"].extend(replay_prompts)
        self._logs["completion"].extend(replay_completions)
        for name in self.reward_func_names:
            self._logs["rewards"][name].extend([1.0] * n_replay)
        self._logs["advantages"].extend(replay_adv)
        for column in list(self._logs["extra"]):
            if column not in ("hindsight", "kept_constraints", "row_id"):
                self._logs["extra"][column].extend([None] * n_replay)
        # gather_object keeps rank order: rank 0's originals then replays, then rank 1's, ... ; reorder ids.
        per_rank = B + len(picked)
        ids_orig, ids_replay = [], []
        for start in range(0, len(row_ids), per_rank):
            chunk = row_ids[start:start + per_rank]
            ids_orig += chunk[:B]
            ids_replay += chunk[B:]
        self._logs["extra"]["row_id"].extend(ids_orig + ids_replay)
        self._logs["extra"]["hindsight"].extend([False] * n_orig + [True] * n_replay)
        self._logs["extra"]["kept_constraints"].extend([None] * n_orig + replay_kept)

        self.last_replay = ReplayBatch(
            sources=sources, real=real, q_prime=[new_prompts[i] if real[i] else None for i in range(len(sources))],
            rewards=[float(r) for r in base.tolist()] + [1.0 if r else float("nan") for r in real], lam=lam,
            choices=choices)


@dataclass
class ReplayBatch:
    """What the latest generation batch replayed on this rank (for inspection and tests).

    Attributes:
        sources: (R,) index of each appended row's source among the B original rows.
        real: (R,) False for zero-weight padding rows (group with fewer than k candidates).
        q_prime: (R,) hindsight prompt of each real replay row (None for padding).
        rewards: (B + R,) reward of every row: the verdict reward of originals, 1 for replays, NaN for padding.
        lam: lambda_s used for the selection.
        choices: (R,) the `ReplayChoice` of each real row (None for padding).
    """

    sources: list[int]
    real: list[bool]
    q_prime: list[Any]
    rewards: list[float]
    lam: float
    choices: list[Any]


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
