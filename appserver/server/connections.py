"""The connections one server serves, each over its own transport (stdio, WebSocket,
in-process): serving one until it leaves, logging who it is, closing them all at drain."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from appserver.protocol.initialize import InitializeParams
from appserver.rpc.connection import Connection, Limits, RequestContext
from appserver.services.router import Router
from appserver.transport.base import Transport

if TYPE_CHECKING:
    from appserver.transport.memory import MemoryTransport

# The logger of the server's connection lines (docs/logging.md).
log = logging.getLogger("appserver.server")

#: Seconds a drain waits for closed connections to flush their queued frames.
CLOSE_WAIT = 3


class Connections:
    """The server's open connections, served over any transport."""

    def __init__(self, router: Router, limits: Limits) -> None:
        self.router = router
        self.limits = limits
        self.open: set[Connection] = set()
        self._changed = anyio.Event()  # set when a connection ends
        self._clients: dict[int, str] = {}  # connection id -> "name version", for the logs
        router.initialize_hooks.append(self._log_client)

    async def serve(
        self,
        transport: Transport,
        at_end_of_input: Callable[[], Awaitable[None]] | None = None,
    ) -> Connection:
        """Serve one peer until it leaves (``at_end_of_input``: see
        :attr:`Connection.at_end_of_input`)."""
        connection = Connection(transport, self.router, self.limits)
        connection.at_end_of_input = at_end_of_input
        self.router.attach(connection)
        self.open.add(connection)
        where = str(getattr(transport, "peer", transport.kind))
        fields = {"connection": connection.id, "peer": where}
        log.info("connection #%d opened (%s)", connection.id, where, extra=fields)
        try:
            await connection.serve()
        finally:
            self.open.discard(connection)
            self._changed.set()
            client = self._clients.pop(connection.id, "")
            log.info(
                "connection #%d closed (%s%s): %s (code %d)",
                connection.id,
                where,
                f", {client}" if client else "",
                connection.close_reason or "closed",
                connection.close_code,
                extra={
                    **fields,
                    "client": client,
                    "reason": connection.close_reason,
                    "code": connection.close_code,
                },
            )
        return connection

    def _log_client(self, ctx: RequestContext, request: InitializeParams) -> None:
        """Who is behind a connection, once it says (``initialize``)."""
        info = request.client_info
        client = f"{info.name} {info.version}"
        self._clients[ctx.connection.id] = client
        log.info(
            "connection #%d is %s",
            ctx.connection.id,
            client,
            extra={
                "connection": ctx.connection.id,
                "clientName": info.name,
                "clientVersion": info.version,
            },
        )

    async def close_all(self) -> None:
        """Close every connection once its queued frames are written (at most
        ``CLOSE_WAIT`` seconds)."""
        for connection in list(self.open):
            connection.close("server shutting down", code=1001)
        with anyio.move_on_after(CLOSE_WAIT):
            while self.open:
                self._changed = anyio.Event()
                await self._changed.wait()

    @asynccontextmanager
    async def connect_memory(self) -> AsyncIterator[MemoryTransport]:
        """An in-process client end, served until the context exits (tests)."""
        from appserver.transport.memory import memory_pair

        client, server_end = memory_pair()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.serve, server_end)
            try:
                yield client
            finally:
                await client.close()
