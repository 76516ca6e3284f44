# Two commands for a newcomer: `make demo` (a TP=2 x DP=2 CPU job on real text that saves, reloads and
# validates: the report card shows all eight checks) and `make test` (the whole suite). `make check` is
# the fast tier to run after every change: the package layout's import contracts (.importlinter, with
# import-linter's lint-imports) and the unit tests (no torchrun jobs, no notebooks) on two workers, less the
# few marked `slow` (children that import Megatron-Bridge or run Megatron-LM's checks: pyproject.toml's
# markers), which `make test` runs.
# Both create .venv with Python 3.12 on first use and install the kit into it; `make check` and `make test`
# add the test extra (pytest, papermill, import-linter, nvidia-modelopt: pyproject.toml). Later runs skip an
# install unless pyproject.toml changed (each stamp file carries its hash).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
HASH := $(shell (sha256sum pyproject.toml 2>/dev/null || shasum -a 256 pyproject.toml) | cut -c1-12)
STAMP := $(VENV)/.installed-$(HASH)
TEST_STAMP := $(VENV)/.installed-test-$(HASH)

# Find Python 3.12: python3.12 on PATH (if it really runs), then pyenv's 3.12.x, then a clear error.
PYTHON312 ?= $(shell \
  if python3.12 -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then echo python3.12; \
  elif command -v pyenv >/dev/null 2>&1 && ls -d "$$(pyenv root)"/versions/3.12*/bin/python3.12 >/dev/null 2>&1; then \
    ls -d "$$(pyenv root)"/versions/3.12*/bin/python3.12 | sort -V | tail -n 1; \
  fi)

.PHONY: install install-test demo check test lab site site-check clean-runs

install: $(STAMP)
install-test: $(TEST_STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x "$(PY)" ]; then \
	  if [ -z "$(PYTHON312)" ]; then \
	    echo "error: Python 3.12 not found (megatron-core 0.19 needs >=3.12; Megatron-Bridge needs <3.13)."; \
	    echo "       Install python3.12 or pass PYTHON312=/path/to/python3.12."; exit 1; fi; \
	  echo "creating $(VENV) with $(PYTHON312)"; \
	  "$(PYTHON312)" -m venv $(VENV); fi
	@echo "installing the kit into $(VENV) (first time: a few minutes, ~5 GB with CUDA-enabled torch)"
	$(PY) -m pip install --quiet --disable-pip-version-check -e . 2>&1 | grep -v "^WARNING: Location" || true
	@# [tool.megatron-kit] install-without-deps: Megatron-Bridge and transformers, without their declared stacks
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps \
	  $$($(PY) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml","rb"))["tool"]["megatron-kit"]["install-without-deps"]))')
	@PYTHONWARNINGS=ignore $(PY) -c "import torch, megatron.core, helpers, transformers" >/dev/null 2>&1 || \
	  { echo "error: install incomplete; the import below fails:"; $(PY) -c "import torch, megatron.core, helpers, transformers"; exit 1; }
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

# The test extra on top (its stamp is newer than the kit's, so a reinstall of the kit redoes it).
$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]' 2>&1 | grep -v "^WARNING: Location" || true
	@PYTHONWARNINGS=ignore $(PY) -c "import pytest, xdist, papermill, importlinter" >/dev/null 2>&1 || \
	  { echo "error: test extra incomplete; the import below fails:"; $(PY) -c "import pytest, xdist, papermill, importlinter"; exit 1; }
	@touch $(TEST_STAMP)

demo: install
	$(PY) -m helpers --tp 2 --nproc 4 --iters 5 --data wikitext --save-interval 5

check: install-test
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q tests/unit -n 2 -m "not slow" --durations=10

test: install-test
	$(PY) -m pytest -q tests -n 2 --durations=25

lab: install
	$(VENV)/bin/jupyter lab notebooks

# The lessons as web pages (site/html/index.html), from the executed copies `make test` writes to tests/.executed/.
site: install
	$(PY) site/build.py --executed tests/.executed --out site/html

# Every page of the site in headless Chromium (needs Debian's chromium and playwright-core: site/README.md).
site-check:
	node site/check.mjs site/html $${SHOTS:-/tmp/site-shots}

clean-runs:
	rm -rf runs
