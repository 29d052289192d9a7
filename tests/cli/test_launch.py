"""One-command launch as ``trl grpo``: ``hir-trl train --accelerate_config NAME|FILE --num_processes N`` (and
``accelerate launch``'s other options) starts ``accelerate launch -m hir_trl.cli train ...``; ``hir-trl plan`` takes
the same command line."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from hir_trl.cli import launch
from hir_trl.cli.main import main

from ..testing_utils import REPO_ROOT, TINY_RECIPE, assert_nothing_written, train_on_two_processes

ACCELERATE_CONFIGS = REPO_ROOT / "recipes" / "accelerate_configs"


@pytest.fixture(scope="module")
def train_options():
    return launch.train_options()


def test_launcher_options_go_to_accelerate_and_training_flags_stay_the_trainings(train_options):
    argv = ["--config", "r.yaml", "--accelerate_config", "multi_cpu", "--num_processes", "2", "--learning_rate",
            "1e-4", "--main_process_port=29501", "--multi_gpu", "--gradient_accumulation_steps", "2", "--debug"]
    launch_args, train_argv = launch.split_launch_args(argv, train_options)
    assert launch_args == ["--config_file", str(ACCELERATE_CONFIGS / "multi_cpu.yaml"), "--num_processes", "2",
                           "--main_process_port", "29501", "--multi_gpu"]
    # a flag both know (accelerate launch has --gradient_accumulation_steps and --debug) is the training's
    assert train_argv == ["--config", "r.yaml", "--learning_rate", "1e-4", "--gradient_accumulation_steps", "2",
                          "--debug"]
    assert launch.split_launch_args(["--config", "r.yaml", "--seed", "3"], train_options) == (
        [], ["--config", "r.yaml", "--seed", "3"])


def test_accelerate_config_takes_a_shipped_name_or_a_file(tmp_path):
    shipped = launch.shipped_accelerate_configs()
    assert set(shipped) == {path.stem for path in ACCELERATE_CONFIGS.glob("*.yaml")}
    assert launch.accelerate_config_path("zero3") == ACCELERATE_CONFIGS / "zero3.yaml"
    assert launch.accelerate_config_path("zero3.yaml") == ACCELERATE_CONFIGS / "zero3.yaml"
    own = tmp_path / "mine.yaml"
    own.write_text("num_processes: 3\n")
    assert launch.accelerate_config_path(str(own)) == own
    with pytest.raises(ValueError) as caught:
        launch.accelerate_config_path("zero9")
    assert "--accelerate_config zero9: no such file" in str(caught.value) and "multi_cpu" in str(caught.value)


def test_a_bad_launcher_option_is_one_line_and_nothing_starts(tmp_path, capsys):
    for argv, fragment in ((["--accelerate_config", "zero9"], "--accelerate_config zero9: no such file"),
                           (["--num_processes"], "--num_processes needs a value")):
        code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / "out"),
                     "--model_name_or_path", str(tmp_path / "model"), *argv])
        out, err = capsys.readouterr()
        assert code == 2 and err.startswith("hir-trl train: error: ") and err.count("\n") == 1 and fragment in err
        assert_nothing_written(tmp_path)


def test_launch_runs_accelerate_launch_on_the_training_module(monkeypatch, tmp_path, capsys):
    import accelerate.commands.launch as accelerate_launch

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("HIR_TRL_LAUNCHED", raising=False)
    seen = []
    monkeypatch.setattr(accelerate_launch, "launch_command", seen.append)
    code = main(["train", "--accelerate_config", "multi_cpu", "--num_processes", "2", "--config", str(TINY_RECIPE),
                 "--output_dir", str(tmp_path / "out")])
    assert code == 0 and len(seen) == 1
    args = seen[0]
    assert args.module and args.training_script == "hir_trl.cli"
    assert args.training_script_args == ["train", "--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / "out")]
    assert args.config_file == str(ACCELERATE_CONFIGS / "multi_cpu.yaml") and int(args.num_processes) == 2
    assert os.environ["HIR_TRL_LAUNCHED"] == "1"  # what the started processes inherit
    assert "accelerate launch --config_file" in capsys.readouterr().err


def test_a_failed_process_gives_its_exit_status_and_a_launched_process_takes_no_launcher_options(monkeypatch,
                                                                                                capsys):
    import accelerate.commands.launch as accelerate_launch

    def fails(args):
        raise subprocess.CalledProcessError(3, ["python"])

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("HIR_TRL_LAUNCHED", raising=False)
    monkeypatch.setattr(accelerate_launch, "launch_command", fails)
    assert launch.launch_training(["--num_processes", "1"], ["--config", "r.yaml"]) == 3
    capsys.readouterr()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launch.launch_training(["--num_processes", "2"], ["--config", "r.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already runs under a launcher (LOCAL_RANK=1)" in err


def test_plan_takes_the_launch_command_line_of_hir_trl_train(capsys):
    recipe = str(REPO_ROOT / "recipes" / "Qwen2.5-7B-Instruct" / "hir" / "config_paper.yaml")
    assert main(["plan", "--config", recipe, "--accelerate_config", "zero3", "--num_processes", "8",
                 "--main_process_port", "29501"]) == 0
    direct = capsys.readouterr().out
    assert "launch: 8 process(es), DeepSpeed ZeRO-3" in direct
    assert main(["plan", "--", "hir-trl", "train", "--accelerate_config", "zero3", "--num_processes", "8",
                 "--config", recipe]) == 0
    assert capsys.readouterr().out == direct


@pytest.mark.slow
def test_hir_trl_train_with_accelerate_config_trains_on_two_processes(tmp_path):
    done = train_on_two_processes(tmp_path, "multi_cpu", "--max_steps", "1", "--save_strategy", "no")
    assert done.returncode == 0, "\n".join(line for line in done.stderr.splitlines() if "rank0" not in line)
    # the tiny recipe's 12 rows per process are 2 groups, each with k = 2 replays: 4 per process, 8 on two
    assert "Replays made: 8;" in done.stdout, done.stdout
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    assert [entry["step"] for entry in history if "loss" in entry] == [1]
