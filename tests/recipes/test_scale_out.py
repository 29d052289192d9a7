"""Two machines and Slurm, for real (marker ``scale_out``; ``make test-scale-out``; docs/scale-out.md "Two machines").

Two machines are two ``accelerate launch --num_machines 2 --machine_rank 0|1 --main_process_ip 127.0.0.1`` of the
tiny recipe on this host (1 CPU process each, gloo), with a scripted judge (tests/judge_server.py) for the soft
constraints of every row: once into one shared ``output_dir``, once into a folder of each machine's own
(``save_on_each_node: true``, each machine in its own working folder, relative ``output_dir`` and
``judge_cache_dir``). Each layout runs fresh (4 steps, a checkpoint every 2), resumes from ``checkpoint-2`` (the
later line is set aside, and the judge is asked nothing twice), and is re-run as a requeued job would be
("already finished", exit 0). The folder lock, the checkpoints, the judge cache and the final save are checked in
each folder.

The Slurm test starts a controller and a node daemon of Debian's ``slurm-wlm`` on this host (a slurm.conf of its own
in a temporary folder, munge with a key of its own), submits ``recipes/slurm/train.slurm`` on the tiny recipe with
``sbatch``, checks its plan gate, and requeues it with ``scancel --signal`` once a checkpoint is written: the job
runs again and continues from that checkpoint.

Each launch takes a minute on 2 cores, so these tests run only when ``HIR_TRL_SCALE_OUT=1`` (the make target sets it);
elsewhere they skip with the reason."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..judge_server import FakeJudgeServer
from ..testing_utils import REPO_ROOT, TINY_RECIPE, free_port, write_rows

pytestmark = [pytest.mark.scale_out,
              pytest.mark.skipif(os.environ.get("HIR_TRL_SCALE_OUT") != "1",
                                 reason="runs 2-machine launches and a Slurm cluster for minutes: make test-scale-out")]

MULTI_CPU = REPO_ROOT / "recipes" / "accelerate_configs" / "multi_cpu.yaml"
#: Rows with two rule-checked constraints and one soft constraint each: every completion is sent to the judge.
SOFT = "The tone should be cheerful."


def _rows() -> list[dict]:
    tasks = ["Write a haiku about rain.", "Describe a cat.", "Explain tides.", "Name three colours.",
             "Summarise a day at sea.", "Give advice on sleep.", "Describe a city at night.", "Praise a teacher."]
    return [{"id": f"so-{i}", "task": task,
             "constraints": [{"text": "Do not use any commas.", "family": "ifeval",
                              "instruction_id": "punctuation:no_comma"},
                             {"text": "Use at most 20 words.", "family": "ifeval",
                              "instruction_id": "length_constraints:number_words",
                              "kwargs": {"relation": "less than", "num_words": 21}},
                             {"text": SOFT, "kind": "soft"}]} for i, task in enumerate(tasks)]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"):
        env.pop(name, None)
    return env


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).parent / name)


def two_machines(cwds: tuple[Path, Path], logs: Path, *flags: str, timeout: float = 600) -> list[tuple[int, str]]:
    """Start machine 0 and machine 1 (each ``accelerate launch`` in its working folder) and wait for both.

    Returns:
        Each machine's (exit status, output), machine 0 first.
    """
    port = free_port()
    procs = []
    for rank, cwd in enumerate(cwds):
        cwd.mkdir(parents=True, exist_ok=True)
        log = open(logs.with_name(f"{logs.name}-{rank}.log"), "w")  # noqa: SIM115 - closed below
        cmd = [_tool("accelerate"), "launch", "--config_file", str(MULTI_CPU), "--num_machines", "2",
               "--num_processes", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
               "--main_process_port", str(port), "-m", "hir_trl.cli", "train", "--config", str(TINY_RECIPE), *flags]
        procs.append((subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout
    results = []
    for proc, log in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other, _ in procs:
                other.kill()
            pytest.fail(f"the two machines did not finish in {timeout:.0f} s: {' '.join(flags)}")
        log.close()
        results.append((proc.returncode, Path(log.name).read_text(errors="replace")))
    return results


def _ok(results):
    for rank, (code, out) in enumerate(results):
        assert code == 0, f"machine {rank} exited {code}:\n{out[-4000:]}"


def _lock(folder: Path) -> dict:
    from hir_trl.run_folder import LOCK_FILE

    return json.loads((folder / LOCK_FILE).read_text())


def _assert_released(folder: Path) -> None:
    """The run's OS lock went with its process: this process can take the folder and give it back."""
    from hir_trl.run_folder import claim_run_folder, release_run_folder

    claim_run_folder(str(folder), main_process=True)
    release_run_folder(str(folder))


def _checkpoint_ranks(checkpoint: Path) -> set[int]:
    return {int(p.stem.split("_")[-1]) for p in checkpoint.glob("rng_state_*.pth")}


def _assert_folder(folder: Path, steps: list[int], ranks: set[int], final_step: int) -> None:
    """``folder``'s checkpoints (each one `check_resume` accepts, with the RNG states of ``ranks``) and its final
    model (complete, at ``final_step``)."""
    from hir_trl.run_folder import check_resume, final_model

    assert sorted(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*")) == steps
    for step in steps:
        checkpoint = folder / f"checkpoint-{step}"
        assert check_resume(str(checkpoint), str(folder)) == str(checkpoint)  # weights, state, readable files
        assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "hir_state.json").is_file()
        assert _checkpoint_ranks(checkpoint) == ranks
    record, why = final_model(str(folder))
    assert record is not None, why
    assert record["global_step"] == final_step and "model.safetensors" in record["files"]


def _cache_keys(cache_dir: Path) -> set[str]:
    with sqlite3.connect(cache_dir / "judge_cache.sqlite3") as db:
        return {key for (key,) in db.execute("SELECT key FROM verdicts")}


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


@pytest.fixture(scope="module")
def judge():
    with FakeJudgeServer() as server:
        yield server


@pytest.fixture(scope="module")
def soft_data(tmp_path_factory):
    return write_rows(tmp_path_factory.mktemp("data") / "soft.jsonl", _rows())


def _flags(model: Path, data: Path, judge: FakeJudgeServer, output_dir: str, cache_dir: str, *extra: str):
    return ("--model_name_or_path", str(model), "--dataset_name", str(data), "--output_dir", output_dir,
            "--per_device_train_batch_size", "6", "--save_steps", "2", "--judge_model", "openai/test",
            "--judge_api_base", judge.base_url, "--judge_api_key_env", "", "--judge_cache_dir", cache_dir,
            "--soft_constraints", "judge", *extra)


def _timed(label, walls, run):
    start = time.monotonic()
    results = run()
    walls[label] = round(time.monotonic() - start, 1)
    return results


def test_two_machines_share_one_output_dir(tmp_path, tiny_model_path, soft_data, judge):
    """One folder both machines see: machine 0's first process writes it all; machine 1 writes nothing there."""
    out, cache, walls = tmp_path / "shared", tmp_path / "judge-cache", {}
    flags = _flags(tiny_model_path, soft_data, judge, str(out), str(cache))
    cwds = (tmp_path / "machine0", tmp_path / "machine1")
    asked = judge.requests

    _ok(_timed("fresh", walls, lambda: two_machines(cwds, tmp_path / "fresh", *flags, "--max_steps", "4")))
    _assert_folder(out, [2, 4], {0, 1}, final_step=4)
    lock = _lock(out)
    assert lock["node"] == "0" and lock["launch"].startswith("127.0.0.1:")  # held by machine 0's first process
    _assert_released(out)
    assert not [p for cwd in cwds for p in cwd.iterdir()]  # nothing written beside the shared folder
    fresh = judge.requests - asked
    assert fresh > 0 and len(_cache_keys(cache)) == fresh  # every verdict asked once, and kept

    # resume from checkpoint-2: the later line moves aside once, steps 3-4 run again and find every verdict cached
    results = _timed("resume", walls, lambda: two_machines(cwds, tmp_path / "resume", *flags, "--max_steps", "4",
                                                           "--resume_from_checkpoint", str(out / "checkpoint-2")))
    _ok(results)
    moved = {p.name for p in (out / "_abandoned" / "after-checkpoint-2").iterdir()}
    assert {"checkpoint-4", "completions", "hir_final_model.json", "model.safetensors"} <= moved
    assert not (out / "_abandoned" / "after-checkpoint-2-2").exists()  # moved by one process only
    assert "moved the later line aside" in results[0][1] and "moved the later line aside" not in results[1][1]
    _assert_folder(out, [2, 4], {0, 1}, final_step=4)
    assert judge.requests - asked == fresh  # the resumed steps asked the judge nothing

    # a requeued job re-runs the same command with --resume_from_checkpoint true: nothing to do, exit 0 on both
    results = _timed("requeue", walls, lambda: two_machines(cwds, tmp_path / "requeue", *flags, "--max_steps", "4",
                                                            "--resume_from_checkpoint", "true"))
    _ok(results)
    assert all("already finished" in text for _, text in results)
    print(f"\nshared output_dir: wall seconds {walls}, judge requests {fresh}")


def test_two_machines_with_node_local_output_dirs(tmp_path, tiny_model_path, soft_data, judge):
    """``save_on_each_node``: each machine's first process holds and writes a folder of its own."""
    cwds = (tmp_path / "machine0", tmp_path / "machine1")
    walls = {}
    flags = _flags(tiny_model_path, soft_data, judge, "out", "judge-cache", "--save_on_each_node", "true")
    asked = judge.requests

    _ok(_timed("fresh", walls, lambda: two_machines(cwds, tmp_path / "fresh", *flags, "--max_steps", "4")))
    for rank, cwd in enumerate(cwds):
        _assert_folder(cwd / "out", [2, 4], {rank}, final_step=4)
        assert _lock(cwd / "out")["node"] == str(rank)
        _assert_released(cwd / "out")
    final = [_weights(cwd / "out" / "model.safetensors") for cwd in cwds]
    assert final[0].keys() == final[1].keys() and all(final[0][k].equal(final[1][k]) for k in final[0])
    assert (cwds[0] / "out" / "completions").is_dir()  # TRL logs completions on the first process only
    fresh = judge.requests - asked
    keys = [_cache_keys(cwd / "judge-cache") for cwd in cwds]
    assert fresh > 0 and all(keys) and not keys[0] & keys[1]  # each machine judged (and kept) its own rows
    assert len(keys[0]) + len(keys[1]) == fresh

    results = _timed("resume", walls, lambda: two_machines(cwds, tmp_path / "resume", *flags, "--max_steps", "4",
                                                           "--resume_from_checkpoint", "out/checkpoint-2"))
    _ok(results)
    for rank, cwd in enumerate(cwds):
        assert (cwd / "out" / "_abandoned" / "after-checkpoint-2" / "checkpoint-4").is_dir()
        assert "moved the later line aside" in results[rank][1]  # each machine moved its own folder's line
        _assert_folder(cwd / "out", [2, 4], {rank}, final_step=4)
    assert judge.requests - asked == fresh  # every verdict of steps 3-4 came from the machine's own cache

    results = _timed("requeue", walls, lambda: two_machines(cwds, tmp_path / "requeue", *flags, "--max_steps", "4",
                                                            "--resume_from_checkpoint", "true"))
    _ok(results)
    assert all("already finished" in text for _, text in results)
    print(f"\nnode-local output_dir: wall seconds {walls}, judge requests {fresh}")


def test_save_on_each_node_into_one_shared_folder_is_refused(tmp_path, tiny_model_path, soft_data, judge):
    """Both machines' first processes would write the same files: machine 1 is refused in one line naming the fix."""
    cwds = (tmp_path / "machine0", tmp_path / "machine1")
    flags = _flags(tiny_model_path, soft_data, judge, str(tmp_path / "shared"), str(tmp_path / "cache"),
                   "--save_on_each_node", "true", "--max_steps", "2")
    results = two_machines(cwds, tmp_path / "refused", *flags, timeout=300)
    refused = [(code, out) for code, out in results if "hir-trl train: error:" in out]
    assert len(refused) == 1 and refused[0][0] != 0  # whichever machine came second
    line = next(x for x in refused[0][1].splitlines() if x.startswith("hir-trl train: error:"))
    assert "of this same run" in line and "save_on_each_node: false" in line
    assert not list((tmp_path / "shared").glob("checkpoint-*"))


# ------------------------------------------------------------------------------------------ Slurm

SLURM_DAEMONS = ("munged", "slurmctld", "slurmd")


def _daemon(name: str) -> str | None:
    return shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name,) if p.exists()), None)


class SlurmCluster:
    """A one-node Slurm cluster on this host: munged (a key of its own), slurmctld and slurmd, with their
    slurm.conf, state, spool and logs in ``root`` and ports of their own; `stop` ends the three daemons it started.

    Raises:
        RuntimeError: a daemon did not start, or the node did not come up idle (with the daemons' log tails).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.pids: list[int] = []

    def env(self) -> dict[str, str]:
        return {**_env(), "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=60, **kwargs)

    def start(self) -> SlurmCluster:
        root, host = self.root, socket.gethostname()
        for name in ("state", "spool", "log", "munge"):
            (root / name).mkdir(parents=True, exist_ok=True)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = root / "munge" / "munge.socket"
        subprocess.run([_daemon("munged"), f"--key-file={key}", f"--socket={socket_path}",
                        f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'log' / 'munged.log'}",
                        f"--seed-file={root / 'munge' / 'seed'}", "--force"], check=True, timeout=30)
        self.pids.append(int((root / "munge" / "munged.pid").read_text()))
        self.conf.write_text("\n".join([
            "ClusterName=hirtest", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}", "AuthType=auth/munge",
            f"AuthInfo=socket={socket_path}", "CredType=cred/munge", f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}", f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}", f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "ReturnToService=2", "MpiDefault=none",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
        for daemon, pid_file in (("slurmctld", "slurmctld.pid"), ("slurmd", "slurmd.pid")):
            subprocess.run([_daemon(daemon), "-f", str(self.conf)], env=self.env(), check=True, timeout=60)
            for _ in range(50):
                if (root / pid_file).exists():
                    break
                time.sleep(0.2)
            self.pids.append(int((root / pid_file).read_text()))
        for _ in range(60):
            state = self.run("sinfo", "--noheader", "--format=%t").stdout.strip()
            if state == "idle":
                return self
            time.sleep(1)
        raise RuntimeError(f"the Slurm node did not come up idle (sinfo: {state!r}):\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                         for p in sorted((self.root / "log").glob("*.log")))

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, Restarts, ExitCode, ...), or {} once the job is forgotten."""
        out = self.run("scontrol", "show", "job", "--oneliner", job_id).stdout
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    def wait(self, job_id: str, done, timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            if done(fields):
                return fields
            time.sleep(2)
        pytest.fail(f"job {job_id}: still {self.job(job_id).get('JobState')} after {timeout:.0f} s\n{self.logs()}")

    def stop(self) -> None:
        import signal

        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = [name for name in (*SLURM_DAEMONS, "sbatch") if _daemon(name) is None]
    if missing:
        pytest.skip(f"needs Debian's slurm-wlm and munge ({', '.join(missing)} not found): "
                    "apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their user only when started as root")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _slurm_work(tmp_path: Path) -> Path:
    """The submission folder: the shipped recipes (linked), logs/ for the script's output, outputs/ for the run."""
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    (work / "recipes").symlink_to(REPO_ROOT / "recipes")
    return work


def _sbatch(slurm: SlurmCluster, work: Path, extra: str, accelerator: str = "multi_cpu", **env: str) -> str:
    submitted = slurm.run("sbatch", "--parsable", "--gres=none", f"--chdir={work}",
                          f"--export=ALL,GPUS_PER_NODE=1,{','.join(f'{k}={v}' for k, v in env.items())}".rstrip(","),
                          str(REPO_ROOT / "recipes" / "slurm" / "train.slurm"), "recipes/tiny/hir/config_cpu.yaml",
                          accelerator, extra)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def _job_log(work: Path, job_id: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((work / "logs").glob(f"*-{job_id}.*")))


def test_slurm_plan_gate_stops_a_launch_that_does_not_fit(tmp_path, slurm, tiny_model_path):
    work = _slurm_work(tmp_path)
    job = _sbatch(slurm, work, f"--use_cpu false --model_name_or_path {tiny_model_path}", "multi_gpu",
                  GPU_MEMORY_GB="0.01")  # 10 MB GPUs: the tiny model's state alone does not fit
    fields = slurm.wait(job, lambda f: f.get("JobState") in ("FAILED", "COMPLETED"), timeout=300)
    log = _job_log(work, job)
    assert fields["JobState"] == "FAILED" and fields["ExitCode"].startswith("1:"), log
    assert "does not fit" in log and "END" not in log  # stopped at the plan, before srun
    assert not (work / "outputs" / "tiny-hir").exists()


def test_slurm_job_requeued_by_signal_continues_from_its_checkpoint(tmp_path, slurm, tiny_model_path):
    work = _slurm_work(tmp_path)
    out = work / "outputs" / "tiny-hir"
    start = time.monotonic()
    job = _sbatch(slurm, work, f"--model_name_or_path {tiny_model_path} --max_steps 8 --save_steps 2")
    deadline = time.monotonic() + 600
    while not (out / "checkpoint-2" / "trainer_state.json").exists():
        assert time.monotonic() < deadline, f"no checkpoint-2 after 600 s:\n{_job_log(work, job)}\n{slurm.logs()}"
        assert slurm.job(job).get("JobState") in ("PENDING", "RUNNING"), _job_log(work, job)
        time.sleep(1)
    signalled = slurm.run("scancel", "--batch", "--signal=USR1", job)
    assert signalled.returncode == 0, signalled.stderr
    first = time.monotonic() - start
    fields = slurm.wait(job, lambda f: f.get("JobState") == "COMPLETED" or f.get("JobState") == "FAILED", 900)
    log = _job_log(work, job)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    assert "REQUEUE" in log and "RESTART 1: --resume_from_checkpoint true" in log
    from hir_trl.run_folder import final_model

    record, why = final_model(str(out))
    assert record is not None and record["global_step"] == 8, why
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert sorted({h["step"] for h in history if "loss" in h}) == list(range(1, 9))
    resumed = next(line for line in log.splitlines() if "RESTART 1" in line)
    assert "checkpoint-" in (out / "README.md").read_text()  # the model card names the checkpoint resumed from
    print(f"\nslurm: requeued after {first:.0f} s ({resumed}); whole job {time.monotonic() - start:.0f} s")


def test_slurm_job_requeued_before_its_first_checkpoint_starts_again(tmp_path, slurm, tiny_model_path):
    """No checkpoint to continue from: the requeued job replaces what the interrupted run wrote and trains anew."""
    work = _slurm_work(tmp_path)
    out = work / "outputs" / "tiny-hir"
    job = _sbatch(slurm, work, f"--model_name_or_path {tiny_model_path} --max_steps 4 --save_steps 100")
    deadline = time.monotonic() + 600
    while "step 1/4" not in _job_log(work, job):
        assert time.monotonic() < deadline, f"no step after 600 s:\n{_job_log(work, job)}\n{slurm.logs()}"
        time.sleep(1)
    assert not list(out.glob("checkpoint-*"))
    assert slurm.run("scancel", "--batch", "--signal=USR1", job).returncode == 0
    fields = slurm.wait(job, lambda f: f.get("JobState") in ("COMPLETED", "FAILED"), 900)
    log = _job_log(work, job)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    assert "RESTART 1: --overwrite_output_dir true" in log
    from hir_trl.run_folder import final_model

    record, why = final_model(str(out))
    assert record is not None and record["global_step"] == 4, why
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [h["step"] for h in history if "loss" in h] == [1, 2, 3, 4]  # one line of steps, from the start
