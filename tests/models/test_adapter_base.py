"""The base a LoRA adapter was trained on (`hir_trl.models.adapter_base`): every save records the Hub id in
``adapter_config.json`` and the exact local folder beside it (``_hir_adapter_base.json``); ``hir-trl eval generate``
merges into the exact folder while it is here, else into the recorded base (offline: a one-line error naming it and
``--base_model_name_or_path``), the override always wins; a resume on another base is refused in one line.

One real LoRA run (``hir-trl train``, module scope) on a local copy of the tiny model whose build record names a Hub
model, as the SmolLM2 conversion does; the rest is model-free or uses that run's adapter."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from hir_trl.cli.eval import main as eval_main
from hir_trl.cli.main import main
from hir_trl.evaluation import generation
from hir_trl.evaluation.generation import GenerationSettings, choose_lora_base, generate_responses, merge_lora
from hir_trl.models.adapter_base import (
    ADAPTER_BASE_RECORD,
    local_base_problem,
    read_adapter_base_record,
    resume_base_problem,
    trained_base,
    weight_files,
    write_adapter_base_records,
)
from hir_trl.models.smollm2 import BUILD_RECORD
from hir_trl.run_folder import FINAL_MARK, check_resume_point, complete_final_save

from ..testing_utils import TINY_RECIPE, assert_one_line_error

HUB_ID = "hir-test/tiny-instruct"  # in no Hub cache: offline, it cannot load
ROW = {"key": "k1", "prompt": "P1", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
LORA = ["--use_peft", "true", "--lora_r", 4, "--lora_alpha", 8, "--lora_target_modules", "q_proj", "v_proj"]


def _train(out, model, *extra):
    return main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path", str(model),
                 "--build_tiny_model", "false", *map(str, LORA), *map(str, extra)])


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_path):
    """A 1-step LoRA run (checkpoint-1 and the final adapter) on ``base``, a copy of the tiny model that records
    itself as a copy of the Hub model `HUB_ID`."""
    root = tmp_path_factory.mktemp("adapter-base")
    base = Path(shutil.copytree(tiny_model_path, root / "base"))
    (base / BUILD_RECORD).write_text(json.dumps({"builder": "gguf", "gguf_file": "tiny.gguf", "hub_id": HUB_ID}))
    out = root / "out"
    assert _train(out, base, "--max_steps", 1, "--save_steps", 1) == 0
    return SimpleNamespace(root=root, base=base, out=out)


def _bench(folder):
    path = folder / "bench.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    return path


def _eval(capsys, adapter, output, *extra):
    code = eval_main(["generate", "-m", str(adapter), "-b", str(_bench(output.parent)), "-o", str(output),
                      "--max_tokens", "4", "--backend", "transformers", "--no_progress", *map(str, extra)])
    out, err = capsys.readouterr()
    return code, out, err


def _with_record(run, tmp_path, **changes):
    """A copy of the run's final adapter whose `ADAPTER_BASE_RECORD` has ``changes``."""
    adapter = Path(shutil.copytree(run.out, tmp_path / "adapter", ignore=shutil.ignore_patterns("checkpoint-*")))
    record = json.loads((adapter / ADAPTER_BASE_RECORD).read_text())
    (adapter / ADAPTER_BASE_RECORD).write_text(json.dumps({**record, **changes}))
    return adapter


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------ what every save records


def test_every_save_records_the_hub_id_and_the_exact_base(run):
    expected = {"base_model_name_or_path": HUB_ID, "trained_on": str(run.base.resolve()),
                "weights": {"model.safetensors": _sha256(run.base / "model.safetensors")}}
    for folder in (run.out, run.out / "checkpoint-1"):
        assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_ID
        assert json.loads((folder / ADAPTER_BASE_RECORD).read_text()) == expected, folder
    assert ADAPTER_BASE_RECORD in json.loads((run.out / FINAL_MARK).read_text())["files"]  # part of the final save


def test_a_final_save_completed_from_a_checkpoint_keeps_the_record(run, tmp_path):
    checkpoint = Path(shutil.copytree(run.out / "checkpoint-1", tmp_path / "out" / "checkpoint-1"))
    complete_final_save(str(checkpoint), str(tmp_path / "out"), "note")
    assert (tmp_path / "out" / ADAPTER_BASE_RECORD).read_bytes() == (checkpoint / ADAPTER_BASE_RECORD).read_bytes()
    assert ADAPTER_BASE_RECORD in json.loads((tmp_path / "out" / FINAL_MARK).read_text())["files"]


def _fake_peft(name_or_path, adapters=("default",)):
    return SimpleNamespace(peft_config={a: SimpleNamespace(base_model_name_or_path=HUB_ID) for a in adapters},
                           get_base_model=lambda: SimpleNamespace(name_or_path=name_or_path))


def test_records_beside_each_adapter_and_nothing_for_a_full_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = tmp_path / "models" / "base"
    base.mkdir(parents=True)
    (base / "model-00001-of-00002.safetensors").write_bytes(b"12")
    (base / "model-00002-of-00002.safetensors").write_bytes(b"345")
    (base / "training_args.bin").write_bytes(b"x")
    save = tmp_path / "save"
    (save / "second").mkdir(parents=True)
    (save / "adapter_config.json").write_text("{}")
    (save / "second" / "adapter_config.json").write_text("{}")
    written = write_adapter_base_records(save, _fake_peft("models/base", ("default", "second", "unsaved")))
    assert written == [save / ADAPTER_BASE_RECORD, save / "second" / ADAPTER_BASE_RECORD]  # as peft lays them out
    record = json.loads(written[1].read_text())
    assert record == {"base_model_name_or_path": HUB_ID, "trained_on": str(base),
                      "weights": {"model-00001-of-00002.safetensors": "sha256:" + hashlib.sha256(b"12").hexdigest(),
                                  "model-00002-of-00002.safetensors": "sha256:" + hashlib.sha256(b"345").hexdigest()}}
    hub = trained_base(_fake_peft("org/model"))
    assert hub == {"base_model_name_or_path": "org/model", "trained_on": None, "weights": {}}
    assert trained_base(SimpleNamespace()) is None and write_adapter_base_records(save, SimpleNamespace()) == []
    assert weight_files(tmp_path / "save") == {}


# ------------------------------------------------------------------------------------ is the base still here


@pytest.mark.parametrize("damage, why", [
    (None, None),
    ("gone", "is gone"),
    ("resized", "holds other weights (model.safetensors: its content differs from the one trained on, "
                "sha256:ba7816bf8f01...)"),
    ("rewritten", "holds other weights (model.safetensors: its content differs from the one trained on, "
                  "sha256:ba7816bf8f01...)"),
    ("removed", "no longer holds extra.bin"),
    ("added", "holds more.safetensors, which it did not when trained on"),
    ("emptied", "holds no weight files"),
])
def test_local_base_problem(tmp_path, damage, why):
    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"abc")
    (base / "extra.bin").write_bytes(b"e")
    record = {"trained_on": str(base), "weights": weight_files(base)}
    if damage == "gone":
        shutil.rmtree(base)
    elif damage == "resized":
        (base / "model.safetensors").write_bytes(b"abcd")
    elif damage == "rewritten":  # the same name and size, other bytes
        (base / "model.safetensors").write_bytes(b"abd")
    elif damage == "removed":
        (base / "extra.bin").unlink()
    elif damage == "added":
        (base / "more.safetensors").write_bytes(b"m")
    elif damage == "emptied":
        for path in base.iterdir():
            path.unlink()
    assert local_base_problem(record) == why


@pytest.mark.parametrize("text, why", [
    (None, f"no {ADAPTER_BASE_RECORD}"),
    ("{not json", "cannot be read (JSONDecodeError)"),
    ("[1, 2]", "is no record of a base"),
    ('{"trained_on": 3}', "is no record of a base"),
    ('{"trained_on": "/x", "weights": []}', "is no record of a base"),
])
def test_a_record_that_is_not_one(tmp_path, text, why):
    if text is not None:
        (tmp_path / ADAPTER_BASE_RECORD).write_text(text)
    record, reason = read_adapter_base_record(tmp_path)
    assert record is None and why in reason


# ------------------------------------------------------------------------------------ the base eval merges into


def _adapter(tmp_path, recorded, trained_on=None, weights=None, name="adapter"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": recorded}))
    if trained_on is not None:
        (folder / ADAPTER_BASE_RECORD).write_text(json.dumps(
            {"base_model_name_or_path": recorded, "trained_on": str(trained_on),
             "weights": weight_files(trained_on) if weights is None and Path(trained_on).is_dir() else weights or {}}))
    return str(folder)


@pytest.fixture
def local_base(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"weights")
    return base


def test_the_exact_base_is_merged_into_while_it_is_here(tmp_path, local_base, monkeypatch):
    monkeypatch.setattr(generation, "_hub_offline", lambda: True)
    adapter = _adapter(tmp_path, HUB_ID, local_base)
    base, why = choose_lora_base(adapter)
    assert base == str(local_base) and f"the exact base it was trained on, named by its {ADAPTER_BASE_RECORD}" == why
    other = tmp_path / "other"
    other.mkdir()
    assert choose_lora_base(adapter, str(other)) == (str(other), "--base_model_name_or_path")  # the override wins
    assert choose_lora_base(adapter, "org/other") == ("org/other", "--base_model_name_or_path")


@pytest.mark.parametrize("damage, why", [("gone", "is gone"), ("changed", "holds other weights")])
def test_without_the_exact_base_offline_the_hub_id_is_named_in_one_line(tmp_path, local_base, monkeypatch, damage,
                                                                        why):
    monkeypatch.setattr(generation, "_hub_offline", lambda: True)
    adapter = _adapter(tmp_path, HUB_ID, local_base)
    if damage == "gone":
        shutil.rmtree(local_base)
    else:
        (local_base / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(ValueError) as info:
        choose_lora_base(adapter)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{adapter}: the base it was trained on, {local_base}, {why}")
    assert f"its recorded base {HUB_ID} (adapter_config.json) is not in the local Hub cache" in message
    assert message.endswith(f"pass --base_model_name_or_path (a local copy of {HUB_ID}, or the weights trained on)")
    monkeypatch.setattr(generation, "_hub_cached", lambda repo: repo == HUB_ID)  # in the cache: loads offline
    base, said = choose_lora_base(adapter)
    assert base == HUB_ID and f"{local_base}, {why}" in said and "the Hub's weights may differ" in said
    monkeypatch.setattr(generation, "_hub_offline", lambda: False)
    monkeypatch.setattr(generation, "_hub_cached", lambda repo: False)
    base, said = choose_lora_base(adapter)  # online: the Hub model, and the line says why and what may differ
    assert base == HUB_ID and said.startswith("the Hub model its adapter_config.json records; the base it was")
    assert choose_lora_base(adapter, str(tmp_path)) == (str(tmp_path), "--base_model_name_or_path")


def test_other_adapters_keep_their_recorded_base(tmp_path, local_base, monkeypatch):
    monkeypatch.setattr(generation, "_hub_offline", lambda: True)
    # no record (saved by another tool or before hir-trl wrote one): the recorded base, offline only from the cache
    with pytest.raises(ValueError, match=f"^{tmp_path / 'a'}: its recorded base {HUB_ID} .*HF_HUB_OFFLINE is set: "
                                         "pass --base_model_name_or_path"):
        choose_lora_base(_adapter(tmp_path, HUB_ID, name="a"))
    assert choose_lora_base(_adapter(tmp_path, str(local_base), name="b")) == (
        str(local_base), "the base its adapter_config.json records")
    # a base recorded by its path (no Hub id known), since gone: the path is named, and the record's reason
    gone = tmp_path / "gone"
    adapter = _adapter(tmp_path, str(gone), gone, weights={"model.safetensors": 7}, name="c")
    with pytest.raises(ValueError, match=f"its base model {gone} is no folder here; the base it was trained on, "
                                         f"{gone}, is gone .*: pass --base_model_name_or_path"):
        choose_lora_base(adapter)
    # a record that cannot be read is said, not skipped
    adapter = _adapter(tmp_path, str(local_base), name="d")
    Path(adapter, ADAPTER_BASE_RECORD).write_text("{broken")
    base, why = choose_lora_base(adapter)
    assert base == str(local_base) and "cannot be read" in why
    # a record of a Hub base (trained_on null): the recorded Hub id
    adapter = tmp_path / "e"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/model"}))
    (adapter / ADAPTER_BASE_RECORD).write_text(json.dumps({"base_model_name_or_path": "org/model", "trained_on": None}))
    monkeypatch.setattr(generation, "_hub_offline", lambda: False)
    assert choose_lora_base(str(adapter)) == ("org/model", "the Hub model its adapter_config.json records")


def test_eval_generate_merges_into_the_exact_base_offline(run, tmp_path, capsys):
    code, _, err = _eval(capsys, run.out, tmp_path / "eval")
    assert code == 0, err
    lines = [line for line in err.splitlines() if "is a LoRA adapter of" in line]
    assert lines == [f"hir-trl eval: {run.out} is a LoRA adapter of {run.base.resolve()} (the exact base it was "
                     f"trained on, named by its {ADAPTER_BASE_RECORD}): merged into the base with peft in memory "
                     "(transformers)"]
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["generation"]["base_model"] == str(run.base.resolve())  # the report names the base used


def test_merge_lora_uses_the_exact_base_not_the_recorded_one(run, tmp_path, tiny_model_path):
    """The recorded base is a local folder with other weights: the merge must give the model trained on."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    other = tmp_path / "other"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05)
    model.save_pretrained(other)
    adapter = Path(shutil.copytree(run.out, tmp_path / "adapter", ignore=shutil.ignore_patterns("checkpoint-*")))
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(other)}))
    ids = torch.tensor([[1, 5, 9, 13]])
    with torch.no_grad():
        expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run.base), adapter)(ids).logits
        on_other = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(other), adapter)(ids).logits
        assert torch.allclose(merge_lora(str(adapter))(ids).logits, expected, atol=1e-5)
        assert not torch.allclose(expected, on_other, atol=1e-3)
        record = json.loads((adapter / ADAPTER_BASE_RECORD).read_text())
        (adapter / ADAPTER_BASE_RECORD).write_text(json.dumps({**record, "trained_on": str(tmp_path / "gone")}))
        assert torch.allclose(merge_lora(str(adapter))(ids).logits, on_other, atol=1e-5)  # gone: the recorded one


@pytest.mark.parametrize("change, why", [({"trained_on": "/nowhere/base"}, "/nowhere/base, is gone"),
                                         ({"weights": {"model.safetensors": 1}}, "holds other weights")])
def test_eval_generate_without_the_exact_base_is_one_line_naming_the_hub_id(run, tmp_path, capsys, change, why):
    adapter = _with_record(run, tmp_path, **change)
    code, out, err = _eval(capsys, adapter, tmp_path / "eval")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("hir-trl eval: error: "), err
    for fragment in (why, f"its recorded base {HUB_ID}", "HF_HUB_OFFLINE", "pass --base_model_name_or_path"):
        assert fragment in err, (fragment, err)
    assert not (tmp_path / "eval").exists()  # refused before anything was generated or written
    code, _, err = _eval(capsys, adapter, tmp_path / "over", "--base_model_name_or_path", run.base)
    assert code == 0, err
    assert f"is a LoRA adapter of {run.base} (--base_model_name_or_path)" in err
    assert json.loads((tmp_path / "over" / "report.json").read_text())["generation"]["base_model"] == str(run.base)


def test_the_python_api_says_which_base_and_why(run, tmp_path):
    lines = []
    settings = GenerationSettings(model=str(run.out), max_tokens=2, backend="transformers")
    generate_responses([[{"role": "user", "content": "a"}]], settings, progress=False, announce=lines.append)
    assert len(lines) == 1 and f"of {run.base.resolve()} (the exact base it was trained on" in lines[0]
    adapter = _with_record(run, tmp_path, trained_on=str(tmp_path / "gone"))
    with pytest.raises(ValueError, match=f"its recorded base {HUB_ID}"):
        generate_responses([[{"role": "user", "content": "a"}]], GenerationSettings(model=str(adapter)),
                           progress=False, announce=lines.append)


# ------------------------------------------------------------------------------------ resuming on the base trained on


def _record(folder, **values):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ADAPTER_BASE_RECORD).write_text(json.dumps(values))
    return folder


def test_resume_base_problem(tmp_path, local_base):
    weights = weight_files(local_base)
    ckpt = _record(tmp_path / "ckpt", base_model_name_or_path=HUB_ID, trained_on=str(local_base), weights=weights)
    same = {"base_model_name_or_path": HUB_ID, "trained_on": str(local_base), "weights": weights}
    copy = Path(shutil.copytree(local_base, tmp_path / "copy"))
    elsewhere = {"base_model_name_or_path": HUB_ID, "trained_on": str(copy), "weights": weights}
    hub = {"base_model_name_or_path": HUB_ID, "trained_on": None, "weights": {}}
    other = {"base_model_name_or_path": "org/other", "trained_on": None, "weights": {}}
    assert resume_base_problem(ckpt, same) is None
    assert resume_base_problem(ckpt, None) is None and resume_base_problem(tmp_path / "none", other) is None
    for current, loads in ((elsewhere, str(copy)), (hub, HUB_ID)):  # the folder trained on is here: it is the one
        problem = resume_base_problem(ckpt, current)
        assert problem == (f"{ckpt} was trained on {local_base} ({ADAPTER_BASE_RECORD}), and this run loads {loads}: "
                           f"pass --model_name_or_path {local_base}, or start a new run")
    (local_base / "model.safetensors").write_bytes(b"rebuilt!")  # the same folder, other weights
    assert "which holds other weights (model.safetensors: its content differs" in resume_base_problem(ckpt, same)
    shutil.rmtree(local_base)
    assert resume_base_problem(ckpt, elsewhere) is None  # gone: a folder with the same weight files continues it
    assert resume_base_problem(ckpt, hub) is None  # gone: the same recorded base
    assert resume_base_problem(ckpt, other) == (f"{ckpt} holds a LoRA adapter of {HUB_ID}, and this run loads "
                                                f"org/other: pass --model_name_or_path {HUB_ID} (or a local copy of "
                                                "it), or start a new run")
    hub_ckpt = _record(tmp_path / "hub", base_model_name_or_path="org/model", trained_on=None, weights={})
    assert resume_base_problem(hub_ckpt, {**other, "base_model_name_or_path": "org/model"}) is None
    assert "holds a LoRA adapter of org/model, and this run loads org/other" in resume_base_problem(hub_ckpt, other)


def test_a_resume_on_another_base_is_one_line_through_the_cli_and_the_api(run, tmp_path, capsys):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hir_trl.cli.main import parse_train_args

    copy = Path(shutil.copytree(run.base, tmp_path / "copy-of-base"))
    out = Path(shutil.copytree(run.out, tmp_path / "out"))
    (out / FINAL_MARK).unlink()
    before = {str(p): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name != "_hir-trl.lock"}
    code = _train(out, copy, "--max_steps", 2, "--resume_from_checkpoint", "true")
    stdout, err = capsys.readouterr()
    assert_one_line_error(code, stdout, err, f"was trained on {run.base.resolve()} ({ADAPTER_BASE_RECORD}), and this "
                          f"run loads {copy}", f"--model_name_or_path {run.base.resolve()}")
    assert {str(p): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name != "_hir-trl.lock"} \
        == before
    args = parse_train_args(["--config", str(TINY_RECIPE), *map(str, LORA)])[1]
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    for model, refused in ((run.base, False), (copy, True)):
        peft = get_peft_model(AutoModelForCausalLM.from_pretrained(model), LoraConfig(r=4, target_modules=["q_proj"]))
        if refused:
            with pytest.raises(ValueError, match=f"and this run loads {copy}"):
                check_resume_point(str(out / "checkpoint-1"), args, {**lora, "base": trained_base(peft)})
        else:
            check_resume_point(str(out / "checkpoint-1"), args, {**lora, "base": trained_base(peft)})


# ------------------------------------------------------------------------------------ the same base is the same bytes


def test_a_base_of_the_same_names_and_sizes_but_other_bytes_is_another_base(tmp_path, local_base):
    """Identity by content: a folder whose weight files have the names and sizes of the ones trained on, but other
    bytes, is not the base trained on (neither for resuming nor for the merge of eval generate)."""
    weights = weight_files(local_base)
    assert weights == {"model.safetensors": _sha256(local_base / "model.safetensors")}
    ckpt = _record(tmp_path / "ckpt", base_model_name_or_path=HUB_ID, trained_on=str(local_base), weights=weights)
    lookalike = tmp_path / "lookalike"
    lookalike.mkdir()
    (lookalike / "model.safetensors").write_bytes(b"WEIGHTS")  # same name, same 7 bytes, other content
    copy = Path(shutil.copytree(local_base, tmp_path / "copy"))
    shutil.rmtree(local_base)  # the folder trained on is gone: only a true copy continues it
    assert resume_base_problem(ckpt, {"base_model_name_or_path": "org/x", "trained_on": str(copy),
                                      "weights": weight_files(copy)}) is None
    problem = resume_base_problem(ckpt, {"base_model_name_or_path": "org/x", "trained_on": str(lookalike),
                                         "weights": weight_files(lookalike)})
    assert problem is not None and f"holds a LoRA adapter of {HUB_ID}" in problem
    record = {"trained_on": str(lookalike), "weights": weights}
    assert local_base_problem(record).startswith("holds other weights (model.safetensors: its content differs")


def test_a_record_of_sizes_is_no_proof_of_the_same_weights(tmp_path, local_base):
    """A record written before hashes (sizes) still tells a resized folder apart, and never vouches for another
    folder by its sizes."""
    from hir_trl.models.adapter_base import same_weights

    sizes = {"model.safetensors": 7}
    assert local_base_problem({"trained_on": str(local_base), "weights": sizes}) is None
    assert local_base_problem({"trained_on": str(local_base), "weights": {"model.safetensors": 8}}) == (
        "holds other weights (model.safetensors: 7 bytes, trained on 8)")
    assert not same_weights(weight_files(local_base), sizes)
    assert same_weights(weight_files(local_base), weight_files(local_base)) and not same_weights({}, {})
