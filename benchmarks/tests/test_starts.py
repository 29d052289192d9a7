"""Stored starting checkpoints (benchmarks/learning/starts.py): the task cache is unpacked from the stored start and
checked by sha256 instead of rebuilt; `rounds start-check` passes from it without a rebuild, names a cache built here
that is not it, and reports a rebuild that differs; `rounds store-start` stores only the records' checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.learning import records, rounds, starts, task
from benchmarks.learning.task import TaskConfig

REGISTERED_LOSS = 0.9183009076118469


def _fake_cache(folder: Path, weights: bytes = b"weights-0", loss: float = REGISTERED_LOSS) -> Path:
    """A task cache's layout with small files: model/, the prompt files and meta.json (written last)."""
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "model.safetensors").write_bytes(weights)
    (folder / "model" / "tokenizer.json").write_text('{"vocab": ["a", "b"]}')
    (folder / "rl_prompts.jsonl").write_text('{"task": "Write."}\n')
    (folder / "meta.json").write_text(json.dumps({"sft": {"final_loss": loss}, "total_seconds": 1.0}))
    return folder


def _no_build(*args, **kwargs):
    raise AssertionError("the task was rebuilt although a start is stored")


def _records_from(folder: Path, key: str, loss: float = REGISTERED_LOSS) -> Path:
    folder.mkdir(parents=True)
    records.write_jsonl(folder / records.RUNS_FILE, [
        {"method": "rl_ir", "seed": s, "checkpoint": {"task": f"task-{key}", "sft_final_loss": loss},
         "logs": [], "evals": []} for s in (0, 1)])
    return folder


def test_a_stored_start_unpacks_to_the_same_files_and_its_archive_is_deterministic(tmp_path):
    built = _fake_cache(tmp_path / "built")
    entry = starts.store(built, "k1", REGISTERED_LOSS, tmp_path / "starts")
    again = starts.store(built, "k1", REGISTERED_LOSS, tmp_path / "starts-again")
    assert entry["sha256"] == again["sha256"] and entry["archive"] == f"{entry['sha256']}.tar.gz"
    assert set(entry["files"]) == {"model/model.safetensors", "model/tokenizer.json", "rl_prompts.jsonl"}
    out = tmp_path / "cache" / "task-k1"
    assert starts.restore("k1", out, tmp_path / "starts") == entry
    assert starts.manifest(out) == starts.manifest(built)
    assert json.loads((out / "meta.json").read_text())["sft"]["final_loss"] == REGISTERED_LOSS
    assert starts.restore("other-key", tmp_path / "cache" / "task-other", tmp_path / "starts") is None
    assert not (tmp_path / "cache" / "task-other").exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["task-k1"]  # no staging folder left


@pytest.mark.parametrize("damage", ["archive bytes", "archive missing", "registered file hash"])
def test_a_stored_start_that_is_not_the_registered_bytes_is_refused(tmp_path, damage):
    entry = starts.store(_fake_cache(tmp_path / "built"), "k1", REGISTERED_LOSS, tmp_path / "starts")
    archive = tmp_path / "starts" / entry["archive"]
    if damage == "archive bytes":
        blob = bytearray(archive.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        archive.write_bytes(bytes(blob))
    elif damage == "archive missing":
        archive.unlink()
    else:
        registry = starts.read_registry(tmp_path / "starts")
        registry["k1"]["files"]["model/model.safetensors"] = "0" * 64
        (tmp_path / "starts" / starts.REGISTRY_NAME).write_text(json.dumps(registry))
    out = tmp_path / "cache" / "task-k1"
    with pytest.raises(starts.StoredStartError, match=entry["archive"][:12]):
        starts.restore("k1", out, tmp_path / "starts")
    assert not out.exists()


def test_differences_name_each_changed_missing_and_extra_file():
    stored = {"a": "1" * 64, "b": "2" * 64, "c": "3" * 64}
    lines = starts.differences(stored, {"a": "1" * 64, "b": "9" * 64, "d": "4" * 64})
    assert [line.split(":")[0] for line in lines] == ["b", "c", "d"]
    assert starts.differences(stored, dict(stored)) == []
    assert starts.fingerprint(stored) != starts.fingerprint({**stored, "b": "9" * 64})


def test_the_task_cache_reads_the_stored_start_before_it_would_rebuild(tmp_path, monkeypatch):
    cfg = TaskConfig(num_sft_examples=8)
    starts.store(_fake_cache(tmp_path / "built"), cfg.key(), REGISTERED_LOSS, tmp_path / "starts")
    monkeypatch.setattr(task, "_build", _no_build)
    # a build that did not finish (files, no meta.json) is replaced by the stored start
    partial = task.cache_dir(cfg, tmp_path / "cache")
    partial.mkdir(parents=True)
    (partial / "sft.jsonl").write_text("half")
    got = task.ensure_sft_model(cfg, root=tmp_path / "cache", log=lambda s: None, starts_dir=tmp_path / "starts")
    assert got == partial and not (got / "sft.jsonl").exists()
    assert starts.manifest(got) == starts.manifest(tmp_path / "built")


def test_start_check_passes_from_the_stored_start_without_a_rebuild(tmp_path, monkeypatch, capsys):
    key = TaskConfig().key()
    entry = starts.store(_fake_cache(tmp_path / "built"), key, REGISTERED_LOSS, tmp_path / "starts")
    folder = _records_from(tmp_path / "records", key)
    monkeypatch.setattr(task, "_build", _no_build)
    argv = ["start-check", str(folder), "--cache-dir", str(tmp_path / "cache"), "--starts-dir",
            str(tmp_path / "starts")]
    assert rounds.main(argv) == 0
    out = capsys.readouterr().out
    assert f"the stored start (sha256 {entry['sha256'][:12]}" in out and "the same starting checkpoint" in out
    # records from another checkpoint: the stored start does not pair with them
    other = _records_from(tmp_path / "other-records", key, loss=0.96456)
    assert rounds.main(["start-check", str(other), *argv[2:]]) == rounds.NOT_THE_SAME


def test_start_check_names_a_cache_built_here_that_is_not_the_stored_start(tmp_path, monkeypatch, capsys):
    key = TaskConfig().key()
    starts.store(_fake_cache(tmp_path / "built"), key, REGISTERED_LOSS, tmp_path / "starts")
    _fake_cache(task.cache_dir(TaskConfig(), tmp_path / "cache"), weights=b"weights-of-another-cpu", loss=0.96456)
    folder = _records_from(tmp_path / "records", key)
    assert rounds.main(["start-check", str(folder), "--cache-dir", str(tmp_path / "cache"), "--starts-dir",
                        str(tmp_path / "starts")]) == rounds.NOT_THE_SAME
    out = capsys.readouterr().out
    assert "model/model.safetensors: sha256" in out and "is not the stored start" in out and "remove it" in out


@pytest.mark.parametrize("rebuilt_weights, equal", [(b"weights-0", True), (b"weights-of-another-cpu", False)])
def test_start_check_rebuild_is_compared_with_the_stored_hash(tmp_path, monkeypatch, capsys, rebuilt_weights, equal):
    key = TaskConfig().key()
    starts.store(_fake_cache(tmp_path / "built"), key, REGISTERED_LOSS, tmp_path / "starts")
    folder = _records_from(tmp_path / "records", key)
    rebuilds = []

    def rebuild(cfg, out, log):
        rebuilds.append(out)
        out.rmdir() if out.exists() else None
        _fake_cache(out, weights=rebuilt_weights, loss=REGISTERED_LOSS if equal else 0.96456)

    monkeypatch.setattr(task, "_build", rebuild)
    rc = rounds.main(["start-check", str(folder), "--rebuild", "--cache-dir", str(tmp_path / "cache"),
                      "--starts-dir", str(tmp_path / "starts")])
    out = capsys.readouterr().out
    assert len(rebuilds) == 1 and not rebuilds[0].is_relative_to(tmp_path / "cache")  # scratch cache, never used
    if equal:
        assert rc == 0 and "the rebuild equals the stored start, file for file" in out
    else:
        assert rc == rounds.NOT_THE_SAME
        assert "rebuild: model/model.safetensors: sha256" in out and "the rebuild differs from the stored start" in out
        assert "rebuilt here: SFT loss 0.96456" in out
    # the cache the runs read is the stored start either way
    assert starts.manifest(task.cache_dir(TaskConfig(), tmp_path / "cache")) == starts.manifest(tmp_path / "built")


def test_store_start_stores_only_the_checkpoint_the_records_start_from(tmp_path, capsys):
    key = TaskConfig().key()
    _fake_cache(task.cache_dir(TaskConfig(), tmp_path / "cache"), loss=0.96456)
    argv = ["--cache-dir", str(tmp_path / "cache"), "--starts-dir", str(tmp_path / "starts")]
    assert rounds.main(["store-start", str(_records_from(tmp_path / "records", key)), *argv]) == rounds.NOT_THE_SAME
    assert "not stored" in capsys.readouterr().out and starts.read_registry(tmp_path / "starts") == {}
    other = _records_from(tmp_path / "records-here", key, loss=0.96456)
    assert rounds.main(["store-start", str(other), *argv]) == 0
    entry = starts.read_registry(tmp_path / "starts")[key]
    assert entry["sft_final_loss"] == 0.96456 and entry["machine"]["processor"]
    assert (tmp_path / "starts" / entry["archive"]).is_file()


@pytest.mark.slow
def test_a_real_task_cache_round_trips_and_a_rebuild_here_equals_it(tmp_path, monkeypatch):
    """The toy task built for real: stored, unpacked into a fresh cache (no rebuild), and rebuilt on this machine
    into the same bytes (SFT is deterministic on one machine; the stored start is what makes it so across them)."""
    from benchmarks.learning.run import PRESETS

    cfg = TaskConfig(**PRESETS["toy"]["task"])
    built = task.ensure_sft_model(cfg, root=tmp_path / "a", log=lambda s: None, threads=1,
                                  starts_dir=tmp_path / "none")
    entry = starts.store(built, cfg.key(), None, tmp_path / "starts")
    assert "model/model.safetensors" in entry["files"]
    with monkeypatch.context() as patch:
        patch.setattr(task, "_build", _no_build)
        restored = task.ensure_sft_model(cfg, root=tmp_path / "b", log=lambda s: None, threads=1,
                                         starts_dir=tmp_path / "starts")
    assert starts.manifest(restored) == entry["files"]
    rebuilt = task.ensure_sft_model(cfg, root=tmp_path / "c", log=lambda s: None, threads=1,
                                    starts_dir=tmp_path / "none")
    assert starts.differences(entry["files"], starts.manifest(rebuilt)) == []
