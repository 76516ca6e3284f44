# Two commands for a newcomer: `make demo` (a TP=2 x DP=2 CPU job on real text that saves, reloads and
# validates: the report card shows all eight checks) and `make test` (the whole suite). `make check` is
# the fast tier to run after every change: the package layout's import contracts (.importlinter, with
# import-linter's lint-imports) and the unit tests (no torchrun jobs, no notebooks).
# Both create .venv with Python 3.12 on first use and install the kit into it; later runs skip the
# install unless pyproject.toml changed (the stamp file carries its hash).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell (sha256sum pyproject.toml 2>/dev/null || shasum -a 256 pyproject.toml) | cut -c1-12)

# Find Python 3.12: python3.12 on PATH (if it really runs), then pyenv's 3.12.x, then a clear error.
PYTHON312 ?= $(shell \
  if python3.12 -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then echo python3.12; \
  elif command -v pyenv >/dev/null 2>&1 && ls -d "$$(pyenv root)"/versions/3.12*/bin/python3.12 >/dev/null 2>&1; then \
    ls -d "$$(pyenv root)"/versions/3.12*/bin/python3.12 | sort -V | tail -n 1; \
  fi)

.PHONY: install demo check test lab site site-check clean-runs

install: $(STAMP)

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

demo: install
	$(PY) -m helpers --tp 2 --nproc 4 --iters 5 --data wikitext --save-interval 5

check: install
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q tests/unit --durations=10

test: install
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
