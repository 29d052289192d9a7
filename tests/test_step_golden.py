"""A HiR step gives bit-identical results run after run: the golden record of two training steps on the tiny model.

For each of ``replay_shortfall`` {pad, resample} x ``advantage_estimator`` {grpo, reinforce_pp (the paper's, with
its KL loss coefficient beta = 1e-4)}, and Reinforce++ with the KL in the reward, two optimizer steps with a fixed
seed: every row's reward and advantage, the new rows (kind, source, group, kept constraints, a fingerprint of q'), the per-row sums
of the old and reference log-probs over the completion tokens, the loss of every step and the step's ``hir/*``
counts are compared, as exact ``float.hex`` strings, with ``tests/data/step_golden.json``. Any change to the
step's arithmetic, its order of random draws or its batch layout shows here.

The fixture is written by the code it checks: ``HIR_RECORD_GOLDEN=1 pytest tests/test_step_golden.py`` records it
again (only for a deliberate change of behaviour, said so in CHANGELOG.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
import torch

from hir_trl import HiRTrainer

from .test_trainer import make_args

GOLDEN = Path(__file__).parent / "data" / "step_golden.json"
#: torch's intra-op threads while recording and checking: a float32 reduction's order, so its last bits, depends on
#: the thread count (an earlier test or a machine with more cores may leave another), not on the number of cores.
THREADS = 2

#: Paper values of the Reinforce++ family (the paper recipes): the estimator and its KL loss coefficient.
REINFORCE_PP = dict(advantage_estimator="reinforce_pp", beta=1e-4)
SCENARIOS = {
    "pad-grpo": dict(replay_shortfall="pad"),
    "resample-grpo": dict(replay_shortfall="resample"),
    "pad-reinforce_pp": dict(replay_shortfall="pad", **REINFORCE_PP),
    "resample-reinforce_pp": dict(replay_shortfall="resample", **REINFORCE_PP),
    "resample-reinforce_pp-kl_in_reward": dict(replay_shortfall="resample", kl_in_reward=True, **REINFORCE_PP),
}
#: Step metrics recorded (counts and lambda; never timings).
METRICS = ("hir/lambda", "hir/replayed_rows", "hir/supplementary_samples", "hir/padded_rows", "hir/filler_samples",
           "hir/generate_calls", "hir/generated_tokens", "hir/relabelled_constraints", "reward/ila", "reward/cla")


def hexed(value: float | None) -> str | None:
    return None if value is None else float(value).hex()


def digest(q_prime) -> str:
    """A short fingerprint of a hindsight prompt (its chat messages or text), to keep the fixture small."""
    return hashlib.sha256(json.dumps(q_prime, sort_keys=True).encode()).hexdigest()[:16]


def length_reward(prompts, completions, completion_ids, constraints, **kwargs):
    """An extra TRL-style reward function (so that a replay's own extra rewards are part of the record): the
    completion's length in tokens over 16, plus 0.1 per constraint the row keeps."""
    return [len(ids) / 16 + 0.1 * len(kept) for ids, kept in zip(completion_ids, constraints, strict=True)]


def row_sums(values, mask):
    """Per-row sums over the completion tokens of a (N, T) tensor (or the (N,) values themselves)."""
    if values.dim() == 1:
        return [hexed(v) for v in values.tolist()]
    return [hexed(v) for v in (values * mask).sum(1).tolist()]


def record(tmp_path, tiny_model_path, dataset, overrides):
    """The golden record of two training steps with ``overrides``."""
    # k = 3 of m = 6 leaves some groups short of candidates, so pads (or supplementary samples) occur
    # 4 groups; k = 3 and at least 2 constraints met: some groups are short of candidates, so pads (or
    # supplementary samples) occur beside replays in both steps with this seed
    settings = dict(max_steps=2, seed=1, per_device_train_batch_size=24, num_replays=3, replay_min_satisfied=2,
                    reward_weights=[1.0, 0.5])
    args = make_args(tmp_path, **{**settings, **overrides})
    trainer = HiRTrainer(model=str(tiny_model_path), args=args, train_dataset=dataset, reward_funcs=[length_reward])
    steps, losses = [], []
    generate, compute_loss = trainer._generate_and_score_completions, trainer.compute_loss

    def spy_generate(inputs):
        out = generate(inputs)
        replay, mask = trainer.last_replay, out["completion_mask"].float()
        steps.append({
            "row_ids": [str(x["row_id"]) for x in inputs],
            "rewards": [hexed(r) for r in replay.rewards],
            "advantages": row_sums(out["advantages"], mask),
            "new_rows": [[row.kind, row.source, row.group,
                          None if row.choice is None else [i for i, ok in enumerate(row.choice.kept) if ok],
                          None if row.q_prime is None else digest(row.q_prime)] for row in replay.new_rows],
            **{key: row_sums(out[key], mask) for key in ("old_per_token_logps", "ref_per_token_logps") if key in out},
        })
        return out

    def spy_loss(*args, **kwargs):
        loss = compute_loss(*args, **kwargs)
        losses.append(hexed(loss.item()))
        return loss

    trainer._generate_and_score_completions, trainer.compute_loss = spy_generate, spy_loss
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    metrics = [{name: hexed(entry[name]) for name in METRICS} for entry in logged]
    return {"steps": steps, "losses": losses, "metrics": metrics}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_steps_are_bit_identical_to_the_golden_record(tmp_path, tiny_model_path, sample_dataset, name):
    got = record(tmp_path, tiny_model_path, sample_dataset, SCENARIOS[name])
    kinds = [row[0] for step in got["steps"] for row in step["new_rows"]]
    assert len(got["steps"]) == 2 and len(got["losses"]) == 2
    assert kinds.count("replay") > 0
    assert kinds.count("pad" if SCENARIOS[name]["replay_shortfall"] == "pad" else "supplementary") > 0
    assert all(math.isfinite(float.fromhex(loss)) for loss in got["losses"])
    if os.environ.get("HIR_RECORD_GOLDEN"):
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        golden[name] = got
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), sort_keys=True) + "\n")
        pytest.skip(f"recorded {name} into {GOLDEN}")
    expected = json.loads(GOLDEN.read_text())[name]
    for step, (want, have) in enumerate(zip(expected["steps"], got["steps"], strict=True)):
        for key in want:
            assert have[key] == want[key], f"step {step}: {key} differs"
        assert set(have) == set(want)
    assert got["losses"] == expected["losses"]
    assert got["metrics"] == expected["metrics"]
