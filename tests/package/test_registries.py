"""One idiom per extension point: every strategy kind is a registry (choice name -> function or class) in its module,
and `HiRConfig`'s choices for that field are the registry's keys, with one message for an unknown name."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hir_trl import HiRConfig
from hir_trl.rewards import ConstraintReward, VerdictMatrix
from hir_trl.step.advantages import ESTIMATORS, REPLAY_ADVANTAGES, group_advantages, hir_advantages
from hir_trl.step.loss_weighting import LOSS_WEIGHTINGS, prepare_loss_batch
from hir_trl.step.replay import SCOPES, SELECTIONS, select_replays
from hir_trl.step.rewards import REWARD_MODES
from hir_trl.step.shortfall import SHORTFALLS, shortfall_policy

#: The config field each registry serves.
REGISTRIES = {
    "advantage_estimator": ESTIMATORS,
    "replay_advantage": REPLAY_ADVANTAGES,
    "replay_loss_weighting": LOSS_WEIGHTINGS,
    "replay_scope": SCOPES,
    "replay_selection": SELECTIONS,
    "replay_shortfall": SHORTFALLS,
    "reward_mode": REWARD_MODES,
}

#: How the step looks each registry up (the name given, as the config's field would pass it).
LOOKUPS = {
    "advantage_estimator": lambda name: group_advantages(torch.zeros(2), [[0, 1]], torch.ones(2, 1),
                                                         estimator=name),
    "replay_advantage": lambda name: hir_advantages(torch.zeros(2), [], 2, 2, torch.ones(2, 1),
                                                    replay_advantage=name),
    "replay_loss_weighting": lambda name: prepare_loss_batch({"advantages": torch.zeros(2)}, [], 2, 2,
                                                             weighting=name, num_replays=1),
    "replay_scope": lambda name: select_replays([[True, False]] * 2, [0.0, 0.0], 2, 1, 1.0, scope=name),
    "replay_selection": lambda name: select_replays([[True, False]] * 2, [0.0, 0.0], 2, 1, 1.0, selection=name),
    "replay_shortfall": lambda name: shortfall_policy(name, 2),
    "reward_mode": lambda name: VerdictMatrix([]).rewards(name),
}


def _field(name: str) -> dataclasses.Field:
    return {f.name: f for f in dataclasses.fields(HiRConfig)}[name]


@pytest.mark.parametrize("field", sorted(REGISTRIES))
def test_the_config_choices_are_the_registry_keys(field):
    registry = REGISTRIES[field]
    assert _field(field).metadata["choices"] == list(registry)  # the same names, in the same order
    assert _field(field).default in registry
    assert all(callable(strategy) for strategy in registry.values())
    assert _field(field).metadata["help"]


@pytest.mark.parametrize("field", sorted(REGISTRIES))
def test_an_unknown_choice_is_one_line_naming_the_field(tmp_path, field):
    expected = f"{field} must be one of {tuple(REGISTRIES[field])}, got 'no_such'"
    with pytest.raises(ValueError) as config_error:
        HiRConfig(output_dir=str(tmp_path), bf16=False, **{field: "no_such"})
    assert str(config_error.value) == expected
    with pytest.raises(ValueError) as step_error:  # the step's lookup says the same
        LOOKUPS[field]("no_such")
    assert str(step_error.value) == expected


def test_each_registered_strategy_is_accepted_by_its_name(tmp_path):
    # every key of a registry is accepted by the config (the combinations it needs set around it)
    needs = {("replay_loss_weighting", "paper"): {"loss_type": "dapo"},
             ("advantage_estimator", "reinforce_pp"): {}, ("advantage_estimator", "reinforce_pp_baseline"): {}}
    for field, registry in REGISTRIES.items():
        for name in registry:
            config = HiRConfig(output_dir=str(tmp_path), bf16=False, **{field: name}, **needs.get((field, name), {}))
            assert getattr(config, field) == name


def test_the_reward_modes_score_a_row_as_named():
    from hir_trl.verifiers import Verdict

    matrix = VerdictMatrix([[Verdict(True), Verdict(False)], [Verdict(True), Verdict(True)]])
    assert matrix.rewards("ila") == [0.0, 1.0]
    assert matrix.rewards("cla") == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"^reward_mode must be one of \('ila', 'cla'\), got 'xla'$"):
        ConstraintReward(reward_mode="xla")  # the reward function's own check says the same
