"""`hir_trl.trl_adapter.TRLPasses` and `hir_trl.trl_internals` against the installed TRL: each test fails loudly when
TRL's private behaviour changes."""

from __future__ import annotations

import inspect
from collections import deque
from types import SimpleNamespace

import pytest
from trl import GRPOTrainer

from hir_trl import HiRConfig, trl_adapter
from hir_trl.step import StepPasses
from hir_trl.step.log import LogRow
from hir_trl.trainer import HiRTrainer
from hir_trl.trl_adapter import TRLPasses

#: The public members of `TRLPasses` beyond `hir_trl.step.StepPasses`, each with who uses it. A new public member
#: fails `test_trl_passes_is_the_step_protocol_plus_the_trainers_calls` until it is listed here.
TRAINER_MEMBERS = {
    # HiRTrainer.__init__
    "vllm_available": "__init__", "move_kl_to_reward": "__init__", "resize_completion_log": "__init__",
    "after_trl_init": "__init__",
    # HiRTrainer's hooks
    "keep_reward_call": "_calculate_rewards", "capture": "_get_per_token_logps_and_entropies, _generate_single_turn",
    "judge_ahead": "_generate", "replay_ratio_logging": "_compute_loss",
    "start_completion_log": "_generate_and_score_completions", "capturing": "_generate_and_score_completions",
    "separate_completion_log": "evaluation_loop", "checkpoint_folder": "_save_checkpoint",
    # set by after_trl_init, read by capturing: why generate cannot record while sampling
    "no_recording_reason": "after_trl_init",
    # the TRL calls `extra_rewards` makes, which `hir_trl.step.rewards` and `hir_trl.step.state` name
    "replay_reward_kwargs": "extra_rewards", "run_together": "extra_rewards", "score_with_model": "extra_rewards",
}


def _protocol_members() -> tuple[set[str], set[str]]:
    """(attributes, methods) `hir_trl.step.StepPasses` declares."""
    methods = {name for name, value in vars(StepPasses).items() if callable(value) and not name.startswith("_")}
    return set(StepPasses.__annotations__), methods


def _parameters(function) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter but ``self``."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values() if p.name != "self"]


def test_trl_passes_is_the_step_protocol_plus_the_trainers_calls():
    """`TRLPasses` holds every member of `StepPasses` (an attribute as a value or property, a method with the
    protocol's parameters: names, kinds, defaults), and no public member but those and `TRAINER_MEMBERS`: TRL's
    private state reaches HiR through these and nothing else. Built over an empty trainer (nothing of TRL is read
    until a member is used)."""
    passes = TRLPasses(SimpleNamespace(), seed=0)
    attributes, methods = _protocol_members()
    assert {"args", "global_step", "timer", "replay_rng"} <= attributes
    assert {"policy_pass", "supplementary_samples", "gather", "log_metric", "log_hindsight_rows"} <= methods
    missing = object()
    for name in sorted(attributes):
        found = inspect.getattr_static(passes, name, missing)
        assert found is not missing, f"TRLPasses has no {name}"
        assert isinstance(found, property) or not inspect.isfunction(found), f"TRLPasses.{name} is a method"
    for name in sorted(methods):
        found = inspect.getattr_static(TRLPasses, name, None)
        assert inspect.isfunction(found), f"TRLPasses has no method {name}"
        assert _parameters(found) == _parameters(vars(StepPasses)[name]), name
    public = {name for name in dir(passes) if not name.startswith("_")}
    assert public - attributes - methods == set(TRAINER_MEMBERS)


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
    assert trainer.hir_passes._trl_computes_old_logps() is computed
    assert computed is (num_iterations == 2)


def test_completion_log_buffers_and_one_completion_per_prompt(tmp_path, tiny_model_path, sample_dataset):
    trainer = _trainer(tmp_path, tiny_model_path, sample_dataset)
    passes = trainer.hir_passes
    # TRL's completion log holds these buffers, the adapter's replacement keeps their names and kinds
    assert set(trainer._logs) == {"images", "prompt", "completion", "rewards", "advantages", "extra"}
    assert all(isinstance(trainer._logs[name], deque) for name in trl_adapter.ROW_BUFFERS)
    assert trainer._logs["prompt"].maxlen == 6 + 0  # generation batch + k rows per group (k = 0)
    passes.resize_completion_log(9)
    assert trainer._logs["prompt"].maxlen == 9 and trainer._logs["rewards"]["x"].maxlen == 9
    trainer.model.train()
    trainer._generate_and_score_completions(_batch(trainer, sample_dataset, 6))
    logged = len(trainer._logs["prompt"])
    metrics = {key: len(values) for key, values in trainer._metrics["train"].items()}
    assert logged == 6
    # TRL reads num_generations inside the call: one completion per prompt, and nothing kept in the records
    # (TRL's own method, as `HiRTrainer._supplementary_samples` calls it: HiR's override starts a new log)
    with passes._one_completion_per_prompt(), passes._discard_records(2):
        out = GRPOTrainer._generate_and_score_completions(trainer, _batch(trainer, sample_dataset, 2))
    assert trainer.num_generations == 6
    assert out["completion_ids"].size(0) == 2
    assert len(trainer._logs["prompt"]) == logged and len(trainer._logs["advantages"]) == logged
    assert {k: len(v) for k, v in trainer._metrics["train"].items() if k != "num_tokens"} == {
        k: v for k, v in metrics.items() if k != "num_tokens"}
    # the log takes HiR's rows and columns
    passes.log_hindsight_rows(["r"] * 6, [0.5] * 6, [LogRow("q'", "y", "r", True, False, "[0]", 1.0)], [1.0])
    assert list(trainer._logs["advantages"])[-7:] == [0.5] * 6 + [1.0]
    assert list(trainer._logs["extra"]["hindsight"]) == [False] * 6 + [True]
    assert len(trainer._logs["prompt"]) == 7
    assert passes.tokenize_prompts([sample_dataset[0]["prompt"]])[0]


def test_start_and_separate_completion_log(tmp_path, tiny_model_path, sample_dataset):
    """`start_completion_log` empties TRL's buffers (keeping their size); `separate_completion_log` gives the block
    its own log and puts the real one back, with what the block logged dropped."""
    trainer = _trainer(tmp_path, tiny_model_path, sample_dataset)
    trainer.model.train()
    trainer._generate_and_score_completions(_batch(trainer, sample_dataset, 6))
    assert len(trainer._logs["prompt"]) == 6 and trainer._logs["rewards"]
    real = trainer._logs
    with trainer.hir_passes.separate_completion_log():
        assert trainer._logs is not real
        trainer._logs["prompt"].extend(["evaluation row"] * 6)
    assert trainer._logs is real and len(real["prompt"]) == 6 and "evaluation row" not in real["prompt"]
    trainer.hir_passes.start_completion_log()
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
    ours = trainer.hir_passes.replay_reward_kwargs(rows[::-1], [1, 0], capture.environments)
    assert set(ours) == set(trl_kwargs)
    assert ours["environments"] == environments[::-1]
    assert ours["trainer_state"] is trl_kwargs["trainer_state"] is trainer.state
    for column in set(trl_kwargs) - {"environments", "trainer_state", "log_extra", "log_metric"}:
        assert ours[column] == trl_kwargs[column][::-1], column
    trainer.environments = None  # TRL's default: no ``environments`` argument at all
    trainer._calculate_rewards(rows, [r["prompt"] for r in rows], ["a", "b"], [[1], [2]])
    assert set(trainer.hir_passes.replay_reward_kwargs(rows, [0, 1], None)) == set(seen[-1])


def test_private_state_the_adapter_reads_and_writes(tmp_path, tiny_model_path, sample_dataset):
    """``beta`` (the KL loss coefficient TRL's loss reads), ``_tokenizer``, ``_get_output_dir`` and ``_metrics``."""
    import inspect
    import os

    from trl import GRPOTrainer

    assert "self.beta" in inspect.getsource(GRPOTrainer._compute_loss)  # TRL's KL loss term reads beta
    trainer = _trainer(tmp_path, tiny_model_path, sample_dataset, beta=0.04)
    assert trainer.ref_model is not None  # loaded because beta > 0 at construction
    passes = trainer.hir_passes
    assert passes.move_kl_to_reward() == 0.04 and trainer.beta == 0.0
    assert passes.pad_token_id == trainer.processing_class.pad_token_id
    assert passes.checkpoint_folder(None) == os.path.join(trainer.args.output_dir, "checkpoint-0")
    passes.log_metric("hir/x", 1.5)
    passes.log_metric("hir/x", 2.5, training=False)
    assert trainer._metrics["train"]["hir/x"] == [1.5] and trainer._metrics["eval"]["hir/x"] == [2.5]
    assert passes._reward_environments() is None  # TRL's default before any call


def test_trl_internals_behave_as_hir_uses_them(tiny_model_path):
    """Each TRL-internal helper `hir_trl.trl_internals` imports, as HiR calls it."""
    import functools
    import inspect

    import torch
    from transformers import AutoModelForCausalLM

    from hir_trl import trl_internals

    # pad: prompts left-padded to a common width, a multiple of pad_to_multiple_of (`hir_trl.step.batch.extend_batch`)
    padded = trl_internals.pad([torch.tensor([1, 2]), torch.tensor([3])], padding_value=0, padding_side="left",
                               pad_to_multiple_of=4)
    assert padded.tolist() == [[0, 0, 1, 2], [0, 0, 0, 3]]
    # nanstd: the unbiased standard deviation of the values that are not NaN (`hir_trl.step.advantages`)
    values = torch.tensor([1.0, float("nan"), 3.0, 5.0])
    assert trl_internals.nanstd(values).item() == pytest.approx(torch.tensor([1.0, 3.0, 5.0]).std().item())

    # get_callable_name, is_async_callable: a reward function's name and kind (`hir_trl.guards.checked_reward_function`)
    def plain(prompts, completions, **kwargs):
        return [0.0] * len(prompts)

    async def awaited(prompts, completions, **kwargs):
        return [0.0] * len(prompts)

    class Scorer:
        async def __call__(self, prompts, completions, **kwargs):
            return [0.0] * len(prompts)

    assert [trl_internals.get_callable_name(f) for f in (plain, functools.partial(awaited), Scorer())] == [
        "plain", "awaited", "Scorer"]
    assert [trl_internals.is_async_callable(f) for f in (plain, awaited, functools.partial(awaited), Scorer())] == [
        False, True, True, True]
    assert isinstance(trl_internals.is_vllm_available(), bool)
    # use_adapter(model, adapter_name=...): the reference model of a PEFT run (`TRLPasses.reference_logps`)
    assert list(inspect.signature(trl_internals.use_adapter).parameters) == ["model", "adapter_name"]
    # disable_gradient_checkpointing(model, kwargs): off within the block, back on after (`TRLPasses.policy_pass`)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_path))
    model.gradient_checkpointing_enable()
    with trl_internals.disable_gradient_checkpointing(model, None):
        assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    # GRPOScriptArguments, DatasetConfig: trl grpo's script options, which `hir_trl.configs.HiRScriptArguments` takes
    import dataclasses

    assert {"reward_funcs", "reward_model_name_or_path", "dataset_streaming", "dataset_test_split"} <= {
        f.name for f in dataclasses.fields(trl_internals.GRPOScriptArguments)}
    assert [f.name for f in dataclasses.fields(trl_internals.DatasetConfig)] == [
        "path", "name", "data_dir", "data_files", "split", "columns", "fraction"]
    # trl_rewards: the reward functions trl grpo names (`hir_trl.trainer_setup.TRL_REWARD_FUNCTIONS`)
    assert trl_internals.trl_rewards.think_format_reward(
        completions=[[{"content": "<think>a</think>b"}], [{"content": "b"}]], prompts=["q", "q"]) == [1.0, 0.0]


def test_a_replays_async_rewards_run_together_on_trls_event_loop(tmp_path, tiny_model_path, sample_dataset):
    """`TRLPasses.extra_rewards` awaits a replay's async reward functions together (their runs overlap) on the event
    loop where `GRPOTrainer._calculate_rewards` gathers them for the sampled rows (TRL's ``async_loop`` thread)."""
    import asyncio
    import threading
    import time
    from types import SimpleNamespace

    from hir_trl.step.state import HiRCapture

    runs = []

    def timed(value):
        async def reward(prompts, completions, **kwargs):
            start = time.monotonic()
            await asyncio.sleep(0.2)
            runs.append((value, threading.current_thread().name, start, time.monotonic()))
            return [value] * len(prompts)

        reward.__name__ = f"reward_{value}"
        return reward

    trainer = HiRTrainer(model=str(tiny_model_path), train_dataset=sample_dataset,
                         reward_funcs=[timed(0.25), timed(0.5), timed(0.75)],
                         args=HiRConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=6,
                                        num_replays=0, max_steps=1, max_completion_length=8, bf16=False, use_cpu=True,
                                        report_to="none", save_strategy="no", gradient_checkpointing=False))
    rows = [dict(sample_dataset[0]), dict(sample_dataset[1])]
    prompts = [row["prompt"] for row in rows]
    trainer._calculate_rewards(rows, prompts, ["a", "b"], [[1], [2]])  # TRL's own call, for its thread
    trl_threads = {thread for _, thread, _, _ in runs}
    runs.clear()
    replays = [SimpleNamespace(kind="replay", source=1), SimpleNamespace(kind="replay", source=0)]
    table = trainer.hir_passes.extra_rewards(HiRCapture(), replays, prompts, ["a", "b"], [[1], [2]], rows)
    assert table == [[0.25, 0.5, 0.75]] * 2
    assert len(runs) == 3 and {thread for _, thread, _, _ in runs} == trl_threads
    assert trl_threads != {threading.current_thread().name}  # TRL's loop runs on its own thread
    assert max(start for _, _, start, _ in runs) < min(end for _, _, _, end in runs)  # all three overlap
