"""Servers under test: in-process over memory, a real subprocess over stdio,
and a real WebSocket listener. All expose ``connect()`` -> :class:`RpcClient`."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from appserver.rpc.connection import Limits
from appserver.runtime.turns import EngineConfig
from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from appserver.transport.listen_options import ListenerOptions
from tests.support.client import RpcClient

TRANSPORTS = ["memory", "stdio", "websocket"]


class WsStream:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, frame: str) -> None:
        await self.ws.send(frame)

    async def receive(self) -> str:
        try:
            message = await self.ws.recv()
        except ConnectionClosed as exc:
            raise EOFError from exc
        return message if isinstance(message, str) else message.decode()

    async def close(self) -> None:
        await self.ws.close()


class ProcessStream:
    """JSON lines over a child's stdin/stdout."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._buffer = b""

    async def send(self, frame: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(frame.encode() + b"\n")

    async def send_bytes(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def receive(self) -> str:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            try:
                chunk = await self.process.stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError) as exc:
                raise EOFError from exc
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    async def close(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()


def server_command(workspace: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "appserver",
        "app-server",
        "--workspace",
        str(workspace),
        "--log-level",
        "warning",
        *extra,
    ]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("APPSERVER_TOKEN", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def read_listening_url(process: Process, timeout: float = 15) -> str:
    """Wait for the 'appserver: listening on ws://...' line on stderr."""
    assert process.stderr is not None
    seen = b""
    with anyio.fail_after(timeout):
        while True:
            match = re.search(rb"listening on (ws://\S+)", seen)
            if match:
                return match.group(1).decode()
            try:
                seen += await process.stderr.receive()
            except anyio.EndOfStream:
                raise RuntimeError(f"server exited: {seen.decode(errors='replace')}") from None


class ServerUnderTest:
    """One running server and a way to open clients to it."""

    def __init__(self, kind: str, workspace: Path, server_args: Sequence[str] = ()) -> None:
        self.kind = kind
        self.workspace = workspace
        self.server_args = tuple(server_args)  # extra CLI flags for the stdio subprocess
        self.multi_client = kind != "stdio"
        self.app: AppServer | None = None
        self.url: str | None = None
        self.stack = AsyncExitStack()
        self.tg: Any = None
        self._stdio_used = False

    @asynccontextmanager
    async def connect(
        self,
        name: str = "test-client",
        *,
        initialize: bool = True,
        capabilities: dict[str, Any] | None = None,
    ) -> AsyncIterator[RpcClient]:
        async with AsyncExitStack() as stack:
            if self.kind == "memory":
                assert self.app is not None
                stream: Any = await stack.enter_async_context(self.app.connect_memory())
            elif self.kind == "websocket":
                assert self.url is not None
                ws = await stack.enter_async_context(connect(self.url, max_size=None))
                stream = WsStream(ws)
            else:
                if self._stdio_used:
                    raise RuntimeError("stdio serves exactly one client per process")
                self._stdio_used = True
                process = await stack.enter_async_context(
                    await anyio.open_process(
                        server_command(self.workspace, *self.server_args), env=child_env()
                    )
                )
                stack.callback(_terminate, process)
                stream = ProcessStream(process)
            client = RpcClient(stream, name)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            await client.run(tg)
            if initialize:
                await client.initialize(capabilities)
            yield client


def _terminate(process: Process) -> None:
    if process.returncode is None:
        process.terminate()


@asynccontextmanager
async def running_server(
    kind: str,
    workspace: Path,
    limits: Limits | None = None,
    engine: EngineConfig | None = None,
    store: str | None = None,
    **options: Any,
) -> AsyncIterator[ServerUnderTest]:
    """Start a server of ``kind`` for ``workspace``; stop it on exit.

    ``engine`` tunes the turn engine (stdio: only ``approval_timeout``, as
    ``--approval-timeout``); ``options`` are more :class:`ServerConfig` fields
    (in-process kinds only), e.g. ``provider`` or ``allow_private_image_urls``;
    ``store``: a ``--store`` URL (default: the workspace's SQLite file).
    """
    args: list[str] = []
    if engine is not None:
        args += ["--approval-timeout", str(engine.approval_timeout)]
    if store is not None:
        args += ["--store", store]
        options["store"] = store
    sut = ServerUnderTest(kind, workspace, args)
    async with AsyncExitStack() as stack:
        if kind in ("memory", "websocket"):
            config = ServerConfig(workspace=workspace, limits=limits or Limits(), **options)
            if engine is not None:
                config.engine = engine
            sut.app = await stack.enter_async_context(AppServer.open(config))
        if kind == "websocket":
            assert sut.app is not None
            await stack.enter_async_context(
                sut.app.listen_websocket(ListenerOptions(host="127.0.0.1", port=0))
            )
            sut.url = sut.app.endpoints["appServerWebSocket"]
        yield sut
