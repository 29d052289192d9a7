"""The documentation stays true to the code: the generated configuration reference is current, every paper-labelled
recipe resolves to the paper's settings, README's Python example runs verbatim (Hub push against a local stub), and
README and docs/ link only to files that exist."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from hir_trl.cli import parse_train_args
from hir_trl.configs import PAPER_VALUES

REPO = Path(__file__).resolve().parents[1]
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

    text = runpy.run_path(str(REPO / "scripts" / "config_reference.py"))["render"]()
    for cls in (HiRConfig, HiRScriptArguments):
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
            args.supplementary_provision, args.replay_old_logps) == (8, "group", "resample", "none", "original")


# ----------------------------------------------------------------------------------------- README's example


class _LocalHub:
    """A stand-in for `huggingface_hub.HfApi` that stores each pushed folder under a local directory."""

    def __init__(self, root: Path):
        self.root = root
        self.created: list[tuple[str, bool | None]] = []
        self.uploads: list[dict] = []

    def create_repo(self, repo_id, token=None, private=None, exist_ok=False, **kwargs):
        from types import SimpleNamespace

        self.created.append((repo_id, private))
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, *, repo_id, folder_path, ignore_patterns=None, **kwargs):
        import fnmatch
        import shutil

        target = self.root / repo_id
        for path in Path(folder_path).rglob("*"):
            relative = path.relative_to(folder_path)
            if path.is_file() and not any(fnmatch.fnmatch(part, pattern) for part in relative.parts
                                          for pattern in ignore_patterns or []):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target / relative)
        self.uploads.append({"repo_id": repo_id, **kwargs})
        return f"local://{repo_id}"


def readme_example() -> str:
    """The one Python block of README's "Python" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Python\n(.*?)^## ", text, re.S | re.M).group(1)
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 1
    return blocks[0]


def test_readme_example_runs_verbatim_and_pushes_to_the_hub(tmp_path, monkeypatch):
    """README's example trains 2 HiR steps on the tiny model and pushes the model and its card; the Hub is a local
    stand-in (transformers' `hf_api`), so nothing goes over the network."""
    import transformers.trainer

    hub = _LocalHub(tmp_path / "hub")
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: hub)
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
    assert [repo for repo, _ in hub.created] == ["your-name/tiny-hir"]  # hub_model_id, created once
    pushed = tmp_path / "hub" / "your-name" / "tiny-hir"
    assert (pushed / "model.safetensors").is_file() and (pushed / "tokenizer.json").is_file()
    card = (pushed / "README.md").read_text(encoding="utf-8")
    assert "- hir" in card and "## HiR training" in card and "- Dataset: `notes.jsonl`" in card
    assert "The 7 settings where hir-trl's defaults depart from the paper" in card


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
    # the seven departures, each with the paper's value
    for name, value in PAPER_VALUES.items():  # e.g. | `beta` | `0` (TRL's: no KL term) | `1e-4` (KL in the loss) |
        shown = format(value, ".0e").replace("e-0", "e-") if isinstance(value, float) else str(value).lower()
        assert re.search(rf"^\| `{name}` \| [^|]+ \| `{re.escape(shown)}`", text, re.M), name
    for page in [REPO / "README.md", REPO / "benchmarks" / "README.md", *DOCS.glob("*.md")]:
        assert not re.search(r"session [0-9]|issue [0-9]+", page.read_text(encoding="utf-8"), re.I), page.name
