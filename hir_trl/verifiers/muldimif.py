"""Placeholder: being written."""
FAMILY = "muldimif"
REGISTRY: dict = {}


def check(instruction_id, kwargs, response, prompt=None):
    raise KeyError(instruction_id)
