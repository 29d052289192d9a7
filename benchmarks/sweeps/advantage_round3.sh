#!/usr/bin/env bash
# Issue 12, section 2, round 3: the paired advantage without the clipping asymmetry (a replay's old log-probs
# under q', so its ratio starts at 1 like its source's), the remaining baselines and the positive-only ablation.
# Same benchmark settings as rounds 1-2. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
run() {  # results-name, methods, extra-json
  "$PY" -m benchmarks.learning.run --methods "$2" --seeds 0,1,2 --jobs 1 --extra "$3" \
      --results-dir "benchmarks/results-advantage/$1" >> "benchmarks/results-advantage/$1.log" 2>&1
}
mkdir -p benchmarks/results-advantage
( run paired-w1-hindsight hir '{"replay_advantage": "paired", "replay_weight": 1.0, "replay_old_logps": "hindsight"}'
  run baselines rl_cr '' ) &
( run baselines hir_paper ''
  run positive-w1 hir '{"replay_advantage": "positive", "replay_weight": 1.0}' ) &
wait
