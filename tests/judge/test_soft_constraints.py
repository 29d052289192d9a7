"""HiRConfig.soft_constraints: soft (LLM-judged) constraints with no judge never fail silently."""

from __future__ import annotations

import datasets
import pytest

from hir_trl import HiRConfig, HiRTrainer
from hir_trl.data.loading import count_soft_constraints, drop_soft_constraints
from hir_trl.trainer import SoftConstraintsWithoutJudgeError


def soft(text):
    return {"text": text, "kind": "soft", "family": None, "instruction_id": None, "kwargs": "{}"}


def with_soft(dataset, rows_with_soft=(0, 3), soft_only_row=5):
    """``dataset`` with a soft constraint appended to some rows and one row whose constraints are all soft."""
    rows = dataset.to_list()
    for i in rows_with_soft:
        rows[i]["constraints"] = [*rows[i]["constraints"], soft(f"Sound formal ({i}).")]
    rows[soft_only_row]["constraints"] = [soft("Be kind."), soft("Be brief.")]
    return datasets.Dataset.from_list(rows)


def args(tmp_path, **overrides):
    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=12, max_steps=1,
                  max_completion_length=8, bf16=False, use_cpu=True, report_to="none", save_strategy="no",
                  judge_model="", replay_truncated_completions=True)
    values.update(overrides)
    return HiRConfig(**values)


def test_count_and_drop_soft_constraints(sample_dataset):
    data = with_soft(sample_dataset)
    assert count_soft_constraints(sample_dataset) == (0, 0)
    assert count_soft_constraints(data) == (4, 3)
    assert count_soft_constraints({"a": data, "b": data.to_list()}) == (8, 6)
    assert count_soft_constraints(None) == (0, 0)
    assert count_soft_constraints(data.to_iterable_dataset()) is None

    dropped = drop_soft_constraints(data)
    assert len(dropped) == len(data) - 1  # the all-soft row is not trained on
    assert count_soft_constraints(dropped) == (0, 0)
    original = sample_dataset.to_list()
    kept = [row for i, row in enumerate(original) if i != 5]
    # every other row keeps exactly its hard constraints, in order, and its prompt
    assert [r["constraints"] for r in dropped] == [r["constraints"] for r in kept]
    assert [r["prompt"] for r in dropped] == [r["prompt"] for r in kept]
    assert drop_soft_constraints(data.to_list()) == dropped.to_list()


def test_soft_constraints_without_judge_refuse_to_start(tmp_path, tiny_model_path, sample_dataset):
    data = with_soft(sample_dataset)
    with pytest.raises(SoftConstraintsWithoutJudgeError) as info:
        HiRTrainer(model=str(tiny_model_path), args=args(tmp_path), train_dataset=data)
    message = str(info.value)
    assert "4 soft" in message and "3 row(s)" in message and "judge_model" in message
    assert "soft_constraints: fail" in message and "soft_constraints: skip" in message
    # evaluation data is checked too, and a streaming dataset (uncountable) is refused rather than assumed clean
    with pytest.raises(SoftConstraintsWithoutJudgeError, match="evaluation data"):
        HiRTrainer(model=str(tiny_model_path), args=args(tmp_path), train_dataset=sample_dataset, eval_dataset=data)
    with pytest.raises(SoftConstraintsWithoutJudgeError, match="streaming"):
        HiRTrainer(model=str(tiny_model_path), args=args(tmp_path), train_dataset=data.to_iterable_dataset())
    # hard-only data needs no judge
    HiRTrainer(model=str(tiny_model_path), args=args(tmp_path), train_dataset=sample_dataset)


def test_soft_constraints_fail_and_skip(tmp_path, tiny_model_path, sample_dataset):
    data = with_soft(sample_dataset)
    failing = HiRTrainer(model=str(tiny_model_path), args=args(tmp_path, soft_constraints="fail"), train_dataset=data)
    assert count_soft_constraints(failing.train_dataset) == (4, 3)
    matrix = failing.constraint_reward.verify(
        [r["prompt"] for r in data.select([0])], ["text"], [r["constraints"] for r in data.select([0])])
    soft_verdict = matrix[0, len(data[0]["constraints"]) - 1]
    assert not soft_verdict.passed and "no judge" in soft_verdict.error

    skipping = HiRTrainer(model=str(tiny_model_path), args=args(tmp_path, soft_constraints="skip"),
                          train_dataset=data, eval_dataset=data)
    assert count_soft_constraints(skipping.train_dataset) == (0, 0)
    assert count_soft_constraints(skipping.eval_dataset) == (0, 0)
    assert len(skipping.train_dataset) == len(data) - 1


def test_soft_constraints_choice_is_validated(tmp_path):
    with pytest.raises(ValueError, match="soft_constraints must be one of"):
        args(tmp_path, soft_constraints="ignore")
