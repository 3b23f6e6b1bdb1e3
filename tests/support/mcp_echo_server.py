"""A real MCP server for the tests, written with the ``mcp`` SDK.

    python mcp_echo_server.py                      # stdio
    python mcp_echo_server.py --http [--require-header NAME=VALUE]

With ``--http`` it serves streamable HTTP at ``http://127.0.0.1:<port>/mcp``
on a free port and prints the port on its first stdout line; requests
without the required header are refused with 401.

Tools: ``echo``, ``add``, ``fail`` (a tool error), ``env`` (reads one of the
server's environment variables), ``cwd``, ``pid``, ``sleep`` and ``crash``
(the process exits mid-call). One resource and one resource template.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("echo", log_level="WARNING")


@app.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@app.tool(structured_output=False)
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@app.tool(structured_output=False)
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@app.tool(structured_output=False)
def env(name: str) -> str:
    """The value of one of the server's environment variables ('<unset>' if absent)."""
    return os.environ.get(name, "<unset>")


@app.tool(structured_output=False)
def cwd() -> str:
    """The server's working directory."""
    return os.getcwd()


@app.tool(structured_output=False)
async def sleep(seconds: float) -> str:
    """Wait, then answer."""
    await anyio.sleep(seconds)
    return "slept"


@app.tool(structured_output=False)
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@app.tool(structured_output=False)
def crash() -> str:
    """Exit the process without answering."""
    sys.stdout.flush()
    os._exit(3)


@app.resource("echo://greeting")
def greeting() -> str:
    """A fixed text."""
    return "hello"


@app.resource("echo://items/{item}")
def item(item: str) -> str:
    """One item by name."""
    return f"item {item}"


def _guarded(inner: Any, header: str, value: str) -> Any:
    wanted = (header.lower().encode(), value.encode())

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and wanted not in scope.get("headers", []):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"missing header"})
            return
        await inner(scope, receive, send)

    return guarded


async def serve_http(require: str | None) -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sys.stdout.write(f"{sock.getsockname()[1]}\n")
    sys.stdout.flush()
    asgi: Any = app.streamable_http_app()
    if require:
        header, _, value = require.partition("=")
        asgi = _guarded(asgi, header, value)
    config = uvicorn.Config(asgi, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--require-header")
    args = parser.parse_args()
    if args.http:
        anyio.run(serve_http, args.require_header)
    else:
        app.run()


if __name__ == "__main__":
    main()
