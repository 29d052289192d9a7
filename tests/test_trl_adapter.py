"""`hir_trl.trl_adapter` against the installed TRL: each test fails loudly when TRL's private behaviour changes."""

from __future__ import annotations

from collections import deque

import pytest
from trl import GRPOTrainer

from hir_trl import HiRConfig, trl_adapter
from hir_trl.step.log import LogRow
from hir_trl.trainer import HiRTrainer


def _trainer(tmp_path, tiny_model_path, dataset, **overrides):
    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=6, num_generations=6, num_replays=0,
                  max_steps=1, max_completion_length=8, bf16=False, use_cpu=True, report_to="none",
                  save_strategy="no", seed=0, gradient_checkpointing=False)
    values.update(overrides)
    return HiRTrainer(model=str(tiny_model_path), args=HiRConfig(**values), train_dataset=dataset)


def _batch(trainer, dataset, n):
    return [dataset[0]] * n


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_trl_computes_old_logps_matches_trl(tmp_path, tiny_model_path, sample_dataset, num_iterations):
    """TRL's own condition for its old-log-prob pass, restated by the adapter, against what TRL really returns."""
    trainer = _trainer(tmp_path, tiny_model_path, sample_dataset, num_iterations=num_iterations)
    trainer.model.train()
    output = trainer._generate_and_score_completions(_batch(trainer, sample_dataset, 6))
    computed = output.get("old_per_token_logps") is not None
    assert trl_adapter.trl_computes_old_logps(trainer) is computed
    assert computed is (num_iterations == 2)


def test_completion_log_buffers_and_one_completion_per_prompt(tmp_path, tiny_model_path, sample_dataset):
    trainer = _trainer(tmp_path, tiny_model_path, sample_dataset)
    # TRL's completion log holds these buffers, the adapter's replacement keeps their names and kinds
    assert set(trainer._logs) == {"images", "prompt", "completion", "rewards", "advantages", "extra"}
    assert all(isinstance(trainer._logs[name], deque) for name in trl_adapter.ROW_BUFFERS)
    assert trainer._logs["prompt"].maxlen == 6 + 0  # generation batch + k rows per group (k = 0)
    trl_adapter.resize_completion_log(trainer, 9)
    assert trainer._logs["prompt"].maxlen == 9 and trainer._logs["rewards"]["x"].maxlen == 9
    trainer.model.train()
    trainer._generate_and_score_completions(_batch(trainer, sample_dataset, 6))
    logged = len(trainer._logs["prompt"])
    metrics = {key: len(values) for key, values in trainer._metrics["train"].items()}
    assert logged == 6
    # TRL reads num_generations inside the call: one completion per prompt, and nothing kept in the records
    # (TRL's own method, as `HiRTrainer._supplementary_samples` calls it: HiR's override starts a new log)
    with trl_adapter.one_completion_per_prompt(trainer), trl_adapter.discard_records(trainer, 2):
        out = GRPOTrainer._generate_and_score_completions(trainer, _batch(trainer, sample_dataset, 2))
    assert trainer.num_generations == 6
    assert out["completion_ids"].size(0) == 2
    assert len(trainer._logs["prompt"]) == logged and len(trainer._logs["advantages"]) == logged
    assert {k: len(v) for k, v in trainer._metrics["train"].items() if k != "num_tokens"} == {
        k: v for k, v in metrics.items() if k != "num_tokens"}
    # the log takes HiR's rows and columns
    trl_adapter.log_hindsight_rows(trainer, ["r"] * 6, [0.5] * 6, [LogRow("q'", "y", "r", True, False, "[0]", 1.0)],
                                   [1.0])
    assert list(trainer._logs["advantages"])[-7:] == [0.5] * 6 + [1.0]
    assert list(trainer._logs["extra"]["hindsight"]) == [False] * 6 + [True]
    assert len(trainer._logs["prompt"]) == 7
    assert trl_adapter.tokenize_prompts(trainer, [sample_dataset[0]["prompt"]])[0]


def test_start_and_separate_completion_log(tmp_path, tiny_model_path, sample_dataset):
    """`start_completion_log` empties TRL's buffers (keeping their size); `separate_completion_log` gives the block
    its own log and puts the real one back, with what the block logged dropped."""
    trainer = _trainer(tmp_path, tiny_model_path, sample_dataset)
    trainer.model.train()
    trainer._generate_and_score_completions(_batch(trainer, sample_dataset, 6))
    assert len(trainer._logs["prompt"]) == 6 and trainer._logs["rewards"]
    real = trainer._logs
    with trl_adapter.separate_completion_log(trainer):
        assert trainer._logs is not real
        trainer._logs["prompt"].extend(["evaluation row"] * 6)
    assert trainer._logs is real and len(real["prompt"]) == 6 and "evaluation row" not in real["prompt"]
    trl_adapter.start_completion_log(trainer)
    assert all(len(trainer._logs[name]) == 0 for name in trl_adapter.ROW_BUFFERS)
    assert not trainer._logs["rewards"] and not trainer._logs["extra"] and trainer._logs["prompt"].maxlen == 6


def test_a_replays_reward_call_gets_the_keyword_arguments_trl_passes(tmp_path, tiny_model_path, sample_dataset):
    """`replay_reward_kwargs` against `GRPOTrainer._calculate_rewards` itself: the same keyword arguments (dataset
    columns, ``trainer_state``, ``log_extra``, ``log_metric`` and ``environments``), each replay with its source
    row's environment as captured from TRL's call."""
    seen = []

    def recording(prompts, completions, completion_ids, **kwargs):
        seen.append(kwargs)
        return [0.0] * len(prompts)

    trainer = HiRTrainer(model=str(tiny_model_path), train_dataset=sample_dataset, reward_funcs=[recording],
                         args=HiRConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=6,
                                        num_replays=0, max_steps=1, max_completion_length=8, bf16=False, use_cpu=True,
                                        report_to="none", save_strategy="no", gradient_checkpointing=False))
    rows = [dict(sample_dataset[0]), dict(sample_dataset[1])]
    environments = [object(), object()]
    trainer.environments = environments  # what TRL sets per call when it has an environment_factory
    with trainer.hir_passes.capturing() as capture:
        trainer._calculate_rewards(rows, [r["prompt"] for r in rows], ["a", "b"], [[1], [2]])
    trl_kwargs = seen[-1]
    assert "environments" in trl_kwargs and capture.environments is environments
    ours = trl_adapter.replay_reward_kwargs(trainer, rows[::-1], [1, 0], capture.environments)
    assert set(ours) == set(trl_kwargs)
    assert ours["environments"] == environments[::-1]
    assert ours["trainer_state"] is trl_kwargs["trainer_state"] is trainer.state
    for column in set(trl_kwargs) - {"environments", "trainer_state", "log_extra", "log_metric"}:
        assert ours[column] == trl_kwargs[column][::-1], column
    trainer.environments = None  # TRL's default: no ``environments`` argument at all
    trainer._calculate_rewards(rows, [r["prompt"] for r in rows], ["a", "b"], [[1], [2]])
    assert set(trl_adapter.replay_reward_kwargs(trainer, rows, [0, 1], None)) == set(seen[-1])


def test_private_state_the_adapter_reads_and_writes(tmp_path, tiny_model_path, sample_dataset):
    """``beta`` (the KL loss coefficient TRL's loss reads), ``_tokenizer``, ``_get_output_dir`` and ``_metrics``."""
    import inspect
    import os

    from trl import GRPOTrainer

    assert "self.beta" in inspect.getsource(GRPOTrainer._compute_loss)  # TRL's KL loss term reads beta
    trainer = _trainer(tmp_path, tiny_model_path, sample_dataset, beta=0.04)
    assert trainer.ref_model is not None  # loaded because beta > 0 at construction
    assert trl_adapter.move_kl_to_reward(trainer) == 0.04 and trainer.beta == 0.0
    assert trl_adapter.pad_token_id(trainer) == trainer.processing_class.pad_token_id
    assert trl_adapter.checkpoint_folder(trainer, None) == os.path.join(trainer.args.output_dir, "checkpoint-0")
    trl_adapter.log_metric(trainer, "hir/x", 1.5)
    trl_adapter.log_metric(trainer, "hir/x", 2.5, training=False)
    assert trainer._metrics["train"]["hir/x"] == [1.5] and trainer._metrics["eval"]["hir/x"] == [2.5]
    assert trl_adapter.reward_environments(trainer) is None  # TRL's default before any call
