"""`hir-trl eval --benchmark ifeval|ifbench`: the public Hub dataset read with `datasets`, tested offline on local
copies of the released files (`datasets.load_dataset` reads a local folder as it reads a Hub repository)."""

from __future__ import annotations

import shutil

import pytest

from hir_trl.evaluation import benchmarks
from hir_trl.evaluation.benchmarks import BenchmarkFormatError, load_benchmark, public_records

from ..testing_utils import shared_file


def _as_dataset_folder(tmp_path, name, relative):
    """A folder holding the released file, which `datasets` reads as a dataset of one split."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copyfile(shared_file(relative), folder / shared_file(relative).name)
    return folder


@pytest.mark.parametrize(("name", "relative"), [("ifeval", "ifeval/input_data.jsonl"),
                                                ("ifbench", "ifbench/IFBench_test.jsonl")])
def test_a_benchmark_by_name_reads_its_dataset_with_datasets_and_equals_the_file(tmp_path, monkeypatch, name,
                                                                                 relative):
    folder = _as_dataset_folder(tmp_path, name, relative)
    monkeypatch.setattr(benchmarks, "PUBLIC_BENCHMARKS", {**benchmarks.PUBLIC_BENCHMARKS, name: str(folder)})
    monkeypatch.chdir(tmp_path / name)  # no file named "ifeval" here: the name means the public data set
    by_name = load_benchmark(name)
    from_file = load_benchmark(shared_file(relative))
    assert by_name.format == from_file.format == name and by_name.name == from_file.name
    assert len(by_name.rows) == len(from_file.rows) > 100
    # the Arrow table filled every kwargs with every row's keys (None); they are dropped again (IFBench's released
    # file writes them as null itself)
    def rows(benchmark):
        return [(r.key, r.prompt, [(c.family, c.instruction_id, {k: v for k, v in c.kwargs.items() if v is not None},
                                    c.status) for c in r.constraints]) for r in benchmark.rows]

    assert rows(by_name) == rows(from_file)
    assert all(v is not None for r in by_name.rows for c in r.constraints for v in c.kwargs.values())
    assert load_benchmark(name, limit=3).rows == by_name.rows[:3]


def test_muldimif_by_name_and_an_unreadable_dataset_are_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="MulDimIF has no Hub dataset; pass the path of its test.json"):
        load_benchmark("muldimif")
    with pytest.raises(BenchmarkFormatError, match=r"cannot read the dataset .*missing.*pass the benchmark's file"):
        public_records(tmp_path / "missing")
