"""A TRL user's `GRPOConfig` options with replays in the batch: each supported cell keeps TRL's meaning (checked as
a property on one step of the tiny model), each refused one fails when `HiRConfig` is built with one line naming the
option, and every field of the installed `GRPOConfig` is classified in `hir_trl.compat`.

Properties checked per cell (`Run`):
- a padding row changes no other row's loss (the loss of the batch with its pads equals that without them);
- every replay carries loss tokens;
- the sampled rows' advantages equal those TRL's `GRPOTrainer` computed on the same rows, when HiR adds no row to
  the estimate (``replay_advantage="positive"``, no supplementary sample);
- every row of the generation batch, replays and pads included, is used once per iteration.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from hir_trl import ConstraintReward, HiRConfig, HiRTrainer, compat
from hir_trl.cli.main import main
from hir_trl.step.batch import loss_mask

from ..testing_utils import REPO_ROOT

TINY_RECIPE = REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu.yaml"
#: No failed completion meets 100 constraints: every new row is a pad (k per group), HiR adds nothing to the estimate.
ALL_PADS = dict(replay_min_satisfied=100)
#: Every failed completion is a candidate: a random model fails every row, so no group falls short (no pad, no
#: supplementary sample) and every group gets k replays.
NO_SHORTFALL = dict(replay_min_satisfied=0)


@pytest.fixture(scope="module")
def rows(sample_dataset):
    """The first four rows of the real sample (two generation batches of two groups)."""
    return sample_dataset.select(range(4))


def make_args(tmp_path, **overrides) -> HiRConfig:
    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=12, max_steps=1,
                  max_completion_length=8, bf16=False, use_cpu=True, report_to="none", logging_steps=1,
                  save_strategy="no", seed=0, learning_rate=1e-3, replay_truncated_completions=True,
                  num_replays=2)
    values.update(overrides)
    return HiRConfig(**values)


def fingerprint(batch, i):
    """Row i of a batch: its prompt and loss tokens and its advantage (rounded)."""
    advantage = batch["advantages"][i]
    return (tuple(batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()),
            tuple(batch["completion_ids"][i][loss_mask(batch)[i].bool()].tolist()),
            round(float(advantage), 5) if advantage.dim() == 0 else round(float(advantage.sum()), 4))


@dataclasses.dataclass
class Run:
    trainer: HiRTrainer
    batches: list  # (extended output, last_replay, TRL's own output of the sampled rows) per generation batch
    micro: list  # every micro-batch `_compute_loss` saw

    @property
    def out(self):
        return self.batches[0][0]

    @property
    def new_rows(self):
        return self.batches[0][1].new_rows

    @property
    def B(self):
        return len(self.out["completion_ids"]) - len(self.new_rows)

    def kinds(self):
        return Counter(row.kind for row in self.new_rows)

    def loss(self, batch):
        with torch.no_grad():
            return self.trainer._compute_loss(self.trainer.model, batch).item()

    # ------------------------------------------------------------------------------------------ properties

    def assert_pads_change_no_loss(self):
        """The loss of the batch with its pads equals the loss of the same batch without them."""
        out, B = self.out, self.B
        pads = [B + i for i, row in enumerate(self.new_rows) if row.kind == "pad"]
        assert pads, "the cell must hold padding rows"
        keep = torch.tensor([i for i in range(len(out["completion_ids"])) if i not in pads])
        without = {key: (value[keep] if isinstance(value, torch.Tensor) and value.dim() > 0
                         and value.size(0) == len(out["completion_ids"]) else value) for key, value in out.items()}
        assert without["num_items_in_batch"] == out["num_items_in_batch"]  # a pad has no loss token
        with_pads, no_pads = self.loss(out), self.loss(without)
        assert with_pads == pytest.approx(no_pads, rel=1e-5, abs=1e-7), (with_pads, no_pads)
        assert no_pads != 0.0

    def assert_a_pad_scales_row_normalized_losses(self):
        """An empty row appended to the batch scales the loss by N / (N + 1) under every row-normalized loss."""
        out = self.out
        n = len(out["completion_ids"])
        padded = {key: (torch.cat([value, value[:1]]) if isinstance(value, torch.Tensor) and value.dim() > 0
                        and value.size(0) == n else value) for key, value in out.items()}
        padded["completion_mask"][-1] = 0
        for loss_type in compat.ROW_NORMALIZED_LOSSES:
            self.trainer.loss_type = loss_type
            assert self.loss(padded) == pytest.approx(self.loss(out) * n / (n + 1), rel=1e-5), loss_type

    def assert_replays_carry_loss_tokens(self):
        replays = [self.B + i for i, row in enumerate(self.new_rows) if row.kind == "replay"]
        assert replays, "the cell must hold replays"
        tokens = loss_mask(self.out)[replays].sum(1)
        assert (tokens > 0).all(), tokens.tolist()

    def assert_sampled_advantages_are_trls(self):
        """HiR added no row to the estimate: its sampled rows' advantages are those TRL computed on them."""
        assert self.kinds()["supplementary"] == 0
        for out, _, trl in self.batches:
            hir = out["advantages"][:len(trl["advantages"])]
            assert hir.dim() == 1
            assert torch.allclose(hir, trl["advantages"], atol=2e-5), (hir, trl["advantages"])
            assert trl["advantages"].abs().sum() > 0  # not a batch where every advantage is 0

    def assert_rows_used_once_per_iteration(self, iterations=1):
        expected = Counter()
        for out, _, _ in self.batches:
            expected.update(fingerprint(out, i) for i in range(len(out["completion_ids"])))
        seen = Counter(fingerprint(batch, i) for batch in self.micro for i in range(len(batch["completion_ids"])))
        assert seen == Counter({row: n * iterations for row, n in expected.items()})


def run(tmp_path, model_path, dataset, monkeypatch, *, reward_funcs=None, peft_config=None, **overrides) -> Run:
    """Train a HiRTrainer for ``max_steps`` on ``dataset``, recording every generation batch and micro-batch."""
    trl_outputs = []
    original_trl = GRPOTrainer._generate_and_score_completions

    def trl_call(self, inputs):
        out = original_trl(self, inputs)
        trl_outputs.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in out.items()})
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", trl_call)
    trainer = HiRTrainer(model=str(model_path), args=make_args(tmp_path, **overrides), train_dataset=dataset,
                         reward_funcs=reward_funcs, peft_config=peft_config)
    batches, micro = [], []
    generate, compute_loss = trainer._generate_and_score_completions, trainer._compute_loss

    def spy_generate(inputs):
        first = len(trl_outputs)
        out = generate(inputs)
        batches.append(({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in out.items()},
                        trainer.last_replay, trl_outputs[first]))
        return out

    def spy_loss(model, inputs):
        micro.append({k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
        return compute_loss(model, inputs)

    trainer._generate_and_score_completions, trainer._compute_loss = spy_generate, spy_loss
    trainer.train()
    trainer._compute_loss = compute_loss
    return Run(trainer, batches, micro)


# ------------------------------------------------------------------------------------------- the matrix

#: Losses that count tokens: padding rows are allowed, and change nothing.
TOKEN_LOSSES = [name for name in compat.LOSS_TYPES if name not in compat.ROW_NORMALIZED_LOSSES]


def test_token_normalized_losses_with_pads(tmp_path, tiny_model_path, rows, monkeypatch):
    """``dapo`` (the default) trains with padding rows; on its batch, every loss that counts tokens (``dapo``,
    ``bnpo``, ``cispo``, ``vespo``) gives the same loss with the pads as without them."""
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, **ALL_PADS)
    assert r.kinds() == {"pad": 4}
    r.assert_sampled_advantages_are_trls()
    r.assert_rows_used_once_per_iteration()
    for loss_type in TOKEN_LOSSES:
        r.trainer.loss_type = loss_type
        r.assert_pads_change_no_loss()


@pytest.mark.parametrize("loss_type, level", [("grpo", "token"), ("grpo", "sequence"), ("sapo", "token"),
                                              ("luspo", "sequence"), ("dr_grpo", "token")])
def test_row_normalized_losses_with_resample(tmp_path, tiny_model_path, rows, monkeypatch, loss_type, level):
    """The losses that divide by the row count run with supplementary samples, never pads; the replays keep their
    tokens and the sampled rows TRL's advantages (GSPO: ``importance_sampling_level="sequence"``)."""
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, loss_type=loss_type, importance_sampling_level=level,
            replay_shortfall="resample", **NO_SHORTFALL)
    assert r.kinds() == {"replay": 4}
    r.assert_replays_carry_loss_tokens()
    r.assert_sampled_advantages_are_trls()
    r.assert_rows_used_once_per_iteration()
    if (loss_type, level) == ("grpo", "token"):  # why `HiRConfig` refuses them with pads
        r.assert_a_pad_scales_row_normalized_losses()


@pytest.mark.parametrize("scale_rewards", ["batch", "none"])  # "group" (the default): every other cell
def test_scale_rewards(tmp_path, tiny_model_path, rows, monkeypatch, scale_rewards):
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, scale_rewards=scale_rewards, **NO_SHORTFALL)
    r.assert_sampled_advantages_are_trls()
    r.assert_replays_carry_loss_tokens()


def test_normalize_then_sum_is_trls(tmp_path, tiny_model_path, rows, monkeypatch):
    """TRL's normalize_then_sum (per-group, weighted, then over the batch), with replays in the batch."""
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, multi_objective_aggregation="normalize_then_sum",
            reward_weights=[0.5], **NO_SHORTFALL)
    r.assert_sampled_advantages_are_trls()
    r.assert_replays_carry_loss_tokens()


def test_several_reward_functions_with_weights(tmp_path, tiny_model_path, rows, monkeypatch):
    def length(prompts, completions, **kwargs):
        return [len(str(c)) / 100 for c in completions]

    def vowels(prompts, completions, **kwargs):
        return [sum(ch in "aeiou" for ch in str(c)) / 10 for c in completions]

    r = run(tmp_path, tiny_model_path, rows, monkeypatch, reward_funcs=[ConstraintReward(), length, vowels],
            reward_weights=[1.0, 0.5, 2.0], **NO_SHORTFALL)
    r.assert_sampled_advantages_are_trls()
    r.assert_replays_carry_loss_tokens()


def test_mask_truncated_completions_replays_carry_tokens(tmp_path, tiny_model_path, rows, monkeypatch):
    """With ``mask_truncated_completions`` only completions that ended are replayed, each with its loss tokens.
    (The random model rarely stops: a length penalty on EOS makes about half the completions end.)"""
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, mask_truncated_completions=True,
            replay_truncated_completions=False, max_completion_length=12,
            generation_kwargs={"exponential_decay_length_penalty": (5, 1.8)}, **NO_SHORTFALL)
    masked = int((r.out["completion_mask"][:r.B].sum(1) == 0).sum())
    assert 0 < masked < r.B  # some sampled completions were truncated (and masked), some ended
    r.assert_replays_carry_loss_tokens()
    r.assert_rows_used_once_per_iteration()


@pytest.mark.parametrize("layout, iterations", [
    (dict(num_iterations=2, max_steps=2), 2),
    (dict(steps_per_generation=2, per_device_train_batch_size=6, max_steps=2), 1),
    (dict(gradient_accumulation_steps=2, per_device_train_batch_size=6), 1),
], ids=["num_iterations", "steps_per_generation", "gradient_accumulation"])
def test_every_row_used_once_per_iteration(tmp_path, tiny_model_path, rows, monkeypatch, layout, iterations):
    overrides = dict(replay_min_satisfied=1)
    overrides.update(layout)
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, **overrides)
    assert len(r.batches) == 1 and len(r.micro) == 2
    r.assert_rows_used_once_per_iteration(iterations)
    r.assert_sampled_advantages_are_trls()


def test_pads_change_no_loss_with_entropy_mask_and_kl(tmp_path, tiny_model_path, rows, monkeypatch):
    """``top_entropy_quantile`` < 1 (its quantile over loss tokens) and ``beta`` > 0 (the KL term per token)."""
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, top_entropy_quantile=0.5, beta=0.04, **ALL_PADS)
    assert "ref_per_token_logps" in r.out
    r.assert_pads_change_no_loss()
    r.assert_rows_used_once_per_iteration()


def test_lora_changes_only_adapter_weights(tmp_path, tiny_model_path, rows, monkeypatch):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    base = {name: p.clone() for name, p in AutoModelForCausalLM.from_pretrained(str(tiny_model_path)).named_parameters()}
    r = run(tmp_path, tiny_model_path, rows, monkeypatch, peft_config=LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0), **NO_SHORTFALL)
    r.assert_replays_carry_loss_tokens()
    changed_adapter, checked = 0, 0
    for name, p in r.trainer.model.named_parameters():
        if "lora_" in name:
            changed_adapter += "lora_B" in name and bool(p.detach().abs().sum() > 0)  # B starts at 0
            continue
        key = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(p.detach(), base[key]), name
        checked += 1
    assert changed_adapter > 0 and checked == len(base)


# ------------------------------------------------------------------------------------------- refusals

REFUSED = {
    "loss_type_unknown": (dict(loss_type="ppo"), "loss_type must be one of grpo, bnpo"),
    "importance_sampling_level_unknown": (dict(importance_sampling_level="group"), "importance_sampling_level"),
    "aggregation_unknown": (dict(multi_objective_aggregation="sum"), "multi_objective_aggregation must be one of"),
    "scale_rewards_unknown": (dict(scale_rewards="std"), "scale_rewards must be one of group, batch, none"),
    "remove_unused_columns": (dict(remove_unused_columns=True), "remove_unused_columns: true"),
    "liger_without_gpu": (dict(use_liger_kernel=True), "use_liger_kernel: true needs a CUDA GPU"),
    "normalize_then_sum_reinforce_pp": (dict(multi_objective_aggregation="normalize_then_sum",
                                             advantage_estimator="reinforce_pp"),
                                        "multi_objective_aggregation: normalize_then_sum"),
    "normalize_then_sum_reinforce_pp_baseline": (dict(multi_objective_aggregation="normalize_then_sum",
                                                      advantage_estimator="reinforce_pp_baseline"),
                                                 "advantage_estimator: reinforce_pp_baseline"),
    "mask_truncated_and_replay_truncated": (dict(mask_truncated_completions=True, replay_truncated_completions=True),
                                            "replay_truncated_completions: false"),
    **{f"{loss}_with_pad": (dict(loss_type=loss, replay_shortfall="pad"),
                            f"loss_type: {loss} divides by the number of rows")
       for loss in compat.ROW_NORMALIZED_LOSSES},
}


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(compat, "_cuda_available", lambda: False)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_at_config_with_one_line(tmp_path, no_gpu, case):
    overrides, fragment = REFUSED[case]
    with pytest.raises(ValueError) as caught:
        make_args(tmp_path, **overrides)
    message = str(caught.value)
    assert fragment in message and "\n" not in message, message
    assert any(option in message for option in overrides), message  # names the option


@pytest.mark.parametrize("allowed", [
    dict(loss_type="grpo", replay_shortfall="resample"), dict(loss_type="grpo", num_replays=0),
    dict(loss_type="bnpo"),
    dict(mask_truncated_completions=True, replay_truncated_completions=False),
    dict(mask_truncated_completions=True, num_replays=0), dict(scale_rewards=False),
    dict(multi_objective_aggregation="normalize_then_sum"),
], ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_the_neighbouring_cells_are_accepted(tmp_path, allowed):
    assert make_args(tmp_path, **allowed).loss_type in compat.LOSS_TYPES


@pytest.mark.parametrize("flags, fragment", [
    (["--loss_type", "grpo"], "loss_type: grpo divides by the number of rows"),
    (["--remove_unused_columns", "true"], "remove_unused_columns: true"),
    (["--use_liger_kernel", "true"], "use_liger_kernel: true needs a CUDA GPU"),
    (["--mask_truncated_completions", "true"], "mask_truncated_completions: true"),  # the recipe replays truncated
    (["--scale_rewards", "std"], "scale_rewards must be one of"),
])
def test_cli_prints_a_refusal_as_one_line(tmp_path, capsys, no_gpu, flags, fragment):
    code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / "out"),
                 "--model_name_or_path", str(tmp_path / "model"), *flags])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.startswith("hir-trl train: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert fragment in err and not out
    assert not (tmp_path / "out").exists() and not (tmp_path / "model").exists()


def test_environment_factory_is_refused_before_trl_starts(tmp_path, tiny_model_path, rows, monkeypatch):
    started = []
    monkeypatch.setattr(GRPOTrainer, "__init__", lambda self, *a, **k: started.append(True))
    with pytest.raises(ValueError) as caught:
        HiRTrainer(model=str(tiny_model_path), args=make_args(tmp_path), train_dataset=rows,
                   environment_factory=lambda: SimpleNamespace(reset=lambda **kwargs: None))
    assert "environment_factory" in str(caught.value) and "\n" not in str(caught.value)
    assert not started


# ------------------------------------------------------------------------------------------- the contract


def test_every_grpo_config_field_is_classified():
    """Fails when the installed TRL's `GRPOConfig` has a field `hir_trl.compat` does not classify, or when it
    classifies one that no longer exists: a new TRL release cannot slip a field past the table."""
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert sorted(fields - set(compat.FIELD_CLASSES)) == [], "classify these GRPOConfig fields in hir_trl/compat.py"
    assert sorted(set(compat.FIELD_CLASSES) - fields) == [], "these classified fields left GRPOConfig"
    assert set(compat.FIELD_CLASSES.values()) <= set(compat.CLASSES)
    known = fields | {f.name for f in dataclasses.fields(HiRConfig)} | {"peft_config", "use_peft"}
    options = [row[0] for row in compat.compatibility_rows()]
    named = {name for option in options for name in re.findall(r"[a-z]+(?:_[a-z0-9]+)+", option)}
    assert named - known == set(compat.REFUSED_TRAINER_ARGUMENTS), named - known  # the table names real options
    assert set(compat.REFUSED_TRAINER_ARGUMENTS) <= set(inspect.signature(GRPOTrainer.__init__).parameters)


def test_the_accepted_values_are_trls():
    """`compat`'s value lists are those TRL 1.16's loss and advantage code branch on."""
    loss = inspect.getsource(GRPOTrainer._compute_loss)
    assert set(re.findall(r'loss_type == "(\w+)"', loss)) | {
        name for group in re.findall(r"loss_type in \[([^\]]+)\]", loss) for name in re.findall(r'"(\w+)"', group)
    } == set(compat.LOSS_TYPES)
    assert set(re.findall(r'importance_sampling_level == "(\w+)"', loss)) == set(compat.IMPORTANCE_SAMPLING_LEVELS)
    scoring = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert set(re.findall(r'multi_objective_aggregation == "(\w+)"', scoring)) == set(
        compat.MULTI_OBJECTIVE_AGGREGATIONS)
    assert "'batch', 'group', or 'none'" in scoring and set(compat.SCALE_REWARDS) == {"batch", "group", "none"}
