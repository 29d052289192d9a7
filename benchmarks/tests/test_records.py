"""Run records packed gzipped: a finished experiment's ``runs.jsonl.gz`` reads as its ``runs.jsonl`` did, beside the
plain ``runs.jsonl`` a running round packs into, and every committed one holds, byte for byte, the records it
replaced."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess

import pytest

from benchmarks.learning import experiments, records, rounds

#: Each committed ``runs.jsonl.gz`` (by its folder under benchmarks/experiments/) -> the line count and the sha256 of
#: the ``runs.jsonl`` it replaced: decompressed, it must be those bytes (no record lost, none rewritten).
GZIPPED = {
    "decisive-smollm2": (32, "21b21480361075a1e9833c00a7e56a140f16034d0bce93a61e8e5ec68187882f"),
    "decisive-synthetic": (120, "cf2f5ac04cd902873492c6d61029c7cc4459facacdd427e4d4f4a59122f4c494"),
    "ended-replays-paper-synthetic": (6, "ab85911bbe347a07d5b43c7e93b14a5036b4bb36eeb032fe5e5b662a0a9a16c9"),
    "equal-sampling": (20, "2073f839b3c00f586a9c8cf25518f45ce2e0db28564fd98ed9d248f7732148b2"),
    "equal-sampling/pairing-check": (1, "8562cc8c569e3858f7bd6dc081c7582681b7a231587c9b2ed75531b47d58e093"),
    "gloo-teardown": (72, "83ab2d73b2b6620299a1ff5e7e24ab42626f9c435bd3045c4c707513693fffbd"),
    "one-round-synthetic": (5, "53038c84771e1ff8a45686678671c6d06f25371028e50ac97959fc397428bd3a"),
    "relabel-synthetic": (12, "9833a47171b33a4867a8cf1772ae2a5d2b2701f8ebd76112a533dcdb0cb9d6bb"),
    "replay-ratio": (20, "00f3412503447fca7835fc1af58e91d14a7286365e523ace7a8c980ecb8b008f"),
    "replay-ratio/pairing-check": (1, "ac02756e75989b29ec0f0e03808049198b4b4ca6756dce342dbe0fd65ba3d64d"),
    "sparse-binary": (60, "52a95468af2a966baee2bf61f68a9db4b19a1879838f42a5da38be00f0b958ef"),
    "written-objective": (20, "1613ecc7352cdf26dc0f61a9346b606215db6f93b68638a46413777bc0481b69"),
    "written-objective/pairing-check": (1, "a9f4ad2393017224c14b3aafaf668d904c3b7a27fe8bab6d2d31b3c42dd89db8"),
}


def _record(method: str, seed: int, **extra) -> dict:
    return {"method": method, "seed": seed, "evals": [{"step": 0, "ila": 0.1}], **extra}


def _gzip(path, plain_path) -> None:
    """``gzip -n -9 -c PLAIN > PATH``: no name, no time stamp, so the same records give the same bytes."""
    path.write_bytes(gzip.compress(plain_path.read_bytes(), compresslevel=9, mtime=0))


def test_a_gzipped_runs_file_reads_as_the_plain_one(tmp_path):
    plain, packed = tmp_path / "plain", tmp_path / "gzipped"
    plain.mkdir(), packed.mkdir()
    rows = [_record("rl_cr", 0, note="é ü"), _record("hir_cla", 1)]
    records.write_jsonl(plain / records.RUNS_FILE, rows)
    _gzip(packed / records.RUNS_GZ_FILE, plain / records.RUNS_FILE)
    assert records.read_jsonl(packed / records.RUNS_GZ_FILE) == records.read_jsonl(plain / records.RUNS_FILE) == rows
    assert records.packed_records(packed) == rows == records.packed_records(plain)
    assert records.load_records(packed) == records.load_records(plain)
    assert records.find(packed, "hir_cla", 1) == rows[1]
    assert rounds.load_record(packed / records.RUNS_GZ_FILE, "rl_cr", 0) == rows[0]
    (packed / records.RUNS_GZ_FILE).write_bytes(gzip.compress(b'{"method": "rl_cr", "seed": 0}\n{oops\n'))
    with pytest.raises(ValueError, match=r"runs\.jsonl\.gz:2: not a JSON object"):
        records.load_records(packed)


def test_gzipped_records_come_first_and_pack_folds_into_the_plain_file_only(tmp_path):
    """A finished folder's ``runs.jsonl.gz`` with a ``runs.jsonl`` beside it (a round packed there after): both are
    read, the gzipped first, a plain record replacing a gzipped one of the same method and seed; ``pack`` writes the
    plain file, never the gzipped one."""
    records.write_jsonl(tmp_path / "old.jsonl", [_record("rl_cr", 0, tag="gz"), _record("rl_cr", 1, tag="gz")])
    _gzip(tmp_path / records.RUNS_GZ_FILE, tmp_path / "old.jsonl")
    (tmp_path / "old.jsonl").unlink()
    gzipped = (tmp_path / records.RUNS_GZ_FILE).read_bytes()
    records.write_jsonl(tmp_path / records.RUNS_FILE, [_record("rl_cr", 1, tag="plain")])
    assert [r["tag"] for r in records.packed_records(tmp_path)] == ["gz", "gz", "plain"]
    assert [(r["seed"], r["tag"]) for r in records.load_records(tmp_path)] == [(0, "gz"), (1, "plain")]
    records.loose_path(tmp_path, "hir_cla", 2).parent.mkdir()
    records.loose_path(tmp_path, "hir_cla", 2).write_text(json.dumps(_record("hir_cla", 2, tag="loose")))
    loaded = records.load_records(tmp_path)
    assert records.pack(tmp_path) == 1
    assert (tmp_path / records.RUNS_GZ_FILE).read_bytes() == gzipped
    assert [r["tag"] for r in records.read_jsonl(tmp_path / records.RUNS_FILE)] == ["loose", "plain"]
    assert records.load_records(tmp_path) == loaded


def test_a_record_folder_with_gzipped_records_only_is_a_record_folder(tmp_path):
    (tmp_path / "pairing-check").mkdir()
    (tmp_path / "pairing-check" / records.RUNS_GZ_FILE).write_bytes(gzip.compress(b""))
    (tmp_path / "notes").mkdir()
    assert [p.name for p in records.record_folders(tmp_path)] == [tmp_path.name, "pairing-check"]


def _gz_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "benchmarks/experiments"], cwd=records.REPO_ROOT,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return sorted(p for p in listed.stdout.splitlines() if p.endswith(records.RUNS_GZ_FILE))


def _folder(path: str) -> str:
    return path.removeprefix("benchmarks/experiments/").removesuffix("/" + records.RUNS_GZ_FILE)


def test_every_committed_gzipped_runs_file_is_the_plain_one_it_replaced():
    """Each decompresses to valid JSON lines, as many as the ``runs.jsonl`` it replaced, with its sha256; made with
    ``gzip -n`` (no name, no time stamp in the header)."""
    paths = _gz_files()
    new = "a newly gzipped runs.jsonl: add its line count and sha256 (taken before gzip -n -9) to GZIPPED"
    assert sorted(map(_folder, paths)) == sorted(GZIPPED), new
    for path in paths:
        data = (records.REPO_ROOT / path).read_bytes()
        assert data[:3] == b"\x1f\x8b\x08" and data[3] & 0x08 == 0 and data[4:8] == bytes(4), path  # gzip -n
        plain = gzip.decompress(data)
        lines, sha256 = GZIPPED[_folder(path)]
        assert hashlib.sha256(plain).hexdigest() == sha256, path
        assert plain.endswith(b"\n") and len(plain.splitlines()) == lines, path
        assert all(isinstance(json.loads(line), dict) for line in plain.splitlines()), path
        assert len(records.read_jsonl(records.REPO_ROOT / path)) == lines


def test_every_record_decision_json_names_is_in_the_gzipped_records():
    """The records each decision rests on (a decisive pair's methods and seeds; a round's pairs and pairing checks)
    are there, wherever they were gzipped; the gloo-teardown records match the counts of its summary.json."""
    gzipped = {_folder(p) for p in _gz_files()}
    keys = {name: {records.record_key(r) for r in records.read_jsonl(records.EXPERIMENTS / name / records.RUNS_GZ_FILE)}
            for name in gzipped if name != "gloo-teardown"}
    named = 0
    for entry in records.read_decisions():
        needed = []
        if "methods" in entry:  # a decisive pair
            needed += [(entry["experiment"], m, s) for m in entry["methods"].values() for s in entry["seeds"]]
        for pair in entry.get("pairs", []):
            needed += [(pair[side]["runs"].removeprefix("benchmarks/experiments/"), pair[side]["method"], s)
                       for side in ("a", "b") for s in pair["seeds"]]
        for check in [entry.get("pairing_check") or {}, *(entry.get("more_pairing_checks") or [])]:
            if check.get("same_run") is not None:
                needed.append((f"{entry['experiment']}/pairing-check", check["method"], 0))
        for folder, method, seed in needed:
            if folder in keys:
                assert f"{method}-seed{seed}" in keys[folder], (entry["experiment"], folder, method, seed)
                named += 1
    assert named > 500
    summary = json.loads((records.EXPERIMENTS / "gloo-teardown" / "summary.json").read_text())
    runs = records.packed_records(records.EXPERIMENTS / "gloo-teardown")
    assert len(runs) == summary["runs_per_arm"] * len(summary["arms"])
    for arm, counts in summary["arms"].items():
        assert sum(r["arm"] == arm for r in runs) == summary["runs_per_arm"]
        assert sum(r["arm"] == arm and r["hung"] for r in runs) == counts["hung"]


def test_the_experiments_table_counts_gzipped_and_plain_records(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "EXPERIMENTS", tmp_path)
    (tmp_path / "done").mkdir()
    records.write_jsonl(tmp_path / "done" / "plain.jsonl", [_record("rl_cr", s) for s in range(3)])
    _gzip(tmp_path / "done" / records.RUNS_GZ_FILE, tmp_path / "done" / "plain.jsonl")
    (tmp_path / "done" / "plain.jsonl").unlink()
    records.write_jsonl(tmp_path / "done" / records.RUNS_FILE, [_record("rl_cr", 3)])
    assert experiments.experiments_table().splitlines()[-1] == "| `experiments/done/` | no | 4 | - |"
