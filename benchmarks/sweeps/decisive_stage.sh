# Sourced by decisive_<task>.sh: `stage ARGS...` runs (or resumes) one stage of the pre-registration in $PREREG
# with `python -m benchmarks.learning.decisive run`; CACHE_DIR (optional) is the SFT/task cache, PYTHON the interpreter,
# and the array `schedule` (optional, set before calling stage) holds scheduling options such as `--save-every N`.
PY=${PYTHON:-python}
cache=()
if [ -n "${CACHE_DIR:-}" ]; then cache=(--cache-dir "$CACHE_DIR"); fi
schedule=()
stage() { "$PY" -m benchmarks.learning.decisive run "$PREREG" "${cache[@]}" "${schedule[@]}" "$@"; }
