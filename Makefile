# Quickstart: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
# ADK is a range in pyproject (>=2.13,<3); the tests run on its lowest version, 2.13.0, unless told otherwise
# (make test ADK=2.x.y). 2.13.0 is also the newest on PyPI as of 2026-12-07, so it is the one version tested.
ADK ?= 2.13.0
VENV := .venv
BIN := $(VENV)/bin
# One stamp per ADK version, so `make test ADK=x.y.z` installs that version even when .venv exists.
STAMP := $(VENV)/.installed-adk-$(ADK)
# The CPU build of torch, asked for by its local version from PyTorch's CPU index. A bare `torch==2.13.0` from PyPI
# is the CUDA build with 16 nvidia-* wheels and triton (several GB). No retries and a short timeout: offline, pip
# gives up on that index in about 12 s (about 55 s with pip's default retries) and uses a local wheel if it has one.
TORCH := torch==2.13.0+cpu
TORCH_INDEX := https://download.pytorch.org/whl/cpu
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-services services services-stop bench report clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --retries 0 --timeout 5 --extra-index-url $(TORCH_INDEX) '$(TORCH)'
	$(BIN)/pip install -q -e '.[dev]' 'google-adk[db]==$(ADK)'
	rm -f $(VENV)/.installed-adk-*
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo_agent.py

test: $(STAMP)
	@$(BIN)/python -c "from google.adk import __version__ as v; print('google-adk', v); assert v == '$(ADK)', v"
	$(BIN)/python -m pytest -q

# The tests with the real services (tests/test_services.py skips without them): PostgreSQL (Debian: apt-get install
# -y postgresql) and moto's S3 server, on 127.0.0.1, stopped afterwards. `make test-services ARGS=tests/test_services.py`
# runs only those. `make services` leaves them running (`source .aether/services/env`, then pytest) until
# `make services-stop`.
ARGS ?=
test-services: $(STAMP)
	VENV=$(VENV) bash .ci/services run $(BIN)/python -m pytest -q $(ARGS)

services: $(STAMP)
	VENV=$(VENV) bash .ci/services start .aether/services

services-stop:
	VENV=$(VENV) bash .ci/services stop .aether/services

# The demo's HTML report, rendered in headless Chromium (fails on a JavaScript error; apt-get install -y chromium).
# It all goes to REPORT_DIR (ignored by git): the tracked docs/report.png changes only when copied there by hand.
REPORT_DIR ?= .aether/report
report: $(STAMP)
	rm -rf $(REPORT_DIR)/packs
	$(BIN)/python examples/demo_agent.py --store $(REPORT_DIR)/packs --report $(REPORT_DIR)/demo-report.html > /dev/null
	$(BIN)/python scripts/check_report.py $(REPORT_DIR)/demo-report.html --screenshot $(REPORT_DIR)/report.png

# Each benchmark writes its own section of docs/benchmarks.md (the rest of the file is kept). `make bench` runs the
# pack overhead (4-10 min); the context eval (about 1.5 h) and the retrieval eval (~25 min) have their commands there.
bench: $(STAMP)
	$(BIN)/python bench/pack_overhead.py --data ../shared/datasets

clean:
	rm -rf $(VENV) .pytest_cache .aether
