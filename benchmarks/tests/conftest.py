"""The harness tests' fixtures: the suite's tiny local model (tests/testing_utils.py builds it, as for tests/)."""

from __future__ import annotations

import os

import pytest

from tests.testing_utils import build_tiny_model, load_sample_dataset, share_cores_among_workers

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    share_cores_among_workers()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A random-init tiny Qwen2 model with a tokenizer trained on the tiny recipe's sample data."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), load_sample_dataset())
