#!/usr/bin/env bash
# The adapter's contract with TRL, on each TRL version given: tests/trainer/test_trl_adapter.py, the step's golden
# record (tests/step/test_step_golden.py) and a tiny `hir-trl train`, in the venv VENV (default .venv-trl), into which
# each version is installed in turn (pip --no-deps: TRL 1.12-1.16 declare the same requirements hir-trl already pulls).
#   VENV=.venv-trl bash scripts/trl_range.sh 1.12.0 1.16.0
# One line per version: "trl X: passed" or "trl X: FAILED (<what>)"; exits non-zero when any version failed.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-trl}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
status=0
for version in "$@"; do
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "trl==$version" || {
    echo "trl $version: FAILED (install)"; status=1; continue; }
  failed=()
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/trainer/test_trl_adapter.py \
      tests/step/test_step_golden.py \
      -k "test_trl_ or not test_step_golden or test_two_steps_match_the_golden_record" || failed+=(tests)
  out=$(mktemp -d)
  "$VENV/bin/hir-trl" train --config recipes/tiny/hir/config_cpu.yaml --output_dir "$out/run" \
      --model_name_or_path "$out/tiny-model" --max_steps 2 > "$out/train.log" 2>&1 || { failed+=(train); tail -20 "$out/train.log"; }
  [ -f "$out/run/model.safetensors" ] || [ -f "$out/run/adapter_model.safetensors" ] || failed+=("no final model")
  rm -rf "$out"
  if [ ${#failed[@]} -eq 0 ]; then echo "trl $version: passed"; else echo "trl $version: FAILED (${failed[*]})"; status=1; fi
done
exit $status
