"""Reading a ``hir-trl train`` recipe (YAML) strictly: a key given twice in one mapping is refused.

PyYAML's loaders keep the last value of a repeated key without a word, so a recipe that sets ``learning_rate``
twice trains with whichever comes last. `check_recipe` reads the file with a loader that refuses the second
occurrence, naming both lines; `hir_trl.cli.parse_train_args` calls it before TRL's parser reads the recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class DuplicateKeyError(ValueError):
    """A YAML mapping gives one key twice; the message names the file, the key and both lines."""


class _StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key repeated within one mapping (`DuplicateKeyError`)."""

    source = "the recipe"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if first is not None:
                raise DuplicateKeyError(f"{self.source}: key {key!r} is given twice (line {first} and line {line}); "
                                        "keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_recipe(path: str | Path) -> Any:
    """The parsed YAML of ``path``, refusing a key repeated within one mapping (at any depth).

    Raises:
        DuplicateKeyError: (a `ValueError`) a repeated key, naming the file, the key and both lines.
        OSError: the file cannot be read; yaml.YAMLError: it is no YAML.
    """
    text = Path(path).read_text(encoding="utf-8")
    loader = _StrictLoader(text)
    loader.source = str(path)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def check_recipe(argv: list[str]) -> None:
    """Check the recipe named by ``--config PATH`` (or ``--config=PATH``) in ``argv``, when there is one
    (`load_recipe`).

    Raises:
        DuplicateKeyError, OSError, yaml.YAMLError: see `load_recipe`.
    """
    for index, arg in enumerate(argv):
        if arg == "--config" and index + 1 < len(argv):
            load_recipe(argv[index + 1])
        elif arg.startswith("--config="):
            load_recipe(arg.split("=", 1)[1])


__all__ = ["DuplicateKeyError", "check_recipe", "load_recipe"]
