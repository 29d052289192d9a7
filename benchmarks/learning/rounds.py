"""Helpers of the three pre-registered rounds after the decisive experiment (``benchmarks/experiments/<round>/
preregistration.yaml``: ``equal-sampling``, ``written-objective``, ``replay-ratio``), run by
``benchmarks/sweeps/rounds.sh``.

- ``check A B``: the pairing check every round runs first. B is a rerun, at the round's commit and on the round's
  machine, of a committed decisive record A: the two must be the same run (`same_run`: every logged step's loss,
  rewards, replays and tokens, and every held-out verdict) for the round's new arm to be paired with the decisive
  records. Exit 0 when they are, 1 (and the differences) when not.
- ``seeds PREREG``: the seeds of the round's new arm to run now: its registered seeds, plus, once they are all in,
  the re-estimation seeds its ``reestimation`` clause asks for (blinded to the mean: the sd of the primary pair's
  paired differences on the registered seeds, `paired.seeds_for_half_width`, capped).

Usage (from the repository root)::

    python -m benchmarks.learning.rounds check benchmarks/results-decisive/synthetic/runs/hir_cla-seed0.json \\
        benchmarks/experiments/replay-ratio/pairing-check/runs/hir_cla-seed0.json
    python -m benchmarks.learning.rounds seeds benchmarks/experiments/replay-ratio/preregistration.yaml
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.learning import paired  # noqa: E402

#: Logged per-step values that must be equal in a pairing check; ``reward/cla`` within `CLA_REL_TOL` (it is logged
#: in float32 by some commits and float64 by others, so the 7th significant digit may differ).
SAME_KEYS = ("loss", "reward/ila", "hir/replayed_rows", "hir/supplementary_samples", "hir/generated_tokens",
             "hir/padded_rows", "completions/mean_length")
CLA_REL_TOL = 1e-6


def same_run(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The differences between two run records (``benchmarks.learning.run``) that must be one run: the method,
    seed and starting checkpoint, every logged step's `SAME_KEYS` and ``reward/cla``, and every held-out
    evaluation's per-(prompt, sample) verdicts. Wall times and ``hir/seconds_*`` may differ. Empty: the same run."""
    out = [f"{key}: {a.get(key)!r} != {b.get(key)!r}" for key in ("method", "seed", "checkpoint")
           if a.get(key) != b.get(key)]
    logs_a, logs_b = ({e["step"]: e for e in r["logs"]} for r in (a, b))
    if sorted(logs_a) != sorted(logs_b):
        out.append(f"logged steps differ: {len(logs_a)} against {len(logs_b)}")
    for step in sorted(set(logs_a) & set(logs_b)):
        ea, eb = logs_a[step], logs_b[step]
        for key in SAME_KEYS:
            if ea.get(key) != eb.get(key):
                out.append(f"step {step} {key}: {ea.get(key)!r} != {eb.get(key)!r}")
        ca, cb = ea.get("reward/cla"), eb.get("reward/cla")
        if (ca is None) != (cb is None) or (ca is not None and not math.isclose(ca, cb, rel_tol=CLA_REL_TOL)):
            out.append(f"step {step} reward/cla: {ca!r} != {cb!r}")
    evals_a, evals_b = ({e["step"]: e for e in r["evals"]} for r in (a, b))
    if sorted(evals_a) != sorted(evals_b):
        out.append(f"evaluated steps differ: {sorted(evals_a)} against {sorted(evals_b)}")
    for step in sorted(set(evals_a) & set(evals_b)):
        if evals_a[step]["verdicts"] != evals_b[step]["verdicts"]:
            out.append(f"step {step}: held-out verdicts differ (ILA {evals_a[step]['ila']} against "
                       f"{evals_b[step]['ila']})")
    return out


def load_preregistration(path: str | Path) -> dict[str, Any]:
    """A round's pre-registration as a dict.

    Raises:
        ValueError: a required key is missing.
    """
    import yaml

    spec = yaml.safe_load(Path(path).read_text())
    for key in ("experiment", "bench", "arm", "seeds", "results_dir", "pairs", "decision_rule"):
        if key not in spec:
            raise ValueError(f"{path}: missing key {key!r}")
    return spec


def _finals(runs_dir: Path, method: str) -> dict[int, float]:
    """Seed -> final held-out ILA (points) of a method's records in ``runs_dir``."""
    return {r["seed"]: 100 * paired.final_eval(r)["ila"] for r in paired.load_runs(runs_dir).get(method, [])}


def seeds_to_run(spec: dict[str, Any], repo: Path = REPO_ROOT) -> list[int]:
    """The new arm's seeds to run now: the registered ``seeds``; once each has a record, those plus the
    re-estimation seeds (``reestimation``: ``target_half_width``, ``max_seeds_per_arm``) that the sd of the primary
    pair's differences on the registered seeds asks for (blinded: the mean is not looked at). The primary pair is
    ``pairs[0]``, whose sides ``a`` and ``b`` each name a ``method`` and the ``runs`` folder of its records."""
    seeds = list(spec["seeds"])
    clause = spec.get("reestimation")
    if not clause:
        return seeds
    pair = spec["pairs"][0]
    a, b = (_finals(repo / pair[side]["runs"], pair[side]["method"]) for side in ("a", "b"))
    if not set(seeds) <= set(a) & set(b):
        return seeds
    needed = paired.seeds_for_half_width(paired.t_interval([a[s] - b[s] for s in seeds])["sd"],
                                         clause["target_half_width"])
    total = min(max(needed, len(seeds)), clause["max_seeds_per_arm"])
    return seeds + list(range(max(seeds) + 1, max(seeds) + 1 + total - len(seeds)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="exit 0 when two run records are the same run")
    check.add_argument("committed", type=Path)
    check.add_argument("rerun", type=Path)
    seeds = sub.add_parser("seeds", help="print the new arm's seeds to run now, comma-separated")
    seeds.add_argument("preregistration", type=Path)
    seeds.add_argument("--b-runs", default=None, help="the primary pair's baseline records instead of pairs[0].b.runs "
                       "(the round's own baseline, when its pairing check failed)")
    ns = parser.parse_args(argv)
    if ns.command == "check":
        differences = same_run(*(json.loads(p.read_text()) for p in (ns.committed, ns.rerun)))
        for line in differences[:20]:
            print(line)
        print("the same run" if not differences else f"{len(differences)} differences: not the same run")
        return 0 if not differences else 1
    spec = load_preregistration(ns.preregistration)
    if ns.b_runs:
        spec["pairs"][0]["b"]["runs"] = ns.b_runs
    print(",".join(map(str, seeds_to_run(spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
