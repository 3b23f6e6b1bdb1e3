"""The WebSocket transport's ``try_send``: a burst in one loop iteration is
taken only up to the socket's high-water mark (the rest goes to the
connection's bounded outbox)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from websockets.protocol import State

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
