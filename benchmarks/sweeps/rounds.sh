#!/usr/bin/env bash
# The three pre-registered rounds after the decisive experiment, in order: equal sampling, the written objective,
# the replay ratio (benchmarks/experiments/<round>/preregistration.yaml). Each starts with its pairing check (a rerun
# of one decisive record at this commit, compared with `benchmarks.learning.rounds check`); when the check fails,
# the round re-runs its baseline arms at this commit, as its pre-registration says.
# Run from a frozen worktree of the commit that adds the pre-registrations, so that later commits cannot change a
# running sweep:
#   C=$(git log -1 --format=%H -- benchmarks/experiments/replay-ratio/preregistration.yaml)
#   git worktree add /tmp/rounds "$C" && cd /tmp/rounds && \
#       CACHE_DIR=/path/to/benchmarks/.cache PYTHON=/path/to/venv/bin/python bash benchmarks/sweeps/rounds.sh
# Resumable: run the same line again; a (method, seed) whose record exists is skipped, and run.py reuses any record
# with the same settings and starting checkpoint. ROUNDS (default "equal-sampling written-objective replay-ratio")
# picks rounds; DECISIVE_RUNS is the folder of the decisive synthetic records; JOBS runs at a time (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
# torch's AVX2 kernels, as for every decisive record (they rebuild the registered SFT checkpoint bit for bit)
export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-avx2}
PY=${PYTHON:-python}
DECISIVE=${DECISIVE_RUNS:-benchmarks/results-decisive/synthetic/runs}
E=benchmarks/experiments
cache=()
if [ -n "${CACHE_DIR:-}" ]; then cache=(--cache-dir "$CACHE_DIR"); fi
# the decisive experiment's bench settings (benchmarks/preregistered/decisive-synthetic.yaml), shared by every run
BENCH=(--prompts 512 --prompts-per-step 4 --m 6 --k 2 --learning-rate 2e-4 --max-completion-length 80
       --temperature 1.0 --lambda-0 2.0 --eta 0.05 --eval-every 64 --eval-prompts 128 --eval-samples 16
       --eval-temperature 1.0 --jobs "${JOBS:-2}" --threads 1)
ALL20=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19

missing() {  # RESULTS_DIR METHODS SEEDS -> the seeds (comma-separated) of which some method has no record yet
  local out=() seed method methods seeds
  IFS=, read -ra methods <<< "$2"
  IFS=, read -ra seeds <<< "$3"
  for seed in "${seeds[@]}"; do
    for method in "${methods[@]}"; do
      if [ ! -f "$1/runs/$method-seed$seed.json" ]; then out+=("$seed"); break; fi
    done
  done
  (IFS=,; echo "${out[*]}")
}

runs() {  # PREREG RESULTS_DIR METHODS SEEDS EXTRA_JSON: run (or resume) METHODS x SEEDS
  local todo
  todo=$(missing "$2" "$3" "$4")
  if [ -z "$todo" ]; then echo "$(date +%T) $3 in $2: every seed of $4 has its record"; return 0; fi
  echo "$(date +%T) $3 in $2: seeds $todo"
  "$PY" -m benchmarks.learning.run --methods "$3" --seeds "$todo" "${BENCH[@]}" --extra "$5" \
      --preregistration "$1" --results-dir "$2" "${cache[@]}"
}

paired_with_decisive() {  # ROUND METHOD: rerun the decisive METHOD seed 0 here; 0 when it is the same run
  runs "$E/$1/preregistration.yaml" "$E/$1/pairing-check" "$2" 0 ''
  "$PY" -m benchmarks.learning.rounds check "$DECISIVE/$2-seed0.json" "$E/$1/pairing-check/runs/$2-seed0.json"
}

for round in ${ROUNDS:-equal-sampling written-objective replay-ratio}; do
  P=$E/$round/preregistration.yaml
  case $round in
    equal-sampling)
      if ! paired_with_decisive "$round" rl_cr; then
        runs "$P" "$E/$round/hir_cla" hir_cla "$ALL20" ''
      fi
      runs "$P" "$E/$round" rl_cr "$ALL20" '{"num_generations": 6}'
      ;;
    written-objective)
      if ! paired_with_decisive "$round" hir_paper_rpp; then
        runs "$P" "$E/$round/baselines" hir_paper_rpp,rl_cr_rpp "$ALL20" ''
      fi
      runs "$P" "$E/$round" hir_paper_rpp "$ALL20" '{"replay_loss_weighting": "paper"}'
      ;;
    replay-ratio)
      paired=yes
      paired_with_decisive "$round" hir_cla || paired=no
      runs "$P" "$E/$round" hir_cla 0,1,2,3,4,5,6,7,8,9,10,11 '{"replay_old_logps": "hindsight"}'
      if [ $paired = no ]; then runs "$P" "$E/$round/baseline" hir_cla 0,1,2,3,4,5,6,7,8,9,10,11 ''; fi
      # the blinded re-estimation (the pre-registration's `reestimation:`): seeds 12, ... up to 20 if the sd asks
      base=()
      if [ $paired = no ]; then base=(--b-runs "$E/$round/baseline/runs"); fi
      seeds=$("$PY" -m benchmarks.learning.rounds seeds "$P" "${base[@]}")
      runs "$P" "$E/$round" hir_cla "$seeds" '{"replay_old_logps": "hindsight"}'
      if [ $paired = no ]; then runs "$P" "$E/$round/baseline" hir_cla "$seeds" ''; fi
      ;;
    *) echo "unknown round $round (equal-sampling, written-objective, replay-ratio)" >&2; exit 2 ;;
  esac
done
