# gpupool: `make run` starts the control plane on the demo; `make test` runs every test.
# Both bootstrap the virtual environment (.venv) themselves.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make run` installs gpupool with its server packages only; the test toolchain (Ray, moto,
# schemathesis, the Azure SDK, mypy, ...) comes with the first `make test`. Packages are
# installed by uv (fetched from PyPI into .venv/tools first), which is several times faster
# than pip on a fresh machine.
RUN_STAMP := $(VENV)/.installed-server
STAMP := $(VENV)/.installed-test
UV := $(VENV)/tools/bin/uv
INSTALL := $(UV) pip install --python $(BIN)/python
CONFIG ?= examples/demo.yaml
PYTEST_ARGS ?=

.PHONY: run test test-azure lint bench format clean

$(UV):
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target $(VENV)/tools 'uv>=0.5,<1'

$(RUN_STAMP): pyproject.toml | $(UV)
	@echo "== installing gpupool and its server packages into $(VENV)"
	$(INSTALL) -e '.[server]'
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(UV)
	@echo "== installing gpupool with everything its tests need into $(VENV)"
	$(INSTALL) -e '.[test]'
	touch $(STAMP) $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/gpupool server --config $(CONFIG)

# The Slurm and Ray test clusters, the OIDC provider, Azurite, the S3 server and Prometheus are
# started by the tests themselves (scripts/*/up.sh, as root) and stopped here afterwards;
# GPUPOOL_KEEP_CLUSTERS=1 leaves them running.
test: $(STAMP)
	status=0; $(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	if [ -z "$$GPUPOOL_KEEP_CLUSTERS" ]; then \
	  scripts/slurm/down.sh >/dev/null 2>&1 || true; scripts/ray/down.sh >/dev/null 2>&1 || true; \
	  scripts/oidc/down.sh >/dev/null 2>&1 || true; \
	  scripts/azurite/down.sh >/dev/null 2>&1 || true; scripts/s3/down.sh >/dev/null 2>&1 || true; \
	  scripts/prometheus/down.sh >/dev/null 2>&1 || true; \
	fi; exit $$status

# The backend contract suite on real Azure (not part of `make test` or CI): Azure Batch with
# GPUPOOL_TEST_AZURE_BATCH_URL and GPUPOOL_TEST_AZURE_BATCH_POOL, Azure ML with
# GPUPOOL_TEST_AZURE_ML_{SUBSCRIPTION,RESOURCE_GROUP,WORKSPACE,COMPUTE,ENVIRONMENT}, signed in
# as azure-identity finds (az login, a managed identity, AZURE_CLIENT_ID...). See docs/azure.md.
test-azure: $(STAMP)
	@if [ -z "$$GPUPOOL_TEST_AZURE_BATCH_URL$$GPUPOOL_TEST_AZURE_ML_WORKSPACE" ]; then \
	  echo "test-azure: skipped: no Azure credentials configured (set GPUPOOL_TEST_AZURE_BATCH_URL" \
	    "and GPUPOOL_TEST_AZURE_BATCH_POOL, or GPUPOOL_TEST_AZURE_ML_*; see docs/azure.md)"; \
	  exit 0; \
	fi; \
	GPUPOOL_TEST_AZURE=1 $(BIN)/pytest tests/backends/test_backend_contract.py -k 'real' \
	  -p no:cacheprovider -o timeout=1800 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

bench: $(STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/first_run.py --json > bench/results/first_run.json
	$(BIN)/python bench/api.py --json > bench/results/api.json
	$(BIN)/python bench/scheduler.py --size S --json > bench/results/scheduler-S.json
	$(BIN)/python bench/scheduler.py --size M --json > bench/results/scheduler-M.json
	$(BIN)/python bench/forecast.py --size M --json > bench/results/forecast-M.json
	$(BIN)/python bench/controller.py --json > bench/results/controller.json
	$(BIN)/python bench/accounting.py --json > bench/results/accounting.json
	$(BIN)/python bench/simulator.py --json > bench/results/simulator.json
	$(BIN)/python bench/backends.py --jobs 40 --json > bench/results/backends.json
	$(BIN)/python bench/dashboard.py --json > bench/results/dashboard.json
	cat bench/results/*.json

clean:
	rm -rf $(VENV) .gpupool .pytest_cache .mypy_cache .ruff_cache
