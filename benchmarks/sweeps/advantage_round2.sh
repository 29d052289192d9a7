#!/usr/bin/env bash
# Issue 12, section 2, round 2: are truncated completions (no EOS, cut at max_completion_length) the harmful part
# of replay? Same benchmark settings as round 1. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
run() {  # results-name, methods, extra-json
  "$PY" -m benchmarks.learning.run --methods "$2" --seeds 0,1,2 --jobs 1 --extra "$3" \
      --results-dir "benchmarks/results-advantage/$1" >> "benchmarks/results-advantage/$1.log" 2>&1
}
mkdir -p benchmarks/results-advantage
run group-ended hir '{"replay_advantage": "group", "replay_truncated_completions": false}'
run paired-w1-ended hir '{"replay_advantage": "paired", "replay_weight": 1.0, "replay_truncated_completions": false}'
