"""Install as documented: every ``pip install`` line of README.md and docs/ names what exists (fast), and the lean
core runs without the judge's packages (fast: a subprocess where litellm and tenacity cannot be found); every line
is run against the built wheel in fresh venvs by ``make test-install`` (slow: marker ``install``, skipped unless
``HIR_TRL_TEST_INSTALL=1``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import tomllib

from ..testing_utils import REPO_ROOT, TINY_RECIPE

PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = set(PROJECT["optional-dependencies"])
WHEEL = f"dist/hir_trl-{PROJECT['version']}-py3-none-any.whl"
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def install_lines() -> list[tuple[str, str]]:
    """(page:line, command) of every ``pip install`` command of README.md and docs/*.md: in shell blocks (the
    command before any ``#`` comment) and in inline code."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        in_block = False
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{page.relative_to(REPO_ROOT)}:{number}"
            if line.startswith("```"):
                in_block = not in_block
                continue
            if in_block:
                command = line.split(" #", 1)[0].strip()
                if command.startswith("pip install"):
                    found.append((where, command))
            else:
                found += [(where, code) for code in re.findall(r"`(pip install [^`]+)`", line)]
    return found


def hir_trl_targets(command: str) -> list[tuple[str, set[str]]]:
    """(what, extras) of each hir-trl target of a pip install command: ``.`` (a clone), ``wheel`` (the built
    wheel's path) or ``hir-trl`` (by name); other targets (third-party packages, options) are left out."""
    targets = []
    for word in shlex.split(command)[2:]:
        match = re.fullmatch(r"(\.|dist/hir_trl-[^\[]+\.whl|hir-trl)(?:\[([\w,-]+)\])?", word)
        if match:
            what = {".": "."}.get(match.group(1), "hir-trl" if match.group(1) == "hir-trl" else "wheel")
            targets.append((what, set(filter(None, (match.group(2) or "").split(",")))))
            if what == "wheel":
                assert match.group(1) == WHEEL, (command, WHEEL)
    return targets


def test_every_install_line_names_a_target_and_extras_that_exist():
    lines = install_lines()
    assert len(lines) > 15
    problems = []
    for where, command in lines:
        words = shlex.split(command)
        targets = hir_trl_targets(command)
        for what, extras in targets:
            if extras - EXTRAS:
                problems.append(f"{where}: {command}: no extra {', '.join(sorted(extras - EXTRAS))}")
            if what == "hir-trl" and not extras:  # hir-trl by name alone: nothing on the package index
                problems.append(f"{where}: {command}: hir-trl is not on the package index")
        if "hir-trl" in " ".join(words[2:]) and not targets:
            problems.append(f"{where}: {command}: hir-trl named in a form pip cannot install")
    assert problems == []
    commands = [command for _, command in lines]
    # from a clone, from the built wheel, with the judge extra
    assert "pip install ." in commands and f"pip install {WHEEL}" in commands
    assert any(extras == {"judge"} for command in commands for _, extras in hir_trl_targets(command))


#: ``hir-trl`` with the named packages made absent: neither importable nor found by `importlib.metadata`.
ABSENT_RUNNER = textwrap.dedent('''
    import importlib.metadata as metadata, os, sys
    ABSENT = set(os.environ["HIR_TEST_ABSENT"].split(","))

    for name in ABSENT:  # as absent: import fails, importlib.util.find_spec gives None
        sys.modules[name] = None
    real = metadata.distribution
    metadata.distribution = lambda name: (_ for _ in ()).throw(metadata.PackageNotFoundError(name)) \\
        if name.lower() in ABSENT else real(name)
    from hir_trl.cli import main
    sys.exit(main())
''')


def run_without(tmp_path: Path, absent: str, *argv: str) -> subprocess.CompletedProcess:
    """``hir-trl *argv`` from the repository root (the recipe's relative data path), ``absent`` packages absent."""
    script = tmp_path / "hir-trl"
    script.write_text(ABSENT_RUNNER, encoding="utf-8")
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HIR_TEST_ABSENT": absent}
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, env=environ,
                          timeout=600, cwd=REPO_ROOT)


def test_rule_only_training_evaluation_and_plan_run_without_the_judge_extra(tmp_path):
    absent = "litellm,tenacity,wandb,trackio"
    trained = run_without(tmp_path, absent, "train", "--config", str(TINY_RECIPE), "--output_dir",
                          str(tmp_path / "out"), "--model_name_or_path", str(tmp_path / "model"), "--max_steps", "1",
                          "--save_strategy", "no")
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"] == 1
    planned = run_without(tmp_path, absent, "plan", "--config", str(TINY_RECIPE))
    assert planned.returncode == 0 and "launch: 1 process(es)" in planned.stdout, planned.stderr
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"key": 1, "prompt": "P", "instruction_id_list": ["punctuation:no_comma"],
                                 "kwargs": [{}]}) + "\n")
    (tmp_path / "responses.jsonl").write_text(json.dumps({"prompt": "P", "response": "no comma here"}) + "\n")
    scored = run_without(tmp_path, absent, "eval", "score", "--benchmark", str(bench), "--responses",
                         str(tmp_path / "responses.jsonl"), "--output", str(tmp_path / "score.json"))
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert (tmp_path / "score.json").is_file()


def test_the_judge_without_its_extra_is_one_line_naming_it(tmp_path):
    bench = tmp_path / "bench.jsonl"  # a soft constraint: only the judge can check it
    bench.write_text(json.dumps({"id": 1, "task": "T", "prompt": "P", "constraints": [
        {"text": "The tone should be cheerful.", "kind": "soft"}]}) + "\n")
    (tmp_path / "responses.jsonl").write_text(json.dumps({"prompt": "P", "response": "x"}) + "\n")
    judged = run_without(tmp_path, "litellm", "eval", "score", "--benchmark", str(bench), "--responses",
                         str(tmp_path / "responses.jsonl"), "--judge_model", "openai/gpt-4o-mini",
                         "--judge_api_key_env", "HOME")
    assert judged.returncode == 2 and judged.stderr.count("\n") == 1, judged.stderr
    assert "needs litellm, which is not installed: pip install 'hir-trl[judge]'" in judged.stderr
    assert "or pass --judge_model '' to report it as unjudged" in judged.stderr


# ------------------------------------------------------------------------------ slow: the lines, in fresh venvs

install = pytest.mark.skipif(os.environ.get("HIR_TRL_TEST_INSTALL") != "1",
                             reason="builds the wheel and installs it in fresh venvs (minutes, the package index): "
                                    "make test-install")


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(out),
                          str(REPO_ROOT)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def fresh_venv(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    return folder / "bin"


def as_run(command: str, wheel: Path) -> list[str]:
    """The pip command with its hir-trl targets pointing at the built wheel (a clone's ``.`` too)."""
    words = shlex.split(command)
    out = []
    for word in words:
        match = re.fullmatch(r"(\.|dist/hir_trl-[^\[]+\.whl)(\[[\w,-]+\])?", word)
        out.append(f"{wheel}{match.group(2) or ''}" if match else word)
    return [w for w in out if w != "-e"]  # an editable install of the wheel is its install


def distinct_install_commands() -> dict[str, list[str]]:
    """Each distinct ``pip install`` command of the docs -> the page:line places that show it (one run each)."""
    places: dict[str, list[str]] = {}
    for where, command in install_lines():
        places.setdefault(command, []).append(where)
    return places


@pytest.mark.install
@install
@pytest.mark.parametrize("command", list(distinct_install_commands()),
                         ids=[places[0] for places in distinct_install_commands().values()])
def test_every_install_line_runs_against_the_built_wheel_in_a_fresh_venv(tmp_path, built_wheel, command):
    """One distinct command per test (``pytest --lf`` reruns the failed ones); its venv is removed afterwards, so
    the disk holds one venv at a time (each is gigabytes: torch and the rest)."""
    where = ", ".join(distinct_install_commands()[command])
    venv = tmp_path / "venv"
    try:
        bin_dir = fresh_venv(venv)
        if any(what == "hir-trl" for what, _ in hir_trl_targets(command)):  # by name: hir-trl installed first
            subprocess.run([str(bin_dir / "pip"), "install", "--quiet", str(built_wheel)], check=True, timeout=3600)
        words = as_run(command, built_wheel)
        started = time.monotonic()
        done = subprocess.run([str(bin_dir / "python"), "-m", *words[:2], "--quiet", *words[2:]], capture_output=True,
                              text=True, timeout=3600)
        print(f"\n{where}: {command}: exit {done.returncode} in {time.monotonic() - started:.0f} s, venv "
              f"{venv_size(venv) / 2**30:.2f} GiB")
        assert done.returncode == 0, f"{where}: {command}: {done.stderr[-3000:]}"
        if command in ("pip install .", f"pip install {WHEEL}"):  # the base install: no judge, and it works
            check_base_install(bin_dir, tmp_path / "work")
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def venv_size(folder: Path) -> int:
    """Bytes of the files under ``folder`` (links not followed)."""
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def check_base_install(bin_dir: Path, work: Path) -> None:
    work.mkdir()
    listed = subprocess.run([str(bin_dir / "python"), "-m", "pip", "list", "--format", "json"], capture_output=True,
                            text=True, check=True).stdout
    names = {row["name"].lower() for row in json.loads(listed)}
    print(f"base install: {len(names)} packages")
    assert "hir-trl" in names and not names & {"litellm", "tenacity", "wandb", "trackio"}, sorted(names)
    environ = {**os.environ, "HF_HUB_OFFLINE": "1"}
    environ.pop("PYTHONPATH", None)
    env = subprocess.run([str(bin_dir / "hir-trl"), "env"], capture_output=True, text=True, env=environ, cwd=work)
    assert env.returncode == 0 and "LiteLLM version: not installed" in env.stdout, env.stderr
    for argv in (["recipes", "copy", "tiny/hir/config_cpu.yaml", "."],
                 ["train", "--config", "recipes/tiny/hir/config_cpu.yaml", "--max_steps", "1", "--save_strategy",
                  "no"],
                 ["plan", "--config", "recipes/tiny/hir/config_cpu.yaml"]):
        done = subprocess.run([str(bin_dir / "hir-trl"), *argv], capture_output=True, text=True, env=environ,
                              cwd=work, timeout=1800)
        assert done.returncode == 0, (argv, done.stderr[-3000:])
