"""Mutation check of the HiR step: each mutation changes the meaning of one line of ``hir_trl/step/``, and the fast
tests that need no model must fail on it (the mutation is *killed*); one they pass on *survived*, a gap in the tests.

Each mutation runs in a temporary copy of the tree (``hir_trl/``, ``tests/``, ``pyproject.toml``) with that one line
changed, under ``pytest -x`` on the tests listed with it; the unchanged copy must pass those tests first. Run from the
repository root::

    python scripts/mutate_step.py              # every mutation; exit status 1 if one survived or broke the run
    python scripts/mutate_step.py --list       # the mutations, without running them
    python scripts/mutate_step.py NAME [NAME ...]

The list and its last result are in docs/development.md ("Mutation check of the step").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What a copy holds: the package, the tests (with their data) and pytest's settings.
COPIED = ("hir_trl", "tests", "pyproject.toml")


@dataclass(frozen=True)
class Mutation:
    """One single-line change of ``path``: ``before`` (found exactly once in the file, on one line) becomes
    ``after``; ``tests``: the pytest node ids or files that must fail on it, none of them loading a model."""

    name: str
    covers: str
    path: str
    before: str
    after: str
    tests: tuple[str, ...]


STEP = "tests/step/test_step.py"
MODULES = "tests/step/test_step_modules.py"
MUTATIONS = (
    Mutation("top-k-lowest-first", "selection order", "hir_trl/step/replay.py",
             "return (math.inf if math.isnan(s) else -s, i)", "return (math.inf if math.isnan(s) else s, i)",
             ("tests/step/test_replay.py", STEP)),
    Mutation("top-k-ties-higher-index", "selection order", "hir_trl/step/replay.py",
             "return (math.inf if math.isnan(s) else -s, i)", "return (math.inf if math.isnan(s) else -s, -i)",
             ("tests/step/test_replay.py", STEP)),
    Mutation("f-int-subtracted", "the F_int term", "hir_trl/step/replay.py",
             "return [float(d) + lam * float(f) for d, f in zip(diversity, integrity)]",
             "return [float(d) - lam * float(f) for d, f in zip(diversity, integrity)]",
             ("tests/step/test_replay.py", STEP)),
    Mutation("f-int-unweighted", "the F_int term", "hir_trl/step/replay.py",
             "return [float(d) + lam * float(f) for d, f in zip(diversity, integrity)]",
             "return [float(d) + float(f) for d, f in zip(diversity, integrity)]",
             ("tests/step/test_replay.py", STEP)),
    Mutation("f-int-count-not-fraction", "the F_int term", "hir_trl/step/replay.py",
             "return sum(bool(v) for v in verdicts) / len(verdicts)", "return sum(bool(v) for v in verdicts)",
             ("tests/step/test_replay.py", STEP)),
    Mutation("k-minus-one-per-group", "k", "hir_trl/step/replay.py",
             "return [pick([i for i in candidates if g * group_size <= i < (g + 1) * group_size], k) for g in "
             "range(groups)]",
             "return [pick([i for i in candidates if g * group_size <= i < (g + 1) * group_size], k - 1) for g in "
             "range(groups)]",
             (STEP, MODULES)),
    Mutation("k-not-times-groups-batch", "k", "hir_trl/step/replay.py",
             "for i in pick(candidates, k * groups):", "for i in pick(candidates, k):",
             (STEP,)),
    Mutation("replay-ratio-inverted", "the replay ratio", "hir_trl/step/log.py",
             "log_ratio = logps - (logps if old_per_token_logps is None else old_per_token_logps)",
             "log_ratio = (logps if old_per_token_logps is None else old_per_token_logps) - logps",
             ("tests/step/test_loss_weighting.py::test_replay_ratio_counts_hand_computed",)),
    Mutation("paired-source-gains", "replay advantages", "hir_trl/step/advantages.py",
             "advantages[source] -= value\n", "advantages[source] += value\n",
             (STEP, MODULES)),
    Mutation("replay-weight-ignored", "replay advantages", "hir_trl/step/advantages.py",
             "value = weight * float(rewards[row])", "value = float(rewards[row])",
             (STEP, MODULES)),
    Mutation("group-replays-outside-group", "replay advantages", "hir_trl/step/advantages.py",
             "members = group_members(new_rows, num_sampled, group_size, replays_in_group=True)",
             "members = group_members(new_rows, num_sampled, group_size, replays_in_group=False)",
             (STEP, MODULES)),
    Mutation("positive-is-paired", "positive", "hir_trl/step/advantages.py",
             "return _sampled_then_replays(rewards, new_rows, num_sampled, group_size, loss_mask, replay_weight, False, "
             "estimator)",
             "return _sampled_then_replays(rewards, new_rows, num_sampled, group_size, loss_mask, replay_weight, True, "
             "estimator)",
             (STEP, MODULES)),
    Mutation("shortfall-ties-higher-index", "shortfall ties", "hir_trl/step/replay.py",
             "g = max(range(len(deficits)), key=lambda i: (deficits[i] - out[i], -i))",
             "g = max(range(len(deficits)), key=lambda i: (deficits[i] - out[i], i))",
             ("tests/step/test_objective.py::test_allocate_shortfall", STEP)),
    Mutation("shortfall-ignores-deficit", "shortfall ties", "hir_trl/step/replay.py",
             "g = max(range(len(deficits)), key=lambda i: (deficits[i] - out[i], -i))",
             "g = max(range(len(deficits)), key=lambda i: (deficits[i] - out[i] > 0, -i))",
             ("tests/step/test_objective.py::test_allocate_shortfall", STEP)),
    Mutation("kl-not-copied-to-replays", "the KL copy", "hir_trl/step/advantages.py",
             'if row.kind in ("replay", "pad"):', 'if row.kind == "pad":',
             (MODULES, STEP)),
    Mutation("supplementary-not-counted", "supplementary weights", "hir_trl/step/loss_weighting.py",
             "under_q[row.group] += 1", "under_q[row.group] += 0",
             ("tests/step/test_loss_weighting.py::test_paper_row_weights_by_kind", STEP)),
    Mutation("supplementary-weighted-as-replay", "supplementary weights", "hir_trl/step/loss_weighting.py",
             'weights.append(1.0 / under_q[row.group] if row.kind == "supplementary"',
             'weights.append(1.0 / num_replays if row.kind == "supplementary"',
             ("tests/step/test_loss_weighting.py::test_paper_row_weights_by_kind", STEP)),
    Mutation("ended-only-ignored", "ended-only", "hir_trl/step/algorithm.py",
             "eligible = None if args.replay_truncated_completions else completion_ended(",
             "eligible = None if True else completion_ended(",
             (STEP,)),
    Mutation("ended-means-any-eos-token", "ended-only", "hir_trl/step/sampling.py",
             "return (torch.isin(completion_ids, eos) & completion_mask.bool()).any(1).tolist()",
             "return torch.isin(completion_ids, eos).any(1).tolist()",
             (STEP, MODULES)),
    Mutation("candidates-need-more", "selection order", "hir_trl/step/replay.py",
             "if satisfied < len(row) and satisfied >= min_satisfied and (eligible is None or eligible[i]):",
             "if satisfied < len(row) and satisfied > min_satisfied and (eligible is None or eligible[i]):",
             ("tests/step/test_replay.py", STEP)),
    Mutation("reward-modes-swapped", "the binary reward", "hir_trl/step/rewards.py",
             '{"ila": ila_rewards, "cla": cla_rewards}', '{"ila": cla_rewards, "cla": ila_rewards}',
             ("tests/step/test_rewards.py", STEP)),
)


def mutated_text(text: str, mutation: Mutation) -> str:
    """``text`` with ``mutation`` applied.

    Raises:
        ValueError: ``mutation.before`` is not in ``text`` exactly once, spans lines, or equals ``after`` (the list
            no longer matches the code).
    """
    if text.count(mutation.before) != 1:
        raise ValueError(f"{mutation.name}: {mutation.path} holds {mutation.before!r} "
                         f"{text.count(mutation.before)} times, not once")
    if "\n" in mutation.before.rstrip("\n") or "\n" in mutation.after.rstrip("\n") or mutation.before == mutation.after:
        raise ValueError(f"{mutation.name}: not a change of one line")
    return text.replace(mutation.before, mutation.after)


def copy_tree(target: Path) -> None:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target / name)


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int | None, str]:
    """pytest's exit status (None after ``timeout`` seconds) and its last lines, on ``tests`` in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])


def check(mutation: Mutation, timeout: float) -> tuple[str, float, str]:
    """``(result, seconds, pytest's last lines)``: result ``killed`` (a test failed), ``survived`` (all passed) or
    ``error`` (pytest could not run the tests, or ran past ``timeout``)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutate-step-") as folder:
        tree = Path(folder)
        copy_tree(tree)
        path = tree / mutation.path
        path.write_text(mutated_text(path.read_text(), mutation))
        status, tail = run_tests(tree, mutation.tests, timeout)
    result = {0: "survived", 1: "killed"}.get(status, "error")
    return result, time.monotonic() - start, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="the mutations to run (default: every one)")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one mutation's tests")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTATIONS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown mutation(s) {', '.join(unknown)}; --list names them")
    chosen = [known[name] for name in args.names] or list(MUTATIONS)
    for mutation in chosen:  # a stale list fails here, before any test runs
        mutated_text((ROOT / mutation.path).read_text(), mutation)
    if args.list:
        for m in chosen:
            print(f"{m.name}\t{m.covers}\t{m.path}\t{m.before.strip()} -> {m.after.strip()}")
        return 0
    with tempfile.TemporaryDirectory(prefix="mutate-step-") as folder:  # the unchanged tree passes the tests
        copy_tree(Path(folder))
        tests = tuple(dict.fromkeys(test for m in chosen for test in m.tests))
        status, tail = run_tests(Path(folder), tests, args.timeout)
    if status != 0:
        print(f"the unchanged tree fails its tests ({status}): {tail}", file=sys.stderr)
        return 2
    results = []
    for mutation in chosen:
        result, seconds, tail = check(mutation, args.timeout)
        results.append(result)
        print(f"{result:8}  {mutation.name:34} {mutation.covers:22} {seconds:5.0f} s", flush=True)
        if result != "killed":
            print(f"          {tail}", flush=True)
    print(f"{results.count('killed')} of {len(results)} killed")
    return 0 if all(result == "killed" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
