"""The ``replay_shortfall`` policies behind one ``fill``: padding rows, or supplementary samples from one more call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hir_trl.step.log import StepTimer
from hir_trl.step.shortfall import PadShortfall, ResampleShortfall, shortfall_policy


def test_the_policy_is_chosen_once_from_the_config():
    assert isinstance(shortfall_policy("pad", 2), PadShortfall)
    assert isinstance(shortfall_policy("resample", 2), ResampleShortfall)
    assert isinstance(shortfall_policy("resample", 0), PadShortfall)  # no group is ever short: no extra call
    with pytest.raises(ValueError, match=r"replay_shortfall must be one of \('pad', 'resample'\), got 'some'"):
        shortfall_policy("some", 2)


def test_pad_fills_the_shortfall_with_padding_rows_and_draws_nothing():
    filled = PadShortfall().fill(None, [{}] * 18, [1, 0, 2], need_old_logps=True)
    assert (filled.supplementary, filled.padding, filled.samples) == ([0, 0, 0], [1, 0, 2], None)


def test_resample_draws_each_groups_shortfall_in_one_timed_call():
    calls = []
    samples = object()

    def supplementary_samples(inputs, fill, need_old_logps):
        calls.append((len(inputs), fill, need_old_logps))
        assert passes.timer._stack, "the call runs inside the 'supplementary' timing"
        return samples

    passes = SimpleNamespace(timer=StepTimer(), supplementary_samples=supplementary_samples)
    filled = ResampleShortfall().fill(passes, [{}] * 18, [1, 0, 2], need_old_logps=False)
    assert calls == [(18, [1, 0, 2], False)]
    assert (filled.supplementary, filled.padding, filled.samples) == ([1, 0, 2], [0, 0, 0], samples)
    assert "supplementary" in passes.timer.seconds
