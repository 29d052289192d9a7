"""The harness tests share the suite's fixtures (the tiny model, the sample data, `shared_file`, `require`)."""

from tests.conftest import SAMPLE_DATA, require, sample_dataset, shared_file, tiny_model_path  # noqa: F401
