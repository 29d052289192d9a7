#!/usr/bin/env bash
# make train's recipe, 3 steps, twice side by side (1 torch thread each, the same seed, so the same completions):
# glibc's default allocator against a fixed MALLOC_MMAP_THRESHOLD_ (bytes, the first argument). Reads wall time,
# peak RSS and page faults from /usr/bin/time -v and the per-step step_time from the logs, into $OUT (default
# /tmp/allocator-check). Usage: bash benchmarks/sweeps/allocator_check.sh 4194304
set -euo pipefail
cd "$(dirname "$0")/../.."
threshold=${1:?usage: allocator_check.sh BYTES}
out=${OUT:-/tmp/allocator-check}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
train() { /usr/bin/time -v .venv/bin/hir-trl train --config recipes/SmolLM2-135M-Instruct/hir/config_cpu.yaml \
    --max_steps 3 --output_dir "$out/$1" --push_to_hub false > "$out/$1.log" 2>&1; }
train default &
MALLOC_MMAP_THRESHOLD_=$threshold train "mmap-$threshold" &
wait
for name in default "mmap-$threshold"; do
  echo "$name: $(grep -o "'step_time': '[0-9.]*'" "$out/$name.log" | tr '\n' ' ')"
  grep -E "Elapsed|Maximum resident|Minor" "$out/$name.log"
done
