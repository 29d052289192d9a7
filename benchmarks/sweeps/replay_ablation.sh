#!/usr/bin/env bash
# Issue 12: how replays enter the advantages, and whether cut-off completions may be replayed, on the synthetic
# task with the default benchmark settings (fixed before the comparison; only the replay options differ), 3 seeds
# each, next to the baselines from the same SFT checkpoint. Resumable: records with the same settings and starting
# checkpoint are reused. Results: benchmarks/results/ (main comparison) and benchmarks/results-replay-ablation/.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
run() {  # results dir, methods, extra-json
  "$PY" -m benchmarks.learning.run --methods "$2" --seeds 0,1,2 --jobs "${JOBS:-2}" --extra "$3" --results-dir "$1"
}
A=benchmarks/results-replay-ablation
run benchmarks/results hir,hir_paper,rl_ir,rl_cr ''        # hir = HiRConfig's defaults (positive, ended only)
run benchmarks/results random '{"replay_advantage": "positive", "replay_weight": 1.0, "replay_truncated_completions": false}'
run $A/paired-w1 hir '{"replay_advantage": "paired", "replay_weight": 1.0, "replay_truncated_completions": true}'
run $A/group-ended hir '{"replay_advantage": "group", "replay_truncated_completions": false}'
run $A/positive-w1 hir '{"replay_advantage": "positive", "replay_weight": 1.0, "replay_truncated_completions": true}'
run $A/positive-w1-ended hir '{"replay_advantage": "positive", "replay_weight": 1.0, "replay_truncated_completions": false}'
