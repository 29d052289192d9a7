"""What a trained model takes to the Hub: a LoRA adapter records the base it can be loaded on elsewhere (the Hub
id of a local copy when known, else an absolute path), and the completion logs go up with the model only as said
in one line at start (``push_completions: false`` leaves them out)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import transformers.trainer as transformers_trainer
from huggingface_hub.utils import filter_repo_objects

from hir_trl.models.adapter_base import adapter_base_name, record_adapter_base
from hir_trl.models.smollm2 import BUILD_RECORD, SMOLLM2_GGUF_FILE, hub_origin
from hir_trl.run_folder import COMPLETIONS_PATTERNS, hub_upload, hub_upload_note

SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


class RecordingApi:
    """Stands in for `huggingface_hub.HfApi` (no network): records create_repo and upload_folder calls."""

    def __init__(self, calls):
        self.calls = calls

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id))
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))
        return SimpleNamespace(commit_url="recorded")


@pytest.fixture
def hub_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(transformers_trainer, "hf_api", lambda *a, **k: RecordingApi(calls))
    return calls


def _args(**args):
    values = dict(push_to_hub=True, log_completions=True, push_completions=True, output_dir="out")
    values.update(args)
    return SimpleNamespace(**values)


# ------------------------------------------------------------------------------------ the adapter's base


def test_hub_origin_from_the_build_record(tmp_path):
    new = tmp_path / "new"
    new.mkdir()
    (new / BUILD_RECORD).write_text(json.dumps({"builder": "gguf", "gguf_file": SMOLLM2_GGUF_FILE,
                                                "hub_id": SMOLLM2_HUB_ID}))
    old = tmp_path / "old"  # a conversion recorded before the record named its Hub model
    old.mkdir()
    (old / BUILD_RECORD).write_text(json.dumps({"builder": "gguf", "gguf_file": SMOLLM2_GGUF_FILE}))
    other = tmp_path / "other"
    other.mkdir()
    (other / BUILD_RECORD).write_text(json.dumps({"builder": "gguf", "gguf_file": "mine.gguf"}))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / BUILD_RECORD).write_text("[not json")
    assert hub_origin(new) == hub_origin(old) == SMOLLM2_HUB_ID
    assert hub_origin(other) is None and hub_origin(bad) is None and hub_origin(tmp_path / "none") is None


def test_adapter_base_name_and_record_adapter_base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs" / "SmolLM2").mkdir(parents=True)
    (tmp_path / "outputs" / "SmolLM2" / BUILD_RECORD).write_text(json.dumps({"gguf_file": SMOLLM2_GGUF_FILE}))
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    assert adapter_base_name("outputs/SmolLM2") == SMOLLM2_HUB_ID  # a local copy of a Hub model: its Hub id
    assert adapter_base_name("./models/tiny") == str(tmp_path / "models" / "tiny")  # else an absolute path
    assert adapter_base_name("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"  # a Hub id stays
    model = SimpleNamespace(peft_config={"default": SimpleNamespace(base_model_name_or_path="outputs/SmolLM2"),
                                         "second": SimpleNamespace(base_model_name_or_path="models/tiny"),
                                         "hub": SimpleNamespace(base_model_name_or_path="org/model")})
    assert record_adapter_base(model) == {"default": SMOLLM2_HUB_ID, "second": str(tmp_path / "models" / "tiny")}
    assert model.peft_config["hub"].base_model_name_or_path == "org/model"
    assert record_adapter_base(SimpleNamespace()) == {}  # not a peft model: nothing to record


# ------------------------------------------------------------------------------------ the completion logs


def test_the_upload_note_says_what_goes_up():
    assert "uploads the completion logs (out/completions/" in hub_upload_note(_args())
    assert "--push_completions false" in hub_upload_note(_args())
    assert "leaves the completion logs (out/completions/) out" in hub_upload_note(_args(push_completions=False))
    assert hub_upload_note(_args(push_to_hub=False)) is None
    assert hub_upload_note(_args(log_completions=False)) is None


@pytest.mark.parametrize("push_completions, log_completions, left_out", [
    (False, True, True), (True, True, False), (False, False, False)])
def test_hub_upload_leaves_the_completion_logs_out_only_when_asked(hub_calls, push_completions, log_completions,
                                                                   left_out):
    args = _args(push_completions=push_completions, log_completions=log_completions)
    with hub_upload(args):
        transformers_trainer.hf_api().upload_folder(folder_path="out", ignore_patterns=["_*", "checkpoint-*"])
    transformers_trainer.hf_api().upload_folder(folder_path="out", ignore_patterns=["_*", "checkpoint-*"])
    inside, after = (kwargs["ignore_patterns"] for _, kwargs in hub_calls)
    assert inside == ["_*", "checkpoint-*", *COMPLETIONS_PATTERNS] if left_out else inside == ["_*", "checkpoint-*"]
    assert after == ["_*", "checkpoint-*"]  # restored after the context
    files = ["model.safetensors", "README.md", "completions/completions_00001.parquet", "checkpoint-2/x.pt"]
    kept = list(filter_repo_objects(files, ignore_patterns=inside))
    assert kept == (["model.safetensors", "README.md"] if left_out else
                    ["model.safetensors", "README.md", "completions/completions_00001.parquet"])


def test_a_lora_run_records_its_base_and_pushes_without_completion_logs(tmp_path, tiny_model_path, sample_dataset,
                                                                         hub_calls, monkeypatch, caplog):
    from peft import LoraConfig

    from hir_trl import HiRConfig
    from hir_trl.trainer import HiRTrainer

    local = tmp_path / "models" / "tiny"
    local.parent.mkdir()
    local.symlink_to(tiny_model_path)
    monkeypatch.chdir(tmp_path)
    args = HiRConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=6, num_generations=6,
                     num_replays=0, max_steps=1, max_completion_length=8, bf16=False, use_cpu=True, report_to="none",
                     save_strategy="no", seed=0, gradient_checkpointing=False, log_completions=True, push_to_hub=True,
                     hub_model_id="me/tiny-hir", push_completions=False)
    with caplog.at_level(logging.WARNING, logger="hir_trl.run_folder"):
        trainer = HiRTrainer(model="models/tiny", args=args, train_dataset=sample_dataset,
                             peft_config=LoraConfig(r=2, target_modules=["q_proj"]))
    assert [r.getMessage() for r in caplog.records if "completion logs" in r.getMessage()] == [
        f"hir-trl: push_to_hub leaves the completion logs ({tmp_path / 'out'}/completions/) out of every upload"]
    assert trainer.model.peft_config["default"].base_model_name_or_path == str(local.resolve())
    (tmp_path / "out" / "completions").mkdir(parents=True, exist_ok=True)  # TRL makes it at init
    (tmp_path / "out" / "completions" / "completions_00001.parquet").write_bytes(b"x")
    trainer.push_to_hub()
    saved = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == str(local.resolve())  # loads from any working directory
    exact = json.loads((tmp_path / "out" / "_hir_adapter_base.json").read_text())  # written by push_to_hub's save
    assert exact["trained_on"] == exact["base_model_name_or_path"] == str(local.resolve())
    uploads = [kwargs for name, kwargs in hub_calls if name == "upload_folder"]
    assert len(uploads) == 1 and set(COMPLETIONS_PATTERNS) <= set(uploads[0]["ignore_patterns"])
    assert "_*" in uploads[0]["ignore_patterns"]  # transformers' own patterns kept
    kept = filter_repo_objects(["adapter_config.json", "_hir_adapter_base.json"],
                               ignore_patterns=uploads[0]["ignore_patterns"])
    assert list(kept) == ["adapter_config.json"]  # the Hub id goes up, the local path trained on stays here
