"""Constraints and rewards of your own: register_verifier, verifier_modules, reward_funcs beside the constraint
reward, the one owner of the reward mode, and the model card's HiR section."""

from __future__ import annotations

import json
import math
import re
import runpy
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from hir_trl import ConstraintReward, DatasetFormatError, HiRConfig, HiRTrainer, load_hir_dataset, register_verifier
from hir_trl.card import hir_card_section
from hir_trl.configs import PAPER_VALUES
from hir_trl.data.loading import load_rows
from hir_trl.verifiers import FAMILIES, validate_constraint, verify_constraint
from hir_trl.verifiers import muldimif as muldimif_module

REPO = Path(__file__).resolve().parents[2]
ALWAYS_TEXT = "Write in the Acme house style."
NEVER_TEXT = "Include the secret Acme code."


pytestmark = pytest.mark.usefixtures("clean_registry")  # registrations are process-wide (tests/conftest.py)


def native_row(task, *constraints, row_id=None):
    return {"id": row_id or task, "task": task, "constraints": list(constraints)}


def acme(instruction_id, text, **kwargs):
    return {"text": text, "family": "acme", "instruction_id": instruction_id, "kwargs": kwargs}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------- the API


def test_register_verifier_as_decorator_and_its_verdicts():
    seen_prompts = []

    @register_verifier("acme", "max_lines", description="Answer in at most {n} lines.")
    def max_lines(response: str, n: int, prompt: str | None = None) -> bool:
        seen_prompts.append(prompt)
        return len(response.strip().splitlines()) <= n

    assert max_lines("a\nb", n=2) is True  # the decorator returns the function itself
    assert verify_constraint("acme", "max_lines", {"n": 1}, "a\nb", "the instruction").passed is False
    assert verify_constraint("acme", "max_lines", {"n": 2}, "a\nb", "the instruction").passed is True
    assert seen_prompts[-2:] == ["the instruction", "the instruction"]  # prompt= when the function takes it
    assert verify_constraint("acme", "max_lines", {"n": 2}, "   ").passed is False  # as every family: blank fails
    assert FAMILIES["acme"].VERIFIER.build_checker("max_lines", {"n": 3}).build_description() == \
        "Answer in at most 3 lines."
    # kwargs are checked against the signature when a row is loaded
    assert "missing a required argument: 'n'" in validate_constraint("acme", "max_lines", {})
    assert "unexpected keyword argument 'm'" in validate_constraint("acme", "max_lines", {"n": 1, "m": 2})


def test_a_failing_or_non_bool_checker_is_a_recorded_failed_verdict():
    register_verifier("acme", "raises", lambda response: 1 / 0)
    register_verifier("acme", "returns_int", lambda response: 1)
    register_verifier("acme", "returns_none", lambda response: None)
    verdict = verify_constraint("acme", "raises", {}, "text")
    assert (verdict.passed, verdict.error) == (False, "ZeroDivisionError: division by zero")
    verdict = verify_constraint("acme", "returns_int", {}, "text")
    assert verdict.passed is False and "returned int 1, not a bool" in verdict.error
    assert "returned NoneType" in verify_constraint("acme", "returns_none", {}, "text").error
    # in a batch, the failure stays in its own (row, constraint) cell
    register_verifier("acme", "ok", lambda response: True)
    reward = ConstraintReward(reward_mode="cla")
    rows = [[{"kind": "hard", "family": "acme", "instruction_id": i, "kwargs": "{}", "text": i}
             for i in ("raises", "ok")], [{"kind": "hard", "family": "acme", "instruction_id": "ok", "kwargs": "{}",
                                           "text": "ok"}]]
    assert reward(["q", "q"], ["a", "b"], constraints=rows) == [0.5, 1.0]
    assert "ZeroDivisionError" in reward.last_verdicts[0, 0].error and reward.last_verdicts[0, 1].error is None


def test_register_verifier_errors():
    register_verifier("acme", "first", lambda response: True)
    with pytest.raises(ValueError, match="already registered.*replace=True"):
        register_verifier("acme", "first", lambda response: False)
    register_verifier("acme", "first", lambda response: False, replace=True)
    assert verify_constraint("acme", "first", {}, "x").passed is False
    builtin_id = sorted(muldimif_module.REGISTRY)[0]
    with pytest.raises(ValueError, match="built-in"):
        register_verifier("muldimif", builtin_id, lambda response, requirement: True)
    register_verifier("muldimif", builtin_id, lambda response, requirement: requirement == "yes", replace=True)
    assert verify_constraint("muldimif", builtin_id, {"requirement": "yes"}, "x").passed is True
    assert verify_constraint("muldimif", builtin_id, {"requirement": "no"}, "x").passed is False
    for family, instruction_id in [("ac:me", "x"), ("acme", "a:b"), ("ac me", "x"), ("acme", "a\tb"), ("", "x")]:
        with pytest.raises(ValueError, match="family|instruction_id"):
            register_verifier(family, instruction_id, lambda response: True)
    with pytest.raises(TypeError, match="check"):
        register_verifier("acme", "not_callable", "yes")


# ----------------------------------------------------------------------------------------------- data


def test_rows_of_a_registered_family_load_and_bad_kwargs_name_the_row(tmp_path):
    register_verifier("acme", "mentions", lambda response, product: product in response)
    path = write_jsonl(tmp_path / "rows.jsonl", [
        native_row("Describe a kettle.", acme("mentions", "Mention AcmeBoil.", product="AcmeBoil")),
        native_row("Describe a toaster.", acme("mentions", "Mention it.", brand="x"))])
    with pytest.raises(DatasetFormatError, match=r"rows.jsonl, line 2: field 'constraints\[0\].instruction_id'"):
        load_rows(path)
    write_jsonl(path, [native_row("Describe a kettle.", acme("mentions", "Mention AcmeBoil.", product="AcmeBoil")),
                       native_row("Describe a toaster.", acme("unknown", "?"))])
    with pytest.raises(DatasetFormatError, match="unknown instruction id 'unknown' in family 'acme'"):
        load_rows(path)


# ----------------------------------------------------------------------------------------------- training


def _train_args(tmp_path, **overrides):
    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=12, max_steps=1,
                  max_completion_length=8, bf16=False, use_cpu=True, gradient_checkpointing=False,
                  report_to="none", logging_steps=1, save_strategy="no", seed=0, learning_rate=1e-4,
                  replay_truncated_completions=True)
    values.update(overrides)
    return HiRConfig(**values)


def test_a_registered_constraint_trains_replays_and_extra_rewards_score_the_replay_itself(tmp_path,
                                                                                          tiny_model_path):
    """One register_verifier call, and the family trains: every completion meets 'always' and misses 'never', so each
    replay's q' keeps exactly the 'always' text; the extra reward function depends on the prompt, so a replay's extra
    reward (computed on (q', y)) differs from its source's (on (q, y))."""
    prompts_seen = []

    @register_verifier("acme", "always")
    def always(response: str, prompt: str) -> bool:
        prompts_seen.append(prompt)
        return True

    register_verifier("acme", "never", lambda response: False)
    rows = [native_row(task, acme("always", ALWAYS_TEXT), acme("never", NEVER_TEXT))
            for task in ("Describe our kettle.", "Advertise our toaster.")]
    dataset = load_hir_dataset(write_jsonl(tmp_path / "acme.jsonl", rows))
    calls = []

    def secret(prompts, completions, constraints, **kwargs):  # TRL's reward-function signature
        calls.append((prompts, completions, constraints, sorted(kwargs)))
        return [2.0 if NEVER_TEXT in p[-1]["content"] else -1.0 for p in prompts]

    trainer = HiRTrainer(model=str(tiny_model_path), train_dataset=dataset, reward_funcs=[secret],
                         args=_train_args(tmp_path, reward_weights=[1.0, 0.5]))
    assert trainer.constraint_reward.reward_mode == "cla"  # built for us, first, with the config's mode
    assert trainer.reward_func_names == ["cla", "secret"]
    trainer.train()

    replay = trainer.last_replay
    B = 12
    assert set(prompts_seen) == {row["prompt"][-1]["content"] for row in dataset}
    # the sampled rows: 1 x CLA (1 of 2 met) + 0.5 x secret(q, y) = 0.5 + 1.0
    assert replay.rewards[:B] == [1.5] * B
    replays = [i for i, new_row in enumerate(replay.new_rows) if new_row.kind == "replay"]
    assert len(replays) == 4  # k = 2 per group, every failure is a candidate
    for i in replays:
        q_prime = replay.new_rows[i].q_prime[-1]["content"]
        assert ALWAYS_TEXT in q_prime and NEVER_TEXT not in q_prime
        assert tuple(replay.new_rows[i].choice.satisfied) == (True, False)
        # 1 (the replay meets what q' keeps) + 0.5 x secret(q', y) = 1 - 0.5; a copy of the source's would be 2.0
        assert replay.rewards[B + i] == pytest.approx(0.5)
    # the extra function's replay call: q' and the source's completion, the kept constraints only
    replay_prompts, replay_completions, replay_constraints, keys = calls[-1]
    assert [p[-1]["content"] for p in replay_prompts] == [replay.new_rows[i].q_prime[-1]["content"] for i in replays]
    assert all([c["text"] for c in kept] == [ALWAYS_TEXT] for kept in replay_constraints)
    assert {"completion_ids", "trainer_state", "task", "row_id"} <= set(keys)
    assert len(replay_completions) == 4

    trainer.create_model_card()
    card = (tmp_path / "out" / "README.md").read_text()
    assert "1 x constraint reward (CLA" in card and "0.5 x `secret`" in card
    assert "| `rewards/secret/mean` |" in card


def test_reward_funcs_checks_and_the_one_owner_of_the_reward_mode(tmp_path, tiny_model_path, sample_dataset):
    def extra(prompts, completions, **kwargs):
        return [0.0] * len(prompts)

    def build(reward_funcs, **overrides):
        return HiRTrainer(model=str(tiny_model_path), args=_train_args(tmp_path, **overrides),
                          train_dataset=sample_dataset, reward_funcs=reward_funcs)

    with pytest.raises(ValueError, match=r"reward_mode='ila'.*HiRConfig.reward_mode='cla'"):
        build(ConstraintReward(reward_mode="ila"))
    with pytest.raises(ValueError, match="must be the first"):
        build([extra, ConstraintReward()])
    with pytest.raises(TypeError, match="one ConstraintReward"):
        build([ConstraintReward(), ConstraintReward()])
    with pytest.raises(TypeError, match="got int 42"):
        build([42])
    with pytest.raises(ValueError, match="reward_weights has 1 weight"):
        build([extra], reward_weights=[1.0])
    with pytest.raises(ValueError, match="sum_then_normalize"):
        build([extra], multi_objective_aggregation="normalize_then_sum")
    reward = ConstraintReward()
    trainer = build([reward, extra], reward_mode="ila")
    assert trainer.constraint_reward is reward and reward.reward_mode == "ila"
    assert trainer.reward_func_names == ["ila", "extra"]
    assert build(ConstraintReward(reward_mode="cla")).constraint_reward.reward_mode == "cla"


# ----------------------------------------------------------------------------------------------- model card


def test_card_lists_every_hirconfig_field_and_the_departures_from_the_paper(tmp_path):
    args = HiRConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True, per_device_train_batch_size=6)
    card = hir_card_section(args, "data.jsonl", [])
    own = [f.name for f in fields(HiRConfig) if f.name in HiRConfig.__annotations__ or f.name.startswith("judge_")]
    assert len(own) > 30 and "judge_model" in own  # the judge's fields, inherited from JudgeArguments, too
    for name in own:
        assert f"- `{name}`: `{getattr(args, name)}`" in card, name
    assert "1 x constraint reward (CLA, the fraction of constraints met" in card
    # nine defaults depart from the paper, each on the card with the paper's value
    assert set(PAPER_VALUES) == {"reward_mode", "replay_advantage", "replay_truncated_completions",
                                 "advantage_estimator", "beta", "replay_shortfall", "hindsight_relabel",
                                 "diversity_aggregation", "replay_min_satisfied"}
    assert "The 9 settings where hir-trl's defaults depart from the paper" in card
    for name, paper in PAPER_VALUES.items():
        assert getattr(args, name) != paper, name
        assert f"| `{name}` | `{getattr(args, name)}` | `{paper}` | departs |" in card
    # the paper recipe sets the paper's value of each
    recipe = yaml.safe_load((REPO / "recipes" / "Qwen2.5-7B-Instruct" / "hir" / "config_paper.yaml").read_text())
    assert {name: recipe[name] for name in PAPER_VALUES} == PAPER_VALUES
    paper_args = HiRConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True, per_device_train_batch_size=6,
                           reward_mode="ila", replay_advantage="group", replay_truncated_completions=True,
                           advantage_estimator="reinforce_pp", beta=1e-4)
    assert hir_card_section(paper_args, None, []).count("| as the paper |") == 5
    assert hir_card_section(HiRConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True, per_device_train_batch_size=6,
                                      **PAPER_VALUES), None, []).count("| as the paper |") == 9
    assert "1 x constraint reward (ILA, 1 when every constraint is met" in hir_card_section(paper_args, None, [])


# ----------------------------------------------------------------------------------------------- evaluation


def _acme_for_eval():
    register_verifier("acme", "mentions", lambda response, product: product in response,
                      check_loose=lambda response, product: product.lower() in response.lower(),
                      description="Mention {product} by name.")
    register_verifier("acme", "short", lambda response: len(response.split()) <= 5)


def test_hir_eval_scores_a_registered_family_strict_and_loose(tmp_path):
    from hir_trl.evaluation import evaluate, load_benchmark

    _acme_for_eval()
    path = write_jsonl(tmp_path / "bench.jsonl", [
        native_row("Describe a kettle.", acme("mentions", "Mention AcmeBoil.", product="AcmeBoil"),
                   acme("short", "Be short."), row_id="k"),
        native_row("Describe a toaster.", acme("short", "Be short."), row_id="t")])
    benchmark = load_benchmark(path, format="hir")
    prompts = [row.prompt for row in benchmark.rows]
    report = evaluate(benchmark, {prompts[0]: "I love acmeboil kettles", prompts[1]: "a b c d e f g"})
    metrics = {name: stats["mean"] for name, stats in report["metrics"].items()}
    # strict: row k meets 'short' only (case differs), row t fails; loose: row k meets both
    assert metrics == {"ila": 0.0, "cla": 0.25, "ila_loose": 0.5, "cla_loose": 0.5}
    assert report["by_category"]["acme"]["n"] == 3 and report["by_instruction"]["mentions"]["loose_acc"] == 1.0
    # without a registered loose check, an HIR benchmark reports ILA and CLA only (as before)
    plain = write_jsonl(tmp_path / "plain.jsonl", [native_row("Describe a kettle.", acme("short", "Be short."))])
    assert set(evaluate(load_benchmark(plain, format="hir"), {"x": "y"}, allow_unknown=True)["metrics"]) == {
        "ila", "cla"}


def test_eval_cli_imports_verifier_modules_and_reads_family_ids_in_ifeval_rows(tmp_path, capsys):
    from hir_trl.cli.eval import main

    module = tmp_path / "acme_rules.py"
    module.write_text("from hir_trl import register_verifier\n\n"
                      "@register_verifier('acme', 'mentions', check_loose=lambda response, product: "
                      "product.lower() in response.lower())\n"
                      "def mentions(response, product):\n    return product in response\n")
    bench = tmp_path / "ifeval_style.jsonl"
    bench.write_text(json.dumps({"key": 1, "prompt": "Sell a kettle without commas.",
                                 "instruction_id_list": ["acme:mentions", "punctuation:no_comma"],
                                 "kwargs": [{"product": "AcmeBoil"}, {}]}) + "\n")
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"prompt": "Sell a kettle without commas.", "response": "buy an acmeboil"}) + "\n")
    out = tmp_path / "report.json"
    args = ["score", "--benchmark", str(bench), "--responses", str(responses), "--output", str(out)]
    assert main(args) == 2  # without the module the id is unknown
    assert "acme:mentions" in capsys.readouterr().err
    assert main([*args, "--verifier-modules", str(module)]) == 0
    report = json.loads(out.read_text())["benchmarks"]["IFEval"]
    assert report["by_category"] == {"acme": {"n": 1, "acc": 0.0, "unjudged": 0, "loose_acc": 1.0},
                                     "punctuation": {"n": 1, "acc": 1.0, "unjudged": 0, "loose_acc": 1.0}}
    assert main([*args, "--verifier-modules", "no_such_module_xyz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("hir-trl eval: error: verifier_modules: cannot import 'no_such_module_xyz': "
                       "ModuleNotFoundError: No module named 'no_such_module_xyz'")


# ----------------------------------------------------------------------------------------------- synth and CLI


def test_synth_samples_registered_ids_with_a_description(tmp_path, capsys):
    from hir_trl.data import synth
    _acme_for_eval()  # 'mentions' has a description but needs kwargs; 'short' has no description
    assert synth.registered_samplers("acme") == {}
    register_verifier("acme", "mentions", lambda response, product: product in response, replace=True,
                      description="Mention {product} by name.",
                      sample_kwargs=lambda rng, task: {"product": rng.choice(["AcmeBoil", "AcmeToast"])})
    register_verifier("acme", "shout", lambda response: response.isupper(), description="Answer in capitals.")
    assert sorted(synth.registered_samplers("acme")) == ["acme:mentions", "acme:shout"]
    rows = synth.synthesize(["Describe a kettle.", "Write a poem."] * 4, 2, seed=0, families=["ifeval", "acme"])
    native = [row for row in rows if "task" in row]
    assert native, "no row drew an acme id"
    used = {(c["family"], c["instruction_id"]) for row in native for c in row["constraints"]}
    assert used & {("acme", "mentions"), ("acme", "shout")} and ("acme", "short") not in used
    for row in native:
        for c in row["constraints"]:
            if c["instruction_id"] == "mentions":
                assert c["text"] == f"Mention {c['kwargs']['product']} by name."
    path = synth.write_rows(rows, tmp_path / "synth.jsonl")
    assert len(load_rows(path)) == len(rows)  # every row, native or HIR-16K, loads
    # the built-in families alone give the same rows as before registering anything
    assert synth.synthesize(["Describe a kettle."] * 3, 2, 0) == synth.synthesize(["Describe a kettle."] * 3, 2, 0,
                                                                                   families=["ifeval", "ifbench"])
    from hir_trl.cli.synth import main as synth_main

    assert synth_main(["--dataset_name", "x.jsonl", "--output", "y.jsonl", "--verifier_modules", "no_such_xyz"]) == 2
    assert "cannot import 'no_such_xyz'" in capsys.readouterr().err


def test_train_cli_verifier_modules_from_the_recipe(tmp_path, capsys):
    from hir_trl.cli.main import main, parse_train_args

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"model_name_or_path": str(tmp_path / "model"), "dataset_name": "x.jsonl",
                                      "verifier_modules": ["my_pkg.constraints", "rules.py"],
                                      "output_dir": str(tmp_path / "out"), "use_cpu": True, "bf16": False,
                                      "per_device_train_batch_size": 6}))
    script_args, _, _ = parse_train_args(["--config", str(recipe)])
    assert script_args.verifier_modules == ["my_pkg.constraints", "rules.py"]
    assert main(["train", "--config", str(recipe), "--verifier_modules", "no_such_module_xyz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("hir-trl train: error: verifier_modules: cannot import 'no_such_module_xyz': "
                       "ModuleNotFoundError: No module named 'no_such_module_xyz'")


# ----------------------------------------------------------------------------------------------- docs


def _docs_example() -> str:
    """The one Python block of docs/verifiers.md's section on constraints and reward functions of your own."""
    text = (REPO / "docs" / "verifiers.md").read_text(encoding="utf-8")
    section = re.search(r"^## Your own constraints and reward functions\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 1
    return blocks[0]


def test_docs_custom_constraints_example_runs_verbatim(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_docs_example(), "docs/verifiers.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2 and trainer.reward_func_names == ["cla", "brevity"]
    printed = capsys.readouterr().out
    assert "'role': 'user'" in printed
    kept = [row.q_prime[-1]["content"] for row in trainer.last_replay.new_rows if row.q_prime is not None]
    assert kept and all(q.startswith(("Describe our kettle.", "Advertise our toaster.", "Review our blender."))
                        for q in kept)
    rewards = trainer.last_replay.rewards
    assert all(not math.isnan(r) for r in rewards)


def test_example_script_runs_end_to_end(tmp_path):
    namespace = runpy.run_path(str(REPO / "examples" / "custom_constraints.py"))
    report = namespace["main"](["--workdir", str(tmp_path / "work")])
    bench = report["benchmarks"]["acme"]
    assert set(bench["metrics"]) == {"ila", "cla", "ila_loose", "cla_loose"}
    assert bench["by_category"]["acme"]["n"] == 6 and bench["num_rows"] == 3
    assert "## HiR training" in (tmp_path / "work" / "hir" / "README.md").read_text()
