"""No silent no-op: sampling that makes a group's m completions all the same is refused (or warned about where the
run can still learn), whether it is set at the top level or through ``generation_kwargs``; and a run whose every
optimizer step had a gradient of exactly zero says so (a warning through the Python API) and ``hir-trl train`` exits 2,
not 0."""

from __future__ import annotations

import json
import logging
import textwrap

import pytest
import torch

from hir_trl import HiRConfig
from hir_trl.guards import NothingTrainedError, ZeroGradientGuard

from ..testing_utils import assert_nothing_written, assert_one_line_error, train

GREEDY = [
    pytest.param({"generation_kwargs": {"do_sample": False}}, "generation_kwargs.do_sample is False", id="do_sample"),
    pytest.param({"generation_kwargs": {"temperature": 0}}, "generation_kwargs.temperature is 0", id="gk-temperature"),
    pytest.param({"generation_kwargs": {"temperature": 0.0, "top_p": 0.9}}, "generation_kwargs.temperature is 0.0",
                 id="gk-temperature-float"),
    pytest.param({"generation_kwargs": {"top_k": 1}}, "generation_kwargs.top_k is 1", id="gk-top_k"),
    pytest.param({"generation_kwargs": {"min_p": 1.0}}, "generation_kwargs.min_p is 1.0", id="gk-min_p"),
    pytest.param({"generation_kwargs": {"top_p": 0.0}}, "generation_kwargs.top_p is 0.0", id="gk-top_p"),
    pytest.param({"generation_kwargs": {"use_beam_search": True}}, "beam search", id="vllm-beam-search"),
    pytest.param({"generation_kwargs": {"num_beams": 4, "do_sample": False}}, "do_sample is False", id="beams"),
    pytest.param({"generation_kwargs": {"temperature": "hot"}}, "generation_kwargs.temperature must be a finite",
                 id="gk-not-a-number"),
    pytest.param({"temperature": 0.0}, "temperature must be > 0", id="top-level-temperature"),
    pytest.param({"top_k": 1}, "top_k must be >= 2", id="top-level-top_k"),
]


@pytest.mark.parametrize(("values", "fragment"), GREEDY)
def test_greedy_sampling_is_refused_through_the_python_api(tmp_path, values, fragment):
    with pytest.raises(ValueError) as caught:
        HiRConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", **values)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("values", "fragment"), GREEDY[:6])
def test_greedy_sampling_is_refused_through_the_cli_before_anything_is_written(tmp_path, capsys, values, fragment):
    argv = [part for name, value in values.items() for part in (f"--{name}", json.dumps(value))]
    code, out, err = train(tmp_path, capsys, *argv)
    assert_one_line_error(code, out, err, fragment)
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("values", [{"temperature": 0.01}, {"generation_kwargs": {"temperature": 0.05}}])
def test_nearly_greedy_sampling_trains_with_a_warning(tmp_path, caplog, values):
    with caplog.at_level(logging.WARNING, logger="hir_trl.configs"):
        HiRConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", **values)
    assert "is nearly greedy" in caplog.text


def test_sampling_that_differs_is_taken_without_a_word(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hir_trl.configs"):
        config = HiRConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none",
                           generation_kwargs={"top_k": 50, "do_sample": True, "temperature": 0.7, "top_p": 0.95})
    assert config.generation_kwargs["top_k"] == 50 and "greedy" not in caplog.text


# ------------------------------------------------------------------------------------------ zero gradients


class _Args:
    pass


def _step(guard, model, grads):
    for parameter, grad in zip(model.parameters(), grads):
        parameter.grad = grad
    guard.on_pre_optimizer_step(_Args(), None, None, model=model)


def _model():
    return torch.nn.Linear(2, 2)


def test_the_zero_gradient_guard_tells_a_run_that_never_moved(caplog):
    guard, model = ZeroGradientGuard(), _model()
    guard.on_train_begin(_Args(), None, None)
    for _ in range(3):
        _step(guard, model, [torch.zeros(2, 2), torch.zeros(2)])
    with caplog.at_level(logging.WARNING, logger="hir_trl.guards"):
        guard.on_train_end(_Args(), None, None)  # the Python API: told in one warning, read from the guard
    assert "every optimizer step (3) had a gradient of exactly zero" in caplog.text
    with pytest.raises(NothingTrainedError, match=r"every optimizer step \(3\) had a gradient of exactly zero"):
        guard.check()  # what hir-trl train raises before the final save


@pytest.mark.parametrize("moving_step", [0, 2])
def test_one_step_with_a_gradient_is_a_run_that_trained(moving_step):
    guard, model = ZeroGradientGuard(), _model()
    guard.on_train_begin(_Args(), None, None)
    for step in range(3):
        bias = torch.tensor([0.0, 1e-30]) if step == moving_step else torch.zeros(2)
        _step(guard, model, [torch.zeros(2, 2), bias])
    guard.on_train_end(_Args(), None, None)
    assert guard.problem is None
    guard.check()  # no error


def test_gradients_the_model_does_not_hold_are_not_judged():
    guard, model = ZeroGradientGuard(), _model()
    guard.on_train_begin(_Args(), None, None)
    _step(guard, model, [None, None])  # DeepSpeed keeps them in its own buffers
    guard.on_train_end(_Args(), None, None)
    assert guard.problem is None


CONSTANT_REWARD = textwrap.dedent('''
    def constant(completions, **kwargs):
        return [1.0] * len(completions)
''')


@pytest.mark.slow  # one training step end to end, through hir-trl train
def test_a_cli_run_whose_every_gradient_is_zero_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    """The constraint reward weighted 0 and a constant reward function: every advantage is 0 in every group."""
    (tmp_path / "hir_constant_reward.py").write_text(CONSTANT_REWARD, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = train(tmp_path, capsys, "--max_steps", "1", "--num_replays", "0", "--save_strategy", "no",
                           "--reward_funcs", "hir_constant_reward.constant", "--reward_weights", "0", "1")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("hir-trl train: error: stopped at step 1: every optimizer step (1) had a gradient of "
                           "exactly zero"), line
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "model.safetensors").exists()  # nothing that looks like a result
