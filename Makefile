# Two entry points: `make run` (server on its embedded defaults) and `make test` (everything CI checks).
PYTHON ?= python3
# Run as users do: Python caches compiled modules. An environment that turns the cache off
# (PYTHONDONTWRITEBYTECODE) would make every appserver process the tests start compile its
# modules again (a fifth of the suite's time).
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The Node client; its node_modules are installed (npm ci) when missing or the lock changed.
NODE_DIR   := clients/node
NODE_STAMP := $(NODE_DIR)/node_modules/.package-lock.json

.PHONY: run chat test other-checks lint typecheck schema-check schema client-check client browser-client browser-deps postgres-deps node-deps pytest node-test qwen-sdk-test codex-ts-sdk-test bench bench-peer clean

# One install: the appserver package carries the Python client and its chat
# (clients/python/src/appserver_client, see pyproject.toml).
$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
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

# The Node client's node_modules first: tests/protocol/test_typescript.py compiles with its tsc.
# Three workers on two cores: a third of the suite's time is waiting on the
# processes it starts, so two left the cores idle (13.7 min against 9.3).
pytest: $(STAMP) browser-deps postgres-deps $(NODE_STAMP)
	$(BIN)/pytest -q -n 3

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
# After browser-deps, never beside it (make test runs with -j2): two apt-get at once would
# fight over dpkg's lock on a fresh machine.
postgres-deps: | browser-deps
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || [ -x "$$PG_BIN/pg_ctl" ] || { \
		echo "installing postgresql (apt) for the tests against a real PostgreSQL"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }

# Node.js and npm (the Node client's and the Qwen SDK's tests): checked first, installed
# with apt where it can be (Debian's nodejs); otherwise one line says what to install.
NODE_MAJOR := 20
node-deps:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
		command -v apt-get >/dev/null 2>&1 || { \
			echo "make test needs Node.js $(NODE_MAJOR)+ and npm: install them (https://nodejs.org/en/download or your package manager), then run make test again" >&2; \
			exit 1; }; \
		echo "installing nodejs and npm (apt) for the Node client's tests"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= $(NODE_MAJOR) ? 0 : 1)' || { \
		echo "make test needs Node.js $(NODE_MAJOR)+ (found $$(node --version)): install a newer one (https://nodejs.org/en/download)" >&2; \
		exit 1; }

# pytest beside everything else: it leaves about a fifth of two cores idle (its tests wait on
# the servers they start), which the other checks fill one at a time (-j2: pytest and one
# more). Each target's output is printed whole when it ends.
test: node-deps
	$(MAKE) --no-print-directory -j2 --output-sync=target pytest other-checks

other-checks: lint typecheck schema-check client-check node-test qwen-sdk-test codex-ts-sdk-test

# The servers the Node and Qwen SDK tests start keep the user's settings and workspace trust
# (docs/security.md#workspace-trust) here, not in ~/.config/appserver (pytest sets its own).
node-test qwen-sdk-test codex-ts-sdk-test: export APPSERVER_HOME := $(CURDIR)/test-artifacts/appserver-home
# Their scenarios expect `!echo hi` to be asked: read-only commands ask there (docs/approvals.md).
node-test qwen-sdk-test codex-ts-sdk-test: export APPSERVER_READ_ONLY_COMMANDS := ask

# The Node client (clients/node): npm ci when node_modules is missing or the lock changed,
# then check src/generated.ts against the schema, build with tsc, and run `node --test`
# against real servers from $(VENV).
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json | node-deps
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

$(QWEN_STAMP): $(QWEN_DIR)/package.json $(QWEN_DIR)/package-lock.json | node-deps
	cd $(QWEN_DIR) && npm ci --no-audit --no-fund
	touch $@

qwen-sdk-test: $(STAMP) $(QWEN_STAMP)
	cd $(QWEN_DIR) && node --test

# OpenAI's TypeScript SDK (@openai/codex-sdk, pinned in its lock file) running
# $(VENV)/bin/appserver-codex exec --experimental-json once per turn (tests/codex_ts_sdk).
# --omit=optional: the SDK's own Codex binary (@openai/codex-linux-x64, ~400 MB) is not used.
CODEX_TS_DIR := tests/codex_ts_sdk
CODEX_TS_STAMP := $(CODEX_TS_DIR)/node_modules/.package-lock.json

$(CODEX_TS_STAMP): $(CODEX_TS_DIR)/package.json $(CODEX_TS_DIR)/package-lock.json | node-deps
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

# appserver side by side with OpenAI Codex's `codex app-server` (bench/peer.py), then every
# door's start-up and --help beside Codex's spawn -> initialize (bench/startup.py). Installs
# the @openai/codex pinned in bench/peer/package-lock.json into bench/.cache/codex (npm ci)
# when missing. Options: make bench-peer BENCH_PEER_ARGS="--runs 5 --json samples.json"
# BENCH_STARTUP_ARGS="--rounds 11 --before ../old-tree"
bench-peer: $(STAMP)
	$(BIN)/python bench/peer.py $(BENCH_PEER_ARGS)
	$(BIN)/python bench/startup.py $(BENCH_STARTUP_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache test-artifacts
