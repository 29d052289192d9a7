"""The cost benchmark's peak-memory measurement: a transient allocation is charged to the bucket that made it."""

from __future__ import annotations

import mmap
import sys
import time

import pytest

from benchmarks.learning import profiling

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

MB = 2**20


def _spike(megabytes: int, hold: float = 0.0) -> None:
    """Make ``megabytes`` of fresh pages resident for ``hold`` seconds, then unmap them (an anonymous mapping: heap
    memory freed by earlier tests cannot serve it, so the RSS really rises)."""
    buffer = mmap.mmap(-1, megabytes * MB)
    for offset in range(0, megabytes * MB, 4096):  # touch every page
        buffer[offset] = 1
    time.sleep(hold)
    buffer.close()


@pytest.mark.parametrize("exact", [True, False])
def test_a_freed_spike_lands_in_its_bucket(monkeypatch, exact):
    if not exact:
        monkeypatch.setattr(profiling, "_reset_hwm", lambda: False)
    elif not profiling._reset_hwm():
        pytest.skip("/proc/self/clear_refs is not writable here")
    sampler = profiling._RssSampler(interval=0.001)
    sampler.start()
    assert sampler.exact is exact
    base = profiling._rss_bytes()
    sampler.mark("generation")
    _spike(300, hold=0.0 if exact else 0.05)  # a sampling thread needs the memory resident while it looks
    sampler.mark("selection")
    _spike(60)
    peak = sampler.stop()
    assert sampler.peaks["generation"] >= base + 280 * MB
    assert sampler.peaks["selection"] < base + 200 * MB
    assert peak == max(sampler.peaks.values())


def test_the_high_water_mark_catches_a_spike_no_sampler_could():
    if not profiling._reset_hwm():
        pytest.skip("/proc/self/clear_refs is not writable here")
    sampler = profiling._RssSampler(interval=60.0)  # a sampler this slow would see nothing
    sampler.start()
    base = profiling._rss_bytes()
    _spike(250)
    assert sampler.stop() >= base + 230 * MB


def test_the_process_peak_survives_the_resets():
    if not profiling._reset_hwm():
        pytest.skip("/proc/self/clear_refs is not writable here")
    sampler = profiling._RssSampler()
    sampler.start()
    base = profiling._rss_bytes()
    _spike(250)
    sampler.mark("generation")  # resets the kernel's mark: ru_maxrss alone now forgets the spike
    sampler.stop()
    assert sampler.process_peak() >= base + 230 * MB
