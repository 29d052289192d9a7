"""One flag convention for ``hir-trl train``, ``hir-trl eval`` and ``hir-trl synth``: TRL's `TrlParser` over
dataclasses, ``--snake_case`` as TRL spells it and ``--kebab-case`` too, the same names for the same things, the
former spellings still read, ``--config FILE`` / ``--config=FILE``, ``--help``, and a bad flag as one line."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hir_trl.cli import eval as eval_cli
from hir_trl.cli import synth
from hir_trl.cli.parser import UsageError, split_config_flag

from ..testing_utils import TINY_RECIPE


def _names(*types) -> set[str]:
    return {f.name for t in types for f in dataclasses.fields(t)}


def test_the_same_things_have_the_same_names_in_train_eval_and_synth():
    from trl import ModelConfig

    from hir_trl import HiRConfig
    from hir_trl.configs import HiRScriptArguments

    train = _names(HiRScriptArguments, HiRConfig, ModelConfig)
    judge = {name for name in _names(HiRConfig) if name.startswith("judge_")}
    assert _names(eval_cli.JudgeArguments) == judge  # every judge option, named as training names it
    generate = _names(eval_cli.BenchmarkArguments, eval_cli.GenerateArguments)
    assert {"model_name_or_path", "output_dir", "overwrite_output_dir", "seed", "run_name", "verifier_modules",
            "temperature", "top_p", "top_k"} <= generate & train
    assert {"dataset_name", "dataset_config", "dataset_train_split", "dataset_max_rows", "seed",
            "verifier_modules"} <= _names(synth.SynthArguments) & train


def test_train_and_eval_take_the_judge_options_from_one_class(tmp_path):
    import inspect

    import yaml

    from hir_trl import HiRConfig
    from hir_trl.cli.train import make_train_parser, parse_train_args
    from hir_trl.judge import JudgeArguments, LiteLLMJudge

    judge = dataclasses.fields(JudgeArguments)
    assert len(judge) == 13 and all(f.name.startswith("judge_") and f.metadata["help"] for f in judge)
    assert issubclass(HiRConfig, JudgeArguments) and eval_cli.JudgeArguments is JudgeArguments
    hir = {f.name: f for f in dataclasses.fields(HiRConfig)}
    names = [f.name for f in dataclasses.fields(HiRConfig)]
    assert [name for name in names if name.startswith("judge_")] == [f.name for f in judge]  # one order
    assert names.index("output_dir") < names.index("judge_model") < names.index("num_replays")
    # every parser shows the same name, default, help and choices, from the one declaration
    parsers = {"train": make_train_parser(), **{f"eval {c}": eval_cli.make_parser(c) for c in ("score", "generate")}}
    for where, parser in parsers.items():
        actions = {action.dest: action for action in parser._actions}
        for f in judge:
            action = actions[f.name]
            assert (action.default, action.help, action.choices) == (f.default, f.metadata["help"],
                                                                     f.metadata.get("choices")), (where, f.name)
            assert hir[f.name].default == f.default and hir[f.name].metadata == f.metadata
    help_text = parsers["train"].format_help()
    assert all(f"--{f.name}" in help_text for f in judge)
    # the defaults are the judge's own (`LiteLLMJudge`), so training and eval build the same judge
    defaults = inspect.signature(LiteLLMJudge).parameters
    assert {f.name: f.default for f in judge} == {f"judge_{name}": defaults[name].default for name in (
        "model", "api_base", "api_key_env", "max_concurrency", "timeout", "max_retries", "retry_backoff",
        "temperature", "max_tokens", "logprobs", "failure_policy", "extra_kwargs", "cache_dir")}
    # a recipe (YAML) reaches HiRConfig's judge fields, and their validation still runs
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "out"), "judge_model": "",
                                      "judge_extra_kwargs": {"logit_bias": {"31": 100.0}}, "judge_max_tokens": 2}))
    config = parse_train_args(["--config", str(recipe)])[1]
    assert (config.judge_model, config.judge_extra_kwargs, config.judge_max_tokens) == (
        "", {"logit_bias": {"31": 100.0}}, 2)
    with pytest.raises(ValueError, match="judge_max_tokens must be an integer >= 1, got 0"):
        HiRConfig(output_dir=str(tmp_path), bf16=False, judge_max_tokens=0)


@pytest.mark.parametrize("spelling", ["snake", "kebab", "former"])
def test_eval_generate_reads_snake_kebab_and_former_spellings_alike(spelling):
    flags = {
        "snake": ["--model_name_or_path", "m", "--benchmark", "b.jsonl", "--output_dir", "o", "--num_samples", "5",
                  "--max_tokens", "64", "--judge_model", "hosted_vllm/j", "--judge_api_key_env", "",
                  "--judge_failure_policy", "raise", "--overwrite_output_dir", "true", "--vllm_gpu_memory_utilization",
                  "0.5"],
        "kebab": ["--model-name-or-path", "m", "--benchmark", "b.jsonl", "--output-dir", "o", "--num-samples", "5",
                  "--max-tokens", "64", "--judge-model", "hosted_vllm/j", "--judge-api-key-env", "",
                  "--judge-failure-policy", "raise", "--overwrite-output-dir", "--gpu-memory-utilization", "0.5"],
        "former": ["-m", "m", "-b", "b.jsonl", "-o", "o", "--num_generations", "5", "--max_completion_length", "64",
                   "--judge-model", "hosted_vllm/j", "--judge-api-key-env", "", "--judge-failure-policy", "raise",
                   "--overwrite_output_dir", "--gpu-memory-utilization", "0.5"],
    }[spelling]
    args = eval_cli.parse_args(["generate", *flags])
    assert (args.model_name_or_path, args.benchmark, args.output_dir) == ("m", ["b.jsonl"], "o")
    assert (args.num_samples, args.max_tokens, args.gpu_memory_utilization) == (5, 64, 0.5)
    assert (args.judge_model, args.judge_api_key_env, args.judge_failure_policy) == ("hosted_vllm/j", "", "raise")
    assert args.overwrite_output_dir is True and args.command == "generate"


def test_eval_score_and_compare_read_both_spellings(tmp_path):
    snake = eval_cli.parse_args(["score", "--benchmark", "b", "--responses", "r", "--allow_missing", "--no_rows",
                                 "--pass_k", "1", "2", "--dataset_max_rows", "3"])
    kebab = eval_cli.parse_args(["score", "-b", "b", "-r", "r", "--allow-missing", "--no-rows", "--pass-k", "1", "2",
                                 "--limit", "3"])
    for args in (snake, kebab):
        assert (args.benchmark, args.responses, args.allow_missing, args.no_rows) == (["b"], ["r"], True, True)
        assert (args.pass_k, args.limit) == ([1, 2], 3)
    assert eval_cli.parse_args(["compare", "a.json", "b.json", "--names", "x", "y"]).reports == ["a.json", "b.json"]
    assert eval_cli.parse_args(["--compare", "a.json", "--reports", "b.json"]).reports == ["a.json", "b.json"]


@pytest.mark.parametrize("flags", [
    ["--dataset_name", "{src}", "--output", "{out}", "--dataset_max_rows", "1", "--dataset_train_split", "train"],
    ["--dataset-name", "{src}", "--output", "{out}", "--dataset-max-rows", "1", "--dataset-train-split", "train"],
    ["--dataset_name", "{src}", "--output", "{out}", "--max_rows", "1", "--dataset_split", "train"],
    ["--dataset-name", "{src}", "--output", "{out}", "--max-rows", "1", "--num-constraints", "3"],
])
def test_synth_reads_snake_kebab_and_former_spellings(tmp_path, capsys, flags):
    src = tmp_path / "prompts.jsonl"
    src.write_text("".join(json.dumps({"prompt": f"Write about {w}."}) + "\n" for w in ("rain", "snow")))
    out = tmp_path / "out.jsonl"
    argv = [f.format(src=src, out=out) for f in flags]
    assert synth.main(argv) == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 1  # one row: dataset_max_rows read under each spelling


@pytest.mark.parametrize("argv, fragment", [
    (["score", "-b", "b", "-r", "r", "--outptu", "x"], "unrecognized arguments: --outptu x"),
    (["score", "-b", "b", "-r", "r", "--output_dir", "x"], "unrecognized arguments: --output_dir x"),
    (["score", "-b", "b", "-r", "r", "--format", "ifevel"], "argument --format: invalid choice: 'ifevel'"),
    (["generate", "-m", "m", "-b", "b", "-o", "o", "--dtype", "bfloat"],
     "argument --dtype: invalid choice: 'bfloat' (choose from 'auto', 'bfloat16', 'float16', 'float32')"),
    (["generate", "-m", "m", "-b", "b", "-o", "o", "--dtype", "fp16"], "choose from 'auto', 'bfloat16'"),
    (["generate", "-m", "m", "-b", "b", "-o", "o", "--num_samples", "five"], "argument --num_samples"),
    (["generate", "-b", "b", "-o", "o"], "required: --model_name_or_path"),
    (["generate", "-m", "m", "-b", "b", "-o", "o", "--backend", "vllmm"], "argument --backend: invalid choice"),
    (["compare"], "compare needs report files"),
    (["scroe", "-b", "b"], "unknown command 'scroe'"),
    (["-b", "b"], "give a command first"),
    (["score", "-b", "b", "-r", "r", "--config"], "--config needs a file"),
])
def test_a_bad_eval_flag_is_one_line(capsys, argv, fragment):
    assert eval_cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("hir-trl eval: error: ") and fragment in err, err


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset_name", "p.jsonl", "--output", "o.jsonl", "--num_constraint", "2"], "unrecognized arguments"),
    (["--dataset_name", "p.jsonl"], "required: --output"),
    (["--dataset_name", "p.jsonl", "--output", "o.jsonl", "--seed", "x"], "argument --seed"),
    (["--dataset_name", "p.jsonl", "--output", "o.jsonl", "--families", "acme"], "'acme' is no verifier family"),
    (["--config=", "--output", "o.jsonl"], "--config needs a file"),
])
def test_a_bad_synth_flag_is_one_line(tmp_path, capsys, monkeypatch, argv, fragment):
    monkeypatch.chdir(tmp_path)
    assert synth.main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("hir-trl synth: error: ") and fragment in err, err


@pytest.mark.parametrize("argv, shown", [
    (["score", "--help"], "--responses"),
    (["generate", "-h"], "--model_name_or_path"),
    (["compare", "--help"], "REPORT_JSON"),
])
def test_eval_help_of_each_command(capsys, argv, shown):
    with pytest.raises(SystemExit) as exit_info:
        eval_cli.main(argv)
    assert exit_info.value.code == 0 and shown in capsys.readouterr().out
    assert eval_cli.main(["--help"]) == 0 and "generate" in capsys.readouterr().out


def test_synth_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        synth.main(["--help"])
    assert exit_info.value.code == 0 and "--dataset_train_split" in capsys.readouterr().out


@pytest.mark.parametrize("spelling", ["--config FILE", "--config=FILE"])
def test_eval_and_synth_read_a_config_file_in_both_spellings(tmp_path, capsys, spelling):
    src = tmp_path / "prompts.jsonl"
    src.write_text(json.dumps({"prompt": "Write about rain."}) + "\n")
    recipe = tmp_path / "synth.yaml"
    recipe.write_text(f"dataset_name: {src}\noutput: {tmp_path / 'out.jsonl'}\nnum_constraints: 1\n")
    argv = spelling.replace("FILE", str(recipe)).split(" ")
    assert synth.main([*argv, "--seed", "3"]) == 0, capsys.readouterr().err
    assert (tmp_path / "out.jsonl").is_file()
    recipe.write_text("benchmark: [b.jsonl]\nmodel_name_or_path: m\noutput_dir: o\nnum_samples: 4\n")
    args = eval_cli.parse_args(["generate", *spelling.replace("FILE", str(recipe)).split(" "), "--num_samples", "2"])
    assert (args.benchmark, args.model_name_or_path, args.num_samples) == (["b.jsonl"], "m", 2)  # the flag wins
    recipe.write_text("benchmark: [b.jsonl]\nresponses: [r.jsonl]\nnum_sample: 4\n")
    assert eval_cli.main(["score", *spelling.replace("FILE", str(recipe)).split(" ")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unknown key(s) in {recipe}: num_sample" in err


def test_split_config_flag(tmp_path):
    recipe = tmp_path / "a.yaml"
    recipe.write_text("x: 1\n")
    assert split_config_flag([f"--config={recipe}", "--x", "1"]) == ["--config", str(recipe), "--x", "1"]
    assert split_config_flag(["--x", "1"]) == ["--x", "1"]
    for bad in (["--config"], ["--config", "--x"], ["--config="], ["--config", str(tmp_path / "missing.yaml")],
                [f"--config={recipe}", "--config", str(recipe)]):
        with pytest.raises(UsageError, match="--config"):
            split_config_flag(bad)


def test_train_reads_config_equals_file_and_kebab_flags():
    from hir_trl.cli.main import parse_train_args

    script, training, model = parse_train_args([f"--config={TINY_RECIPE}", "--output-dir", "elsewhere",
                                                "--judge-timeout", "7", "--max_steps", "3"])
    assert script.dataset_name and model.model_name_or_path  # from the recipe
    assert (training.output_dir, training.judge_timeout, training.max_steps) == ("elsewhere", 7.0, 3)
