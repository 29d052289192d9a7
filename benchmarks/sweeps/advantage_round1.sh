#!/usr/bin/env bash
# Issue 12, section 2: how replays enter the advantages, on the synthetic task (default benchmark settings,
# fixed before the comparison; only the HiR advantage options differ), next to the baselines from the same SFT
# checkpoint. Two streams, one run each at a time (one torch thread per run, as in the default benchmark).
# Resumable: rerun to continue (records with the same settings and checkpoint are reused).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
run() {  # results-name, methods, extra-json
  "$PY" -m benchmarks.learning.run --methods "$2" --seeds 0,1,2 --jobs 1 --extra "$3" \
      --results-dir "benchmarks/results-advantage/$1" >> "benchmarks/results-advantage/$1.log" 2>&1
}
mkdir -p benchmarks/results-advantage
( run paired-w1 hir '{"replay_advantage": "paired", "replay_weight": 1.0}'
  run baselines rl_cr '' ) &
( run baselines rl_ir ''
  run positive-w1 hir '{"replay_advantage": "positive", "replay_weight": 1.0}'
  run baselines hir_paper '' ) &
wait
