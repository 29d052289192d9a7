#!/usr/bin/env bash
# The decisive experiment on the real task (SmolLM2-135M-Instruct), in the pre-registered order
# (benchmarks/experiments/decisive-smollm2/preregistration.yaml). Resumable: finished run records are reused. One run at a time
# (a run peaks at 8-14 GB of RSS). A run saves a resumable checkpoint every 2 optimizer steps (`--save-every`, beside
# the task's cache), so a run cut off (a run takes hours on a 2-core CPU) resumes where it stopped when the script is
# started again. Run from a frozen worktree of the commit to test:
#   git worktree add /tmp/decisive <commit> && cd /tmp/decisive && \
#       CACHE_DIR=/path/to/benchmarks/.cache bash benchmarks/sweeps/decisive_smollm2.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PREREG=benchmarks/experiments/decisive-smollm2/preregistration.yaml
source benchmarks/sweeps/decisive_stage.sh
schedule=(--save-every 2)
for seed in 0 1 2 3 4; do stage --family trl --arms hir,rl_cr --seeds "$seed"; done
stage --family trl --arms rl_ir --seeds 0,1,2,3,4
for seed in 5 6 7 8; do stage --family trl --arms hir,rl_cr --seeds "$seed"; done
for seed in 0 1 2; do stage --family paper --arms hir,rl_cr --seeds "$seed"; done
stage --family paper --arms rl_ir --seeds 0,1,2
"$PY" -m benchmarks.learning.decisive decide
