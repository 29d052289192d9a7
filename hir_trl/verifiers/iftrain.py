"""Placeholder: the IF-RLVR training constraints of the IFBench family (being written)."""

from .base import Checker

REGISTRY: dict[str, type[Checker]] = {}
