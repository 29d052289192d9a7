"""A HiR step gives the same results on every CPU: the golden record of two training steps on the tiny model.

For each of ``replay_shortfall`` {pad, resample} x ``advantage_estimator`` {grpo, reinforce_pp (the paper's, with
its KL loss coefficient beta = 1e-4)}, Reinforce++ with the KL in the reward, and GRPO with the defaults' replay
advantage (``positive``), ended-only replays and the binary reward (``reward_mode="ila"``), two optimizer steps with a
fixed seed: every row's reward and advantage, the new rows (kind, source, group, kept constraints, a fingerprint of q'),
the per-row sums of the old and reference log-probs over the completion tokens, the loss of every step and the
step's ``hir/*`` counts are compared with ``tests/fixtures/step_golden.json``.

Everything discrete (row ids, row kinds, sources, groups, kept constraints, q' fingerprints, the step counts) is
compared exactly. Floats are compared at float32 rounding scale: ``|a - b| <= ULPS * 2**-23 * max(1, |a|, |b|)``.
The SIMD kernels torch picks for a CPU (``ATEN_CPU_CAPABILITY`` default, avx2, avx512) and the thread count change
the order of float32 reductions, so the last bits of a log-prob sum or a loss; measured over those kernels and 1 or 2
threads (benchmarks/experiments/golden-spread), a log-prob row sum moved by at most 1.2 units of 2**-23 of its value
and a loss by at most 0.38 units of 2**-23, while rewards, advantages and counts did not move. A real change of the
step's arithmetic (another advantage normaliser, the KL in the reward) moves them by orders of magnitude more, and
any change of a random draw or of the batch layout changes the discrete part.

Which completions are sampled depends on torch's random streams, which another torch release may draw
differently (torch 2.6 does; 2.14 draws as 2.13): under a torch other than the one that wrote the record
(``torch`` in the fixture), a record whose discrete part differs is skipped with that reason, while its floats are
still compared wherever the discrete part agrees. Under the recording torch (CI's, constraints.txt) nothing is
skipped.

The fixture is written by the code it checks: ``HIR_RECORD_GOLDEN=1 pytest tests/step/test_step_golden.py`` records it
again (only for a deliberate change of behaviour, said so in CHANGELOG.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hir_trl import HiRTrainer

from ..testing_utils import make_args

GOLDEN = Path(__file__).parents[1] / "fixtures" / "step_golden.json"
#: The torch release (no local build label) that wrote the record, and the one running.
RECORDED_TORCH = json.loads(GOLDEN.read_text()).get("torch", "2.13.0")
RUNNING_TORCH = torch.__version__.split("+")[0]
#: torch's intra-op threads while recording and checking (the comparison tolerates another count; recording with a
#: fixed one keeps a re-recorded fixture's diff to what changed).
THREADS = 2
#: Float tolerance in units of float32's machine epsilon (2**-23), relative to max(1, |value|): 13x the largest
#: spread measured between CPU kernels and thread counts (see the module docstring).
ULPS = 16
EPS32 = 2.0 ** -23

#: Paper values of the Reinforce++ family (the paper recipes): the estimator and its KL loss coefficient.
REINFORCE_PP = dict(advantage_estimator="reinforce_pp", beta=1e-4)
SCENARIOS = {
    "pad-grpo": dict(replay_shortfall="pad"),
    "resample-grpo": dict(replay_shortfall="resample"),
    "pad-reinforce_pp": dict(replay_shortfall="pad", **REINFORCE_PP),
    "resample-reinforce_pp": dict(replay_shortfall="resample", **REINFORCE_PP),
    "resample-reinforce_pp-kl_in_reward": dict(replay_shortfall="resample", kl_in_reward=True, **REINFORCE_PP),
    # the defaults' replay advantage, ended-only replays and the binary reward (the random model rarely stops: a
    # length penalty on EOS makes some completions end)
    "pad-grpo-positive-ended-ila": dict(replay_shortfall="pad", replay_advantage="positive", reward_mode="ila",
                                        replay_truncated_completions=False,
                                        generation_kwargs={"exponential_decay_length_penalty": (5, 1.8)}),
}
#: Step metrics recorded (counts and lambda; never timings). The counts are compared exactly, the rest as floats.
METRICS = ("hir/lambda", "hir/replayed_rows", "hir/supplementary_samples", "hir/padded_rows", "hir/filler_samples",
           "hir/generate_calls", "hir/generated_tokens", "hir/relabelled_constraints", "reward/ila", "reward/cla")
COUNTS = {"hir/replayed_rows", "hir/supplementary_samples", "hir/padded_rows", "hir/filler_samples",
          "hir/generate_calls", "hir/generated_tokens", "hir/relabelled_constraints"}
#: Per-step keys holding one float per row; the others ("row_ids", "new_rows") are discrete.
FLOAT_KEYS = {"rewards", "advantages", "old_per_token_logps", "ref_per_token_logps"}


def hexed(value: float | None) -> str | None:
    return None if value is None else float(value).hex()


def close(want: str | None, have: str | None) -> bool:
    """Two recorded floats (``float.hex`` strings, or None) agree at float32 rounding scale (see ULPS)."""
    if want is None or have is None:
        return want == have
    a, b = float.fromhex(want), float.fromhex(have)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= ULPS * EPS32 * max(1.0, abs(a), abs(b))


def differences(expected: dict, got: dict) -> list[str]:
    """What differs between two records: exact for the discrete parts, `close` for floats. Empty when they agree."""
    problems = []
    if len(expected["steps"]) != len(got["steps"]):
        return [f"{len(got['steps'])} steps recorded, {len(expected['steps'])} expected"]
    for step, (want, have) in enumerate(zip(expected["steps"], got["steps"])):
        if set(have) != set(want):
            problems.append(f"step {step}: keys {sorted(set(have) ^ set(want))} differ")
        for key in sorted(set(want) & set(have)):
            if key not in FLOAT_KEYS:
                if have[key] != want[key]:
                    problems.append(f"step {step}: {key} differs")
            elif len(have[key]) != len(want[key]):
                problems.append(f"step {step}: {key} has {len(have[key])} rows, {len(want[key])} expected")
            else:
                rows = [i for i, (w, h) in enumerate(zip(want[key], have[key])) if not close(w, h)]
                if rows:
                    problems.append(f"step {step}: {key} differs beyond float32 rounding in rows {rows}")
    if len(got["losses"]) != len(expected["losses"]) or not all(map(close, expected["losses"], got["losses"])):
        problems.append(f"losses differ: {got['losses']} against {expected['losses']}")
    if len(got["metrics"]) != len(expected["metrics"]):
        problems.append(f"{len(got['metrics'])} logged steps, {len(expected['metrics'])} expected")
    for step, (want, have) in enumerate(zip(expected["metrics"], got["metrics"])):
        for name in sorted(set(want) | set(have)):
            w, h = want.get(name), have.get(name)
            if (h != w) if name in COUNTS or name not in want or name not in have else not close(w, h):
                problems.append(f"step {step}: metric {name} is {h}, {w} expected")
    return problems


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
def test_two_steps_match_the_golden_record(tmp_path, tiny_model_path, sample_dataset, name):
    got = record(tmp_path, tiny_model_path, sample_dataset, SCENARIOS[name])
    kinds = [row[0] for step in got["steps"] for row in step["new_rows"]]
    assert len(got["steps"]) == 2 and len(got["losses"]) == 2
    assert kinds.count("replay") > 0
    assert kinds.count("pad" if SCENARIOS[name]["replay_shortfall"] == "pad" else "supplementary") > 0
    assert all(math.isfinite(float.fromhex(loss)) for loss in got["losses"])
    if os.environ.get("HIR_RECORD_GOLDEN"):
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        golden[name] = got
        golden["torch"] = RUNNING_TORCH
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), sort_keys=True) + "\n")
        pytest.skip(f"recorded {name} into {GOLDEN}")
    problems = differences(json.loads(GOLDEN.read_text())[name], got)
    if RUNNING_TORCH != RECORDED_TORCH and any(p.endswith(" differs") for p in problems):
        pytest.skip(f"torch {RUNNING_TORCH} samples other completions than torch {RECORDED_TORCH}, which wrote the "
                    f"record: {problems[0]}")
    assert problems == []


def shifted(value: str | None, units: float) -> str | None:
    """``value`` moved by ``units`` of float32 rounding at its scale (2**-23 * max(1, |value|))."""
    if value is None:
        return None
    x = float.fromhex(value)
    return (x + units * EPS32 * max(1.0, abs(x))).hex()


def perturbed(record: dict, units: float, keys=("old_per_token_logps", "ref_per_token_logps")) -> dict:
    """A copy of ``record`` whose losses and per-row log-prob sums moved by ``units`` (alternating in sign)."""
    out = json.loads(json.dumps(record))
    out["losses"] = [shifted(v, units * (-1) ** i) for i, v in enumerate(out["losses"])]
    for step in out["steps"]:
        for key in keys:
            if key in step:
                step[key] = [shifted(v, units * (-1) ** i) for i, v in enumerate(step[key])]
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("units", [0.5, 1, 4, ULPS - 1])
def test_float32_rounding_passes_the_comparison(name, units):
    """What another CPU kernel or thread count does (a few units of float32 rounding) is not a difference."""
    golden = json.loads(GOLDEN.read_text())[name]
    assert differences(golden, perturbed(golden, units)) == []


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("units", [4 * ULPS, 1e4])
def test_a_change_beyond_float32_rounding_fails_the_comparison(name, units):
    golden = json.loads(GOLDEN.read_text())[name]
    problems = differences(golden, perturbed(golden, units))
    assert any(p.startswith("losses differ") for p in problems)
    assert any("old_per_token_logps differs beyond float32 rounding" in p for p in problems)


@pytest.mark.parametrize("change", [
    pytest.param(("advantages", 1), id="advantage"),
    pytest.param(("rewards", 3), id="reward"),
])
def test_one_moved_float_or_discrete_field_is_named(change):
    golden = json.loads(GOLDEN.read_text())["pad-grpo"]
    key, row = change
    moved = json.loads(json.dumps(golden))
    moved["steps"][1][key][row] = shifted(moved["steps"][1][key][row], 4 * ULPS)
    assert differences(golden, moved) == [f"step 1: {key} differs beyond float32 rounding in rows [{row}]"]
    swapped = json.loads(json.dumps(golden))
    swapped["steps"][0]["new_rows"][0][2] += 1  # a replay attributed to another group
    assert differences(golden, swapped) == ["step 0: new_rows differs"]
    counted = json.loads(json.dumps(golden))
    counted["metrics"][0]["hir/replayed_rows"] = shifted(counted["metrics"][0]["hir/replayed_rows"], 1)
    assert differences(golden, counted) == [
        f"step 0: metric hir/replayed_rows is {counted['metrics'][0]['hir/replayed_rows']}, "
        f"{golden['metrics'][0]['hir/replayed_rows']} expected"]


@pytest.mark.parametrize("name, change", [
    ("pad-grpo", dict(scale_rewards="none")),        # another advantage normaliser: no division by the group's std
    ("pad-grpo", dict(scale_rewards="batch")),       # the batch's std instead of the group's
    ("resample-reinforce_pp", dict(kl_in_reward=True)),  # the KL moved into the reward (same draws, other floats)
])
def test_a_real_change_of_the_step_arithmetic_fails(tmp_path, tiny_model_path, sample_dataset, name, change):
    got = record(tmp_path, tiny_model_path, sample_dataset, {**SCENARIOS[name], **change})
    problems = differences(json.loads(GOLDEN.read_text())[name], got)
    if RUNNING_TORCH != RECORDED_TORCH and any(p.endswith(" differs") for p in problems):
        pytest.skip(f"torch {RUNNING_TORCH} samples other completions than torch {RECORDED_TORCH}: {problems[0]}")
    assert any("advantages differs beyond float32 rounding" in p for p in problems), problems


#: The kernel sets torch can be told to use (ATEN_CPU_CAPABILITY); each must reproduce the record.
CAPABILITIES = ["default", "avx2"]
#: The scenarios each kernel set reruns: both shortfall policies, both estimators, the KL term in the reward, and the
#: defaults' replay advantage with ended-only replays and the binary reward (the other scenarios add arithmetic, not
#: kernels, and run under this process's kernels above).
KERNEL_SCENARIOS = ["pad-grpo", "resample-reinforce_pp-kl_in_reward", "pad-grpo-positive-ended-ila"]


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_the_golden_record_holds_under_each_cpu_kernel(capability):
    """`KERNEL_SCENARIOS` of the golden record in a fresh process whose torch uses another SIMD kernel set."""
    if os.environ.get("HIR_GOLDEN_CHILD"):
        pytest.skip("inside the child run")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "HIR_GOLDEN_CHILD": "1"}
    env.pop("HIR_RECORD_GOLDEN", None)
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    used = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    if used.stdout.strip().lower() != capability:
        pytest.skip(f"this CPU cannot run torch's {capability} kernels (torch picked {used.stdout.strip()})")
    tests = [f"{__file__}::test_two_steps_match_the_golden_record[{name}]" for name in KERNEL_SCENARIOS]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *tests],
                         env=env, capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    if RUNNING_TORCH == RECORDED_TORCH:
        assert f"{len(KERNEL_SCENARIOS)} passed" in run.stdout, run.stdout[-3000:]
