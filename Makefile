# Everything the project needs is installed from here, into .venv, from scratch.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format legacy bench schemas clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11 or newer is needed")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpustack-fn simulate examples/walkthrough/scenario.yaml

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/python -m pytest -q

legacy: $(STAMP)
	$(BIN)/python tools/legacy.py

schemas: $(STAMP)
	$(BIN)/python tools/schemas.py

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
