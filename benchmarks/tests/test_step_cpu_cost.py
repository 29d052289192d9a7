"""The step-cost benchmark's own parts (benchmarks/step_cpu_cost.py): the GPU model by hand, the prose, the rows."""

from __future__ import annotations

import random

import pytest

from benchmarks import step_cpu_cost as bench


def test_gpu_model_by_hand():
    model = bench.gpu_step_seconds(4096)
    length = 256 + 4096
    row = 2 * 7.62e9 * length + 2 * 28 * 3584 * length ** 2
    assert model["training_s"] == pytest.approx(6 * 64 * row / (312e12 * 0.4), abs=0.05)
    assert model["old_ref_passes_s"] == pytest.approx(2 * 48 * row / (312e12 * 0.4), abs=0.05)
    decode = (2 * 7.62e9 + 48 * (256 + 2048) * 57_344) / (2.0e12 * 0.6)
    assert model["generation_s"] == pytest.approx(4096 * decode, abs=0.05)
    assert bench.gpu_step_seconds(512)["step_s"] < model["step_s"] / 5  # attention grows faster than the length


def test_completions_are_prose_of_the_asked_length():
    pool = ["The quick brown fox jumps over the lazy dog near the river bank.",
            "Hindsight replay rewrites the instruction to keep the constraints the response met.",
            "Each completion is verified once, and its verdicts are reused by the selection."]
    rng = random.Random(0)
    texts = [bench.completion(pool, 2048, rng) for _ in range(3)]
    for text in texts:
        words = len(text.split())
        assert 0.9 * 2048 * bench.WORDS_PER_TOKEN <= words <= 1.15 * 2048 * bench.WORDS_PER_TOKEN
        assert text.startswith("<<") and "\n\n" in text
    assert len(set(texts)) == 3  # every row's text differs


@pytest.mark.skipif(not (bench.DATA / bench.MIXES["ifeval"]).exists(), reason="../shared/data is absent")
def test_rows_get_hir16k_soft_share():
    rows, texts = bench.mix_rows(bench.DATA / bench.MIXES["ifeval"], "ifeval", 8, random.Random(0))
    hard = sum(c["kind"] == "hard" for r in rows for c in r["constraints"])
    soft = sum(c["kind"] == "soft" for r in rows for c in r["constraints"])
    assert len(rows) == 8 and hard > 0 and texts
    assert soft == sum(round(sum(c["kind"] == "hard" for c in r["constraints"]) * bench.SOFT_PER_HARD) for r in rows)
