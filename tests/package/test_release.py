"""A release a maintainer can ship, and the commands a bug report and a user without a clone need.

``hir-trl env`` prints every fact a bug report needs; ``hir-trl recipes`` lists exactly the files of the repository's
recipes/ folder and copies them byte for byte under ``DEST/recipes/``; its user errors are one line with exit status
2. The sdist and wheel build offline (``python -m build --no-isolation``, with the venv's setuptools) and pass
``twine check --strict``; the wheel carries the LICENSE, every module of hir_trl and every file of recipes/, and an
installed (unpacked) wheel copies a recipe from its own package data.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from hir_trl.cli import env, recipes
from hir_trl.cli.main import main

from ..testing_utils import REPO_ROOT, require

RECIPES = REPO_ROOT / "recipes"


def repo_recipe_files() -> list[str]:
    """Every file of the repository's recipes/ folder, relative to it (Python caches left out)."""
    return sorted(p.relative_to(RECIPES).as_posix() for p in RECIPES.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


# ------------------------------------------------------------------------------------------------------ hir-trl env


def test_env_prints_every_fact_a_bug_report_needs(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "Copy-paste the following information when reporting an issue:" in out
    lines = dict(line[2:].split(": ", 1) for line in out.splitlines() if line.startswith("- "))
    for label in ("Platform", "Python version", "CPU", "PyTorch version", "PyTorch CUDA version", "CUDA available",
                  "accelerator(s)", "CPU capability (torch)", "hir-trl version", "TRL version", "Transformers version",
                  "Accelerate version", "PEFT version", "Datasets version", "vLLM version", "DeepSpeed version",
                  "LiteLLM version"):
        assert label in lines, f"no {label!r} line in:\n{out}"
    import torch

    assert lines["PyTorch version"] == version("torch")
    assert lines["CUDA available"] == str(torch.cuda.is_available())
    assert lines["CPU capability (torch)"].split()[0] == torch.backends.cpu.get_cpu_capability()
    assert lines["Python version"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert lines["hir-trl version"].startswith(version("hir-trl"))
    for label, names in env.PACKAGES:
        assert lines[f"{label} version"] == env.package_version(*names)
    for label, name in (("TRL", "trl"), ("Transformers", "transformers"), ("Accelerate", "accelerate"),
                        ("PEFT", "peft"), ("Datasets", "datasets"), ("LiteLLM", "litellm")):
        assert lines[f"{label} version"] == version(name)  # installed: the distribution's own version


def test_env_says_not_installed_and_takes_no_arguments(capsys):
    assert env.package_version("no-such-distribution-hir-trl") == "not installed"
    assert env.package_version("no-such-distribution-hir-trl", "trl") == f"{version('trl')} (trl)"
    assert main(["env", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hir-trl env: error:")


# -------------------------------------------------------------------------------------------------- hir-trl recipes


def test_recipes_lists_exactly_the_files_of_the_recipes_folder(capsys):
    assert main(["recipes"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed == [f"recipes/{name}" for name in repo_recipe_files()]
    assert "recipes/tiny/hir/config_cpu.yaml" in listed and "recipes/deepspeed/zero3_cpu.json" in listed
    assert main(["recipes", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == listed


def test_copy_writes_the_same_bytes_keeping_the_layout_with_the_files_a_recipe_names(tmp_path, capsys):
    dest = tmp_path / "work"
    assert main(["recipes", "copy", "recipes/tiny/hir/config_cpu.yaml", str(dest)]) == 0
    copied = sorted(p.relative_to(dest / "recipes").as_posix() for p in dest.rglob("*") if p.is_file())
    # the recipe and the data file it names (dataset_name: recipes/tiny/data/...), nothing else
    assert copied == ["tiny/data/muldimif_listing_sample.jsonl", "tiny/hir/config_cpu.yaml"]
    for name in copied:
        assert (dest / "recipes" / name).read_bytes() == (RECIPES / name).read_bytes()
    assert capsys.readouterr().out.split() == [str(dest / "recipes" / name) for name in copied]  # what it wrote

    # an accelerate config brings the DeepSpeed file it points at
    assert main(["recipes", "copy", "accelerate_configs/zero3_cpu.yaml", str(dest)]) == 0
    assert (dest / "recipes/deepspeed/zero3_cpu.json").read_bytes() == (RECIPES / "deepspeed/zero3_cpu.json").read_bytes()
    assert "already there, unchanged" in capsys.readouterr().err  # the tiny recipe it names was copied before

    # --all: every file; identical files already there are left alone
    assert main(["recipes", "copy", "--all", str(dest)]) == 0
    everything = sorted(p.relative_to(dest / "recipes").as_posix() for p in dest.rglob("*") if p.is_file())
    assert everything == repo_recipe_files()
    for name in everything:
        assert (dest / "recipes" / name).read_bytes() == (RECIPES / name).read_bytes(), name


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")  # TRL 1.16's config
def test_a_copied_recipe_parses_from_its_destination(tmp_path, monkeypatch):
    """The README's command line reads the copy: --config recipes/... and the recipe's dataset path resolve there."""
    from hir_trl.cli.main import parse_train_args

    assert main(["recipes", "copy", "SmolLM2-135M-Instruct/hir/config_cpu.yaml", str(tmp_path)]) == 0
    monkeypatch.chdir(tmp_path)
    script_args, _, _ = parse_train_args(["--config", "recipes/SmolLM2-135M-Instruct/hir/config_cpu.yaml"])
    assert Path(script_args.dataset_name).is_file()


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")  # TRL 1.16's config
def test_installation_page_recipes_block_runs(tmp_path, monkeypatch, capsys, tiny_model_path):
    """docs/installation.md's list / copy / train block, as written, in an empty folder; the training command gets
    flags for one step on the tiny model (its recipe and data are the copies)."""
    import re
    import shlex

    page = (REPO_ROOT / "docs" / "installation.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"^```bash\n(.*?)^```", page, re.S | re.M) if "hir-trl recipes" in b)
    commands = [shlex.split(line.split("#")[0]) for line in block.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["hir-trl", "recipes"], ["hir-trl", "recipes"], ["hir-trl", "train"]]
    monkeypatch.chdir(tmp_path)
    small = ["--max_steps", "1", "--output_dir", str(tmp_path / "out"), "--model_name_or_path", str(tiny_model_path),
             "--build_tiny_model", "false", "--save_strategy", "no", "--max_completion_length", "8"]
    for argv in commands:
        assert main(argv[1:] + (small if argv[1] == "train" else [])) == 0, argv
    capsys.readouterr()
    assert (tmp_path / "recipes/tiny/data/muldimif_listing_sample.jsonl").is_file()
    assert (tmp_path / "out" / "trainer_state.json").is_file()


@pytest.mark.parametrize("argv, message", [
    (["copy", "tiny/hir/config.yaml", "{dest}"], "no shipped recipe 'tiny/hir/config.yaml'; did you mean"),
    (["copy", "../pyproject.toml", "{dest}"], "no shipped recipe '../pyproject.toml'"),
    (["copy", "tiny"], "give the destination folder after tiny"),
    (["copy", "--all"], "give the recipes and the destination folder"),
    (["copy", "--all", "tiny", "{dest}"], "--all takes only the destination folder"),
    (["copy", "--force", "tiny", "{dest}"], "unrecognized arguments: --force"),
    (["frobnicate"], "unknown subcommand 'frobnicate'"),
])
def test_recipe_errors_are_one_line_with_status_2(tmp_path, capsys, argv, message):
    dest = tmp_path / "dest"
    assert main(["recipes", *(a.format(dest=dest) for a in argv)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("hir-trl recipes: error: ") and message in err
    assert not dest.exists()


def test_an_existing_different_destination_is_refused_and_nothing_is_written(tmp_path, capsys):
    mine = tmp_path / "recipes" / "tiny" / "hir" / "config_cpu.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text("my own recipe\n")
    assert main(["recipes", "copy", "tiny", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{mine} exists and differs" in err and "--overwrite" in err
    assert mine.read_text() == "my own recipe\n"
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == [mine]  # all or nothing
    # a file in place of the destination folder
    assert main(["recipes", "copy", "tiny", str(mine)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    # --overwrite replaces it
    assert main(["recipes", "copy", "--overwrite", "tiny", str(tmp_path)]) == 0
    assert mine.read_bytes() == (RECIPES / "tiny/hir/config_cpu.yaml").read_bytes()


def test_recipes_root_prefers_the_packaged_folder(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "hir_trl"
    (package / "recipes_data" / "tiny").mkdir(parents=True)
    (package / "recipes_data" / "tiny" / "a.yaml").write_text("x: 1\n")
    monkeypatch.setattr(recipes, "__file__", str(package / "cli" / "recipes.py"))
    assert recipes.recipes_root() == (package / "recipes_data").resolve()
    assert recipes.list_recipes() == ["tiny/a.yaml"]
    shutil.rmtree(package / "recipes_data")
    with pytest.raises(FileNotFoundError, match="reinstall hir-trl"):
        recipes.recipes_root()
    # from a source checkout (an editable install): the repository's recipes/
    monkeypatch.setattr(recipes, "__file__", str(REPO_ROOT / "hir_trl" / "cli" / "recipes.py"))
    assert recipes.recipes_root() == RECIPES.resolve()


# ---------------------------------------------------------------------------------------------- sdist, wheel, twine

#: What the build reads from the repository (copied, so that the build writes nothing into the checkout).
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "hir_trl", "recipes", "MANIFEST.in", "setup.py",
                "setup.cfg", "tests")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and wheel built offline from a copy of the repository (``python -m build --no-isolation``)."""
    require("build")  # the dev extra's build and twine: a skip with the reason outside CI, an error under CI
    require("twine")
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.is_file():
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Package would be ignored" not in run.stdout + run.stderr  # setuptools' package-data warnings
    return out


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_twine_check_passes(dist):
    files = [str(_one(dist, "*.whl")), str(_one(dist, "*.tar.gz"))]
    run = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("PASSED") == 2, run.stdout


def test_wheel_carries_the_license_every_module_and_every_recipe(dist):
    wheel = _one(dist, "*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
        assert archive.read(f"{info}/licenses/LICENSE") == (REPO_ROOT / "LICENSE").read_bytes()
        packaged = sorted(n.removeprefix("hir_trl/recipes_data/") for n in names
                          if n.startswith("hir_trl/recipes_data/"))
        assert packaged == repo_recipe_files()
        for name in packaged:
            assert archive.read(f"hir_trl/recipes_data/{name}") == (RECIPES / name).read_bytes(), name
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert "Project-URL: Paper, https://arxiv.org/abs/2512.23457" in metadata
    assert "Classifier: Development Status" in metadata
    # the long description: README.md with no relative link (an index page cannot reach the repository's files)
    headers, body = metadata.split("\n\n", 1)
    assert "Description-Content-Type: text/markdown" in headers
    assert body.strip() == SETUP.long_description((REPO_ROOT / "README.md").read_text(encoding="utf-8")).strip()
    assert relative_links(body) == []
    # every module of hir_trl (pyproject lists the packages: a new subpackage must be added there)
    modules = sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "hir_trl").rglob("*.py")
                     if "__pycache__" not in p.parts)
    assert sorted(n for n in names if n.startswith("hir_trl/") and n.endswith(".py")) == modules
    print(f"{wheel.name}: {len(names)} files")


#: setup.py as a module (its ``setup()`` call runs only as ``__main__``, as the build backend runs it).
_spec = importlib.util.spec_from_file_location("hir_trl_setup", REPO_ROOT / "setup.py")
SETUP = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(SETUP)


def relative_links(markdown: str) -> list[str]:
    """The targets of the links and images of ``markdown`` that are not absolute URLs (``scheme:...``)."""
    return [target for target in re.findall(r"\]\(([^()\s]+)\)", markdown)
            if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target)]


def test_long_description_writes_relative_links_as_the_paths_they_name():
    markdown = ("See [the guide](docs/guide.md#setup), [`docs/a.md`](docs/a.md), [TRL](https://github.com/x/trl) "
                "and [below](#usage).\n![A plot](bench/plot.svg)\n```\n[kept](in/a/code/block.md)\n```\n")
    assert SETUP.long_description(markdown) == (
        "See the guide (`docs/guide.md#setup`), `docs/a.md`, [TRL](https://github.com/x/trl) and below.\n"
        "A plot (figure: `bench/plot.svg`)\n```\n[kept](in/a/code/block.md)\n```\n")
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert relative_links(readme)  # the README links the docs, and the long description names them instead
    assert relative_links(SETUP.long_description(readme)) == []


def test_sdist_carries_the_license_and_the_recipes_folder(dist):
    with tarfile.open(_one(dist, "*.tar.gz")) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert "LICENSE" in names
    assert {f"recipes/{name}" for name in repo_recipe_files()} <= names
    # no tests: they need the repository (conftest.py, the test data, docs, benchmarks), which the sdist is not
    assert not [name for name in names if name.startswith("tests/")]


def test_an_installed_wheel_copies_a_recipe_from_its_package_data(dist, tmp_path):
    """Without a clone: the wheel unpacked as pip installs it (purelib), run from elsewhere, copies the tiny recipe
    out of hir_trl/recipes_data."""
    site = tmp_path / "site"
    with zipfile.ZipFile(_one(dist, "*.whl")) as archive:
        archive.extractall(site)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    code = ("import sys, hir_trl.cli.recipes as r; print(r.recipes_root()); "
            "sys.exit(r.main(['copy', 'tiny/hir/config_cpu.yaml', '.']))")
    run = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[0] == str((site / "hir_trl" / "recipes_data").resolve())
    for name in ("tiny/hir/config_cpu.yaml", "tiny/data/muldimif_listing_sample.jsonl"):
        assert (work / "recipes" / name).read_bytes() == (RECIPES / name).read_bytes()
