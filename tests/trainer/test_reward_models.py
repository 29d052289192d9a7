"""Reward models as extra rewards, as in `GRPOTrainer`: a model id or folder in ``reward_funcs`` (or
``reward_model_name_or_path``) is loaded as a sequence-classification model with its tokenizer; the sampled rows are
scored by TRL, each replay by HiR on its own (q', y), and both are logged. A tiny reward model is built locally."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hir_trl import ConstraintReward, HiRTrainer
from hir_trl.trainer_setup import extra_rewards_problem, named_reward_functions, names_reward_model

from ..testing_utils import (
    REPO_ROOT,
    assert_nothing_written,
    assert_one_line_error,
    make_args,
    train,
    train_on_two_processes,
)


@pytest.fixture(scope="module")
def reward_model_path(tmp_path_factory, tiny_model_path):
    """A random-init sequence-classification model (one label) on the tiny model's config and tokenizer."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny-reward-model")
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.num_labels = 1
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(folder)
    return folder


def test_a_model_id_or_folder_in_reward_funcs_is_kept_for_grpo_trainer_to_load(tmp_path):
    folder = tmp_path / "rm"
    folder.mkdir()
    assert names_reward_model("org/reward-model") and names_reward_model(str(folder))
    assert not names_reward_model("my_module.my_reward") and not names_reward_model("think_format_reward")
    functions = named_reward_functions(["think_format_reward", "org/reward-model", str(folder)])
    assert callable(functions[0]) and functions[1:] == ["org/reward-model", str(folder)]
    # a model is no function TRL calls with the rows' columns: only the reward weights' count is asked of it
    assert extra_rewards_problem(functions, ["prompt", "constraints"], None) is None
    assert "reward_weights has 2 weight(s) for 4 reward(s)" in extra_rewards_problem(functions, ["prompt"], [1, 1])


def test_a_missing_reward_model_folder_is_one_line_before_anything_loads(tmp_path, capsys):
    code, out, err = train(tmp_path, capsys, "--reward_funcs", str(tmp_path / "no-such-rm"))
    assert_one_line_error(code, out, err, "reward_funcs: ", "no-such-rm: no such reward model folder")
    assert_nothing_written(tmp_path)
    code, out, err = train(tmp_path, capsys, "--reward_model_name_or_path", "./no-such-rm")
    assert_one_line_error(code, out, err, "reward_model_name_or_path: ./no-such-rm: no such reward model folder")
    assert_nothing_written(tmp_path)


def test_hir_trl_train_with_a_reward_model_logs_its_reward_for_sampled_rows_and_replays(tmp_path, capsys,
                                                                                     reward_model_path):
    code, out, err = train(tmp_path, capsys, "--reward_funcs", str(reward_model_path), "--max_steps", "2",
                           "--save_strategy", "no")
    assert code == 0, err
    name = reward_model_path.name
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    steps = [entry for entry in history if "loss" in entry]
    assert len(steps) == 2
    for entry in steps:
        sampled, replays = entry[f"rewards/{name}/mean"], entry[f"hir/replay_rewards/{name}/mean"]
        assert math.isfinite(sampled) and math.isfinite(replays)
        # TRL's weighted sum: the constraint reward (CLA in the tiny recipe) plus the model's, weights 1
        assert entry["reward"] == pytest.approx(entry["rewards/cla/mean"] + sampled, abs=1e-5)


def test_replays_are_scored_by_the_reward_model_under_the_hindsight_instruction_with_lora(tmp_path,
                                                                                          tiny_model_path,
                                                                                          sample_dataset,
                                                                                          reward_model_path):
    from peft import LoraConfig
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    trainer = HiRTrainer(model=str(tiny_model_path), reward_funcs=[ConstraintReward(), str(reward_model_path)],
                         args=make_args(tmp_path, max_steps=2, num_replays=2),
                         train_dataset=sample_dataset,
                         peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    calls = []
    score = trainer.hir_passes.score_with_model

    def spy(index, prompts, completions):
        result = score(index, prompts, completions)
        calls.append((list(prompts), list(completions), result))
        return result

    trainer.hir_passes.score_with_model = spy
    trainer.train()
    assert len(calls) == 2  # one call per step: the replays of the step (TRL scores the sampled rows itself)
    replays = trainer.last_replay
    assert replays is not None
    # each replay is scored on its own (q', y): q' drops the constraints y failed, so it is no sampled prompt
    sampled_prompts = [row["prompt"] for row in sample_dataset]
    prompts, completions, result = calls[-1]
    assert prompts and all(prompt not in sampled_prompts for prompt in prompts)
    # the value is the reward model's logit on that text, as GRPOTrainer scores a row (one text at a time here)
    model = AutoModelForSequenceClassification.from_pretrained(reward_model_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(reward_model_path)
    for prompt, completion, value in zip(prompts, completions, result, strict=True):
        text = tokenizer.apply_chat_template(list(prompt) + list(completion), tokenize=False)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            expected = model(**ids).logits[0, 0].item()
        assert value == pytest.approx(expected, abs=1e-4)
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    name = reward_model_path.name
    assert all(f"hir/replay_rewards/{name}/mean" in entry and f"rewards/{name}/mean" in entry for entry in logged)


def train_with_reward_model(tmp_path, reward_model_path, accelerate_config: str, *flags: str, **environ: str):
    """``hir-trl train`` of the tiny recipe on 2 CPU processes (``--accelerate_config``) with the reward model in
    ``reward_funcs``; returns the finished process (its exit status is the caller's to check)."""
    return train_on_two_processes(tmp_path, accelerate_config, "--save_strategy", "no", "--reward_funcs",
                                  str(reward_model_path), *flags, timeout=900, **environ)


def logged_steps(tmp_path) -> list[dict]:
    return [e for e in json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"] if "loss" in e]


@pytest.mark.slow
def test_a_reward_model_on_two_processes_scores_every_ranks_replays(tmp_path, reward_model_path):
    done = train_with_reward_model(tmp_path, reward_model_path, "multi_cpu", "--max_steps", "1", "--use_peft", "true",
                                  "--lora_target_modules", "q_proj", "v_proj")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Replays made: 8;" in done.stdout  # 4 replays per process: both ranks replayed
    (entry,) = logged_steps(tmp_path)
    name = reward_model_path.name
    assert math.isfinite(entry[f"rewards/{name}/mean"]) and math.isfinite(entry[f"hir/replay_rewards/{name}/mean"])


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("stage", [2, 3])
def test_a_reward_model_under_deepspeed_zero_on_two_cpu_processes(tmp_path, reward_model_path, stage):
    """``hir-trl train --accelerate_config zero{2,3}_cpu``: GRPOTrainer prepares the reward model for DeepSpeed (under
    ZeRO-3 an inference engine whose parameters are partitioned, so every rank must run each of its forward passes,
    replays or none); both steps score the sampled rows and the replays of both ranks."""
    pytest.importorskip("deepspeed", reason="deepspeed is not installed (not in the dev extra): make "
                                            "test-deepspeed-cpu installs it and runs this test")
    done = train_with_reward_model(tmp_path, reward_model_path, f"zero{stage}_cpu", "--max_steps", "2",
                                  DS_ACCELERATOR="cpu")
    assert done.returncode == 0, done.stderr[-5000:]
    # accelerate launched the ZeRO config, and DeepSpeed's communication (its CPU shared-memory op) came up
    assert f"--config_file {REPO_ROOT}/recipes/accelerate_configs/zero{stage}_cpu.yaml" in done.stderr
    assert "deepspeed_shm_comm_op built successfully" in done.stdout
    assert "Replays made: 16;" in done.stdout  # 4 replays per process and step: both ranks replayed, twice
    steps = logged_steps(tmp_path)
    assert len(steps) == 2
    name = reward_model_path.name
    for entry in steps:
        sampled, replays = entry[f"rewards/{name}/mean"], entry[f"hir/replay_rewards/{name}/mean"]
        assert math.isfinite(sampled) and math.isfinite(replays)
        assert entry["reward"] == pytest.approx(entry["rewards/cla/mean"] + sampled, abs=1e-5)


def write_one_replaying_and_one_hopeless_prompt(path) -> None:
    """Two rows: on the first every completion meets one of its two constraints (a replay candidate), on the second
    no completion of at most 32 tokens meets either (no candidate, so its group is padded, never replayed)."""
    words = "length_constraints:number_words"
    rows = [
        {"id": "replaying", "task": "Write about the sea.", "constraints": [
            {"text": "Use fewer than 1000 words.", "family": "ifeval", "instruction_id": words,
             "kwargs": {"relation": "less than", "num_words": 1000}},
            {"text": "Use at least 1000 words.", "family": "ifeval", "instruction_id": words,
             "kwargs": {"relation": "at least", "num_words": 1000}}]},
        {"id": "hopeless", "task": "Write about the hills.", "constraints": [
            {"text": "Use at least 1000 words.", "family": "ifeval", "instruction_id": words,
             "kwargs": {"relation": "at least", "num_words": 1000}},
            {"text": "Use at least 2000 words.", "family": "ifeval", "instruction_id": words,
             "kwargs": {"relation": "at least", "num_words": 2000}}]},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_reward_model_under_zero3_when_one_rank_has_no_replays(tmp_path, reward_model_path):
    """ZeRO-3 partitions the reward model, so its forward pass is a collective: a rank without replays must still run
    it, or the rank with replays waits for it forever. One group per rank (``per_device_train_batch_size`` = m = 6)
    from two prompts, one of which can never be replayed: in each step exactly one rank replays."""
    pytest.importorskip("deepspeed", reason="deepspeed is not installed (not in the dev extra): make "
                                            "test-deepspeed-cpu installs it and runs this test")
    data = tmp_path / "two_prompts.jsonl"
    write_one_replaying_and_one_hopeless_prompt(data)
    done = train_with_reward_model(tmp_path, reward_model_path, "zero3_cpu", "--max_steps", "2", "--dataset_name",
                                   str(data), "--per_device_train_batch_size", "6", "--replay_shortfall", "pad",
                                   DS_ACCELERATOR="cpu")
    assert done.returncode == 0, done.stderr[-5000:]
    # 2 replays per step, all on one rank; the other rank's group is padded with 2 zero-weight rows
    assert "Replays made: 4; supplementary samples: 0; padding rows: 4" in done.stdout, done.stdout[-3000:]
    steps = logged_steps(tmp_path)
    assert len(steps) == 2
    name = reward_model_path.name
    for entry in steps:
        assert math.isfinite(entry[f"rewards/{name}/mean"]) and math.isfinite(entry[f"hir/replay_rewards/{name}/mean"])
