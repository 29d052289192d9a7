"""Placeholder: the IFBench rule family (being written)."""

from . import iftrain
from .base import Checker

FAMILY = "ifbench"
REGISTRY: dict[str, type[Checker]] = {**iftrain.REGISTRY}


def check(instruction_id, kwargs, response, prompt=None):
    raise KeyError(instruction_id)
