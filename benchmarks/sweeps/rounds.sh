#!/usr/bin/env bash
# The pre-registered rounds after the decisive experiment, in order: equal sampling, the written objective, the
# replay ratio, the binary reward (benchmarks/experiments/<round>/preregistration.yaml). Each starts with its pairing
# check (a rerun of one decisive record at the round's commit, compared with `benchmarks.learning.rounds check`;
# binary-hir checks two, one per code path its pairs reuse); when a check fails, the round re-runs the baseline arms
# that rest on it at that commit, as its pre-registration says.
# Run from this checkout with RUN_FROM a frozen worktree of the commit that last changed the round's
# pre-registration: the runs execute that commit's code (so later commits cannot change a running sweep), while the
# records, the checks and the seed counts are this checkout's:
#   C=$(git log -1 --format=%H -- benchmarks/experiments/binary-hir/preregistration.yaml)
#   git worktree add /tmp/binary-hir "$C" && ROUNDS=binary-hir RUN_FROM=/tmp/binary-hir bash benchmarks/sweeps/rounds.sh
# (the first three ran from dbd2ab4's worktree; their records are all in, so they are skipped)
# Records land loose, in benchmarks/experiments/<round>/runs/ (the new arm), .../<round>/pairing-check/runs/ and the
# fallback's folder; `python -m benchmarks.learning.experiments pack` folds them into each folder's runs.jsonl.
# Resumable: run the same line again; a (method, seed) with a record there, packed or loose, is skipped, and run.py
# reuses any record with the same settings and starting checkpoint. ROUNDS (default "equal-sampling
# written-objective replay-ratio binary-hir") picks rounds; JOBS runs at a time (default 2; binary-hir registered 1);
# PYTHON the interpreter; CACHE_DIR the task cache (default benchmarks/.cache).
set -euo pipefail
cd "$(dirname "$0")/../.."
# torch's AVX2 kernels, as for every decisive record (they rebuild the registered SFT checkpoint bit for bit)
export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-avx2}
PY=${PYTHON:-python}
RUN_FROM=$(cd "${RUN_FROM:-.}" && pwd)    # the code the runs execute (a frozen worktree)
R=benchmarks/experiments                  # the pre-registrations, committed in RUN_FROM as here
E=$PWD/benchmarks/experiments             # where the records go
DECISIVE=$E/decisive-synthetic
cache=(--cache-dir "${CACHE_DIR:-$PWD/benchmarks/.cache}")
# the decisive experiment's bench settings (benchmarks/experiments/decisive-synthetic/preregistration.yaml)
BENCH=(--prompts 512 --prompts-per-step 4 --m 6 --k 2 --learning-rate 2e-4 --max-completion-length 80
       --temperature 1.0 --lambda-0 2.0 --eta 0.05 --eval-every 64 --eval-prompts 128 --eval-samples 16
       --eval-temperature 1.0 --jobs "${JOBS:-2}" --threads 1)
ALL20=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19

runs() {  # PREREG FOLDER METHODS SEEDS EXTRA_JSON: run (or resume) METHODS x SEEDS into the record FOLDER
  local todo
  todo=$("$PY" -m benchmarks.learning.rounds missing "$2" "$3" "$4") || return 1
  if [ -z "$todo" ]; then echo "$(date +%T) $3 in $2: every seed of $4 has its record"; return 0; fi
  echo "$(date +%T) $3 in $2: seeds $todo"
  (cd "$RUN_FROM" && PYTHONPATH="$RUN_FROM" "$PY" -m benchmarks.learning.run --methods "$3" --seeds "$todo" \
      "${BENCH[@]}" --extra "$5" --preregistration "$1" --results-dir "$2" --no-report "${cache[@]}")
}

paired_with_decisive() {  # ROUND METHOD: rerun the decisive METHOD seed 0 here; 0 when it is the same run, 1 when
  local rc=0              # not (rounds check exits 3); the sweep stops if the rerun or the comparison itself fails
  runs "$R/$1/preregistration.yaml" "$E/$1/pairing-check" "$2" 0 '' || { echo "$1: pairing-check run failed" >&2; exit 1; }
  "$PY" -m benchmarks.learning.rounds check "$DECISIVE" "$E/$1/pairing-check" --method "$2" --seed 0 || rc=$?
  case $rc in
    0) return 0 ;;
    3) echo "$1: not the same run as the decisive record: the round re-runs its baseline here"; return 1 ;;
    *) echo "$1: the pairing check could not compare the records (exit $rc)" >&2; exit 1 ;;
  esac
}

# Every round pairs with the decisive records: this machine's task cache must hold their starting checkpoint. Where
# it is stored (benchmarks/learning/starts), the cache is unpacked from it on any machine; where it is not, a machine
# whose CPU kernels rebuild the SFT model into another one stops the sweep here, before any run (its runs would pair
# with nothing)
"$PY" -m benchmarks.learning.rounds start-check "$DECISIVE" "${cache[@]}" || {
  echo "this machine's task cache is not the decisive records' SFT checkpoint: no round runs here" >&2; exit 1; }

for round in ${ROUNDS:-equal-sampling written-objective replay-ratio binary-hir}; do
  P=$R/$round/preregistration.yaml
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
      base=(--b-runs "$DECISIVE")
      if [ $paired = no ]; then base=(--b-runs "$E/$round/baseline"); fi
      seeds=$("$PY" -m benchmarks.learning.rounds seeds "$P" --a-runs "$E/$round" "${base[@]}")
      runs "$P" "$E/$round" hir_cla "$seeds" '{"replay_old_logps": "hindsight"}'
      if [ $paired = no ]; then runs "$P" "$E/$round/baseline" hir_cla "$seeds" ''; fi
      ;;
    binary-hir)
      # two pairing checks, both before any run of the arm: rl_ir (the RL-IR and RL-CR pairs' baseline path) and
      # hir_cla (the replay path, the HiR default pair's baseline)
      plain=yes; replays=yes
      paired_with_decisive "$round" rl_ir || plain=no
      paired_with_decisive "$round" hir_cla || replays=no
      runs "$P" "$E/$round" hir "$ALL20" ''
      if [ $plain = no ]; then runs "$P" "$E/$round/baselines" rl_ir,rl_cr "$ALL20" ''; fi
      if [ $replays = no ]; then runs "$P" "$E/$round/baselines" hir_cla "$ALL20" ''; fi
      ;;
    *) echo "unknown round $round (equal-sampling, written-objective, replay-ratio, binary-hir)" >&2; exit 2 ;;
  esac
done
