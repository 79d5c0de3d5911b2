# Two entry points for a fresh machine (see README.md):
#   make run    install into .venv and run the main job on the embedded default
#   make test   install into .venv (with the dev extra) and run the tests
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_VERSION := 2.13.0
EXTRAS ?= dev,notebooks
PYTEST_ARGS ?= -m "not slow and not gpu and not alfworld"
export KEDRO_DISABLE_TELEMETRY := true
export PYTHONHASHSEED := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.cache/torch_extensions

.PHONY: install run smoke test test-slow lint viz clean-data

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first and pinned, so that nothing later resolves an unpinned (CUDA) build.
$(VENV)/.installed-$(EXTRAS): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed-$(EXTRAS)

run: install
	$(BIN)/kedro run --pipeline=cycle

smoke: install
	$(BIN)/kedro run --env smoke --pipeline=cycle

# pytest exits 5 when it collects no test; that is not a failure of the code under test.
test: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-slow: install
	$(BIN)/pytest -m "slow and not gpu"

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

viz: install
	$(BIN)/kedro viz build
