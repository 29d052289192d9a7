# hir-trl: `make train` sets up and runs the main job (HiR on a tiny local model, real MulDimIF data, CPU);
# `make test` sets up and runs the test suite. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RECIPE ?= recipes/tiny/hir/config_cpu.yaml
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install install-dev train test style quality clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

train: install
	$(BIN)/hir-trl train --config $(RECIPE)

test: install-dev
	$(BIN)/python -m pytest tests

style: install-dev
	$(BIN)/ruff format hir_trl tests
	$(BIN)/ruff check --fix hir_trl tests

quality: install-dev
	$(BIN)/ruff check hir_trl tests

clean:
	rm -rf $(VENV) outputs .pytest_cache
