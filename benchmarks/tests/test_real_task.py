"""Tests for benchmarks/learning/real_task.py: the real-model task's prompts, pools, scoring and IFEval helper."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks.learning.real_task import (
    CONSTRAINT_TYPES,
    LISTING_SEPARATOR,
    TYPE_OF_ID,
    RealTaskConfig,
    build_rows,
    evaluate_held_out,
    load_muldimif_tasks,
    make_row,
    score_ifeval,
    score_responses,
    split_tasks,
)
from hir_trl.verifiers import FAMILIES
from tests.testing_utils import SAMPLE_DATA, shared_file

TASKS = [f"Describe the history of the {w} in a few sentences." for w in
         ("bridge", "castle", "harbor", "market", "museum", "river", "school", "garden", "forest", "island", "valley",
          "station", "theater", "village", "library", "bakery")]


def test_load_muldimif_tasks_real_data(tmp_path):
    path = shared_file("muldimif/test.json")
    rows = json.loads(path.read_text())
    tasks = load_muldimif_tasks(path, exclude=None)
    assert len(tasks) == len(set(tasks)) > 300
    assert all(20 <= len(t) <= 300 and LISTING_SEPARATOR not in t for t in tasks)
    first = next(r for r in rows if r["constraint_pattern"] == "Listing")
    assert tasks[0] == first["conversations"][0]["content"].split(LISTING_SEPARATOR)[0].strip()
    # A task sharing a sentence with an (IFEval) evaluation prompt is dropped, and only that one.
    sentence = next(t for t in tasks if len(t) > 40)
    fake_ifeval = tmp_path / "input_data.jsonl"
    fake_ifeval.write_text(json.dumps({"prompt": f"Please answer this. {sentence} Use no commas."}) + "\n")
    kept = load_muldimif_tasks(path, exclude=fake_ifeval)
    assert sentence not in kept and len(kept) == len(tasks) - 1
    longer = load_muldimif_tasks(path, max_chars=10_000, exclude=None)
    assert len(longer) > len(tasks)


def test_real_ifeval_prompts_are_excluded():
    tasks = load_muldimif_tasks(shared_file("muldimif/test.json"), exclude=shared_file("ifeval/input_data.jsonl"))
    ifeval = [json.loads(line)["prompt"] for line in shared_file("ifeval/input_data.jsonl").read_text().splitlines()]
    assert not any(task in prompt for task in tasks for prompt in ifeval)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="shared/data"):
        load_muldimif_tasks(tmp_path / "missing.json")
    bad = tmp_path / "test.json"
    bad.write_text(json.dumps([{"id": "7", "constraint_pattern": "Listing",
                                "conversations": [{"role": "user", "content": "No rules here."}]}]))
    with pytest.raises(ValueError, match=r"row 0 \(id 7\)"):
        load_muldimif_tasks(bad)


def test_split_tasks_is_disjoint_and_seeded():
    train, held_out = split_tasks(TASKS, 4, seed=0)
    assert len(held_out) == 4 and len(train) == len(TASKS) - 4
    assert not set(train) & set(held_out) and set(train) | set(held_out) == set(TASKS)
    assert split_tasks(TASKS, 4, seed=0) == (train, held_out)
    assert split_tasks(TASKS, 4, seed=1) != (train, held_out)
    with pytest.raises(ValueError, match="distinct"):
        split_tasks([*TASKS, TASKS[0]], 4, seed=0)
    with pytest.raises(ValueError, match="cannot give 16 held-out"):
        split_tasks(TASKS, 16, seed=0)


def test_make_row_draws_compatible_constraints_of_the_chosen_types(tmp_path):
    from hir_trl import load_hir_dataset

    cfg, rng = RealTaskConfig(), random.Random(3)
    rows = [make_row(task, str(i), rng, cfg) for i, task in enumerate(TASKS)]
    counts = [len(r["constraints"]) for r in rows]
    assert min(counts) >= cfg.min_constraints and max(counts) <= cfg.max_constraints and len(set(counts)) > 1
    for row in rows:
        ids = [c["instruction_id"] for c in row["constraints"]]
        assert len(set(ids)) == len(ids) and set(ids) <= set(CONSTRAINT_TYPES.values())
        for c in row["constraints"]:
            assert c["text"] == FAMILIES[c["family"]].REGISTRY[c["instruction_id"]](**c["kwargs"]).build_description()
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_hir_dataset(path)
    assert len(loaded) == len(rows)
    assert loaded[0]["prompt"][-1]["content"].startswith(TASKS[0] + "\n\n" + LISTING_SEPARATOR)


def test_build_rows_pools():
    cfg = RealTaskConfig(num_eval_tasks=4, num_rl_prompts=30)
    data = build_rows(cfg, TASKS)
    assert len(data["eval"]) == 4 and len(data["rl"]) == 30
    assert [r["task"] for r in data["eval"]] == data["eval_tasks"]
    assert not {r["task"] for r in data["rl"]} & {r["task"] for r in data["eval"]}
    # 12 training tasks cycled: each used 2 or 3 times in 30 rows, with fresh constraints.
    uses = {t: sum(r["task"] == t for r in data["rl"]) for t in data["train_tasks"]}
    assert set(uses.values()) == {2, 3}
    assert build_rows(cfg, TASKS) == data


def _row(*constraints):
    return {"id": "x", "task": "Write about rivers.", "template": "type3",
            "constraints": [{"text": FAMILIES["ifeval"].REGISTRY[i](**k).build_description(), "family": "ifeval",
                             "instruction_id": i, "kwargs": k} for i, k in constraints]}


def test_score_responses():
    row = _row(("punctuation:no_comma", {}), ("detectable_format:title", {}),
               ("keywords:existence", {"keywords": ["harbor"]}))
    scores = score_responses([row] * 3, ["<<Rivers>> The river runs to the harbor.",
                                         "<<Rivers>> The river runs, slowly, to the harbor.",
                                         "Rivers, rivers everywhere."])
    assert scores["ila"] == pytest.approx(1 / 3)
    assert scores["cla"] == pytest.approx((3 / 3 + 2 / 3 + 0) / 3)
    assert scores["family"]["no_comma"] == pytest.approx(1 / 3)
    assert scores["family"]["title"] == pytest.approx(2 / 3)
    assert scores["family"]["keyword"] == pytest.approx(2 / 3)
    assert scores["count"]["keyword"] == 3 and scores["count"]["postscript"] == 0
    assert scores["family"]["postscript"] != scores["family"]["postscript"]  # NaN: no such constraint
    with pytest.raises(ValueError, match="2 rows but 1 responses"):
        score_responses([row, row], ["a"])
    with pytest.raises(ValueError, match=r"row 0 \(x\).*change_case:english_lowercase"):
        score_responses([_row(("change_case:english_lowercase", {}))], ["a"])


def test_evaluate_held_out_is_reproducible(tiny_model_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    rows = build_rows(RealTaskConfig(num_eval_tasks=3, num_rl_prompts=1), TASKS)["eval"]
    first, responses = evaluate_held_out(model, tokenizer, rows, samples=2, max_new_tokens=8)
    again, responses_again = evaluate_held_out(model, tokenizer, rows, samples=2, max_new_tokens=8)
    assert responses == responses_again and json.dumps(first) == json.dumps(again)
    assert len(responses) == 6
    _, other = evaluate_held_out(model, tokenizer, rows, samples=2, max_new_tokens=8, seed=7)
    assert other != responses


def test_score_ifeval_runs_hir_trl_eval(tiny_model_path, tmp_path):
    benchmark = shared_file("ifeval/input_data.jsonl")
    result = score_ifeval(tiny_model_path, tmp_path / "ifeval", max_tokens=8, limit=3, benchmark=benchmark,
                          threads=1)
    assert result["num_rows"] == 3
    assert 0.0 <= result["prompt_level_strict_acc"] <= result["prompt_level_loose_acc"] <= 1.0
    lines = (tmp_path / "ifeval" / "ifeval.responses.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert json.loads((tmp_path / "ifeval" / "summary.json").read_text())["settings"]["limit"] == 3
    with pytest.raises(RuntimeError, match="hir-trl eval failed"):
        score_ifeval(tmp_path / "no-model", tmp_path / "x", limit=1, benchmark=benchmark)


@pytest.mark.slow
def test_real_task_benchmark_end_to_end(tmp_path, tiny_model_path):
    """The learning benchmark on the real-model task, with a tiny stand-in model and LoRA: rows, base rates,
    HiR and RL-IR runs scored per constraint type, the report."""
    shared_file("muldimif/test.json")
    from benchmarks.learning.run import BenchConfig, run_all

    task = RealTaskConfig(model_dir=str(tiny_model_path), num_eval_tasks=4, num_rl_prompts=8, base_samples=1,
                          max_new_tokens=8)
    bench = BenchConfig(methods=("hir", "rl_ir"), seeds=(0,), prompts=4, prompts_per_step=2, eval_every=1,
                        eval_prompts=4, eval_samples=1, max_completion_length=8, jobs=1, lora_rank=4)
    run_all(bench, task, tmp_path / "results", cache_root=tmp_path / "cache", log=lambda s: None)
    task_dir = tmp_path / "cache" / f"real-{task.key()}"
    assert (task_dir / "model").resolve() == tiny_model_path.resolve()
    meta = json.loads((task_dir / "meta.json").read_text())
    assert meta["kind"] == "real" and meta["eval_base_model"]["samples"] == 1
    assert len((task_dir / "eval_rows.jsonl").read_text().splitlines()) == 4
    runs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results" / "runs").glob("*.json")}
    assert set(runs) == {"hir-seed0", "rl_ir-seed0"}
    for run in runs.values():
        assert [e["step"] for e in run["evals"]] == [0, 1, 2]
        assert set(run["evals"][0]["family"]) == set(TYPE_OF_ID.values())
        assert run["bench"]["lora_rank"] == 4
    # HiR samples m = 6 per prompt, plus at most k = 2 supplementary samples per group short of candidates.
    assert 2 * 6 <= runs["hir-seed0"]["steps"][0]["generated_sequences"] <= 2 * (6 + 2)
    assert runs["rl_ir-seed0"]["steps"][0]["generated_sequences"] == 2 * 8
    assert "Real MulDimIF requests" in (tmp_path / "results" / "results.md").read_text()


def test_task_suffix_is_part_of_x_and_keeps_old_keys():
    """The suffix is appended to every task (so a hindsight instruction keeps it); configs without one keep the key
    they had before the field existed."""
    plain, short = RealTaskConfig(), RealTaskConfig(task_suffix="Answer in one sentence.")
    assert plain.key() == "a8ddb78ab34a" and short.key() != plain.key()
    rows = build_rows(RealTaskConfig(task_suffix="Answer in one sentence.", num_eval_tasks=4, num_rl_prompts=6))
    assert all(r["task"].endswith(" Answer in one sentence.") for r in rows["eval"] + rows["rl"])


def test_base_model_pilot_on_the_training_pool(tiny_model_path):
    from benchmarks.learning.real_task import measure_training_pool

    cfg = RealTaskConfig(model_dir=str(tiny_model_path), num_eval_tasks=4, num_rl_prompts=6, min_constraints=1,
                         max_constraints=2)
    result = measure_training_pool(cfg, rows=3, samples=2, max_new_tokens=8, log=lambda s: None)
    assert result["rows"] == 3 and len(result["completions"]) == 6
    met = [all(ch == "1" for ch in c["passed"]) for c in result["completions"]]
    assert result["ila"] == pytest.approx(sum(met) / 6)
    assert result["truncated_fraction"] == pytest.approx(sum(c["tokens"] >= 8 for c in result["completions"]) / 6)
    assert result["fraction_at_least"] == {}  # no reporting cutoff (64, 96, ...) is within 8 tokens


def test_rows_command_writes_the_preregistered_training_rows(tmp_path, capsys):
    """`decisive rows` writes exactly the rows a pre-registration's runs train on (the paired cost uses them)."""
    pytest.importorskip("yaml")
    from benchmarks.learning import decisive, records
    from benchmarks.learning.decisive import load_preregistration, task_config

    prereg = str(records.experiment_dir("decisive-smollm2") / records.PREREGISTRATION_FILE)
    out = tmp_path / "rows.jsonl"
    assert decisive.main(["rows", prereg, "--out", str(out)]) is None
    written = [json.loads(line) for line in out.read_text().splitlines()]
    expected = build_rows(task_config(load_preregistration(prereg)))["rl"]
    assert written == expected and len(written) == task_config(load_preregistration(prereg)).num_rl_prompts
    assert json.loads(capsys.readouterr().out) == {"rows": len(written), "out": str(out)}


def test_pilot_command_times_steps_of_a_given_model(tiny_model_path, tmp_path):
    """`real_task pilot --rows --model` trains the given model on the given rows and reports each step's cost."""
    from benchmarks.learning import real_task

    out = tmp_path / "pilot.json"
    assert real_task.main(["pilot", "--rows", str(SAMPLE_DATA), "--model", str(tiny_model_path), "--steps", "1",
                           "--max-completion-length", "8", "--lora", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["cuda_device"] is None and result["lora"] is True
    assert [s["step"] for s in result["steps"]] == [1]
    assert 0 < result["steps"][0]["generation"] < result["steps"][0]["step_seconds"]
    from transformers import AutoModelForCausalLM

    total = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_path).parameters())
    assert 0 < result["trainable_parameters"] < total  # LoRA: only the adapter trains


def test_pilot_model_needs_rows(capsys):
    from benchmarks.learning import real_task

    with pytest.raises(SystemExit) as exc:
        real_task.main(["pilot", "--model", "somewhere"])
    assert exc.value.code == 2 and "--model needs --rows" in capsys.readouterr().err
