"""Shared fixtures: the real data beside the project (../shared/data) and a tiny local model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
SAMPLE_DATA = REPO_ROOT / "recipes" / "tiny" / "data" / "muldimif_listing_sample.jsonl"


def shared_file(relative: str) -> Path:
    """Path of a file in ../shared/data, or skip the test when it is absent (a user's copy has none)."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: the real benchmark data lives beside the project only in development/CI")
    return path


@pytest.fixture(scope="session")
def sample_dataset():
    """The real MulDimIF rows shipped with the tiny recipe, normalized."""
    from hir_trl import load_hir_dataset

    return load_hir_dataset(SAMPLE_DATA)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory, sample_dataset):
    """A random-init tiny Qwen2 model with a tokenizer trained on the sample data."""
    from hir_trl.models.tiny import build_tiny_model

    texts = [m["content"] for row in sample_dataset for m in row["prompt"]]
    texts += [c["text"] for row in sample_dataset for c in row["constraints"]]
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), texts, vocab_size=1024)


def require(module: str):
    """Import a test-only oracle or optional dependency (lm-eval, matplotlib, ...).

    Outside CI a missing one skips the test with the reason; under CI (``CI`` set, as `.ci/run` runs) it is an
    error, because the dev extra installs them and a skip would hide a broken install.
    """
    import importlib

    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


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
