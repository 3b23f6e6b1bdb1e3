"""Running a door (stdio, or the WebSocket server) as a real process and seeing what
it had imported when it wrote its first answer early (appserver/transport/early.py,
early_ws.py); the ``initialize`` request and the answer a built server gives it.

The door runs as ``python -c PROBE ARGS``: PROBE wraps
``appserver.transport.early.answer_first_line`` and, for the WebSocket server,
``appserver.transport.early_ws.first_connection`` (every door's early answer goes
through one of them), and once that has written an answer, writes the names of the
modules loaded at that moment to stderr as one ``EARLY-MODULES [...]`` line;
then the door goes on as usual (``appserver.cli.main``, or ``codex_main`` for
``appserver-codex``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from tests.support.servers import child_env

PROBE = """\
import json, sys
from appserver.transport import early
answer_first_line = early.answer_first_line
def probe(*args, **kwargs):
    answered = answer_first_line(*args, **kwargs)
    if answered.answer is not None:
        sys.stderr.write("EARLY-MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
        sys.stderr.flush()
    return answered
early.answer_first_line = probe
from appserver.transport import early_ws
first_connection = early_ws.first_connection
def probe_ws(*args, **kwargs):
    accepted = first_connection(*args, **kwargs)
    if accepted is not None and accepted.early is not None:
        sys.stderr.write("EARLY-MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
        sys.stderr.flush()
    return accepted
early_ws.first_connection = probe_ws
from appserver import cli
sys.exit(getattr(cli, sys.argv.pop(1))())
"""

# What no door may have loaded when it answers early: the validation library, the
# wire models, the JSON-RPC core, the runtime, the database driver and schema,
# the providers, the event loop, the ACP package and the network libraries.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "anyio",
    "asyncio",
    "aiosqlite",
    "acp",
    "websockets",
    "httpx2",
    "appserver.protocol",
    "appserver.rpc",
    "appserver.runtime",
    "appserver.providers",
    "appserver.server",
    "appserver.hosting",
)
# Modules of those packages that are the standard library only and needed first
# (appserver/early_start.py): the workspace lock and its database's creation ahead
# (a thread), the workspace config (the capabilities depend on it), and the user's
# settings and the provider settings' resolution (a bad one must fail the start
# before anything is answered), the bounded JSON decoder every door reads with,
# and the protocol's timestamps (the Codeswarm router's events carry their send time).
LIGHT = {
    "appserver.protocol",
    "appserver.protocol.decoding",
    "appserver.protocol.encoding",  # json and re only (the router's frames use it)
    "appserver.protocol.ids",
    "appserver.storage",
    "appserver.storage.lock",
    "appserver.storage.preparation",
    "appserver.storage.sqlite_setup",
    "appserver.storage.user_settings",
    "appserver.storage.workspace_config",
    "appserver.providers",
}


@dataclass
class Door:
    """What the door wrote to stdout and stderr, and its modules at the early answer."""

    stdout: list[str]
    stderr: str
    modules: list[str] | None  # None: it answered nothing early


INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "initialized"})


def initialize(request_id: Any = 1, **params: Any) -> str:
    params.setdefault("clientInfo", {"name": "early", "version": "1"})
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}
    )


async def built_answer(workspace: Path, line: str) -> str:
    """The frame a server built before serving answers ``line`` with."""
    async with (
        AppServer.open(ServerConfig(workspace=workspace)) as server,
        server.connect_memory() as client,
    ):
        await client.send(line)
        return await client.receive()


def run_door(entry: str, argv: list[str], lines: list[str], cwd: Path) -> Door:
    """Run ``appserver.cli.<entry>`` (``main`` or ``codex_main``) with ``argv``,
    write ``lines`` and close its input; what it answered."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, entry, *argv],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=cwd,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return Door(done.stdout.splitlines(), done.stderr, early_modules(done.stderr))


def early_modules(stderr: str) -> list[str] | None:
    """The modules the door had loaded when it answered early (``None``: it did not)."""
    for line in stderr.splitlines():
        if line.startswith("EARLY-MODULES "):
            return list(json.loads(line.removeprefix("EARLY-MODULES ")))
    return None


@dataclass
class WebSocketDoor:
    """``appserver app-server --listen ws://127.0.0.1:0`` under the probe: its
    address, and its stderr (whole once the context has exited)."""

    url: str
    stderr: list[str] = field(default_factory=list)

    @property
    def modules(self) -> list[str] | None:
        return early_modules("".join(self.stderr))


@contextmanager
def websocket_door(workspace: Path, *extra: str) -> Iterator[WebSocketDoor]:
    """Run the WebSocket server as a real process until the context exits."""
    argv = ["app-server", "--listen", "ws://127.0.0.1:0", "--workspace", str(workspace), *extra]
    process = subprocess.Popen(
        [sys.executable, "-c", PROBE, "main", *argv],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=workspace,
    )
    assert process.stderr is not None
    first = process.stderr.readline()
    found = re.search(r"listening on (ws://\S+)", first)
    door = WebSocketDoor(found[1] if found else "", [first])
    # Drained for the server's whole life: a full pipe would stop it at its next log line.
    drain = threading.Thread(target=door.stderr.extend, args=(process.stderr,), daemon=True)
    drain.start()
    try:
        assert found, first
        yield door
    finally:
        process.terminate()
        process.wait(30)
        drain.join(30)
        process.stderr.close()


def heavy_modules(modules: list[str]) -> list[str]:
    """The modules of ``modules`` that an early answer must come without."""
    heavy = ("appserver.storage", *HEAVY)
    return [
        name
        for name in modules
        if name not in LIGHT and any(name == h or name.startswith(h + ".") for h in heavy)
    ]
