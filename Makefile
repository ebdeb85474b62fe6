# Every target bootstraps what it needs; re-running skips what is already current.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .stamps
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help demo test lint typecheck unit localaws bench chaos synth clean

help:
	@echo "make demo      run the local fleet demo (failover scenario)"
	@echo "make test      lint, type-check and run the test suite"
	@echo "make localaws  run only the embedded local AWS until Ctrl-C"

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

$(STAMPS)/npm: package.json
	@mkdir -p $(STAMPS)
	npm install --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: deps
deps: $(STAMPS)/venv $(STAMPS)/npm

lint: deps
	$(BIN)/ruff check .

typecheck: deps
	$(BIN)/mypy

unit: deps
	$(BIN)/pytest -q

test: lint typecheck unit

demo: deps
	$(BIN)/holdfast up --scenario failover

localaws: deps
	$(BIN)/holdfast localaws

clean:
	rm -rf $(VENV) $(STAMPS) node_modules cdk.out .mypy_cache .ruff_cache .pytest_cache
