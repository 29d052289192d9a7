"""The documentation stays true to the code: the generated configuration reference is current, every paper-labelled
recipe resolves to the paper's settings and every departure from the paper is counted, README's Python example runs
as written and keeps its model, README's lead is short, result figures live in benchmarks/ only, and README and docs/
link only to files that exist."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from hir_trl.cli.main import parse_train_args
from hir_trl.configs import PAPER_VALUES

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


# ----------------------------------------------------------------------------------------- configuration reference


def test_configuration_reference_is_current():
    """docs/configuration.md is exactly what scripts/config_reference.py writes from HiRConfig's field metadata."""
    script = runpy.run_path(str(REPO / "scripts" / "config_reference.py"))
    text = script["render"]()
    assert (DOCS / "configuration.md").read_text(encoding="utf-8") == text, (
        "docs/configuration.md is not current: run python scripts/config_reference.py")
    assert script["main"](["--check"]) == 0


def test_configuration_reference_lists_every_field_with_its_help():
    from trl import GRPOConfig

    from hir_trl.configs import HiRConfig, HiRScriptArguments
    from hir_trl.judge import JudgeArguments

    text = runpy.run_path(str(REPO / "scripts" / "config_reference.py"))["render"]()
    for cls in (HiRConfig, JudgeArguments, HiRScriptArguments):
        for name in cls.__annotations__:
            if not name.startswith("_"):
                assert f"| `{name}` |" in text, name
    # the GRPOConfig fields HiRConfig redeclares are listed with both defaults
    section = text.split("## `GRPOConfig` fields whose default `HiRConfig` changes")[1].split("##")[0]
    assert "| `num_generations` | `8` | `6` |" in section and "| `per_device_train_batch_size` | `8` | `6` |" in section
    assert GRPOConfig.__dataclass_fields__["num_generations"].default == 8
    # a field's help reaches the page, pipes escaped so the table holds
    assert "pi(y\\|q')/pi_old(y\\|q)" in text
    assert all(line.count(" | ") - line.count("\\| ") >= 1 for line in text.splitlines() if line.startswith("| `"))


# ----------------------------------------------------------------------------------------- paper-labelled recipes

#: A comment that labels a whole recipe as the paper's (not one that mentions the paper about one field).
PAPER_LABEL = re.compile(r"#.*\b(paper defaults|paper's settings|paper settings|paper's defaults|paper Table)",
                         re.IGNORECASE)


def paper_recipes() -> list[Path]:
    """Every recipe named config_paper*.yaml, and every other recipe whose comment labels it as the paper's."""
    found = []
    for path in sorted((REPO / "recipes").rglob("*.yaml")):
        if "accelerate_configs" in path.parts:
            continue
        if path.name.startswith("config_paper") or PAPER_LABEL.search(path.read_text(encoding="utf-8")):
            found.append(path)
    return found


def test_paper_recipes_are_found():
    names = {str(p.relative_to(REPO / "recipes")) for p in paper_recipes()}
    assert "Qwen2.5-7B-Instruct/hir/config_lora_24gb.yaml" in names  # labelled "paper defaults", not by its name
    assert len([n for n in names if n.endswith("config_paper.yaml")]) == 12  # 3 models x 4 variants


@pytest.mark.parametrize("recipe", paper_recipes(), ids=lambda p: str(p.relative_to(REPO / "recipes")))
def test_paper_recipe_resolves_to_the_papers_settings(recipe):
    """Loaded through hir-trl train's own parser (bf16 and vLLM off, so it parses on a machine without a GPU), a
    paper-labelled recipe has the paper's value of every setting where HiRConfig's defaults depart from it, each
    written in the recipe (a change of default cannot silently turn it into another method). RL-CR is the paper's
    baseline with the graded reward, so its reward_mode is 'cla'."""
    import yaml

    _, args, _ = parse_train_args(["--config", str(recipe), "--bf16", "false", "--use_vllm", "false"])
    expected = dict(PAPER_VALUES)
    if recipe.parent.name == "rl_cr":
        expected["reward_mode"] = "cla"
    assert {name: getattr(args, name) for name in PAPER_VALUES} == expected
    written = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    assert set(PAPER_VALUES) <= set(written), sorted(set(PAPER_VALUES) - set(written))
    # and the paper's other replay settings (Algorithm 1, §3.2, eq. 7-8)
    assert (args.num_generations + args.num_replays, args.replay_scope, args.replay_shortfall,
            args.replay_old_logps) == (8, "group", "resample", "original")


def _hir_block(recipe: Path) -> dict:
    """The keys of a paper recipe's "# HiR" block (from that comment to the next blank line), parsed."""
    import yaml

    text = recipe.read_text(encoding="utf-8")
    block = re.search(r"^# HiR\n(.*?)(?:\n\s*\n|\Z)", text, re.S | re.M).group(1)
    return yaml.safe_load(block)


def test_every_default_that_departs_from_the_paper_is_counted():
    """Each HiR setting of the paper's HiR recipe whose value differs from `HiRConfig`'s default is in `PAPER_VALUES`
    (so on the model card, README's table and the recipe test), with that value; and PAPER_VALUES holds nothing
    else. A default changed away from the paper without being counted fails here."""
    from hir_trl.configs import HiRConfig

    defaults = HiRConfig.__dataclass_fields__
    block = _hir_block(REPO / "recipes" / "Qwen2.5-7B-Instruct" / "hir" / "config_paper.yaml")
    assert {"num_generations", "num_replays", "diversity_aggregation", "replay_min_satisfied"} <= set(block)
    departs = {name: value for name, value in block.items() if value != defaults[name].default}
    assert departs == PAPER_VALUES
    assert len(PAPER_VALUES) == 9


# ----------------------------------------------------------------------------------------- README's example


def readme_example() -> str:
    """The one Python block of README's "Python" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Python\n(.*?)^## ", text, re.S | re.M).group(1)
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 1
    return blocks[0]


def _no_hub_token(tmp_path, monkeypatch):
    """An environment with no Hub token (none in the environment, no token file), as on a machine never logged in."""
    import huggingface_hub

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert huggingface_hub.get_token() is None


def test_readme_example_runs_as_written_and_saves_a_model_that_loads(tmp_path, monkeypatch):
    """README's example trains 2 HiR steps on the tiny model, offline and with no Hub token, and saves the model, its
    tokenizer and its card in output_dir; the folder loads with transformers. Nothing is replaced: without a token
    the example itself skips the push."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _no_hub_token(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "hir/rows_per_group" in entry]
    # one generation call a step: m = 6 sampled rows per group plus its replays, and padding for the slots no
    # candidate fills (replay_shortfall "pad"), never supplementary samples
    assert logged and all(6 <= entry["hir/rows_per_group"] <= 8 and entry["hir/generate_calls"] == 1
                          and entry["hir/supplementary_samples"] == 0 for entry in logged)
    saved = tmp_path / "tiny-hir"
    model = AutoModelForCausalLM.from_pretrained(saved)
    assert model.num_parameters() == trainer.model.num_parameters()
    assert AutoTokenizer.from_pretrained(saved) is not None
    card = (saved / "README.md").read_text(encoding="utf-8")
    assert "- hir" in card and "## HiR training" in card and "- Dataset: `notes.jsonl`" in card
    assert "The 9 settings where hir-trl's defaults depart from the paper" in card
    # the paper's objective, as README's comment writes it, builds beside the example's own settings
    snippet = re.search(r"# the paper's objective instead: (HiRConfig\(.*\))$", readme_example(), re.M).group(1)
    paper = eval(snippet, namespace)  # noqa: S307 - README's own expression
    assert {name: getattr(paper, name) for name in PAPER_VALUES} == PAPER_VALUES
    assert paper.num_replays == 2 and paper.max_completion_length == 16


# ----------------------------------------------------------------------------------------- links


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {github_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def broken_links() -> list[str]:
    """Every relative link of README.md, docs/*.md and benchmarks/README.md whose file, or heading, does not exist."""
    problems = []
    for page in [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            file_part, _, anchor = target.partition("#")
            path = (page.parent / file_part).resolve() if file_part else page
            if not path.exists():
                problems.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                problems.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    return problems


def test_docs_links_point_at_files_and_headings_that_exist():
    assert broken_links() == []
    assert github_slug("The decisive experiment: does HiR beat RL-CR?") == "the-decisive-experiment-does-hir-beat-rl-cr"


def test_readme_is_the_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    # the test command CI runs (.ci/run runs `make test`), shown as README's test command
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test +# ", text, re.M)
    # every docs page is linked from README
    for page in DOCS.glob("*.md"):
        assert f"(docs/{page.name})" in text, page.name
    # every departure (PAPER_VALUES), each with the paper's value
    for name, value in PAPER_VALUES.items():  # e.g. | `beta` | `0` (TRL's: no KL term) | `1e-4` (KL in the loss) |
        shown = format(value, ".0e").replace("e-0", "e-") if isinstance(value, float) else str(value).lower()
        assert re.search(rf"^\| `{name}` \| [^|]+ \| `{re.escape(shown)}`", text, re.M), name
    for page in [REPO / "README.md", REPO / "benchmarks" / "README.md", *DOCS.glob("*.md")]:
        assert not re.search(r"session [0-9]|issue [0-9]+", page.read_text(encoding="utf-8"), re.I), page.name


# ----------------------------------------------------------------------------------------- README's lead, results


def readme_lead() -> list[str]:
    """The non-blank lines between README's title and its first section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lead = re.search(r"\A# [^\n]+\n(.*?)^## ", text, re.S | re.M).group(1)
    return [line for line in lead.splitlines() if line.strip()]


def test_readme_lead_is_five_lines_that_say_what_hir_is_and_how_it_fared():
    lead = readme_lead()
    assert 1 <= len(lead) <= 5, lead
    text = " ".join(lead)
    assert "`HiRTrainer` is a TRL `GRPOTrainer`" in text and "hindsight instruction" in text
    assert "did not beat the graded reward (RL-CR)" in text and "(benchmarks/README.md)" in text


#: The forms a result figure takes in prose: a signed confidence interval, a named interval, a signed difference in
#: points, a bootstrap, a result over a number of seeds, a measured speed ratio, a count of runs or seeds.
RESULT_PATTERNS = {
    "signed interval": r"\[\s*[-+−]\d+(?:\.\d+)?\s*,\s*[-+−]?\d+(?:\.\d+)?\s*\]|\[\s*[-+−]?\d+\.\d+\s*,\s*[-+]\d+(?:\.\d+)?\s*\]",
    "named interval": r"\b\d{2}\s?% (?:confidence |credible )?interval",
    "signed points": r"[-+−]\d+(?:\.\d+)? (?:percentage )?points\b",
    "bootstrap": r"\bbootstrap",
    "seed count": r"\b\d+ (?:registered |pre-registered )?seeds\b",
    "ratio": r"\b\d+\.\d+x\b",
    "run count": r"\b\d+ of \d+ (?:[\w-]+ )?(?:runs|seeds)\b",
}

#: Where a result figure may appear: the benchmarks' own pages.
RESULT_PAGES = ("benchmarks/", "docs/benchmarks.md")


def files_without_results() -> list[Path]:
    """README, docs/ (but docs/benchmarks.md), the package's code (docstrings and help texts), recipes and
    examples."""
    paths = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((REPO / "hir_trl").rglob("*.py")),
             *sorted((REPO / "examples").rglob("*.py")), *sorted((REPO / "examples").rglob("*.md"))]
    paths += [p for p in sorted((REPO / "recipes").rglob("*")) if p.suffix in (".yaml", ".yml", ".md", ".json")]
    return [p for p in paths if not str(p.relative_to(REPO)).startswith(RESULT_PAGES)]


def result_figures(text: str) -> list[str]:
    """Every match of `RESULT_PATTERNS` in ``text``, outside README's generated results table (between the
    ``<!-- results-table:start -->`` and ``<!-- results-table:end -->`` markers)."""
    text = re.sub(r"<!-- results-table:start -->.*?<!-- results-table:end -->", "", text, flags=re.S)
    return [f"{name}: {m.group(0)!r}" for name, pattern in RESULT_PATTERNS.items()
            for m in re.finditer(pattern, text, re.I)]


def test_result_figures_live_in_benchmarks_only():
    """No confidence interval or result figure outside benchmarks/ and docs/benchmarks.md: they go stale where no
    generator rewrites them. Link to the benchmarks instead."""
    found = [f"{path.relative_to(REPO)}: {figure}" for path in files_without_results()
             for figure in result_figures(path.read_text(encoding="utf-8"))]
    assert found == []
    assert REPO / "README.md" in files_without_results() and REPO / "hir_trl" / "configs.py" in files_without_results()


@pytest.mark.parametrize(("form", "text"), [
    ("signed interval", "HiR minus RL-CR, [-2.3, +1.7]"),
    ("signed interval", "an interval of [+0.2, +2.9] over seeds"),
    ("signed interval", "interval [0.2, +2.9]"),
    ("named interval", "with its 95% interval"),
    ("named interval", "a 90 % confidence interval"),
    ("signed points", "RL-IR by +7.4 points"),
    ("signed points", "-0.3 percentage points of ILA"),
    ("bootstrap", "a bootstrap over prompts"),
    ("seed count", "over 20 seeds"),
    ("seed count", "its 12 registered seeds"),
    ("ratio", "step time 0.97x"),
    ("run count", "10 of 36 runs hung"),
    ("run count", "ahead in 9 of 20 seeds"),
])
def test_each_result_pattern_catches_its_form(form, text):
    assert any(hit.startswith(f"{form}:") for hit in result_figures(f"Some prose: {text}, and more."))


def test_result_patterns_spare_ranges_and_the_results_table():
    assert result_figures("a fraction in [0, 1]; lambda in [0.5, 2.0]; 2 instructions x 6 completions") == []
    table = "<!-- results-table:start -->\n| HiR | 20 | -0.3 | [-2.3, +1.7] |\n<!-- results-table:end -->"
    assert result_figures(table) == [] and result_figures(table.replace("results-table:end", "x"))


# ----------------------------------------------------------------------------------------- docs/data.md


def test_data_page_native_row_loads_pasted_into_a_jsonl_file(tmp_path):
    """The native row of docs/data.md, pasted as it is into a .jsonl file, is one row that loads."""
    from hir_trl import load_hir_dataset

    text = (DOCS / "data.md").read_text(encoding="utf-8")
    section = re.search(r"^## Native rows\n(.*?)^## ", text, re.S | re.M).group(1)
    block = re.search(r"^```json\n(.*?)^```", section, re.S | re.M).group(1)
    (tmp_path / "rows.jsonl").write_text(block, encoding="utf-8")
    rows = load_hir_dataset(str(tmp_path / "rows.jsonl"))
    assert len(rows) == 1 and rows[0]["task"] == "Write a haiku about rain."
    assert [c["kind"] for c in rows[0]["constraints"]] == ["hard", "hard", "soft"]


# ----------------------------------------------------------------------------------------- shell blocks

#: What a shell block may be marked as needing (`<!-- needs: ... -->` on the line before it): a GPU, vLLM, the Hub
#: (models, data sets or benchmark files to download), a served judge, or installing packages.
NEEDS = {"gpu", "vllm", "hub", "judge", "install"}


def shell_blocks() -> list[tuple[str, str, str]]:
    """Every ```bash block of README.md and docs/*.md: (page and line, the line before the fence, the block)."""
    found = []
    for page in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"^```(?:bash|sh|shell|console)\n(.*?)^```", text, re.S | re.M):
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            found.append((f"{page.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}", before, m.group(1)))
    return found


def block_problem(where: str, before: str) -> str | None:
    """None when the block is marked as run by a test that exists, or as needing only known things."""
    run_by = re.fullmatch(r"<!-- run by: (tests/[\w/]+\.py)::(\w+) -->", before)
    if run_by:
        source = (REPO / run_by.group(1)).read_text(encoding="utf-8") if (REPO / run_by.group(1)).is_file() else ""
        return None if re.search(rf"^def {run_by.group(2)}\(", source, re.M) else f"{where}: no test {before}"
    needs = re.fullmatch(r"<!-- needs: ([\w ]+) -->", before)
    if needs and set(needs.group(1).split()) <= NEEDS:
        return None
    return f"{where}: neither run by a test nor marked <!-- needs: {'|'.join(sorted(NEEDS))} -->"


def test_every_shell_block_is_run_by_a_test_or_marked():
    blocks = shell_blocks()
    assert len(blocks) > 15
    assert [p for where, before, _ in blocks if (p := block_problem(where, before))] == []


def test_block_markers_are_checked():
    assert block_problem("x", "") and block_problem("x", "<!-- needs: coffee -->")
    assert block_problem("x", "<!-- run by: tests/package/test_docs.py::test_that_does_not_exist -->")
    assert block_problem("x", "<!-- needs: gpu hub -->") is None
    assert block_problem(
        "x", "<!-- run by: tests/package/test_docs.py::test_data_page_synth_then_train_runs -->") is None


def test_data_page_synth_then_train_runs(tmp_path, monkeypatch, tiny_model_path):
    """docs/data.md's `hir-trl synth` then `hir-trl train` block, as written, on a small prompts file; the training
    command gets the documented flags for one step on the tiny model."""
    import shlex

    from hir_trl.cli.main import main

    block = next(text for where, _, text in shell_blocks() if where.startswith("docs/data.md") and "synth" in text)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts.jsonl").write_text("".join(
        f'{{"prompt": "Write a short note about {topic}."}}\n' for topic in ("rain", "tea", "maps", "trains")))
    small = ["--max_steps", "1", "--output_dir", str(tmp_path / "out"), "--model_name_or_path", str(tiny_model_path),
             "--build_tiny_model", "false", "--save_strategy", "no", "--max_completion_length", "8"]
    commands = [shlex.split(line.split("#")[0]) for line in block.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["hir-trl", "synth"], ["hir-trl", "train"]]
    for argv in commands:
        argv = [str(REPO / a) if a.startswith("recipes/") else a for a in argv[1:]]
        assert main(argv + (small if argv[0] == "train" else [])) == 0, argv
    assert len((tmp_path / "synth.jsonl").read_text().splitlines()) == 4
    assert (tmp_path / "out" / "trainer_state.json").is_file()
