#!/usr/bin/env bash
# GPU acceptance in one short slot (<= 8 minutes) on a machine without network whose image has torch, transformers,
# peft and accelerate: installs the wheels it lacks from benchmarks/gpu/carry/wheels (into /tmp, the image stays as
# it is), then runs tests/recipes/test_gpu.py and 2 steps of the SmolLM2 recipe in bf16, and records the GPU kind,
# step time and peak memory against `hir-trl plan`'s prediction in benchmarks/experiments/gpu/
# (benchmarks/gpu/acceptance.py).
#   before the slot, with network:  bash benchmarks/gpu/prepare.sh     (builds benchmarks/gpu/carry/, <= 64 MiB)
#   in the slot, from the checkout: bash benchmarks/gpu/acceptance.sh
# Time: the install at most 60 s, tests/recipes/test_gpu.py at most 200 s, then the plan and the 2 steps; 470 s in all
# at most.
# Exit status: 0 passed and recorded; 1 a check failed (see the record); 3 no CUDA GPU: it stops before installing
# or running anything and prints what it would run; 4 benchmarks/gpu/carry/ is missing or incomplete.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
CARRY=${CARRY:-benchmarks/gpu/carry}
SITE=${SITE:-/tmp/hir-gpu-site}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; then
    PYTHONPATH=$PWD "$PYTHON" benchmarks/gpu/acceptance.py "$@"
    exit $?
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if ! compgen -G "$CARRY/wheels/*.whl" > /dev/null; then
    echo "acceptance: no wheels in $CARRY/wheels: run benchmarks/gpu/prepare.sh before the slot"
    exit 4
fi
timeout 60 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$CARRY"/wheels/*.whl || exit 4
export PYTHONPATH=$SITE:$PWD
timeout 410 "$PYTHON" benchmarks/gpu/acceptance.py --model-files "$CARRY/smollm2" "$@"
