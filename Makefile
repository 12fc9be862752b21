# The README's quick start is exactly `make run` and `make test`; each must work as the
# only command on a fresh clone, so each (re)builds .venv when pyproject.toml changes.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_WHEEL := $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl)
SIM_STAMP := $(VENV)/.installed-sim
TEST_STAMP := $(VENV)/.installed-test
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: run test nightly lint bench venv clean docs

# make run: the simulator alone (simpy, numpy, pydantic, pyyaml, plotly; ~200 MB).
$(SIM_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(SIM_STAMP)

# make docs: the simulator and mkdocs (the reference page is generated from the scenario
# model), not the test environment's torch and triton.
$(DOCS_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[docs]'
	touch $(DOCS_STAMP) $(SIM_STAMP)

# make test: everything the tests need, the real backend (torch, triton) included.
$(TEST_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# Prefer the local CPU wheel of torch where this machine has one (no multi-GB CUDA build).
	$(if $(TORCH_WHEEL),$(BIN)/pip install -q $(TORCH_WHEEL))
	$(BIN)/pip install -q -e '.[real,test,serve,cluster,docs]'
	touch $(TEST_STAMP) $(SIM_STAMP) $(DOCS_STAMP)

venv: $(TEST_STAMP)

run: $(SIM_STAMP)
	$(BIN)/pagesim run scenarios/default.yaml --out runs/default --force

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -rs $(PYTEST_ARGS)

# The long property-test run: Hypothesis's nightly profile (10x+ the ci examples).
nightly: $(TEST_STAMP)
	HYPOTHESIS_PROFILE=nightly TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -rs $(PYTEST_ARGS)

# The documentation site, built strictly (a broken link or page is an error) into site/.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(TEST_STAMP)
	$(BIN)/python bench/allocator.py
	$(BIN)/python bench/sim_speed.py

clean:
	rm -rf $(VENV) runs site .pytest_cache .hypothesis

# Re-record vLLM's real v1 scheduler decisions for the parity tests:
#   make parity VLLM=0.33.0
# Builds its own venv outside pagesim's (vllm --no-deps on a CPU torch); never
# needed by `make run` or `make test`, which replay the committed JSON files.
VLLM ?= 0.33.0
PARITY_VENV := /tmp/pagesim-vllm-$(VLLM)
PARITY_STAMP := $(PARITY_VENV)/.parity-installed

$(PARITY_STAMP): bench/parity/requirements-vllm.txt
	test -x $(PARITY_VENV)/bin/python || $(PY) -m venv $(PARITY_VENV)
	$(PARITY_VENV)/bin/pip install -q --upgrade pip
	$(if $(TORCH_WHEEL),$(PARITY_VENV)/bin/pip install -q $(TORCH_WHEEL),$(PARITY_VENV)/bin/pip install -q torch==2.13.0)
	$(PARITY_VENV)/bin/pip install -q --no-deps vllm==$(VLLM)
	$(PARITY_VENV)/bin/pip install -q -r bench/parity/requirements-vllm.txt \
	  "$$($(PARITY_VENV)/bin/python -c "import importlib.metadata as m; print(next(r.split(';')[0].strip() for r in m.requires('vllm') if r.startswith('transformers')))")"
	touch $@

parity: $(PARITY_STAMP)
	VLLM_TARGET_DEVICE=cpu $(PARITY_VENV)/bin/python bench/parity/record.py \
	  --vllm-version $(VLLM) --out tests/parity/vllm-$(VLLM)

.PHONY: parity
