"""Recipes: reading a ``hir-trl train`` recipe (YAML) strictly, and the recipes shipped with the package.

PyYAML's loaders keep the last value of a repeated key without a word, so a recipe that sets ``learning_rate``
twice trains with whichever comes last. `check_recipe` reads the file with a loader that refuses the second
occurrence, naming both lines; `hir_trl.cli.train.parse_train_args` calls it before TRL's parser reads the recipe.

The repository's ``recipes/`` folder (training configs, their data, accelerate and DeepSpeed configs) ships inside
the package as ``hir_trl/recipes_data`` (pyproject.toml maps it there at build time). ``hir-trl recipes`` lists
those files and ``hir-trl recipes copy`` writes them under ``DEST/recipes/``, keeping the layout, so that the
README's commands (``hir-trl train --config recipes/...``) and the ``recipes/...`` paths inside the recipes work
from ``DEST`` without a clone (`main`).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
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


#: The most values a recipe may hold once its YAML aliases (``*name``) are expanded: a recipe holds a few hundred;
#: aliases of aliases grow without bound ("billion laughs") and would exhaust memory in whatever reads them.
MAX_RECIPE_VALUES = 100_000


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values (scalars, lists, mappings) under ``node`` once every alias is expanded; an alias is the very node its
    anchor marks, so each node is counted once (``sizes``) and the count stays linear in the file."""
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a node that reaches itself (a recursive alias) counts once
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else (
            node.value if isinstance(node, yaml.SequenceNode) else [])
        sizes[id(node)] = min(1 + sum(_expanded_size(child, sizes) for child in children), MAX_RECIPE_VALUES + 1)
    return sizes[id(node)]


def load_recipe(path: str | Path) -> Any:
    """The parsed YAML of ``path``, refusing a key repeated within one mapping (at any depth), and a file whose
    aliases expand to more than `MAX_RECIPE_VALUES` values or that nests deeper than Python can read.

    Raises:
        DuplicateKeyError: (a `ValueError`) a repeated key, naming the file, the key and both lines.
        ValueError: aliases that expand without bound, or nesting too deep, naming the file.
        OSError: the file cannot be read; yaml.YAMLError: it is no YAML.
    """
    text = Path(path).read_text(encoding="utf-8")
    loader = _StrictLoader(text)
    loader.source = str(path)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_RECIPE_VALUES:
            raise ValueError(f"{path}: its YAML aliases (*name) expand to more than {MAX_RECIPE_VALUES:,} values; a "
                             "recipe is a flat list of options: write the values out")
        return loader.construct_document(node)
    except RecursionError:
        raise ValueError(f"{path}: nests lists or mappings deeper than can be read; a recipe is a flat list of "
                         "options") from None
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


#: The folder name the recipes have in the repository, in the listing and under a copy's destination.
RECIPES_DIR = "recipes"
#: Files of a recipe whose text is searched for the other recipe files it names (`referenced_files`).
_TEXT_SUFFIXES = (".yaml", ".yml", ".json")
_REFERENCE = re.compile(r"(?<![\w./-])recipes/[\w./-]*[\w-]")


class RecipeError(ValueError):
    """A recipe name that is not shipped, or a copy that would replace a different file (one line for the user)."""


def recipes_root() -> Path:
    """The folder holding the shipped recipes: ``hir_trl/recipes_data`` of an installed wheel, else the
    ``recipes/`` folder of the source checkout this package runs from (an editable install).

    Raises:
        FileNotFoundError: neither exists (a broken installation).
    """
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "recipes_data", package.parent / RECIPES_DIR):
        if folder.is_dir():
            return folder
    raise FileNotFoundError(f"no recipes found beside {package} (looked for {package / 'recipes_data'} and "
                            f"{package.parent / RECIPES_DIR}); reinstall hir-trl")


def list_recipes(root: Path | None = None) -> list[str]:
    """Every shipped recipe file, as its path relative to the recipes folder (``tiny/hir/config_cpu.yaml``), sorted;
    Python caches are left out."""
    root = recipes_root() if root is None else root
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.relative_to(root).parts)


def referenced_files(relative: str, root: Path | None = None) -> list[str]:
    """The other shipped recipe files that ``relative`` names as ``recipes/...`` (its data, the accelerate config of
    the command in its comment, an accelerate config's DeepSpeed file), and those that they name in turn."""
    root = recipes_root() if root is None else root
    shipped = set(list_recipes(root))
    found: list[str] = []
    todo = [relative]
    while todo:
        current = todo.pop()
        if not current.endswith(_TEXT_SUFFIXES):
            continue
        text = (root / current).read_text(encoding="utf-8", errors="replace")
        for match in _REFERENCE.findall(text):
            name = match[len(RECIPES_DIR) + 1:]
            if name in shipped and name != relative and name not in found:
                found.append(name)
                todo.append(name)
    return sorted(found)


def resolve_recipe_names(names: Sequence[str], root: Path | None = None) -> list[str]:
    """The shipped files that ``names`` select: a file or a folder (everything under it), as ``hir-trl recipes``
    lists it, with or without the leading ``recipes/``; a config brings the files it names (`referenced_files`).

    Raises:
        RecipeError: a name that matches no shipped file (the message suggests close ones).
    """
    root = recipes_root() if root is None else root
    shipped = list_recipes(root)
    selected: list[str] = []
    for raw in names:
        if not raw.strip():
            raise RecipeError("an empty recipe name selects nothing: give a file or folder as `hir-trl recipes` lists "
                              "it (e.g. tiny/hir/config_cpu.yaml), or --all for every recipe")
        parts = [part for part in PurePosixPath(raw.replace("\\", "/")).parts if part not in (".", "/")]
        if parts[:1] == [RECIPES_DIR] and not (root / parts[0]).exists():
            parts = parts[1:]
        name = "/".join(parts)  # "" (recipes/ itself): every file
        matches = [f for f in shipped if ".." not in parts and (not name or f == name or f.startswith(name + "/"))]
        if not matches:
            folders = sorted({str(PurePosixPath(f).parent) for f in shipped} - {"."})
            close = difflib.get_close_matches(name, shipped + folders, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close[:-1]) + ' or ' if len(close) > 1 else ''}{close[-1]}?" if close else ""
            raise RecipeError(f"no shipped recipe {raw!r}{hint} (hir-trl recipes lists them)")
        for match in matches:
            for file in (match, *referenced_files(match, root)):
                if file not in selected:
                    selected.append(file)
    return sorted(selected)


def copy_recipes(names: Sequence[str], dest: str | Path, overwrite: bool = False,
                 root: Path | None = None) -> tuple[list[Path], list[Path]]:
    """Copy the shipped files ``names`` (relative to the recipes folder) to ``dest/recipes/``, byte for byte.

    Nothing is written unless every file can be: a file already there with other bytes is refused unless
    ``overwrite``; one with the same bytes is left alone.

    Returns:
        ``(written, unchanged)``: the destination paths.

    Raises:
        RecipeError: ``dest`` is empty or a file, a destination file differs and ``overwrite`` is off, or a
            destination path is a symbolic link or leads outside ``dest`` through one (`hir_trl.errors.write_target_problem`).
        OSError: a file cannot be written.
    """
    from ..errors import write_target_problem

    root = recipes_root() if root is None else root
    if not str(dest).strip():
        raise RecipeError("the destination folder is empty: give a folder (. for the current one)")
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise RecipeError(f"{dest} is a file, not a folder: give the folder to copy the recipes into")
    written, unchanged, plan = [], [], []
    for name in names:
        source, target = root / name, dest / RECIPES_DIR / name
        data = source.read_bytes()
        problem = write_target_problem(target, dest)
        if problem is not None:
            raise RecipeError(problem)
        if target.is_dir():
            raise RecipeError(f"{target} is a folder; remove it or give another destination")
        if target.exists():
            if target.read_bytes() == data:
                unchanged.append(target)
                continue
            if not overwrite:
                raise RecipeError(f"{target} exists and differs from the shipped recipe; remove it, give another "
                                  "destination, or pass --overwrite")
        plan.append((target, data))
    for target, data in plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(target)
    return written, unchanged


USAGE = """usage: hir-trl recipes [list]                        list the shipped recipes
       hir-trl recipes copy NAME [NAME ...] DEST      copy recipes (files or folders) to DEST/recipes/
       hir-trl recipes copy --all DEST                copy every recipe to DEST/recipes/

NAME is a file or folder as `hir-trl recipes` lists it (with or without `recipes/`); a config brings the files it
names (its data, an accelerate config's DeepSpeed file). The layout is kept, so from DEST the README's commands run
as written: cd DEST && hir-trl train --config recipes/tiny/hir/config_cpu.yaml
options of copy: --overwrite  replace files that differ from the shipped ones (default: refuse, write nothing)
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's error(): usage + message + exit 2; here one line
        raise RecipeError(f"{message} (hir-trl recipes --help)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hir-trl recipes``; returns the exit status: 0, or 2 for a user error (an unknown recipe, a
    destination file that differs, a bad option), printed as one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE, end="")
        return 0
    try:
        if not argv or argv == ["list"]:
            root = recipes_root()
            for name in list_recipes(root):
                print(f"{RECIPES_DIR}/{name}")
            print(f"hir-trl recipes: shipped in {root}; copy with: hir-trl recipes copy NAME DEST (or --all DEST)",
                  file=sys.stderr)
            return 0
        if argv[0] != "copy":
            raise RecipeError(f"unknown subcommand {argv[0]!r}: use `hir-trl recipes` (list) or "
                              "`hir-trl recipes copy NAME DEST`")
        parser = _Parser(prog="hir-trl recipes copy", add_help=False, allow_abbrev=False)
        parser.add_argument("paths", nargs="*")
        parser.add_argument("--all", action="store_true")
        parser.add_argument("--overwrite", action="store_true")
        args = parser.parse_args(argv[1:])
        if not args.paths:
            raise RecipeError("give the recipes and the destination folder: hir-trl recipes copy NAME DEST "
                              "(or --all DEST; DEST may be .)")
        if args.all and len(args.paths) > 1:
            raise RecipeError(f"--all takes only the destination folder, not {' '.join(args.paths[:-1])}")
        if not args.all and len(args.paths) == 1:
            raise RecipeError(f"give the destination folder after {args.paths[0]}: hir-trl recipes copy "
                              f"{args.paths[0]} DEST (DEST may be .)")
        *names, dest = args.paths
        root = recipes_root()
        selected = list_recipes(root) if args.all else resolve_recipe_names(names, root)
        written, unchanged = copy_recipes(selected, dest, overwrite=args.overwrite, root=root)
    except (RecipeError, OSError) as exc:
        from ..errors import one_line

        print(f"hir-trl recipes: error: {one_line(exc)}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    kept = f" ({len(unchanged)} already there, unchanged)" if unchanged else ""
    print(f"hir-trl recipes: copied {len(written)} file(s) to {Path(dest) / RECIPES_DIR}{kept}; run the commands "
          f"from {dest}", file=sys.stderr)
    return 0


__all__ = ["RECIPES_DIR", "DuplicateKeyError", "RecipeError", "check_recipe", "copy_recipes", "list_recipes",
           "load_recipe", "main", "recipes_root", "referenced_files", "resolve_recipe_names"]
