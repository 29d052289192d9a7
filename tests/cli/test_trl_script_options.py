"""Everything ``trl grpo`` takes, ``hir-trl train`` takes: TRL's script options (``reward_funcs``, dataset mixtures,
``dataset_test_split`` with ``eval_strategy``, ``dataset_streaming``, ``system_prompt``, ``chat_template``) are
honoured or refused in one line, never accepted and ignored; and `HiRTrainer` takes `GRPOTrainer`'s arguments in
`GRPOTrainer`'s order."""

from __future__ import annotations

import inspect
import json
import textwrap

import pandas as pd
import pytest

from hir_trl.configs import HiRScriptArguments
from hir_trl.data.chat import chat_template_text
from hir_trl.data.loading import DatasetFormatError, load_rows, load_script_datasets
from hir_trl.trainer_setup import TRL_REWARD_FUNCTIONS, named_reward_functions, reward_call_problem

from ..testing_utils import (
    SAMPLE_DATA,
    assert_nothing_written,
    assert_one_line_error,
    make_args,
    train,
    write_rows,
)

# ------------------------------------------------------------------------------------ the parsers, side by side


def _dests(parser) -> set[str]:
    return {action.dest for action in parser._actions if action.dest not in ("help", "config")}


def test_every_trl_grpo_option_is_an_option_of_hir_trl_train():
    from trl.scripts.grpo import make_parser

    from hir_trl.cli.main import make_train_parser

    missing = _dests(make_parser()) - _dests(make_train_parser())
    assert not missing, f"trl grpo options hir-trl train does not take: {sorted(missing)}"


def test_each_trl_script_option_is_honoured_or_refused_in_the_table():
    import dataclasses

    from trl import DatasetMixtureConfig
    from trl.scripts.grpo import GRPOScriptArguments

    from hir_trl.configs import TRL_SCRIPT_OPTIONS

    trl_fields = [f.name for cls in (GRPOScriptArguments, DatasetMixtureConfig) for f in dataclasses.fields(cls)]
    assert sorted(TRL_SCRIPT_OPTIONS) == sorted(trl_fields)
    assert all(how.startswith(("honoured", "refused")) for how in TRL_SCRIPT_OPTIONS.values())


def test_the_docs_recipe_snippets_parse_as_written():
    """docs/data.md's mixture block and docs/verifiers.md's reward_funcs block are script options as written."""
    import re

    import yaml

    from ..testing_utils import REPO_ROOT

    blocks = {page: [textwrap.dedent(b) for b in re.findall(r"^ *```yaml\n(.*?)^ *```", (
        REPO_ROOT / "docs" / page).read_text(encoding="utf-8"), re.S | re.M)] for page in ("data.md", "verifiers.md")}
    mixture = next(yaml.safe_load(b) for b in blocks["data.md"] if "datasets:" in b)
    script = _script(**mixture)
    assert [d.path for d in script.datasets] == ["data/hir16k_ifeval.jsonl", "sastpg/HIR-16K"]
    assert [d.fraction for d in script.datasets] == [0.7, 0.3] and script.test_split_size == 0.05
    rewards = next(yaml.safe_load(b) for b in blocks["verifiers.md"] if "reward_funcs:" in b)
    assert _script(reward_funcs=rewards["reward_funcs"]).reward_funcs == ["my_rewards.brevity", "think_format_reward"]
    assert len(rewards["reward_weights"]) == 1 + len(rewards["reward_funcs"])


# ------------------------------------------------------------------------------------------------- reward_funcs

REWARD_MODULE = textwrap.dedent('''
    def length_reward(completions, **kwargs):
        return [len(str(c)) / 100.0 for c in completions]

    NOT_A_FUNCTION = 3

    def needs_solution(completions, solution, **kwargs):
        return [0.0] * len(completions)

    def no_kwargs(prompts, completions):
        return [0.0] * len(completions)
''')


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    """A module ``hir_test_rewards`` in the current directory (as ``trl grpo`` finds ``my_module.my_reward``)."""
    (tmp_path / "hir_test_rewards.py").write_text(REWARD_MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "hir_test_rewards"


def test_reward_funcs_names_and_dotted_paths_resolve_as_trl_grpo_resolves_them(reward_module):
    from trl import rewards

    think, dotted, own, overlong = named_reward_functions(
        ["think_format_reward", "trl.rewards.think_format_reward", f"{reward_module}.length_reward",
         "get_soft_overlong_punishment"])
    assert think is rewards.think_format_reward and dotted is rewards.think_format_reward
    assert own.__name__ == "length_reward" and own(completions=["ab"]) == [0.02]
    assert overlong(completion_ids=[[1] * 1500]) == [pytest.approx(-1.0)]  # built as trl grpo builds it: 1280, 256
    assert set(TRL_REWARD_FUNCTIONS) == {"accuracy_reward", "reasoning_accuracy_reward", "think_format_reward",
                                         "get_soft_overlong_punishment"}
    assert named_reward_functions(None) == []


@pytest.mark.parametrize(("entry", "fragments"), [
    ("no_such_name", ["'no_such_name' is neither a reward function TRL names", "think_format_reward"]),
    ("no_such_module_hir.reward", ["cannot import module 'no_such_module_hir'", "ModuleNotFoundError"]),
    ("hir_test_rewards.missing", ["module 'hir_test_rewards' has no 'missing'"]),
    ("hir_test_rewards.NOT_A_FUNCTION", ["is a int, not a reward function"]),
    ("trailing.", ["is neither a reward function TRL names", "nor a dotted path module.function"]),
])
def test_a_reward_funcs_entry_that_does_not_resolve_is_one_line(reward_module, entry, fragments):
    with pytest.raises(ValueError) as caught:
        named_reward_functions([entry])
    message = str(caught.value)
    assert message.startswith("reward_funcs: ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_a_reward_function_trl_cannot_call_on_hir_rows_is_named(reward_module):
    import hir_test_rewards

    columns = ["prompt", "task", "constraints", "template", "row_id"]
    assert reward_call_problem(hir_test_rewards.length_reward, columns) is None
    problem = reward_call_problem(hir_test_rewards.needs_solution, columns)
    assert "'needs_solution'" in problem and "solution" in problem and "**kwargs" in problem
    assert reward_call_problem(hir_test_rewards.needs_solution, [*columns, "solution"]) is None
    problem = reward_call_problem(hir_test_rewards.no_kwargs, columns)
    assert "'no_kwargs'" in problem and "task" in problem


@pytest.mark.parametrize(("flags", "fragments"), [
    pytest.param(["--reward_funcs", "no_such_module_hir.reward"], ["cannot import module 'no_such_module_hir'"],
                 id="bad-dotted-path"),
    pytest.param(["--reward_funcs", "think_format_reward", "--reward_weights", "1", "1", "1"],
                 ["reward_weights has 3 weight(s) for 2 reward(s)"], id="weights-count"),
    pytest.param(["--reward_funcs", "accuracy_reward"], ["'accuracy_reward' cannot take TRL's call", "solution"],
                 id="needs-a-column-the-rows-lack"),
])
def test_reward_funcs_problems_are_one_line_through_the_cli_before_the_model_is_built(tmp_path, capsys, flags,
                                                                                      fragments):
    code, out, err = train(tmp_path, capsys, *flags)
    assert_one_line_error(code, out, err, *fragments)
    assert_nothing_written(tmp_path)


# -------------------------------------------------------------------------------------------- dataset options


def _script(**values) -> HiRScriptArguments:
    return HiRScriptArguments(**values)


@pytest.mark.parametrize("values", [
    pytest.param({"dataset_streaming": True}, id="dataset_streaming"),
    pytest.param({"streaming": True, "datasets": [{"path": str(SAMPLE_DATA)}]}, id="mixture-streaming"),
])
def test_streaming_is_refused_in_one_line(values):
    with pytest.raises(ValueError, match=r"streaming: true is not supported: .* dataset_max_rows") as caught:
        _script(dataset_name=str(SAMPLE_DATA), **values) if "datasets" not in values else _script(**values)
    assert "\n" not in str(caught.value)


def test_dataset_streaming_is_refused_through_the_cli_before_anything_loads(tmp_path, capsys):
    code, out, err = train(tmp_path, capsys, "--dataset_streaming", "true")
    assert_one_line_error(code, out, err, "dataset_streaming: true is not supported")
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize(("values", "fragments"), [
    ({"datasets": [{"pth": "x.jsonl"}]}, ["datasets[0]: unknown key(s) pth", "path is required"]),
    ({"datasets": [{"path": "a.jsonl"}, 3]}, ["datasets[1]: expected a mapping"]),
    ({"datasets": [{"split": "train"}]}, ["datasets[0]: no path"]),
    ({"datasets": [{"path": "a.jsonl"}], "dataset_name": "b.jsonl"}, ["datasets (a mixture of 1) and dataset_name",
                                                                      "give one of them"]),
])
def test_a_bad_mixture_is_one_line(values, fragments):
    with pytest.raises(ValueError) as caught:
        _script(**values)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_a_mixture_is_read_by_trls_helper_and_normalized(tmp_path):
    other = write_rows(tmp_path / "other.jsonl", [json.loads(line) for line in
                                                  SAMPLE_DATA.read_text(encoding="utf-8").splitlines()[:10]])
    rows = load_rows(SAMPLE_DATA)
    # a bare path string, a file as path, and TRL's own form (path: json, data_files: ...), with fraction
    script = _script(datasets=[str(SAMPLE_DATA), {"path": "json", "data_files": str(other)}])
    train_rows, evaluation = load_script_datasets(script, evaluate=False, seed=0)
    assert evaluation is None and len(train_rows) == len(rows) + 10
    assert train_rows[0]["prompt"] == rows[0]["prompt"] and train_rows[len(rows)]["row_id"] == rows[0]["row_id"]
    fractions = _script(datasets=[{"path": str(SAMPLE_DATA), "fraction": 0.5}, {"path": str(other), "fraction": 0.5}])
    assert len(load_script_datasets(fractions, evaluate=False, seed=0)[0]) == 20  # no dataset oversampled
    capped = _script(datasets=[str(SAMPLE_DATA)], dataset_max_rows=5)
    assert len(load_script_datasets(capped, evaluate=False, seed=0)[0]) == 5


def test_test_split_size_holds_out_the_same_rows_every_time(tmp_path, caplog):
    for script in (_script(dataset_name=str(SAMPLE_DATA), test_split_size=0.25),
                   _script(datasets=[str(SAMPLE_DATA)], test_split_size=0.25)):
        first_train, first_eval = load_script_datasets(script, evaluate=True, seed=7)
        again_train, again_eval = load_script_datasets(script, evaluate=True, seed=7)
        assert len(first_eval) == 16 and len(first_train) == 48
        assert first_eval["row_id"] == again_eval["row_id"] and first_train["row_id"] == again_train["row_id"]
        assert not set(first_eval["row_id"]) & set(first_train["row_id"])
        # without evaluation the same rows are still held out (as trl grpo's mixture does), none is evaluated: said
        caplog.clear()
        train_only, none = load_script_datasets(script, evaluate=False, seed=7)
        assert none is None and train_only["row_id"] == first_train["row_id"]
        assert "test_split_size holds out 16 of 64 training rows" in caplog.text
        assert "eval_strategy is 'no'" in caplog.text


def test_dataset_test_split_is_the_evaluation_set_with_eval_strategy(tmp_path, caplog):
    lines = SAMPLE_DATA.read_text(encoding="utf-8").splitlines()
    folder = tmp_path / "data"
    folder.mkdir()
    write_rows(folder / "train.jsonl", [json.loads(line) for line in lines[:20]])
    write_rows(folder / "test.jsonl", [json.loads(line) for line in lines[20:23]])
    write_rows(folder / "validation.jsonl", [json.loads(line) for line in lines[23:25]])
    train_rows, evaluation = load_script_datasets(_script(dataset_name=str(folder)), evaluate=True, seed=0)
    assert len(train_rows) == 20 and len(evaluation) == 3
    _, validation = load_script_datasets(_script(dataset_name=str(folder), dataset_test_split="validation"),
                                         evaluate=True, seed=0)
    assert len(validation) == 2
    assert load_script_datasets(_script(dataset_name=str(folder)), evaluate=False, seed=0)[1] is None
    assert "dataset_test_split" not in caplog.text  # the default, unused as in trl grpo: nothing to say
    assert load_script_datasets(_script(dataset_name=str(folder), dataset_test_split="validation"), evaluate=False,
                                seed=0)[1] is None
    assert "dataset_test_split: validation is read only when eval_strategy is not 'no'" in caplog.text
    with pytest.raises(DatasetFormatError, match="has no 'dev' split"):
        load_script_datasets(_script(dataset_name=str(folder), dataset_test_split="dev"), evaluate=True, seed=0)


@pytest.mark.parametrize(("values", "fragments"), [
    ({"dataset_name": str(SAMPLE_DATA)}, ["(one file) has no test split", "test_split_size", "dataset folder"]),
    ({"datasets": [str(SAMPLE_DATA)]}, ["the datasets mixture has no test split", "test_split_size"]),
])
def test_evaluation_without_a_test_split_is_refused_not_the_training_rows(values, fragments):
    with pytest.raises(ValueError) as caught:
        load_script_datasets(_script(**values), evaluate=True, seed=0)
    for fragment in fragments:
        assert fragment in str(caught.value)


@pytest.mark.parametrize("values", [{"dataset_train_split": "validation"}, {"dataset_config": "default"}])
def test_a_split_or_config_of_a_single_file_is_refused_not_ignored(values):
    with pytest.raises(ValueError, match="is one file: remove it"):
        load_script_datasets(_script(dataset_name=str(SAMPLE_DATA), **values), evaluate=False, seed=0)


def test_system_prompt_is_every_rows_system_turn(tmp_path):
    no_comma = [{"text": "Do not use any commas.", "family": "ifeval", "instruction_id": "punctuation:no_comma",
                 "kwargs": {}}]
    path = write_rows(tmp_path / "rows.jsonl", [
        {"task": "Write a haiku.", "constraints": no_comma, "messages": [{"role": "system", "content": "old system"}]},
        {"task": "Write a poem.", "constraints": no_comma}])
    script = _script(dataset_name=str(path), system_prompt="Be brief.", test_split_size=1)
    train_rows, evaluation = load_script_datasets(script, evaluate=True, seed=0)
    for row in [*train_rows, *evaluation]:
        assert row["prompt"][0] == {"role": "system", "content": "Be brief."}
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert "old system" not in json.dumps(row["prompt"])


def test_chat_template_reads_a_file_a_trl_name_a_tokenizer_or_the_text(tmp_path, tiny_model_path):
    import trl

    template = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    (tmp_path / "t.jinja").write_text(template, encoding="utf-8")
    assert chat_template_text(str(tmp_path / "t.jinja")) == template
    assert chat_template_text(template) == template
    shipped = (trl.__path__[0] + "/chat_templates/qwen2_5.jinja")
    assert chat_template_text("qwen2_5") == open(shipped, encoding="utf-8").read()
    from transformers import AutoTokenizer

    assert chat_template_text(str(tiny_model_path)) == AutoTokenizer.from_pretrained(
        str(tiny_model_path)).get_chat_template()
    for bad, fragment in [(str(tmp_path / "missing.jinja"), "cannot read"),
                          ("no_such_template_name", "no template TRL ships")]:
        with pytest.raises(ValueError, match=fragment) as caught:
            chat_template_text(bad)
        assert "\n" not in str(caught.value) and str(caught.value).startswith("chat_template: ")


def test_ignore_bias_buffers_names_the_boolean_buffers_for_ddp(tmp_path):
    """``ignore_bias_buffers: true`` is honoured as TRL's scripts honour it (trl/scripts/dpo.py): the model's boolean
    buffers are named in ``_ddp_params_and_buffers_to_ignore``, which DDP skips; without it nothing is set."""
    import torch

    from hir_trl.cli.main import parse_train_args, prepare_training
    from hir_trl.run_folder import release_run_folder

    from ..testing_utils import TINY_RECIPE

    for flag, out in (("true", "on"), ("false", "off")):
        parsed = parse_train_args(["--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / out),
                                   "--model_name_or_path", str(tmp_path / "model"), "--ignore_bias_buffers", flag])
        try:
            trainer, _ = prepare_training(*parsed)
        finally:
            release_run_folder()
        model = trainer.model
        if flag == "true":
            assert model._ddp_params_and_buffers_to_ignore == [
                name for name, buffer in model.named_buffers() if buffer.dtype == torch.bool]
        else:
            assert not hasattr(model, "_ddp_params_and_buffers_to_ignore")


# ----------------------------------------------------------------------------------- HiRTrainer's argument order


def test_hirtrainer_takes_grpotrainers_arguments_in_grpotrainers_order():
    from trl import GRPOTrainer

    from hir_trl import HiRTrainer

    ours = inspect.signature(HiRTrainer.__init__).parameters
    theirs = inspect.signature(GRPOTrainer.__init__).parameters
    positional = [n for n, p in ours.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == list(theirs)
    assert all(ours[n].default == theirs[n].default for n in positional if n != "self")
    assert [n for n, p in ours.items() if p.kind is p.KEYWORD_ONLY] == ["judge", "dataset_name"]


@pytest.mark.parametrize("old_call", ["model, args, dataset", "model, args, dataset, [reward]",
                                      "model, args"])
def test_the_old_positional_order_is_one_typeerror_naming_the_fix(tmp_path, old_call):
    from hir_trl import HiRTrainer
    from hir_trl.data.loading import load_hir_dataset

    def reward(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    namespace = {"model": "unused-model-id", "args": make_args(tmp_path), "dataset": load_hir_dataset(SAMPLE_DATA),
                 "reward": reward}
    with pytest.raises(TypeError) as caught:
        eval(f"HiRTrainer({old_call})", {"HiRTrainer": HiRTrainer, **namespace})  # noqa: S307 - a fixed call
    message = str(caught.value)
    assert "\n" not in message and "GRPOTrainer's order (model, reward_funcs, args, train_dataset" in message
    assert "HiRConfig as reward_funcs" in message and "args=config" in message


def test_hirtrainer_positional_as_grpotrainer_trains_and_logs_the_extra_reward(tmp_path, tiny_model_path,
                                                                                  sample_dataset):
    from hir_trl import HiRTrainer

    def brevity(prompts, completions, **kwargs):
        return [1.0 / (1 + len(str(c))) for c in completions]

    trainer = HiRTrainer(str(tiny_model_path), [brevity], make_args(tmp_path, reward_weights=[1.0, 0.5]),
                         sample_dataset)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert trainer.state.global_step == 1 and "rewards/brevity/mean" in logged
    assert trainer.extra_reward_funcs[0].__name__ == "brevity"


# ------------------------------------------------------------------------- the tiny recipe, with every option


def test_tiny_recipe_with_trl_script_options(tmp_path, capsys, reward_module):
    """One run of the tiny recipe: a dotted-path and a TRL reward function with weights, the evaluation split of a
    dataset folder evaluated every step, a system prompt and a chat template."""
    lines = SAMPLE_DATA.read_text(encoding="utf-8").splitlines()
    folder = tmp_path / "data"
    folder.mkdir()
    write_rows(folder / "train.jsonl", [json.loads(line) for line in lines[:24]])
    write_rows(folder / "test.jsonl", [json.loads(line) for line in lines[24:25]])
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (tmp_path / "chat.jinja").write_text(template, encoding="utf-8")
    code, out, err = train(tmp_path, capsys, "--dataset_name", folder, "--max_steps", "1", "--save_strategy", "no",
                           "--reward_funcs", f"{reward_module}.length_reward", "think_format_reward",
                           "--reward_weights", "1", "0.5", "0.5", "--eval_strategy", "steps", "--eval_steps", "1",
                           "--system_prompt", "You are a careful assistant.",
                           "--chat_template", tmp_path / "chat.jinja")
    assert code == 0, err
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    step = next(h for h in history if "reward" in h and "eval_reward" not in h)
    assert step["rewards/length_reward/mean"] > 0 and step["rewards/think_format_reward/mean"] == 0
    evaluation = next(h for h in history if "eval_reward" in h)
    assert {"eval_loss", "eval_rewards/cla/mean", "eval_rewards/length_reward/mean"} <= set(evaluation)
    table = pd.read_parquet(tmp_path / "out" / "completions" / "completions_00001.parquet")
    assert {"length_reward", "think_format_reward"} <= set(table.columns)
    assert all(list(prompt)[0]["content"] == "You are a careful assistant." for prompt in table["prompt"])
    saved = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    saved_template = saved.get("chat_template") or (tmp_path / "out" / "chat_template.jinja").read_text()
    assert saved_template == template
