# Two entry points: `make run` (server on its embedded defaults) and `make test` (everything CI checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run chat test lint typecheck schema-check schema client-check client browser-client browser-deps postgres-deps pytest node-test qwen-sdk-test codex-ts-sdk-test bench bench-peer clean

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
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy clients/python/src

schema-check: $(STAMP)
	$(BIN)/appserver schema --out schema --reference docs/protocol.md --check

# The Python client's types and methods are generated from schema/protocol.schema.json;
# the Node client's src/generated.ts is `appserver schema --ts` (appserver/protocol/typescript.py);
# its browser build (appserver/web/assets/client.js) is checked by node-test.
client-check: $(STAMP)
	$(BIN)/python clients/python/generate.py --check
	$(BIN)/python -m appserver.protocol.typescript clients/node/src/generated.ts --check

pytest: $(STAMP) browser-deps postgres-deps
	$(BIN)/pytest -q -n 2

# The web client's tests (tests/transport/test_web_browser.py) drive Debian's chromium with Playwright
# (the Python package comes with the dev extra; its own browser download is not used).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium (apt) for the web client's browser tests"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# Tests against PostgreSQL (tests/support/postgres.py) initdb and start their own throwaway
# cluster from Debian's server binaries in /usr/lib/postgresql/<version>/bin (or $PG_BIN).
postgres-deps:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || [ -x "$$PG_BIN/pg_ctl" ] || { \
		echo "installing postgresql (apt) for the tests against a real PostgreSQL"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }

test: lint typecheck schema-check client-check pytest node-test qwen-sdk-test codex-ts-sdk-test

# The servers the Node and Qwen SDK tests start keep the user's settings and workspace trust
# (docs/security.md#workspace-trust) here, not in ~/.config/appserver (pytest sets its own).
node-test qwen-sdk-test codex-ts-sdk-test: export APPSERVER_HOME := $(CURDIR)/test-artifacts/appserver-home
# Their scenarios expect `!echo hi` to be asked: read-only commands ask there (docs/approvals.md).
node-test qwen-sdk-test codex-ts-sdk-test: export APPSERVER_READ_ONLY_COMMANDS := ask

# The Node client (clients/node): npm ci when node_modules is missing or the lock changed,
# then check src/generated.ts against the schema, build with tsc, and run `node --test`
# against real servers from $(VENV).
NODE_DIR := clients/node
NODE_STAMP := $(NODE_DIR)/node_modules/.package-lock.json

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	touch $@

node-test: $(STAMP) $(NODE_STAMP)
	cd $(NODE_DIR) && npm run --silent check-generated && npm run --silent check-browser && npm run --silent build && npm run --silent test:run

# The browser build of the Node client, served by the web client: appserver/web/assets/client.js
# (esbuild, checked in; `make node-test` fails when it is stale).
browser-client: $(NODE_STAMP)
	cd $(NODE_DIR) && npm run --silent build:browser

# Qwen Code's official SDK (@qwen-code/sdk, pinned in its lock file) driving
# $(VENV)/bin/appserver through whole turns (tests/qwen_sdk).
QWEN_DIR := tests/qwen_sdk
QWEN_STAMP := $(QWEN_DIR)/node_modules/.package-lock.json

$(QWEN_STAMP): $(QWEN_DIR)/package.json $(QWEN_DIR)/package-lock.json
	cd $(QWEN_DIR) && npm ci --no-audit --no-fund
	touch $@

qwen-sdk-test: $(STAMP) $(QWEN_STAMP)
	cd $(QWEN_DIR) && node --test

# OpenAI's TypeScript SDK (@openai/codex-sdk, pinned in its lock file) running
# $(VENV)/bin/appserver-codex exec --experimental-json once per turn (tests/codex_ts_sdk).
# --omit=optional: the SDK's own Codex binary (@openai/codex-linux-x64, ~400 MB) is not used.
CODEX_TS_DIR := tests/codex_ts_sdk
CODEX_TS_STAMP := $(CODEX_TS_DIR)/node_modules/.package-lock.json

$(CODEX_TS_STAMP): $(CODEX_TS_DIR)/package.json $(CODEX_TS_DIR)/package-lock.json
	cd $(CODEX_TS_DIR) && npm ci --omit=optional --no-audit --no-fund
	touch $@

codex-ts-sdk-test: $(STAMP) $(CODEX_TS_STAMP)
	cd $(CODEX_TS_DIR) && node --test

schema: $(STAMP) $(NODE_STAMP)
	$(BIN)/appserver schema --out schema --reference docs/protocol.md
	$(BIN)/python clients/python/generate.py
	$(BIN)/python -m appserver.protocol.typescript clients/node/src/generated.ts
	cd $(NODE_DIR) && npm run --silent build:browser

client: $(STAMP) $(NODE_STAMP)
	$(BIN)/python clients/python/generate.py
	$(BIN)/python -m appserver.protocol.typescript clients/node/src/generated.ts
	cd $(NODE_DIR) && npm run --silent build:browser

bench: $(STAMP)
	$(BIN)/python bench/rpc.py

# appserver side by side with OpenAI Codex's `codex app-server` (bench/peer.py). Installs the
# @openai/codex pinned in bench/peer/package-lock.json into bench/.cache/codex (npm ci) when
# missing. Options: make bench-peer BENCH_PEER_ARGS="--runs 5 --json samples.json"
bench-peer: $(STAMP)
	$(BIN)/python bench/peer.py $(BENCH_PEER_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache test-artifacts
