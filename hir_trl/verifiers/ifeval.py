"""Placeholder: being written."""
FAMILY = "ifeval"
REGISTRY: dict = {}


def check(instruction_id, kwargs, response, prompt=None):
    raise KeyError(instruction_id)
