# The README's quick start is exactly `make run` and `make test`; each must work as the
# only command on a fresh clone, so each (re)builds .venv when pyproject.toml changes.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_WHEEL := $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl)
SIM_STAMP := $(VENV)/.installed-sim
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test nightly lint bench venv clean

# make run: the simulator alone (simpy, numpy, pydantic, pyyaml, plotly; ~200 MB).
$(SIM_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(SIM_STAMP)

# make test: everything the tests need, the real backend (torch, triton) included.
$(TEST_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# Prefer the local CPU wheel of torch where this machine has one (no multi-GB CUDA build).
	$(if $(TORCH_WHEEL),$(BIN)/pip install -q $(TORCH_WHEEL))
	$(BIN)/pip install -q -e '.[real,test,serve,cluster]'
	touch $(TEST_STAMP) $(SIM_STAMP)

venv: $(TEST_STAMP)

run: $(SIM_STAMP)
	$(BIN)/pagesim run scenarios/default.yaml --out runs/default --force

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -rs $(PYTEST_ARGS)

# The long property-test run: Hypothesis's nightly profile (10x+ the ci examples).
nightly: $(TEST_STAMP)
	HYPOTHESIS_PROFILE=nightly TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -rs $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .

bench: $(TEST_STAMP)
	$(BIN)/python bench/allocator.py
	$(BIN)/python bench/sim_speed.py

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
