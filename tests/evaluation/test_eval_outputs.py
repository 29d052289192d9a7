"""Where ``hir-trl eval`` writes: never over an input, never one output over another, an ``--output_dir`` holding
one evaluation, and every check ``eval generate`` can make done before the first token is generated; a LoRA
adapter folder merged into its base for generation."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest

from hir_trl.cli import eval as eval_cli
from hir_trl.evaluation import generation
from hir_trl.evaluation.generation import GenerationSettings, generate_responses, lora_base, merge_lora

from ..fakes import install_fake_vllm

ROW = {"key": "k1", "prompt": "P1", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A benchmark, a responses file and a model folder (config.json only: generation is replaced), in tmp_path."""
    monkeypatch.chdir(tmp_path)
    bench = _jsonl(tmp_path / "bench.jsonl", [ROW])
    responses = _jsonl(tmp_path / "responses.jsonl", [{"prompt": "P1", "response": "no commas here"}])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return SimpleNamespace(bench=bench, responses=responses, model=model, root=tmp_path)


@pytest.fixture
def no_generation(monkeypatch):
    """Generation that fails the test if it is reached (a refusal must come first)."""
    def refuse(*args, **kwargs):
        raise AssertionError("generation started before the refusal")

    monkeypatch.setattr(eval_cli, "generate_responses", refuse)


@pytest.fixture
def fake_generation(monkeypatch):
    """Generation that answers every prompt with fixed samples (records the calls)."""
    calls = []

    def fake(prompts, settings, progress=True, workdir=None, announce=None):
        calls.append(settings.model)
        return [["no commas here"] * settings.num_samples for _ in prompts], "transformers"

    monkeypatch.setattr(eval_cli, "generate_responses", fake)
    return calls


def _run(capsys, *argv):
    code = eval_cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _snapshot(*paths):
    return {p: p.read_bytes() for p in paths}


# ------------------------------------------------------------------------------ eval score: never over an input


@pytest.mark.parametrize("how", ["same", "dotted", "absolute", "symlink", "hardlink", "benchmark", "table", "plot",
                                 "judge_cache", "module"])
def test_score_never_writes_over_an_input(files, capsys, how):
    if how == "symlink":
        os.symlink(files.responses, files.root / "link.json")
    if how == "hardlink":
        os.link(files.responses, files.root / "hard.json")
    flags = {"same": ["--output", "responses.jsonl"], "dotted": ["--output", "./sub/../responses.jsonl"],
             "absolute": ["--output", files.responses], "symlink": ["--output", "link.json"],
             "hardlink": ["--output", "hard.json"], "benchmark": ["-o", "bench.jsonl"],
             "table": ["--output", "responses.json"],  # its table would be responses.txt: not an input; see below
             "plot": ["--plot", "bench.jsonl"],
             "judge_cache": ["--judge_model", "hosted_vllm/j", "--judge_api_key_env", "", "--judge_cache_dir", "cache",
                             "--output", "cache/judge_cache.sqlite3"],
             "module": ["--verifier_modules", "mine.py", "--output", "mine.py"]}[how]
    (files.root / "mine.py").write_text("")
    (files.root / "sub").mkdir()
    if how == "table":  # the table beside the report is an input
        (files.root / "responses.txt").write_text("a note of mine")
        flags = ["--output", "responses.json", "--responses", files.root / "responses.txt"]
    before = _snapshot(files.bench, files.responses)
    code, out, err = _run(capsys, "score", "-b", files.bench, "-r", files.responses, *flags)
    assert code == 2 and not out and err.count("\n") == 1 and "is the input" in err, err
    assert _snapshot(files.bench, files.responses) == before


@pytest.mark.parametrize("flags, fragment", [
    (["--output", "r.txt"], "the report's table and the report are one file"),
    (["--output", "r.json", "--plot", "r.txt"], "--plot and the report's table are one file"),
    (["--output", "r.png", "--plot"], "are one file"),
    (["--output", "folder"], "is a folder"),
    (["--output", "bench.jsonl/r.json"], "cannot be written"),
])
def test_score_refuses_outputs_that_collide_or_cannot_be_written(files, capsys, flags, fragment):
    (files.root / "folder").mkdir()
    code, out, err = _run(capsys, "score", "-b", files.bench, "-r", files.responses, *flags)
    assert code == 2 and not out and err.count("\n") == 1 and fragment in err, err


def test_score_writes_its_report_beside_the_responses_by_default(files, capsys):
    code, _, err = _run(capsys, "score", "-b", files.bench, "-r", files.responses)
    assert code == 0, err
    assert json.loads((files.root / "responses.report.json").read_text())["benchmarks"]
    assert (files.root / "responses.report.txt").is_file()


# ------------------------------------------------------------------ eval generate: every check before generating


def test_generate_refusals_come_before_generation(files, capsys, no_generation, monkeypatch):
    base = ["generate", "-m", files.model, "-b", files.bench]
    (files.root / "afile").write_text("x")
    (files.root / "run").mkdir()
    (files.root / "run" / "checkpoint-4").mkdir()
    (files.root / "run" / "checkpoint-12").mkdir()
    second = _jsonl(files.root / "second.jsonl", [ROW])
    soft = _jsonl(files.root / "soft.jsonl", [{"id": "s", "task": "T", "prompt": "P2", "constraints": [
        {"text": "The tone should be cheerful.", "kind": "soft"}]}])
    cases = [
        (["--output_dir", "afile"], "--output_dir afile is a file"),
        (["--output_dir", "afile/eval"], "--output_dir afile/eval cannot be written"),
        (["--output_dir", "o", "-b", "IF Eval=" + str(second), "IF_Eval=" + str(second)],
         "give one responses file name (IF_Eval.responses.jsonl)"),
        (["--output_dir", "o", "-b", "x=" + str(second), "x=" + str(files.bench)], "are one name"),
        (["--output_dir", "o", "-b", "a=" + str(second), "A=" + str(files.bench)], "give one responses file name"),
        (["--output_dir", "o", "-b", "no_such.jsonl"], "no_such.jsonl does not exist"),
        (["--output_dir", "o", "--pass_k", "1", "2"], "--pass_k: budgets must be between 1 and --num_samples (1)"),
        (["--output_dir", "o", "--num_samples", "0"], "num_samples must be >= 1"),
        (["--output_dir", "o", "--top_p", "0"], "top_p must be in (0, 1]"),
        (["--output_dir", "o", "-b", str(soft), "--judge_api_key_env", "NO_SUCH_KEY_VAR"],  # the judge is needed
         "or pass --judge_model '' to report it as unjudged"),
        (["--output_dir", "o", "--judge_model", "hosted_vllm/j", "--judge_api_key_env", "",
          "--judge_extra_kwargs", "{bad"], "--judge_extra_kwargs is not valid JSON"),
        (["--output_dir", "o", "--backend", "vllm"], "needs vLLM"),
        (["--output_dir", "o", "--plot", "o/IFEval.responses.jsonl"], "are one file"),  # over a responses file
        (["--output_dir", "o", "--plot", "o/report.txt"], "--plot and the report's table are one file"),
    ]
    for flags, fragment in cases:
        code, out, err = _run(capsys, *base, *flags)
        assert code == 2 and not out and err.count("\n") == 1 and fragment in err, (flags, err)
        assert not (files.root / "o").exists(), flags  # nothing created before the refusal
    for model, fragment in [(files.root / "run", "holds no model (no config.json) and no LoRA adapter"),
                            (files.root / "afile", "is a file: give the model's folder")]:
        code, _, err = _run(capsys, "generate", "-m", model, "-b", files.bench, "-o", "o")
        assert code == 2 and err.count("\n") == 1 and fragment in err, err
    assert "its latest checkpoint is" in _run(capsys, "generate", "-m", files.root / "run", "-b", files.bench,
                                              "-o", "o")[2]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    code, _, err = _run(capsys, *base, "-o", "o", "--plot")
    assert code == 2 and "--plot needs matplotlib" in err


def test_generate_never_writes_over_an_input_in_its_output_dir(files, capsys, no_generation):
    out = files.root / "o"
    out.mkdir()
    bench = _jsonl(out / "IFEval.responses.jsonl", [ROW])  # a benchmark file named as a responses file
    before = bench.read_bytes()
    code, _, err = _run(capsys, "generate", "-m", files.model, "-b", bench, "-o", out)
    assert code == 2 and err.count("\n") == 1, err
    assert "already holds an evaluation" in err  # a *.responses.jsonl there: another evaluation
    code, _, err = _run(capsys, "generate", "-m", files.model, "-b", bench, "-o", out, "--overwrite_output_dir")
    assert code == 2 and err.count("\n") == 1 and "would delete" in err and "the input --benchmark" in err, err
    assert bench.read_bytes() == before
    # --plot naming a benchmark file
    fresh = files.root / "fresh"
    fresh.mkdir()
    report_named = _jsonl(fresh / "b.jsonl", [ROW])
    code, _, err = _run(capsys, "generate", "-m", files.model, "-b", f"x={report_named}", "-o", files.root / "o2",
                        "--plot", report_named)
    assert code == 2 and "is the input --benchmark" in err, err


def test_a_second_model_in_one_output_dir_is_refused_unless_overwritten(files, capsys, fake_generation):
    first = ["generate", "-m", files.model, "-b", files.bench, "-o", "eval", "--run_name", "first"]
    code, _, err = _run(capsys, *first)
    assert code == 0, err
    report = files.root / "eval" / "report.json"
    first_report = report.read_bytes()
    other = files.root / "other-model"
    other.mkdir()
    (other / "config.json").write_text("{}")
    code, out, err = _run(capsys, "generate", "-m", other, "-b", files.bench, "-o", "eval")
    assert code == 2 and not out and err.count("\n") == 1, err
    assert f"already holds an evaluation of {files.model}" in err and "--overwrite_output_dir true" in err
    assert report.read_bytes() == first_report and len(fake_generation) == 1  # nothing generated, nothing replaced
    code, _, err = _run(capsys, *first)  # the same command again: refused the same way
    assert code == 2 and "already holds an evaluation" in err
    stray = files.root / "eval" / "IFBench.responses.jsonl"  # a benchmark the second run does not evaluate
    stray.write_text("{}\n")
    code, _, err = _run(capsys, "generate", "-m", other, "-b", files.bench, "-o", "eval", "--overwrite_output_dir",
                        "true")
    assert code == 0, err
    assert "removed the earlier evaluation" in err and not stray.exists()  # no responses of the first model left
    assert json.loads(report.read_text())["generation"]["model"] == str(other)


# ------------------------------------------------------------------------------------- LoRA adapter folders


def _adapter_config(folder, base):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
    return folder


def test_lora_base_finds_the_base_or_refuses_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = tmp_path / "models" / "base"
    base.mkdir(parents=True)
    assert lora_base(str(_adapter_config(tmp_path / "a1", "models/base"))) == "models/base"  # from the cwd
    (_adapter_config(tmp_path / "models" / "a2", "base") / "base").mkdir()
    assert lora_base(str(tmp_path / "models" / "a2")) == str(tmp_path / "models" / "a2" / "base")  # beside it
    hub = str(_adapter_config(tmp_path / "a3", "HuggingFaceTB/SmolLM2-135M-Instruct"))
    monkeypatch.setattr(generation, "_hub_offline", lambda: True)  # offline, and not in the Hub cache: refused
    with pytest.raises(ValueError, match="its recorded base HuggingFaceTB/SmolLM2-135M-Instruct .*not in the local "
                                         "Hub cache and HF_HUB_OFFLINE is set: pass --base_model_name_or_path"):
        lora_base(hub)
    monkeypatch.setattr(generation, "_hub_offline", lambda: False)
    assert lora_base(hub) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(ValueError, match="its base model ./gone is no folder here"):
        lora_base(str(_adapter_config(tmp_path / "a4", "./gone")))
    with pytest.raises(ValueError, match="names no base_model_name_or_path"):
        lora_base(str(_adapter_config(tmp_path / "a5", "")))
    assert lora_base(str(base)) is None and lora_base("Qwen/Qwen2.5-7B-Instruct") is None


@pytest.fixture(scope="module")
def tiny_lora(tiny_model_path, tmp_path_factory):
    """A LoRA adapter (random, non-zero B) on the tiny model, saved adapter-only with its tokenizer."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    folder = tmp_path_factory.mktemp("lora")
    peft_model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(folder)
    assert not (folder / "config.json").exists() and (folder / "adapter_config.json").is_file()
    return folder


def test_merge_lora_gives_the_adapted_model(tiny_lora, tiny_model_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        base_logits = base(ids).logits
        adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_path), tiny_lora)(ids).logits
        merged = merge_lora(str(tiny_lora))
        merged_logits = merged(ids).logits
    assert not hasattr(merged, "peft_config")  # an ordinary model, as vLLM loads
    assert torch.allclose(merged_logits, adapted, atol=1e-5)
    assert not torch.allclose(merged_logits, base_logits, atol=1e-3)  # the adapter changed the model


def test_generate_on_a_lora_folder_with_transformers_says_it_merged(tiny_lora):
    lines = []
    prompts = [[{"role": "user", "content": "Write a haiku."}]]
    settings = GenerationSettings(model=str(tiny_lora), num_samples=2, max_tokens=4, backend="transformers")
    responses, backend = generate_responses(prompts, settings, progress=False, announce=lines.append)
    assert backend == "transformers" and len(responses[0]) == 2
    assert len(lines) == 1 and "is a LoRA adapter of" in lines[0] and "merged into the base with peft in memory" in \
        lines[0]


def test_generate_on_a_lora_folder_with_vllm_loads_a_merged_copy(tiny_lora, tmp_path, monkeypatch):
    seen = {}

    class LLM:
        def __init__(self, **kwargs):
            from pathlib import Path

            seen["model"] = Path(kwargs["model"])
            seen["files"] = sorted(p.name for p in seen["model"].iterdir())

        def chat(self, conversations, params, use_tqdm=True):
            return [SimpleNamespace(outputs=[SimpleNamespace(text="ok")] * params.kwargs["n"]) for _ in conversations]

    install_fake_vllm(monkeypatch, LLM)
    lines = []
    settings = GenerationSettings(model=str(tiny_lora), num_samples=2, max_tokens=4, backend="vllm")
    responses, backend = generate_responses([[{"role": "user", "content": "a"}]], settings, progress=False,
                                            workdir=tmp_path / "eval", announce=lines.append)
    assert backend == "vllm" and responses == [["ok", "ok"]]
    assert seen["model"].parent == tmp_path / "eval" and "config.json" in seen["files"]
    assert "model.safetensors" in seen["files"] and "tokenizer_config.json" in seen["files"]
    assert not seen["model"].exists()  # the merged copy is removed afterwards
    assert len(lines) == 1 and "merged into the base with peft in" in lines[0] and "which vLLM loads" in lines[0]


def test_eval_generate_cli_on_a_lora_folder(tiny_lora, tmp_path, capsys):
    bench = _jsonl(tmp_path / "bench.jsonl", [ROW])
    code, out, err = _run(capsys, "generate", "--model", tiny_lora, "-b", bench, "-o", tmp_path / "eval",
                          "--max_tokens", "4", "--backend", "transformers", "--no_progress")
    assert code == 0, err
    assert f"hir-trl eval: {tiny_lora} is a LoRA adapter of" in err
    assert json.loads((tmp_path / "eval" / "report.json").read_text())["generation"]["model"] == str(tiny_lora)


def test_base_model_name_or_path_overrides_the_recorded_base(tiny_lora, tiny_model_path, tmp_path, capsys):
    import shutil

    adapter = tmp_path / "adapter"
    shutil.copytree(tiny_lora, adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "./where-training-ran/base"  # a relative path that is no folder here
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    bench = _jsonl(tmp_path / "bench.jsonl", [ROW])
    code, _, err = _run(capsys, "generate", "-m", adapter, "-b", bench, "-o", tmp_path / "a")
    assert code == 2 and err.count("\n") == 1 and "pass --base_model_name_or_path" in err, err
    code, _, err = _run(capsys, "generate", "-m", adapter, "-b", bench, "-o", tmp_path / "b", "--max_tokens", "4",
                        "--backend", "transformers", "--base_model_name_or_path", tiny_model_path, "--no_progress")
    assert code == 0, err
    assert f"is a LoRA adapter of {tiny_model_path}" in err
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert report["generation"]["base_model"] == str(tiny_model_path)  # the report says what ran
    for model, base, fragment in [(tiny_model_path, str(tiny_model_path), "is for a LoRA adapter folder"),
                                  (adapter, str(tmp_path / "nowhere"), "no such model folder")]:
        code, _, err = _run(capsys, "generate", "-m", model, "-b", bench, "-o", tmp_path / "c",
                            "--base_model_name_or_path", base)
        assert code == 2 and err.count("\n") == 1 and fragment in err, err
        assert not (tmp_path / "c").exists()
