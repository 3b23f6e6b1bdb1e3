"""The WebSocket transport's ``try_send``: a burst in one loop iteration is
taken only up to the socket's high-water mark (the rest goes to the
connection's bounded outbox)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import anyio
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.protocol import State

from appserver.transport.base import TransportClosed
from appserver.transport.websocket import WebSocketTransport


async def test_a_burst_is_taken_only_up_to_the_high_water_mark() -> None:
    # The library connection as try_send sees it: open, not paused; its flush
    # (at the loop's next turn) is not reached here.
    connection = SimpleNamespace(paused=False, protocol=SimpleNamespace(state=State.OPEN))
    transport = WebSocketTransport(cast(Any, connection))
    taken = [transport.try_send("x" * 10_000) for _ in range(100)]
    assert taken[0]
    first_refused = taken.index(False)
    assert first_refused <= 7 and not any(taken[first_refused:])
    assert not transport.try_send("y" * 100_000)  # larger than the mark: always queued
    connection.protocol.state = State.CLOSED  # the flush at the loop's next turn writes nothing


async def test_a_batch_is_written_in_order_and_waits_for_the_peer_to_read() -> None:
    # A lagging connection's writer hands the transport its whole outbox: the
    # frames leave in order, in one write, and send_batch returns only once
    # the socket's buffer drained below its high-water mark.
    frames = [f'{{"n":{n},"pad":"{"p" * 200}"}}' for n in range(2_000)]  # ~0.4 MB
    done = anyio.Event()
    late = anyio.Event()
    closed_error: list[BaseException] = []

    async def handler(ws: ServerConnection) -> None:
        transport = WebSocketTransport(ws)
        await transport.send_batch(frames)
        done.set()
        await ws.wait_closed()
        try:
            await transport.send_batch(["late"])
        except Exception as exc:  # the type is what is checked
            closed_error.append(exc)
        late.set()

    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", max_size=None) as client:
            received = [await client.recv() for _ in frames]
            with anyio.fail_after(10):
                await done.wait()
        with anyio.fail_after(10):
            await late.wait()
    assert received == frames
    assert len(closed_error) == 1 and isinstance(closed_error[0], TransportClosed)
