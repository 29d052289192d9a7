"""`HiRConfig`'s checks have one home, `hir_trl.configs.validate`, which `__post_init__` calls: every check that lived
in `__post_init__`, `guards.config_problem`, `compat.REFUSALS`, the judge fields' validation and `field_type_problem`
is reached through it, in its documented order, with its message unchanged."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from hir_trl import HiRConfig, configs
from hir_trl.compat import REFUSALS

SECRET = "hf_" + "a1B2c3D4e5F6g7H8i9J0k"

#: One invalid setting per check, by where the check lived before `validate` (and which check holds it now), with
#: the message's start.
CASES = {
    # HiRConfig.__post_init__ / field_type_problem
    "field type": ({"max_steps": 2.5}, "max_steps must be an integer, got 2.5 (float)"),
    "hub_token": ({"hub_token": "x"}, "hub_token would be saved in clear in training_args.bin"),
    "temperature": ({"temperature": 0.0}, "temperature must be > 0"),
    "max_completion_length": ({"max_completion_length": 0}, "max_completion_length must be >= 1"),
    "max_steps": ({"max_steps": 0}, "max_steps must be >= 1 (or -1"),
    "num_replays": ({"num_replays": -1}, "num_replays must be >= 0, got -1"),
    "lambda_0": ({"lambda_0": -1.0}, "lambda_0 must be a finite number >= 0"),
    "eta": ({"eta": 1.5}, "eta must be between 0 and 1"),
    "k < m": ({"num_replays": 6}, "num_replays (k = 6) must be smaller than num_generations (m = 6)"),
    "max_prompt_length": ({"max_prompt_length": 0}, "max_prompt_length must be >= 1 (or None), got 0"),
    "replay_min_satisfied": ({"replay_min_satisfied": -1}, "replay_min_satisfied must be >= 0, got -1"),
    "replay_weight": ({"replay_weight": -0.5}, "replay_weight must be >= 0, got -0.5"),
    "choices": ({"reward_mode": "xla"}, "reward_mode must be one of ('ila', 'cla'), got 'xla'"),
    "judge_extra_kwargs JSON": ({"judge_extra_kwargs": "{x"}, "judge_extra_kwargs is not valid JSON"),
    "paper weighting": ({"replay_loss_weighting": "paper", "loss_type": "bnpo"},
                        "replay_loss_weighting: paper needs loss_type: dapo and num_replays >= 1"),
    "kl_in_reward": ({"kl_in_reward": True}, "kl_in_reward=True needs beta > 0 (the KL coefficient) and "
                                             "advantage_estimator 'reinforce_pp' or 'reinforce_pp_baseline'"),
    # guards.config_problem
    "finite": ({"learning_rate": math.nan}, "learning_rate must be a finite number, got nan"),
    "reward_weights": ({"reward_weights": [math.inf]}, "reward_weights[0] must be a finite number, got inf"),
    "nothing to train": ({"max_steps": -1, "num_train_epochs": 0}, "max_steps is -1 and num_train_epochs is 0: "
                                                                   "nothing would be trained"),
    "credential in a dict option": ({"model_init_kwargs": {"token": SECRET}},
                                    "model_init_kwargs holds a credential (model_init_kwargs.token)"),
    # guards.config_problem and check_batch_layout: the whole-groups rule, one check now
    "whole groups": ({"per_device_train_batch_size": 4}, "HiRTrainer needs whole groups on every rank: "
                     "per_device_train_batch_size (4) x gradient_accumulation_steps (1) = 4 must be a multiple of "
                     "num_generations (6)"),
    "whole groups, steps_per_generation": ({"per_device_train_batch_size": 3, "steps_per_generation": 1},
                                           "HiRTrainer needs whole groups on every rank: per_device_train_batch_size "
                                           "(3) x steps_per_generation (1) = 3"),
    "split after replay": ({"per_device_train_batch_size": 4, "steps_per_generation": 3},
                           "With num_replays=2, each rank's generation batch grows to 16 rows, which does not split "
                           "into steps_per_generation=3 equal micro-batches"),
    "split, generation_batch_size": ({"per_device_train_batch_size": 4, "generation_batch_size": 12},
                                     "With num_replays=2, each rank's generation batch grows to 16 rows, which does "
                                     "not split into steps_per_generation=3 equal micro-batches"),
    # compat.REFUSALS
    "refusal": ({"remove_unused_columns": True}, "remove_unused_columns: true would drop the dataset's 'constraints' "
                                                 "column"),
    "refusal, combination": ({"loss_type": "grpo"}, "loss_type: grpo divides by the number of rows"),
    # the judge fields (HiRConfig._validate_judge_fields, hir_trl.judge.config)
    "judge setting": ({"judge_timeout": 0.0}, "judge_timeout must be a finite number of seconds > 0, got 0.0"),
    "judge key pasted": ({"judge_api_key_env": SECRET}, "judge_api_key_env must be the NAME of an environment "
                                                        "variable"),
    "judge_max_tokens": ({"judge_max_tokens": 0}, "judge_max_tokens must be an integer >= 1, got 0"),
    "judge_extra_kwargs": ({"judge_extra_kwargs": {"stream": True}}, "judge_extra_kwargs must not set 'stream'"),
    "judge_failure_policy": ({"judge_failure_policy": "retry"}, "judge_failure_policy must be one of ('unsatisfied', "
                                                                "'raise'), got 'retry'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_former_check_is_reached_through_validate_with_its_message(tmp_path, case):
    settings, message = CASES[case]
    with pytest.raises(ValueError) as info:
        HiRConfig(output_dir=str(tmp_path), bf16=False, **settings)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
    assert SECRET not in str(info.value)


def test_post_init_runs_every_check_in_the_documented_order(tmp_path, monkeypatch):
    ran = []

    def recorded(check):
        def run(config):
            ran.append(check.__name__)
            return check(config)
        return run

    before, after = configs.CHECKS_BEFORE_TRL, configs.CHECKS_AFTER_TRL
    monkeypatch.setattr(configs, "CHECKS_BEFORE_TRL", tuple(recorded(c) for c in before))
    monkeypatch.setattr(configs, "CHECKS_AFTER_TRL", tuple(recorded(c) for c in after))
    monkeypatch.setattr(configs.HiRConfig, "_grpo_post_init",
                        lambda self, _run=configs.HiRConfig._grpo_post_init: (ran.append("TRL"), _run(self)))
    HiRConfig(output_dir=str(tmp_path), bf16=False)
    assert ran == [c.__name__ for c in before] + ["TRL"] + [c.__name__ for c in after]
    assert ran == ["field_type_problem", "range_problem", "choice_problem", "training_problem", "batch_layout_problem",
                   "credential_problem", "extra_kwargs_json_problem", "TRL", "refusal_problem", "greedy_problem",
                   "judge_problem",
                   "combination_problem", "batch_layout_problem"]
    doc, at = configs.validate.__doc__, 0
    for name in ran:  # the docstring lists them in the order they run
        at = doc.index("convert()" if name == "TRL" else f"`{name}`", at + 1)


#: A setting in each refused cell of `hir_trl.compat.REFUSALS` (``use_liger_kernel`` depends on the machine's GPU:
#: tests/trainer/test_config_compat.py).
REFUSED = {
    "loss_type": {"loss_type": "nope"},
    "importance_sampling_level": {"importance_sampling_level": "nope"},
    "multi_objective_aggregation": {"multi_objective_aggregation": "nope"},
    "scale_rewards": {"scale_rewards": "nope"},
    "remove_unused_columns": {"remove_unused_columns": True},
    "multi_objective_aggregation + advantage_estimator": {"multi_objective_aggregation": "normalize_then_sum",
                                                          "advantage_estimator": "reinforce_pp"},
    "mask_truncated_completions + replay_truncated_completions": {"mask_truncated_completions": True,
                                                                  "replay_truncated_completions": True},
    "loss_type + replay_shortfall": {"loss_type": "sapo"},
}


def test_every_refusal_of_the_compat_table_is_raised_with_its_message(tmp_path):
    assert set(REFUSED) | {"use_liger_kernel"} == {refusal.option for refusal in REFUSALS}
    default = vars(HiRConfig(output_dir=str(tmp_path), bf16=False))
    for refusal in REFUSALS:
        if refusal.option not in REFUSED:
            continue
        changes = REFUSED[refusal.option]
        with pytest.raises(ValueError) as info:
            HiRConfig(output_dir=str(tmp_path), bf16=False, **changes)
        assert str(info.value) == refusal.message(SimpleNamespace(**{**default, **changes})), refusal.option
