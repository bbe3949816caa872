# Quickstart: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU torch first: a bare `torch` requirement would pull GBs of CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo_agent.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Each benchmark writes its own section of docs/benchmarks.md (the rest of the file is kept). `make bench` runs the
# pack overhead (4-10 min); the context eval (about 1.5 h) and the retrieval eval (~25 min) have their commands there.
bench: $(STAMP)
	$(BIN)/python bench/pack_overhead.py --data ../shared/datasets

clean:
	rm -rf $(VENV) .pytest_cache .aether
