"""The per-step completion logs (``<output_dir>/completions/completions_<step>.parquet``) hold exactly the rows of
their step: the sampled completions of that step's batch, then its replays and supplementary samples, never rows of
an earlier step or of an evaluation batch, so the end-of-run summary's example replays name the step that made
them."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest

from hir_trl import HiRConfig
from hir_trl.cli.summary import example_replays
from hir_trl.trainer import HiRTrainer

STEPS = 4


def _prompt_text(prompt) -> str:
    return json.dumps(list(prompt) if not isinstance(prompt, str) else prompt, default=str)


@pytest.mark.parametrize("replays", [
    pytest.param({"num_replays": 2, "replay_shortfall": "pad", "replay_min_satisfied": 2}, id="pad"),
    pytest.param({"num_replays": 2, "replay_shortfall": "resample", "replay_min_satisfied": 2}, id="resample"),
    pytest.param({"num_replays": 0}, id="no-replays"),
])
def test_each_step_file_holds_exactly_that_steps_rows(tmp_path, tiny_model_path, sample_dataset, replays):
    out = tmp_path / "out"
    args = HiRConfig(output_dir=str(out), per_device_train_batch_size=12, per_device_eval_batch_size=12,
                     num_generations=6, max_steps=STEPS, max_completion_length=8, replay_truncated_completions=True,
                     bf16=False, use_cpu=True, report_to="none", save_strategy="no", seed=3, logging_steps=1,
                     log_completions=True, num_completions_to_print=0, eval_strategy="steps", eval_steps=2,
                     gradient_checkpointing=False, **replays)
    trainer = HiRTrainer(model=str(tiny_model_path), args=args, train_dataset=sample_dataset,
                         eval_dataset=sample_dataset.select(range(2)))
    batches: list[list[dict]] = []  # each training generation batch's rows, in order (one batch per step here)
    generate = trainer._generate_and_score_completions

    def recording(inputs):
        if trainer.model.training:
            batches.append(list(inputs))
        return generate(inputs)

    trainer._generate_and_score_completions = recording
    trainer.train()
    assert len(batches) == STEPS
    files = sorted((out / "completions").glob("completions_*.parquet"))
    assert [f.name for f in files] == [f"completions_{s:05d}.parquet" for s in range(1, STEPS + 1)]
    history = {h["step"]: h for h in trainer.state.log_history if "reward" in h and "eval_reward" not in h}
    replayed = supplementary = 0
    for step, (path, batch) in enumerate(zip(files, batches), start=1):
        table = pd.read_parquet(path)
        assert set(table["step"]) == {step}
        # the count: the batch's sampled rows plus the rows HiR added this step (padding is not logged)
        extra = 0
        if args.num_replays:
            extra = history[step]["hir/replayed_rows"] + history[step]["hir/supplementary_samples"]
            replayed += history[step]["hir/replayed_rows"]
            supplementary += history[step]["hir/supplementary_samples"]
        assert len(table) == len(batch) + extra, (step, len(table), len(batch), extra)
        # the sampled rows are this batch's, prompt for prompt
        sampled = table
        if "hindsight" in table.columns:
            sampled = table[~table["hindsight"].astype(bool) & ~table["supplementary"].astype(bool)]
            assert list(sampled["row_id"]) == [str(x["row_id"]) for x in batch]
            assert set(table["row_id"]) <= {str(x["row_id"]) for x in batch}  # replays come from this batch
        assert Counter(map(_prompt_text, sampled["prompt"])) == Counter(_prompt_text(x["prompt"]) for x in batch)
    if replays.get("replay_shortfall") == "pad":
        assert replayed > 0 and any(h["hir/padded_rows"] > 0 for h in history.values())
        # the summary's example replays name a step that made replays
        examples = example_replays(out / "completions")
        assert examples and all(history[e["step"]]["hir/replayed_rows"] > 0 for e in examples)
        assert all(e["row_id"] in {str(x["row_id"]) for x in batches[e["step"] - 1]} for e in examples)
    if replays.get("replay_shortfall") == "resample":
        assert supplementary > 0
