"""How far the step's golden record moves between torch's CPU kernel sets and thread counts, in units of float32
rounding: the measurement behind ``tests/step/test_step_golden.py``'s tolerance (``ULPS``).

    python -m benchmarks.golden_spread --out benchmarks/experiments/golden-spread

For each ``ATEN_CPU_CAPABILITY`` this CPU can run (default, avx2, avx512) and 1 or 2 torch threads, one process
builds the tiny model and records every golden scenario (``tests.step.test_step_golden.record``). Each record is
compared with ``tests/fixtures/step_golden.json``: the discrete parts must be equal, and for each float key the largest
``|a - b| / (2**-23 * max(1, |a|, |b|))`` is reported. ``OUT/spread.json`` holds the figures and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CAPABILITIES = ("default", "avx2", "avx512")

CHILD = """
import json, sys, tempfile
from pathlib import Path
import torch
import tests.step.test_step_golden as golden
from hir_trl import load_hir_dataset
from hir_trl.models.tiny import build_tiny_model
from tests.testing_utils import SAMPLE_DATA
golden.THREADS = int(sys.argv[1])
dataset = load_hir_dataset(SAMPLE_DATA)
tmp = Path(tempfile.mkdtemp())
texts = [m["content"] for row in dataset for m in row["prompt"]] + [c["text"] for row in dataset for c in row["constraints"]]
model = build_tiny_model(tmp / "tiny", texts, vocab_size=1024)
out = {"capability": torch.backends.cpu.get_cpu_capability(), "threads": int(sys.argv[1]), "records": {}}
for name, overrides in golden.SCENARIOS.items():
    (tmp / name).mkdir()
    out["records"][name] = golden.record(tmp / name, model, dataset, overrides)
print(json.dumps(out))
"""


def spread(expected: dict, got: dict) -> dict:
    """Per float key, the largest move in units of 2**-23 * max(1, |value|); the discrete differences, if any."""
    from tests.step.test_step_golden import EPS32, FLOAT_KEYS, differences

    def units(a: str | None, b: str | None) -> float:
        if a is None or b is None:
            return 0.0
        x, y = float.fromhex(a), float.fromhex(b)
        return abs(x - y) / (EPS32 * max(1.0, abs(x), abs(y)))

    worst: dict[str, float] = {}
    for name, want in expected.items():
        have = got[name]
        for w, h in zip(want["steps"], have["steps"]):
            for key in FLOAT_KEYS & set(w) & set(h):
                worst[key] = max([worst.get(key, 0.0), *map(units, w[key], h[key])])
        worst["loss"] = max([worst.get("loss", 0.0), *map(units, want["losses"], have["losses"])])
        for w, h in zip(want["metrics"], have["metrics"]):
            for metric in w:
                worst[metric] = max(worst.get(metric, 0.0), units(w[metric], h[metric]))
    discrete = {name: [p for p in differences(expected[name], got[name]) if "float32" not in p
                       and not p.startswith("losses")] for name in expected}
    return {"max_units": dict(sorted(worst.items())), "discrete_differences": discrete}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args(argv)
    recorded = json.loads((REPO_ROOT / "tests" / "fixtures" / "step_golden.json").read_text())
    expected = {name: value for name, value in recorded.items() if name != "torch"}  # the scenarios' records
    import torch

    result = {"machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                          "native_capability": torch.backends.cpu.get_cpu_capability(),
                          "torch": torch.__version__, "python": platform.python_version()},
              "command": "python -m benchmarks.golden_spread " + " ".join(argv or sys.argv[1:]), "runs": []}
    for capability in CAPABILITIES:
        for threads in map(int, args.threads.split(",")):
            env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "HF_HUB_OFFLINE": "1"}
            start = time.monotonic()
            with tempfile.TemporaryDirectory():
                run = subprocess.run([sys.executable, "-c", CHILD, str(threads)], env=env, cwd=REPO_ROOT,
                                     capture_output=True, text=True)
            if run.returncode:
                sys.stderr.write(run.stderr[-2000:])
                return 1
            got = json.loads(run.stdout.strip().splitlines()[-1])
            if got["capability"].lower() != capability:
                print(f"{capability}: not available on this CPU (torch used {got['capability']}), skipped")
                continue
            entry = {"capability": capability, "threads": threads, "seconds": round(time.monotonic() - start, 1),
                     **spread(expected, got["records"])}
            result["runs"].append(entry)
            print(json.dumps(entry))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spread.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
