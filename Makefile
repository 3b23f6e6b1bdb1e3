# Two entry points: `make run` (server on its embedded defaults) and `make test` (everything CI checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run chat test lint typecheck schema-check schema client-check client pytest bench clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet -e clients/python
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/appserver app-server --listen ws://127.0.0.1:9100 --workspace .

# Chat with the server `make run` started (in another terminal).
chat: $(STAMP)
	$(BIN)/appserver-client chat --url ws://127.0.0.1:9100

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy clients/python/src

schema-check: $(STAMP)
	$(BIN)/appserver schema --out schema --reference docs/protocol.md --check

# The Python client's types and methods are generated from schema/protocol.schema.json.
client-check: $(STAMP)
	$(BIN)/python clients/python/generate.py --check

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck schema-check client-check pytest

schema: $(STAMP)
	$(BIN)/appserver schema --out schema --reference docs/protocol.md
	$(BIN)/python clients/python/generate.py

client: $(STAMP)
	$(BIN)/python clients/python/generate.py

bench: $(STAMP)
	$(BIN)/python bench/rpc.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
