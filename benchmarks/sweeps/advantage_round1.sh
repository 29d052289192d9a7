#!/usr/bin/env bash
# Issue 12, section 2: how replays enter the advantages, on the synthetic task (default benchmark settings,
# fixed before the comparison; only the HiR advantage options differ). Resumable: rerun to continue.
# Two variants at a time, one job each (one torch thread per run, as in the default benchmark).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
run() {  # name, extra-json
  "$PY" -m benchmarks.learning.run --methods hir --seeds 0,1,2 --jobs 1 --extra "$2" \
      --results-dir "benchmarks/results-advantage/$1" > "benchmarks/results-advantage/$1.log" 2>&1
}
mkdir -p benchmarks/results-advantage
run paired-w1 '{"replay_advantage": "paired", "replay_weight": 1.0}' &
run positive-w1 '{"replay_advantage": "positive", "replay_weight": 1.0}' &
wait
