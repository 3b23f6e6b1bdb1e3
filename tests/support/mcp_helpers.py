"""Helpers for the MCP and plugin tests: the echo server and status waits."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from tests.support.client import RpcClient
from tests.support.turns import new_thread, one_item, run_turn

ECHO_SERVER = str(Path(__file__).with_name("mcp_echo_server.py"))
ECHO_TOOLS = 8  # echo, add, fail, env, cwd, sleep, crash, pid
SETTLED = ("ready", "error", "disabled")


# Python plus the SDK take a second or two to start, much more on a loaded
# machine: the tests are about behaviour, not the default 10 s deadline.
STARTUP = 60


def echo_config(name: str = "echo", **fields: Any) -> dict[str, Any]:
    """A stdio configuration that runs the echo server with this Python."""
    return {
        "name": name,
        "command": sys.executable,
        "args": [ECHO_SERVER],
        "startupTimeoutSec": STARTUP,
        **fields,
    }


def broken_config(name: str = "broken", **fields: Any) -> dict[str, Any]:
    """A stdio configuration whose process prints to stderr and exits at once."""
    script = "import sys; print('cannot start: no config', file=sys.stderr); sys.exit(3)"
    return {"name": name, "command": sys.executable, "args": ["-c", script], **fields}


def statuses(client: RpcClient, name: str, start: int = 0) -> list[dict[str, Any]]:
    """Every ``mcp/status/updated`` status of ``name`` received from ``start`` on."""
    return [
        message["params"]["server"]
        for message in client.messages[start:]
        if message.get("method") == "mcp/status/updated"
        and "id" not in message
        and message["params"]["server"]["name"] == name
    ]


async def wait_status(
    client: RpcClient,
    name: str,
    states: Collection[str] = SETTLED,
    start: int = 0,
    timeout: float = STARTUP + 10,
) -> dict[str, Any]:
    """The first ``mcp/status/updated`` of ``name`` (from ``start``) in one of ``states``."""
    params = await client.notification(
        "mcp/status/updated",
        timeout=timeout,
        start=start,
        where=lambda p: p["server"]["name"] == name and p["server"]["startupState"] in states,
    )
    server: dict[str, Any] = params["server"]
    return server


async def current_status(
    client: RpcClient, name: str, states: Collection[str] = SETTLED, timeout: float = STARTUP + 10
) -> dict[str, Any]:
    """``name``'s status once it is in ``states``, whether it got there before
    this client connected (``mcp/status/list``) or later (a notification)."""
    mark = client.mark()
    listed = await client.request("mcp/status/list")
    for server in listed["servers"]:
        if server["name"] == name and server["startupState"] in states:
            found: dict[str, Any] = server
            return found
    return await wait_status(client, name, states, start=mark, timeout=timeout)


@asynccontextmanager
async def http_echo_server(require_header: str | None = None) -> AsyncIterator[str]:
    """The echo server over streamable HTTP; yields its URL."""
    command = [sys.executable, ECHO_SERVER, "--http"]
    if require_header:
        command += ["--require-header", require_header]
    async with await anyio.open_process(command) as process:
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(20):
            while b"\n" not in seen:
                seen += await process.stdout.receive()
        port = int(seen.split(b"\n", 1)[0])
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            with anyio.move_on_after(5):
                await process.wait()


async def call(
    client: RpcClient, tool: str, arguments: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run one turn in which the offline model calls ``tool``; returns the toolResult."""
    thread_id = await new_thread(client)
    mark = client.mark()  # turn ids repeat across threads: look only at this turn's events
    turn_id, terminal = await run_turn(
        client, thread_id, f"?tool {tool} {json.dumps(arguments or {})}", timeout=60
    )
    assert terminal["method"] == "turn/completed", terminal
    call_item = one_item(client, turn_id, "toolCall", start=mark)
    assert call_item["payload"]["toolName"] == tool
    result = one_item(client, turn_id, "toolResult", start=mark)
    assert result["payload"]["callId"] == call_item["payload"]["callId"]
    payload: dict[str, Any] = result["payload"]
    return payload
