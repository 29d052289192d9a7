"""The tiny random chat model of tests and CPU recipes; its home is `hir_trl.models.tiny` (this path is kept because
the README imports ``build_tiny_model`` from it)."""

from .models.tiny import build_tiny_model, build_tokenizer, ensure_tiny_model

__all__ = ["build_tiny_model", "build_tokenizer", "ensure_tiny_model"]
