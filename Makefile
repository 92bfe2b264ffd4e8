# gpupool: `make run` starts the control plane on the demo; `make test` runs every test.
# Both bootstrap the virtual environment (.venv) themselves.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= examples/demo.yaml
PYTEST_ARGS ?=

.PHONY: run test lint bench format clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpupool server --config $(CONFIG)

# The Slurm and Ray test clusters, the OIDC provider, Azurite and the S3 server are started by
# the tests themselves (scripts/*/up.sh, as root) and stopped here afterwards;
# GPUPOOL_KEEP_CLUSTERS=1 leaves them running.
test: $(STAMP)
	status=0; $(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	if [ -z "$$GPUPOOL_KEEP_CLUSTERS" ]; then \
	  scripts/slurm/down.sh >/dev/null 2>&1 || true; scripts/ray/down.sh >/dev/null 2>&1 || true; \
	  scripts/oidc/down.sh >/dev/null 2>&1 || true; \
	  scripts/azurite/down.sh >/dev/null 2>&1 || true; scripts/s3/down.sh >/dev/null 2>&1 || true; \
	fi; exit $$status

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

bench: $(STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/api.py --json > bench/results/api.json
	$(BIN)/python bench/scheduler.py --size S --json > bench/results/scheduler-S.json
	$(BIN)/python bench/scheduler.py --size M --json > bench/results/scheduler-M.json
	$(BIN)/python bench/controller.py --json > bench/results/controller.json
	$(BIN)/python bench/accounting.py --json > bench/results/accounting.json
	$(BIN)/python bench/simulator.py --json > bench/results/simulator.json
	$(BIN)/python bench/backends.py --jobs 40 --json > bench/results/backends.json
	cat bench/results/*.json

clean:
	rm -rf $(VENV) .gpupool .pytest_cache .mypy_cache .ruff_cache
