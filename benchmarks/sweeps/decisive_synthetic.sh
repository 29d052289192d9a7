#!/usr/bin/env bash
# The decisive experiment on the synthetic task, in the pre-registered order
# (benchmarks/preregistered/decisive-synthetic.yaml). Resumable: finished run records are reused.
# Run from a frozen worktree of the commit to test, so that later commits cannot change a running sweep:
#   git worktree add /tmp/decisive <commit> && cd /tmp/decisive && \
#       CACHE_DIR=/path/to/benchmarks/.cache bash benchmarks/sweeps/decisive_synthetic.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PREREG=benchmarks/preregistered/decisive-synthetic.yaml
source benchmarks/sweeps/decisive_stage.sh
stage --family trl --arms hir,rl_cr
stage --family trl --arms rl_ir
stage --family paper --arms hir,rl_cr
stage --family paper --arms rl_ir
"$PY" -m benchmarks.learning.decisive decide
