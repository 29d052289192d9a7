"""What an upload of ``output_dir`` to the Hub carries of the completion logs.

With ``push_to_hub`` and ``log_completions``, TRL keeps every prompt and completion of training in
``output_dir/completions/`` (`COMPLETIONS_PATTERNS`), which transformers' uploads of ``output_dir`` would carry with
the model. ``push_completions: false`` leaves them out (`hub_upload`, around `transformers.Trainer.push_to_hub` and
`transformers.Trainer._push_from_checkpoint`); a run says which at start, in one line (`warn_hub_upload`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

#: What ``push_completions: false`` leaves out of an upload of ``output_dir``: TRL's completion logs
#: (``completions/completions_<step>.parquet``, written by `trl.GRPOTrainer.log`).
COMPLETIONS_PATTERNS = ("completions/*",)


def hub_upload_note(args: Any) -> str | None:
    """One line when an upload (``push_to_hub``) will carry the completion logs (``log_completions``, kept in
    ``output_dir/completions/``), or leave them out (``push_completions: false``); None without both.

    Args:
        args: the run's `hir_trl.HiRConfig` (``push_to_hub``, ``log_completions``, ``push_completions``,
            ``output_dir``).
    """
    if not (args.push_to_hub and args.log_completions):
        return None
    if getattr(args, "push_completions", True):
        return (f"push_to_hub uploads the completion logs ({args.output_dir}/completions/: every prompt and "
                "completion of training) with the model; pass --push_completions false to leave them out")
    return f"push_to_hub leaves the completion logs ({args.output_dir}/completions/) out of every upload"


def warn_hub_upload(args: Any, main_process: bool) -> str | None:
    """Log `hub_upload_note` as a warning (``hir-trl: <note>``) on the main process. Returns the note, or None."""
    note = hub_upload_note(args)
    if note is not None and main_process:
        logger.warning("hir-trl: %s", note)
    return note


@contextmanager
def hub_upload(args: Any) -> Iterator[None]:
    """Within this context, transformers' uploads of ``output_dir`` (`transformers.Trainer.push_to_hub` and
    `transformers.Trainer._push_from_checkpoint`, which call ``transformers.trainer.hf_api().upload_folder`` with
    ``ignore_patterns=["_*", "checkpoint-*"]``) also leave out `COMPLETIONS_PATTERNS` when ``push_completions`` is
    off (and ``log_completions`` on); otherwise nothing changes. The patterns are bound when ``upload_folder`` is
    called, so an upload that runs on afterwards in the background (``hub_strategy: every_save``) keeps them.

    Args:
        args: the run's `hir_trl.HiRConfig` (``push_completions``, ``log_completions``).
    """
    if getattr(args, "push_completions", True) or not args.log_completions:
        yield
        return
    import transformers.trainer as trainer_module

    original = trainer_module.hf_api

    class LeavingOut:
        def __init__(self, api: Any) -> None:
            self.api = api

        def __getattr__(self, name: str) -> Any:
            return getattr(self.api, name)

        def upload_folder(self, *args: Any, ignore_patterns: Any = None, **kwargs: Any) -> Any:
            patterns = [ignore_patterns] if isinstance(ignore_patterns, str) else list(ignore_patterns or [])
            return self.api.upload_folder(*args, ignore_patterns=[*patterns, *COMPLETIONS_PATTERNS], **kwargs)

    trainer_module.hf_api = lambda *args, **kwargs: LeavingOut(original(*args, **kwargs))
    try:
        yield
    finally:
        trainer_module.hf_api = original


__all__ = ["COMPLETIONS_PATTERNS", "hub_upload", "hub_upload_note", "warn_hub_upload"]
