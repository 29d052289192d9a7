#!/usr/bin/env bash
# Issue 12, section 2, round 4: the remaining baselines on the same checkpoint (RL-CR, random replay with
# truncated completions kept out of the replays) and the positive-only ablation without truncated replays.
# Same benchmark settings as rounds 1-3. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
run() {  # results-name, methods, extra-json
  "$PY" -m benchmarks.learning.run --methods "$2" --seeds 0,1,2 --jobs 1 --extra "$3" \
      --results-dir "benchmarks/results-advantage/$1" >> "benchmarks/results-advantage/$1.log" 2>&1
}
mkdir -p benchmarks/results-advantage
HIR_PAPER_PID=${HIR_PAPER_PID:-}
( run baselines rl_cr ''
  run random-ended random '{"replay_advantage": "group", "replay_truncated_completions": false}' ) &
( while [ -n "$HIR_PAPER_PID" ] && kill -0 "$HIR_PAPER_PID" 2>/dev/null; do sleep 15; done
  run positive-w1-ended hir '{"replay_advantage": "positive", "replay_weight": 1.0, "replay_truncated_completions": false}' ) &
wait
