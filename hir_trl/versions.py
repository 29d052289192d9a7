"""The TRL versions hir-trl supports, checked when ``hir_trl`` is imported.

The trainer overrides TRL private methods (``hir_trl.trl_adapter``), so it works with the TRL minors whose contract
tests pass (``scripts/trl_range.sh``; docs/installation.md lists what was measured on each): today TRL 1.16.
Older TRL is known to break (1.12-1.13: another ``_generate_single_turn`` signature and no
``trl.trainer.utils.is_async_callable``; 1.14: the completion log cannot be written; 1.15: its chunked log-prob
pass fails on CPU), so importing ``hir_trl`` with it raises `UnsupportedTRLError`. A newer TRL is untested: the
import logs one warning line and goes on.

This module imports nothing heavy (no torch, no TRL), so the check runs before anything else of hir-trl loads.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version

#: The TRL range the contract tests pass on (pyproject.toml declares the same).
TRL_MIN, TRL_BELOW = Version("1.16"), Version("1.17")
SUPPORTED_TRL = f">={TRL_MIN},<{TRL_BELOW}"

logger = logging.getLogger("hir_trl")


class UnsupportedTRLError(ImportError):
    """The installed TRL is older than hir-trl supports (its private methods differ)."""


def check_trl(installed: str | None = None) -> str | None:
    """Check the installed TRL (or ``installed``) against `SUPPORTED_TRL`.

    Returns:
        None when it is in range; the warning line (also logged once to the ``hir_trl`` logger) when it is newer.

    Raises:
        UnsupportedTRLError: TRL is older than `TRL_MIN`, or not installed; one line naming the installed and the
            supported versions and the pip command that fixes it.
    """
    if installed is None:
        try:
            installed = version("trl")
        except PackageNotFoundError:
            raise UnsupportedTRLError(f"hir-trl needs TRL {SUPPORTED_TRL}, and TRL is not installed: "
                                      f"pip install 'trl{SUPPORTED_TRL}'") from None
    found = Version(installed)
    if found.release[:2] < TRL_MIN.release[:2]:
        raise UnsupportedTRLError(f"hir-trl supports TRL {SUPPORTED_TRL}; TRL {installed} is installed, and its "
                                  f"private trainer methods differ: pip install 'trl{SUPPORTED_TRL}'")
    if found.release[:2] >= TRL_BELOW.release[:2]:
        message = (f"hir-trl is tested with TRL {SUPPORTED_TRL}; TRL {installed} is installed and untested "
                   f"(if training fails, pip install 'trl{SUPPORTED_TRL}' and report it with `hir-trl env`)")
        logger.warning(message)
        return message
    return None


__all__ = ["SUPPORTED_TRL", "TRL_BELOW", "TRL_MIN", "UnsupportedTRLError", "check_trl"]
