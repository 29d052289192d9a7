"""Shared fixtures: the real sample data and a tiny local model (their bodies: tests/testing_utils.py), and the
verifier registry's clean-up."""

from __future__ import annotations

import os

import pytest

from .testing_utils import build_tiny_model, load_sample_dataset, share_cores_among_workers

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    share_cores_among_workers()


@pytest.fixture(scope="session")
def sample_dataset():
    """The real MulDimIF rows shipped with the tiny recipe, normalized."""
    return load_sample_dataset()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory, sample_dataset):
    """A random-init tiny Qwen2 model with a tokenizer trained on the sample data."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), sample_dataset)


@pytest.fixture
def clean_registry():
    """Verifier registrations are process-wide: remove the families (and built-in ids) a test registered, and the
    failing-checker records (`hir_trl.verifiers.registry`)."""
    from hir_trl.verifiers import BUILTIN_FAMILIES, FAMILIES
    from hir_trl.verifiers import registry as verifier_registry

    families = dict(FAMILIES)
    builtin = {name: dict(FAMILIES[name].REGISTRY) for name in BUILTIN_FAMILIES}
    yield
    for name in list(FAMILIES):
        if name not in families:
            del FAMILIES[name]
    for name, registry in builtin.items():
        FAMILIES[name].REGISTRY.clear()
        FAMILIES[name].REGISTRY.update(registry)
    verifier_registry._FAILURES.clear()
