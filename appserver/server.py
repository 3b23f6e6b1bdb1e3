"""Composition root: storage + runtime + services + transports for one workspace."""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import anyio
from websockets.asyncio.server import Server

from appserver import __version__
from appserver.rpc.connection import Connection, Limits
from appserver.runtime.bus import EventBus
from appserver.runtime.state import RuntimeStates
from appserver.services.router import Router
from appserver.services.threads import ThreadService
from appserver.storage.db import Database
from appserver.storage.lock import WorkspaceLock
from appserver.storage.threads import ThreadRepository
from appserver.transport.base import Transport
from appserver.transport.memory import MemoryTransport, memory_pair
from appserver.transport.stdio import StdioTransport
from appserver.transport.websocket import (
    WS_PATH,
    ListenerOptions,
    WebSocketTransport,
    bound_port,
    start_listener,
)

log = logging.getLogger("appserver.server")


@dataclass
class ServerConfig:
    """Everything that shapes one server process."""

    workspace: Path
    limits: Limits = field(default_factory=Limits)
    db_path: Path | None = None  # default: <workspace>/.craft/appserver.db

    @property
    def craft_dir(self) -> Path:
        return self.workspace / ".craft"

    @property
    def database_path(self) -> Path:
        return self.db_path or self.craft_dir / "appserver.db"


class AppServer:
    """One workspace's server: open with :meth:`open`, then serve transports."""

    def __init__(self, config: ServerConfig, db: Database, lock: WorkspaceLock) -> None:
        self.config = config
        self.db = db
        self.lock = lock
        self.bus = EventBus()
        self.runtimes = RuntimeStates(self.bus)
        self.router = Router(self.bus)
        self.threads = ThreadService(
            ThreadRepository(db), self.bus, self.runtimes, config.workspace
        )
        self.threads.register(self.router)
        self.connections: set[Connection] = set()
        self.ready = False
        self.endpoints: dict[str, str] = {}

    @classmethod
    @asynccontextmanager
    async def open(cls, config: ServerConfig) -> AsyncIterator[AppServer]:
        """Lock the workspace, open the database, and clean up on exit."""
        config.workspace = config.workspace.resolve()
        lock = WorkspaceLock(config.craft_dir / "appserver.lock")
        lock.acquire({"workspacePath": str(config.workspace), "version": __version__})
        try:
            db = await Database.open(config.database_path)
            try:
                server = cls(config, db, lock)
                server.ready = True
                yield server
                await server.shutdown()
            finally:
                with anyio.CancelScope(shield=True):
                    await db.close()
        finally:
            lock.release()

    async def shutdown(self) -> None:
        """Close every connection (they flush what is queued)."""
        for connection in list(self.connections):
            connection.close("server shutting down", code=1001)

    async def serve_transport(self, transport: Transport) -> Connection:
        """Serve one peer until it leaves."""
        connection = Connection(transport, self.router, self.config.limits)
        self.connections.add(connection)
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)
        return connection

    @asynccontextmanager
    async def connect_memory(self) -> AsyncIterator[MemoryTransport]:
        """An in-process client end, served until the context exits (tests)."""
        client, server_end = memory_pair()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.serve_transport, server_end)
            try:
                yield client
            finally:
                await client.close()

    async def serve_stdio(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        """Serve the one stdio client until EOF."""
        transport = await StdioTransport.open(stdin, stdout)
        await self.serve_transport(transport)

    @asynccontextmanager
    async def listen_websocket(self, options: ListenerOptions) -> AsyncIterator[Server]:
        """Accept WebSocket clients while the context is open."""

        async def on_connection(transport: WebSocketTransport) -> None:
            await self.serve_transport(transport)

        server = await start_listener(options, on_connection, lambda: self.ready)
        port = bound_port(server)
        self.endpoints["appServerWebSocket"] = f"ws://{options.host}:{port}{WS_PATH}"
        self.lock.update(
            {
                "workspacePath": str(self.config.workspace),
                "version": __version__,
                "endpoints": self.endpoints,
            }
        )
        log.info("listening on ws://%s:%d%s", options.host, port, WS_PATH)
        try:
            yield server
        finally:
            server.close(close_connections=True)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await server.wait_closed()


async def wait_for_signal() -> int:
    """Block until SIGINT or SIGTERM; returns the signal number."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            return int(signum)
    return 0


async def run(
    config: ServerConfig,
    *,
    stdio: tuple[IO[bytes], IO[bytes]] | None,
    websocket: ListenerOptions | None,
    on_ready: Callable[[AppServer], None] | None = None,
) -> None:
    """Serve until stdio EOF (when stdio is on) or a signal."""
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(AppServer.open(config))
        if websocket is not None:
            await stack.enter_async_context(server.listen_websocket(websocket))
        if on_ready is not None:
            on_ready(server)
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                signum = await wait_for_signal()
                log.info("received signal %d; shutting down", signum)
                tg.cancel_scope.cancel()

            tg.start_soon(stop_on_signal)
            if stdio is not None:
                # stdio mode ends when the one client closes its input.
                await server.serve_stdio(*stdio)
                tg.cancel_scope.cancel()
