"""Training data: reading rows (`loading`, `jsonfiles`), instruction templates, chat messages and `hir-trl synth`."""

from .loading import DatasetFormatError, load_hir_dataset, load_rows

__all__ = ["DatasetFormatError", "load_hir_dataset", "load_rows"]
