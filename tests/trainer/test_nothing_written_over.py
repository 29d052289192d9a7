"""Nothing written over without a word: an ``output_dir`` that is the model trained from, or holds another model, is
refused before anything is written (``hir-trl train`` and `HiRTrainer.train`); no command that writes files
(``recipes copy``, ``eval score|generate``, ``synth``) writes through a symbolic link out of its destination."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset
from hir_trl.cli import eval as eval_cli
from hir_trl.cli.recipes import RecipeError, copy_recipes
from hir_trl.cli.recipes import main as recipes_main
from hir_trl.cli.synth import main as synth_main
from hir_trl.errors import check_write_targets, write_target_problem
from hir_trl.run_folder import model_files, output_model_problem

from ..testing_utils import SAMPLE_DATA, TINY_RECIPE, assert_one_line_error

# ------------------------------------------------------------------------------------------ output_dir holds a model


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def model_copy(tiny_model_path, tmp_path):
    return Path(shutil.copytree(tiny_model_path, tmp_path / "model"))


def _cli(tmp_path, capsys, model, output_dir, *flags):
    from hir_trl.cli.main import main

    code = main(["train", "--config", str(TINY_RECIPE), "--dataset_name", str(SAMPLE_DATA), "--model_name_or_path",
                 str(model), "--output_dir", str(output_dir), "--build_tiny_model", "false", *flags])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("spelling", ["same", "trailing-slash", "dot-relative", "symlink"])
@pytest.mark.parametrize("flags", [[], ["--overwrite_output_dir", "true"], ["--resume_from_checkpoint", "true"]],
                         ids=["fresh", "overwrite", "resume"])
def test_the_model_trained_from_is_never_the_output_dir(model_copy, tmp_path, capsys, monkeypatch, spelling, flags):
    before = _snapshot(model_copy)
    monkeypatch.chdir(tmp_path)
    if spelling == "symlink":
        (tmp_path / "link").symlink_to(model_copy)
    output_dir = {"same": str(model_copy), "trailing-slash": f"{model_copy}/", "dot-relative": "./model",
                  "symlink": str(tmp_path / "link")}[spelling]
    code, out, err = _cli(tmp_path, capsys, model_copy, output_dir, *flags)
    assert_one_line_error(code, out, err, f"output_dir {output_dir} is the model this run trains from",
                          "choose another output_dir")
    assert _snapshot(model_copy) == before


@pytest.mark.parametrize("flags", [[], ["--overwrite_output_dir", "true"]], ids=["fresh", "overwrite"])
def test_an_output_dir_holding_another_model_is_refused(model_copy, tiny_model_path, tmp_path, capsys, flags):
    before = _snapshot(model_copy)
    code, out, err = _cli(tmp_path, capsys, tiny_model_path, model_copy, *flags)
    assert_one_line_error(code, out, err, f"output_dir {model_copy} holds a model that is not this run's",
                          "config.json", "model.safetensors")
    assert _snapshot(model_copy) == before


def test_an_output_dir_holding_an_adapter_is_refused(tiny_model_path, tmp_path, capsys):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"lora")
    code, out, err = _cli(tmp_path, capsys, tiny_model_path, adapter)
    assert_one_line_error(code, out, err, "holds a model that is not this run's (adapter_config.json, "
                          "adapter_model.safetensors)")
    assert sorted(p.name for p in adapter.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]


def test_the_model_a_build_would_make_in_the_output_dir_is_refused(tmp_path, capsys):
    code, out, err = _cli(tmp_path, capsys, tmp_path / "new", tmp_path / "new", "--build_tiny_model", "true")
    assert_one_line_error(code, out, err, "is the model this run trains from")
    assert not (tmp_path / "new").exists()


def test_model_files_tells_a_model_from_a_run_and_from_other_files(model_copy, tmp_path):
    assert model_files(model_copy) == ["config.json", "model.safetensors"]
    assert output_model_problem(str(tmp_path / "missing"), None) is None
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.json").write_text("{}")  # a config without weights is no model
    assert model_files(data) == []
    (model_copy / "training_args.bin").write_bytes(b"x")  # a run's final model: check_output_dir's business
    assert model_files(model_copy) == []


def test_the_python_api_refuses_before_the_folder_is_held(model_copy, tmp_path):
    before = _snapshot(model_copy)
    args = HiRConfig(output_dir=str(model_copy), use_cpu=True, bf16=False, report_to="none",
                     per_device_train_batch_size=12, num_generations=6, num_replays=2, max_steps=1,
                     max_completion_length=8, replay_truncated_completions=True, save_strategy="no")
    trainer = HiRTrainer(str(model_copy), args=args, train_dataset=load_hir_dataset(SAMPLE_DATA))
    with pytest.raises(ValueError, match="is the model this run trains from"):
        trainer.train()
    assert _snapshot(model_copy) == before  # no lock file, no checkpoint, no weights written


# ------------------------------------------------------------------------------------------ symbolic links


def test_write_target_problem(tmp_path):
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    assert write_target_problem(dest / "a" / "b.txt", dest) is None
    (dest / "file").symlink_to(outside / "victim")
    assert "is a symbolic link (to" in write_target_problem(dest / "file", dest)
    (dest / "sub").symlink_to(outside)
    assert "leads outside" in write_target_problem(dest / "sub" / "x.txt", dest)
    (dest / "inner").symlink_to(dest / "a", target_is_directory=True)  # a link that stays inside is fine
    assert write_target_problem(dest / "inner" / "x.txt", dest) is None
    with pytest.raises(ValueError, match="symbolic link"):
        check_write_targets([dest / "ok.txt", dest / "file"], dest)


@pytest.mark.parametrize("link", ["file", "folder", "recipes-folder"])
def test_recipes_copy_never_writes_through_a_symlink(tmp_path, capsys, link):
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    outside.mkdir()
    target = dest / "recipes" / "tiny" / "hir" / "config_cpu.yaml"
    if link == "file":
        target.parent.mkdir(parents=True)
        (outside / "victim.yaml").write_text("mine")
        target.symlink_to(outside / "victim.yaml")
    elif link == "folder":
        (dest / "recipes" / "tiny").mkdir(parents=True)
        (dest / "recipes" / "tiny" / "hir").symlink_to(outside)
    else:
        dest.mkdir()
        (dest / "recipes").symlink_to(outside)
    before = _snapshot(outside)
    code = recipes_main(["copy", "tiny/hir/config_cpu.yaml", str(dest)])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("hir-trl recipes: error: ") and err.count("\n") == 1, err
    assert "symbolic link" in err and not out
    assert _snapshot(outside) == before
    with pytest.raises(RecipeError, match="symbolic link"):
        copy_recipes(["tiny/hir/config_cpu.yaml"], dest, overwrite=True)
    assert _snapshot(outside) == before


@pytest.mark.parametrize("argv", [["copy", ""], ["copy", "", "dest"], ["copy", "tiny/hir/config_cpu.yaml", ""],
                                  ["copy", "--all", ""], ["copy", "  ", "dest"]])
def test_recipes_copy_of_an_empty_name_or_destination_is_one_line(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    code = recipes_main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("hir-trl recipes: error: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing copied anywhere (an empty name once meant every recipe)


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_eval_score_never_writes_its_report_through_a_symlink(tmp_path, capsys):
    bench = _jsonl(tmp_path / "bench.jsonl", [{"key": "k1", "prompt": "P1", "instruction_id_list":
                                               ["punctuation:no_comma"], "kwargs": [{}]}])
    responses = _jsonl(tmp_path / "responses.jsonl", [{"prompt": "P1", "response": "no commas here"}])
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "report.txt").symlink_to(victim)  # the table written beside report.json
    code = eval_cli.main(["score", "-b", str(bench), "-r", str(responses), "--output", str(tmp_path / "report.json")])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("hir-trl eval: error: ") and err.count("\n") == 1, err
    assert "report.txt is a symbolic link" in err and victim.read_text() == "mine"
    assert not (tmp_path / "report.json").exists()


def test_eval_generate_never_writes_through_a_symlink_out_of_its_output_dir(tmp_path):
    out_dir, outside = tmp_path / "eval", tmp_path / "outside"
    out_dir.mkdir()
    outside.mkdir()
    (out_dir / "ifeval.responses.jsonl").symlink_to(outside / "x.jsonl")
    with pytest.raises(ValueError, match="is a symbolic link"):
        eval_cli.check_outputs([("responses", out_dir / "ifeval.responses.jsonl")], [], out_dir)
    (out_dir / "sub").symlink_to(outside)
    with pytest.raises(ValueError, match="leads outside"):
        eval_cli.check_outputs([("report", out_dir / "sub" / "report.json")], [], out_dir)
    assert list(outside.iterdir()) == []


def test_synth_never_writes_through_a_symlink(tmp_path, capsys):
    prompts = _jsonl(tmp_path / "prompts.jsonl", [{"prompt": "Write a poem."}])
    victim = tmp_path / "victim.jsonl"
    victim.write_text("mine")
    (tmp_path / "out.jsonl").symlink_to(victim)
    code = synth_main(["--dataset_name", str(prompts), "--output", str(tmp_path / "out.jsonl"), "--seed", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("hir-trl synth: error: ") and err.count("\n") == 1, err
    assert "symbolic link" in err and victim.read_text() == "mine"
