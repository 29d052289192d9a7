"""Every bad input is one line naming it, with no traceback and nothing written, through the CLI and the Python API:
a chat template that does not parse, a judge key with blanks around it, a dataset mixture of files of different
formats or with a truncated line, ``hir-trl plan`` numbers out of range, data nested thousands of levels deep, YAML
aliases that expand without bound, a learning rate of 1e10, an empty ``--output_dir``, ``eval compare`` of a
responses file, a ``--benchmark`` of ``NAME=`` with an empty side, a judge that answers garbage and a model folder
that is not there; and a reward function's booleans, which TRL reads as 1.0/0.0, are taken as such."""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace

import pytest

from hir_trl.cli import eval as eval_cli
from hir_trl.cli.plan import PlanArguments, make_plan, plan_args_problem
from hir_trl.cli.recipes import MAX_RECIPE_VALUES, load_recipe
from hir_trl.configs import HiRConfig, HiRScriptArguments
from hir_trl.data.chat import chat_template_text, template_problem
from hir_trl.data.jsonfiles import MAX_NESTING, JSONFileError, nesting_depth, read_jsonl
from hir_trl.data.loading import DatasetFormatError, load_hir_dataset, load_script_datasets
from hir_trl.guards import check_rewards

from ..testing_utils import SAMPLE_DATA, TINY_RECIPE, assert_nothing_written, assert_one_line_error, train, write_rows
from .utils import NATIVE, native


def _plan(capsys, *argv):
    from hir_trl.cli.main import main

    code = main(["plan", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code, err, prefix):
    assert code == 2, err
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err


# ------------------------------------------------------------------------------------------ chat templates

BAD_TEMPLATES = [
    ("{% for m in messages %}{{ m.content }}", "line 1", "endfor"),
    ("{{ messages[0].content ", "line 1", ""),
    ("{% if true %}\nA\n{% else %}\nB\n{% endfor %}", "line 5", "endfor"),
    ("{% generation %}{{ 1 }}", "line 1", ""),  # transformers' own tag, left open
]


@pytest.mark.parametrize(("template", "line", "word"), BAD_TEMPLATES)
def test_a_chat_template_that_does_not_parse_is_one_line_through_the_api(tmp_path, template, line, word):
    assert template_problem(template).startswith(line)
    file = tmp_path / "t.jinja"
    file.write_text(template, encoding="utf-8")
    for value, where in ((template, "the template given"), (str(file), str(file))):
        with pytest.raises(ValueError) as caught:
            chat_template_text(value)
        message = str(caught.value)
        assert message.startswith(f"chat_template: {where} does not parse as a Jinja template ({line}")
        assert word in message and "\n" not in message


def test_templates_that_parse_are_taken_as_they_are(tmp_path):
    good = "{% for m in messages %}{{ m.content }}{% endfor %}{% generation %}x{% endgeneration %}"
    assert template_problem(good) is None and chat_template_text(good) == good
    assert "im_start" in chat_template_text("qwen2_5")  # a template TRL ships


@pytest.mark.parametrize("template", [t for t, *_ in BAD_TEMPLATES[:2]])
def test_a_chat_template_that_does_not_parse_is_refused_before_anything_is_written(tmp_path, capsys, template):
    code, out, err = train(tmp_path, capsys, "--chat_template", template)
    assert_one_line_error(code, out, err, "does not parse as a Jinja template")
    assert_nothing_written(tmp_path)


# ------------------------------------------------------------------------------------------ the judge's key


@pytest.mark.parametrize(("name", "value"), [("HIR_TEST_KEY", "sk-abc123\n"), ("HIR_TEST_KEY", "  sk-abc123  "),
                                             ("HIR_TEST_KEY\n", "sk-abc123"), (" HIR_TEST_KEY ", "\tsk-abc123\r\n")])
def test_a_judge_key_with_blanks_around_it_is_used_stripped(monkeypatch, name, value):
    from hir_trl.judge import LiteLLMJudge

    monkeypatch.setenv("HIR_TEST_KEY", value)
    judge = LiteLLMJudge("openai/test", api_base="http://127.0.0.1:9", api_key_env=name)
    sent = {}

    async def acompletion(**kwargs):
        sent.update(kwargs)
        return SimpleNamespace(choices=[])

    judge._litellm = SimpleNamespace(acompletion=acompletion)
    asyncio.run(judge._request("prompt"))
    assert judge.api_key_env == "HIR_TEST_KEY" and sent["api_key"] == "sk-abc123"


@pytest.mark.parametrize("value", ["", "  \n"])
def test_a_blank_judge_key_is_one_line_naming_the_variable(monkeypatch, value):
    from hir_trl.judge import LiteLLMJudge, MissingJudgeKeyError

    monkeypatch.setenv("HIR_TEST_KEY", value)
    with pytest.raises(MissingJudgeKeyError) as caught:
        LiteLLMJudge("openai/test", api_key_env="HIR_TEST_KEY")
    assert "HIR_TEST_KEY" in caught.value.args[0] and "is set but empty" in caught.value.args[0]


def test_a_judge_key_name_with_a_stray_newline_is_taken_by_the_cli(tmp_path, capsys):
    config = HiRConfig(output_dir=str(tmp_path / "o"), use_cpu=True, report_to="none",
                       judge_api_key_env="DEEPSEEK_API_KEY\n")
    assert config.judge_api_key_env.strip() == "DEEPSEEK_API_KEY"


# ------------------------------------------------------------------------------------------ dataset mixtures


def _hir_rows(n=2):
    return SAMPLE_DATA.read_text(encoding="utf-8").splitlines()[:n]


@pytest.fixture
def mixture_files(tmp_path):
    native_file = write_rows(tmp_path / "native.jsonl", [NATIVE, native(id="n-1")])
    hir_file = tmp_path / "hir.jsonl"
    hir_file.write_text("\n".join(_hir_rows()) + "\n", encoding="utf-8")
    extra = write_rows(tmp_path / "extra.jsonl", [native(id="n-2", note="x"), native(id="n-3", note="y")])
    lines = _hir_rows(3)
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text("\n".join([*lines[:2], lines[2][:40]]) + "\n", encoding="utf-8")
    return SimpleNamespace(native=native_file, hir=hir_file, extra=extra, truncated=truncated)


@pytest.mark.parametrize(("pair", "fragments"), [
    (("native", "hir"), ["hir.jsonl: datasets: its rows are HIR-16K rows and those of", "native rows"]),
    (("hir", "native"), ["native.jsonl: datasets: its rows are native rows and those of", "HIR-16K rows"]),
    (("native", "extra"), ["its columns differ from those of", "extra.jsonl has note"]),
    (("hir", "truncated"), ["truncated.jsonl, line 3: does not parse as JSON"]),
    (("truncated", "hir"), ["truncated.jsonl, line 3: does not parse as JSON"]),
])
def test_a_bad_mixture_is_one_line_naming_the_file(mixture_files, pair, fragments):
    script = HiRScriptArguments(datasets=[{"path": str(getattr(mixture_files, name))} for name in pair])
    with pytest.raises(DatasetFormatError) as caught:
        load_script_datasets(script, evaluate=False, seed=0)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_a_mixture_of_files_of_one_format_loads(mixture_files, tmp_path):
    other = write_rows(tmp_path / "native2.jsonl", [native(id="n-9")])
    script = HiRScriptArguments(datasets=[{"path": str(mixture_files.native)}, {"path": str(other)}])
    train_rows, _ = load_script_datasets(script, evaluate=False, seed=0)
    assert len(train_rows) == 3


def test_a_bad_mixture_is_refused_by_the_cli_before_anything_is_written(mixture_files, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    text = TINY_RECIPE.read_text(encoding="utf-8").replace(
        "dataset_name: recipes/tiny/data/muldimif_listing_sample.jsonl",
        f"datasets:\n  - path: {mixture_files.native}\n  - path: {mixture_files.hir}")
    recipe.write_text(text, encoding="utf-8")
    code, out, err = train(tmp_path, capsys, recipe=recipe)
    assert_one_line_error(code, out, err, "its rows are HIR-16K rows and those of")
    assert_nothing_written(tmp_path)


# ------------------------------------------------------------------------------------------ deep data, YAML bombs


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 5000, 100_000])
def test_data_nested_too_deep_is_one_line_naming_the_line(tmp_path, depth):
    deep = "[" * depth + "]" * depth
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(NATIVE) + "\n" + json.dumps(native(id="n-1"))[:-1] + f', "x": {deep}}}\n')
    with pytest.raises(JSONFileError, match=r"deep.jsonl, line 2: nests lists or objects more than 64 levels"):
        list(read_jsonl(path))
    with pytest.raises(DatasetFormatError, match=r"deep.jsonl, line 2: nests"):
        load_hir_dataset(path)
    as_json = tmp_path / "deep.json"
    as_json.write_text(f"[{json.dumps(NATIVE)}, {deep}]")
    with pytest.raises(DatasetFormatError, match=r"deep.json, line 1: nests"):
        load_hir_dataset(as_json)


def test_nesting_depth_counts_without_recursion():
    value: list = []
    for _ in range(50_000):
        value = [value]
    assert nesting_depth(value) == MAX_NESTING + 1  # stops counting past the limit
    assert nesting_depth({"a": [{"b": 1}]}) == 3 and nesting_depth(5) == 0


def test_deep_data_is_refused_by_the_cli_before_anything_is_written(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(native(x="[" * 3000))[:-1].replace('"[', "[") + "]" * 3000 + "}\n")
    code, out, err = train(tmp_path, capsys, "--dataset_name", path)
    assert_one_line_error(code, out, err, "deep.jsonl, line 1: nests lists or objects")
    assert_nothing_written(tmp_path)


def _laughs(levels: int = 9) -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        previous, current = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{current}: &{current} [{', '.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + f"\nlearning_rate: *{chr(ord('a') + levels)}\n"


@pytest.mark.parametrize("text", [_laughs(), _laughs(5), "learning_rate: " + "[" * 5000 + "]" * 5000 + "\n"],
                         ids=["billion-laughs", "laughs-5-levels", "nested-5000"])
def test_yaml_that_expands_without_bound_or_nests_too_deep_is_one_line(tmp_path, capsys, text):
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        load_recipe(recipe)
    assert str(caught.value).startswith(f"{recipe}: ") and "\n" not in str(caught.value)
    code, out, err = train(tmp_path, capsys, recipe=recipe)
    assert_one_line_error(code, out, err, str(recipe))
    assert_nothing_written(tmp_path)
    code, out, err = _plan(capsys, "--config", recipe)
    _one_line(code, err, "hir-trl plan: error: ")


def test_a_recipe_with_a_few_aliases_still_loads(tmp_path):
    recipe = tmp_path / "ok.yaml"
    recipe.write_text("base: &b {lr: 1.0e-5}\nother: *b\nlist: &l [1, 2]\nagain: *l\n", encoding="utf-8")
    assert load_recipe(recipe) == {"base": {"lr": 1e-5}, "other": {"lr": 1e-5}, "list": [1, 2], "again": [1, 2]}
    assert MAX_RECIPE_VALUES >= 10_000


# ------------------------------------------------------------------------------------------ numbers and empty paths


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--learning_rate", "1e10"], "learning_rate must be > 0 and <= 1"),
    (["--learning_rate", "2"], "learning_rate must be > 0 and <= 1"),
    (["--output_dir", ""], "output_dir is empty"),
    (["--output_dir", "   "], "output_dir is empty"),
])
def test_out_of_range_training_flags_are_one_line(tmp_path, capsys, flags, fragment):
    code, out, err = train(tmp_path, capsys, *flags)
    assert_one_line_error(code, out, err, fragment)
    assert_nothing_written(tmp_path)
    values = {flags[0].lstrip("-"): flags[1] if "output_dir" in flags[0] else float(flags[1])}
    with pytest.raises(ValueError, match=fragment):
        HiRConfig(**{"output_dir": str(tmp_path / "o"), "use_cpu": True, "report_to": "none", **values})


def test_a_learning_rate_of_one_is_still_taken(tmp_path):
    assert HiRConfig(output_dir=str(tmp_path / "o"), use_cpu=True, report_to="none", learning_rate=1.0)


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--gpu_memory_gb", "0"], "--gpu_memory_gb must be a number > 0"),
    (["--gpu_memory_gb", "-8"], "--gpu_memory_gb must be a number > 0"),
    (["--gpu_memory_gb", "nan"], "got nan"),
    (["--gpu_memory_gb", "inf"], "got inf"),
    (["--num_processes", "0"], "--num_processes must be an integer >= 1"),
    (["--num_processes", "-2"], "--num_processes must be an integer >= 1"),
    (["--judge_price_input", "-1"], "--judge_price_input must be a number >= 0"),
    (["--judge_price_output", "nan"], "--judge_price_output must be a number >= 0"),
    (["--step_seconds", "0"], "--step_seconds must be a number > 0"),
    (["--prompt_tokens", "0"], "--prompt_tokens must be an integer >= 1"),
])
def test_plan_numbers_out_of_range_are_one_line(capsys, flags, fragment):
    code, out, err = _plan(capsys, "--config", TINY_RECIPE, *flags)
    _one_line(code, err, "hir-trl plan: error: ")
    assert fragment in err and not out
    name, value = flags[0].lstrip("-"), flags[1]
    plan_args = PlanArguments(**{name: int(value) if name in ("num_processes", "prompt_tokens") else float(value)})
    assert fragment in plan_args_problem(plan_args)
    with pytest.raises(ValueError, match=fragment.replace("-", "\\-")):
        make_plan(plan_args, ["--config", str(TINY_RECIPE)], None)


def test_plan_numbers_in_range_pass():
    assert plan_args_problem(PlanArguments(gpu_memory_gb=80, num_processes=8, judge_price_input=0.0,
                                           judge_price_output=1.1, step_seconds=30.0)) is None
    assert plan_args_problem(PlanArguments()) is None and math.isfinite(PlanArguments().prompt_tokens)


# ------------------------------------------------------------------------------------------ eval inputs


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_eval_compare_of_a_responses_file_is_one_line_naming_it(tmp_path, capsys):
    responses = _jsonl(tmp_path / "run.responses.jsonl", [{"prompt": "P", "response": "R"}] * 2)
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    for path, fragment in ((responses, "it looks like JSON Lines"), (other, "no 'benchmarks'"),
                           (binary, "no UTF-8 text"), (deep, "nested too deeply")):
        code = eval_cli.main(["compare", str(path), str(path)])
        out, err = capsys.readouterr()
        _one_line(code, err, "hir-trl eval: error: ")
        assert f"{path} is not a hir-trl eval report" in err and fragment in err, err
        with pytest.raises(ValueError, match="is not a hir-trl eval report"):
            eval_cli.read_report(path)


@pytest.mark.parametrize("spec", ["x=", "=x.jsonl", "  =  ", ""])
def test_a_benchmark_name_or_path_left_empty_is_one_line(tmp_path, capsys, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    responses = _jsonl(tmp_path / "responses.jsonl", [{"prompt": "P1", "response": "R"}])
    code = eval_cli.main(["score", "-b", spec, "-r", str(responses)])
    out, err = capsys.readouterr()
    _one_line(code, err, "hir-trl eval: error: --benchmark")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["responses.jsonl"]
    with pytest.raises(ValueError, match="--benchmark"):
        eval_cli._benchmark_spec(spec)


def test_a_missing_model_folder_is_not_blamed_on_the_network(tmp_path, capsys, monkeypatch):
    """Offline, a name that is no local folder and no cached Hub model is one line naming the folder looked for."""
    from hir_trl.evaluation import generation

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(generation, "_hub_offline", lambda: True)
    bench = _jsonl(tmp_path / "bench.jsonl", [{"key": "k1", "prompt": "P1", "instruction_id_list":
                                               ["punctuation:no_comma"], "kwargs": [{}]}])
    for name in ("my-model", "outputs/tiny-hir"):
        code = eval_cli.main(["generate", "-m", name, "-b", str(bench), "-o", str(tmp_path / "eval")])
        out, err = capsys.readouterr()
        _one_line(code, err, "hir-trl eval: error: ")
        assert f"--model_name_or_path {name}: no such local folder ({tmp_path / name})" in err
        assert "offline" in err and not (tmp_path / "eval").exists()


def test_a_model_that_fails_to_load_from_the_hub_names_the_folder_looked_for(tmp_path, monkeypatch):
    from hir_trl.evaluation import generation

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files\nmore")

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", unreachable)
    settings = generation.GenerationSettings(model="org/no-such-model")
    with pytest.raises(OSError) as caught:
        generation._generate_transformers([[{"role": "user", "content": "hi"}]], settings, progress=False)
    message = str(caught.value)
    assert message.startswith("--model_name_or_path org/no-such-model: no such local folder (")
    assert "couldn't connect" in message and "\n" not in message


# ------------------------------------------------------------------------------------------ the judge's garbage


def test_a_judge_that_answers_garbage_is_one_line():
    from hir_trl.judge import JudgeUnavailableError, LiteLLMJudge

    from ..judge_server import FakeJudgeServer

    with FakeJudgeServer() as server:
        judge = LiteLLMJudge("openai/test", api_base=server.base_url, api_key_env="", max_retries=0, timeout=10)
        triples = [("Write.", "text", f"ANSWER:banana{i} Be formal.") for i in range(3)]
        with pytest.raises(JudgeUnavailableError) as caught:
            judge(triples)
        message = str(caught.value)
        assert "answered none of 3 requests with YES or NO" in message and "\n" not in message
        mixed = [("Write.", "text", "Be formal."), ("Write.", "text", "ANSWER:banana Be calm.")]
        verdicts = judge(mixed)  # one garbage answer among good ones: a failed verdict, not a stop
        assert verdicts[0].passed and not verdicts[1].passed and "neither YES nor NO" in verdicts[1].error


def test_eval_score_with_a_garbage_judge_is_one_line(tmp_path, capsys):
    from hir_trl.evaluation.benchmarks import load_benchmark

    from ..judge_server import FakeJudgeServer

    rows = [native(id=f"n-{i}", task=f"Write note {i}.",
                   constraints=[{"text": f"ANSWER:maybe{i} Be formal.", "kind": "soft"}]) for i in range(2)]
    bench = write_rows(tmp_path / "bench.jsonl", rows)
    prompts = [row.prompt for row in load_benchmark(bench, format="hir").rows]
    responses = _jsonl(tmp_path / "responses.jsonl", [{"prompt": p, "response": "R"} for p in prompts])
    with FakeJudgeServer() as server:
        code = eval_cli.main(["score", "-b", str(bench), "--format", "hir", "-r", str(responses), "--judge_model",
                              "openai/test", "--judge_api_base", server.base_url, "--judge_api_key_env", "",
                              "--judge_max_retries", "0", "--output", str(tmp_path / "report.json")])
    out, err = capsys.readouterr()
    _one_line(code, err, "hir-trl eval: error: ")
    assert "answered none of 2 requests with YES or NO" in err
    assert not (tmp_path / "report.json").exists()


# ------------------------------------------------------------------------------------------ booleans as rewards


def test_a_reward_function_returning_booleans_counts_them_as_one_and_zero():
    import numpy as np
    import torch

    assert check_rewards("f", [True, False, None], 3) == [1.0, 0.0, None]
    assert check_rewards("f", np.array([True, False]), 2) == [1.0, 0.0]
    assert check_rewards("f", torch.tensor([False, True]), 2) == [0.0, 1.0]
    assert check_rewards("f", [np.bool_(True), 0.5], 2) == [1.0, 0.5]
    assert all(type(v) is float for v in check_rewards("f", [True, False], 2))


def test_an_empty_output_of_eval_generate_or_synth_is_one_line(tmp_path, capsys, monkeypatch):
    from hir_trl.cli.synth import main as synth_main

    monkeypatch.chdir(tmp_path)
    bench = _jsonl(tmp_path / "bench.jsonl", [{"key": "k1", "prompt": "P1", "instruction_id_list":
                                               ["punctuation:no_comma"], "kwargs": [{}]}])
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for output in ("", "  "):
        code = eval_cli.main(["generate", "-m", "model", "-b", str(bench), "-o", output])
        _one_line(code, capsys.readouterr()[1], "hir-trl eval: error: --output_dir is empty")
        code = synth_main(["--dataset_name", str(bench), "--output", output])
        _one_line(code, capsys.readouterr()[1], "hir-trl synth: error: --output is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl", "model"]
