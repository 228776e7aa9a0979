# Headwater's developer entry points. `make test` works on a fresh Debian machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: test deps system-deps lint typecheck unit compat dev clean

test: deps lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider

deps: system-deps $(VENV)/.installed

system-deps:
	@bash scripts/install-system-deps.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed
	$(BIN)/mypy

unit: deps
	$(BIN)/pytest -q tests/unit

compat: deps
	$(BIN)/pytest -q -m compat

# Start a local ZooKeeper and one broker in the foreground; prints how to reach them.
dev: deps
	$(BIN)/python scripts/dev_cluster.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
