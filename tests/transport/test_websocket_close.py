"""What a WebSocket client that stopped reading sees when the server closes it.

The server closes such a client with 1008 (outbox overflow, or no write
progress for ``send_timeout``). The close frame queues behind what the socket
already holds, so the client sees 1008 and the reason if it reads again within
the close timeout, and 1006 (TCP dropped, no close frame) after that. The
client here is a real ``websockets`` client whose application stops calling
``recv()``: its library queues a few messages, then stops reading the socket,
and the kernel buffers both ways fill up.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.lowlevel
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection
from websockets.exceptions import ConnectionClosed

from appserver.rpc.connection import Connection, Limits
from appserver.server.app import AppServer
from appserver.server.config import ServerConfig
from appserver.transport.listen_options import DEFAULT_CLOSE_TIMEOUT, ListenerOptions

FRAME_BYTES = 50_000  # each flood frame is answered with a frame as large
OVERFLOW = Limits(outbox_bytes=256 * 1024, outbox_soft_bytes=1024)


@dataclass
class Stalled:
    """A client that stopped reading, and the server's two ends of it."""

    ws: ClientConnection
    connection: Connection  # the JSON-RPC core's
    server_ws: ServerConnection  # the library's


class ClosingLogged(logging.Handler):
    """Notes when the rpc core logs that it closes a connection (its warning
    for an overfull outbox or for a peer that stopped reading)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = anyio.Event()
        self.at = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("closing ") and not self.seen.is_set():
            self.at = time.monotonic()
            self.seen.set()


@contextmanager
def closing_logged() -> Iterator[ClosingLogged]:
    handler = ClosingLogged()
    logger = logging.getLogger("appserver.rpc")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@asynccontextmanager
async def stalled_client(
    workspace: Path, limits: Limits, close_timeout: float
) -> AsyncIterator[Stalled]:
    """A server and an initialized client that reads nothing from now on."""
    options = ListenerOptions(host="127.0.0.1", port=0, close_timeout=close_timeout)
    async with (
        AppServer.open(ServerConfig(workspace=workspace, limits=limits)) as app,
        app.listen_websocket(options) as listener,
    ):
        url = app.endpoints["appServerWebSocket"]
        sock = socket.socket()
        # A small receive window, so less has to be sent before writes back up.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(listener_address(listener))  # loopback: completes at once
        async with connect(url, sock=sock, ping_interval=None, max_size=None) as ws:
            await initialize(ws)
            (server_ws,) = listener.connections
            (connection,) = app.connections
            yield Stalled(ws, connection, server_ws)


def listener_address(listener: Server) -> tuple[str, int]:
    host, port = listener.sockets[0].getsockname()[:2]
    return host, port


async def initialize(ws: ClientConnection) -> None:
    params = {"clientInfo": {"name": "stalled", "version": "1"}}
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
    assert "result" in json.loads(await ws.recv())
    await ws.send(json.dumps({"jsonrpc": "2.0", "method": "initialized"}))


def flood_frame(n: int) -> str:
    # A request without a method is answered at once in the read loop (no
    # handler task, no in-flight gate) with its id echoed: as many bytes out
    # as in, in order. The id starts with its number so order can be checked.
    return json.dumps({"jsonrpc": "2.0", "id": f"{n:06d}:" + "x" * FRAME_BYTES})


async def flood(ws: ClientConnection, until: ClosingLogged, at_most: int) -> int:
    """Send flood frames (reading none) until the server logs that it closes
    the connection or ``at_most`` are sent; returns how many were sent."""
    sent = 0
    while sent < at_most and not until.seen.is_set():
        sent += 1
        await ws.send(flood_frame(sent))
        await anyio.lowlevel.checkpoint()  # send() need not yield; let the server read
    return sent


async def read_again(ws: ClientConnection) -> tuple[list[int], ConnectionClosed]:
    """Read to the end: the numbers of the answers that arrive, then how it ended."""
    numbers: list[int] = []
    with anyio.fail_after(15):
        while True:
            try:
                frame = await ws.recv()
            except ConnectionClosed as closed:
                return numbers, closed
            numbers.append(int(json.loads(frame)["id"].split(":", 1)[0]))


def assert_a_prefix(numbers: list[int], sent: int) -> None:
    # Whole answers from the first on, none twice or out of order; the rest
    # was still queued in the server and is dropped.
    assert numbers == list(range(1, len(numbers) + 1))
    assert 0 < len(numbers) < sent


def assert_closed_with(closed: ConnectionClosed, code: int, reason: str) -> None:
    assert closed.rcvd is not None, f"no close frame: {closed!r}"
    assert (closed.rcvd.code, closed.rcvd.reason) == (code, reason)


async def test_overflow_then_reading_again_gets_1008(workspace: Path) -> None:
    with closing_logged() as closing, anyio.fail_after(30):
        async with stalled_client(workspace, OVERFLOW, DEFAULT_CLOSE_TIMEOUT) as stalled:
            sent = await flood(stalled.ws, until=closing, at_most=2_000)
            assert stalled.connection.closed
            # What will never be written is freed at once, not held while the
            # close frame waits for the client.
            assert stalled.connection.outbox.queued_bytes == 0
            numbers, closed = await read_again(stalled.ws)
            assert_a_prefix(numbers, sent)
            assert_closed_with(closed, 1008, "outbox overflow")
            assert stalled.ws.close_code == 1008


async def test_no_write_progress_then_reading_again_gets_1008(workspace: Path) -> None:
    frames = 8 * 1024 * 1024 // FRAME_BYTES  # more than the kernel buffers hold
    limits = Limits(send_timeout=0.5)  # the outbox bound stays far away
    with closing_logged() as closing, anyio.fail_after(30):
        async with stalled_client(workspace, limits, DEFAULT_CLOSE_TIMEOUT) as stalled:
            sent = await flood(stalled.ws, until=closing, at_most=frames)
            await closing.seen.wait()  # the writer gave up after send_timeout
            numbers, closed = await read_again(stalled.ws)
            assert_a_prefix(numbers, sent)
            assert_closed_with(closed, 1008, "peer stopped reading")


async def test_reading_again_late_within_the_close_timeout_gets_1008(workspace: Path) -> None:
    close_timeout, stall = 2.0, 0.75
    with closing_logged() as closing, anyio.fail_after(30):
        async with stalled_client(workspace, OVERFLOW, close_timeout) as stalled:
            sent = await flood(stalled.ws, until=closing, at_most=2_000)
            # The stall is the scenario, not a synchronisation: the client stays
            # stuck for a while after the server gave up on it, within the
            # close timeout.
            await anyio.sleep(closing.at + stall - time.monotonic())
            assert stalled.server_ws.close_code is None  # the TCP connection is still up
            numbers, closed = await read_again(stalled.ws)
            assert_a_prefix(numbers, sent)
            assert_closed_with(closed, 1008, "outbox overflow")


async def test_reading_again_after_the_close_timeout_gets_1006(workspace: Path) -> None:
    close_timeout = 0.3
    with closing_logged() as closing, anyio.fail_after(30):
        async with stalled_client(workspace, OVERFLOW, close_timeout) as stalled:
            sent = await flood(stalled.ws, until=closing, at_most=2_000)
            with anyio.fail_after(10):
                await stalled.server_ws.wait_closed()  # the server dropped the TCP
            # Not before the close timeout, and not much after it.
            assert close_timeout * 0.9 <= time.monotonic() - closing.at < close_timeout + 2
            numbers, closed = await read_again(stalled.ws)
            # What the kernel already held still arrives; the close frame,
            # queued behind it in the server process, never does.
            assert_a_prefix(numbers, sent)
            assert closed.rcvd is None
            assert stalled.ws.close_code == 1006
