# Two entry points: `make run` (server on its embedded defaults) and `make test` (everything CI checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck schema-check schema pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/appserver app-server --listen ws://127.0.0.1:9100 --workspace .

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

schema-check: $(STAMP)
	$(BIN)/appserver schema --out schema --reference docs/protocol.md --check

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck schema-check pytest

schema: $(STAMP)
	$(BIN)/appserver schema --out schema --reference docs/protocol.md

bench: $(STAMP)
	$(BIN)/python bench/rpc.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
