"""``run``: one server process, serving stdio and/or WebSocket clients until stdio's
end of input or SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import IO, TYPE_CHECKING

import anyio

from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from appserver.storage.failures import StorageFailed

if TYPE_CHECKING:
    from appserver.storage.preparation import Preparation
    from appserver.transport.early import EarlyAnswer
    from appserver.transport.early_ws import EarlyListener
    from appserver.transport.listen_options import ListenerOptions

log = logging.getLogger("appserver.server")


async def run(
    config: ServerConfig,
    *,
    stdio: tuple[IO[bytes], IO[bytes]] | None,
    websocket: ListenerOptions | None,
    on_ready: Callable[[AppServer], None] | None = None,
    prepared: Preparation | None = None,
    early: EarlyAnswer | None = None,
    listening: EarlyListener | None = None,
) -> None:
    """Serve until stdio EOF (when stdio is on) or a signal. ``early``: what
    was read of stdin and answered before (appserver/transport/early.py);
    ``listening``: the WebSocket socket bound before, with its first connection
    (appserver/transport/early_ws.py)."""
    async with AsyncExitStack() as stack:
        # Catch SIGINT/SIGTERM before announcing readiness: a supervisor may
        # signal as soon as it sees the "listening" line and must still get a
        # clean shutdown (exit 0, lock file removed), not the default death.
        signals = stack.enter_context(anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM))
        # A stdio-only server answers `initialize` before it builds the rest.
        defer = websocket is None and stdio is not None
        server = await stack.enter_async_context(
            AppServer.open(config, defer=defer, prepared=prepared)
        )
        if websocket is not None:
            await stack.enter_async_context(server.listen_websocket(websocket, listening))
        if on_ready is not None:
            on_ready(server)
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                signum = 0
                async for received in signals:
                    signum = int(received)
                    break
                log.info("received signal %d; shutting down", signum)
                await server.drain()
                tg.cancel_scope.cancel()

            tg.start_soon(stop_on_signal)
            if stdio is not None:
                # stdio mode ends when the one client closes its input.
                await server.serve_stdio(*stdio, early=early)
                if server.failure is not None:
                    raise StorageFailed(server.failure)
                tg.cancel_scope.cancel()
