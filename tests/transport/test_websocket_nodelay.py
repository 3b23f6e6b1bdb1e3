"""Every WebSocket connection is served with Nagle's algorithm off, the first
one (accepted before the server was built, appserver/transport/early_ws.py)
and those the library accepts later from the socket bound early.

asyncio sets ``TCP_NODELAY`` only on sockets whose ``proto`` says TCP, and an
accepted socket takes its listener's. With it off, a reply written in two
loop iterations waited for the client's delayed ACK (~40 ms a turn on Linux)."""

from __future__ import annotations

import socket

import anyio
from websockets.asyncio.client import connect

from appserver.transport.early_ws import EarlyListener, bind, first_connection
from appserver.transport.listen_options import ListenerOptions
from appserver.transport.websocket import WebSocketTransport, bound_port, start_listener
from tests.transport.test_early_ws import INITIALIZE, UPGRADE, answer, client_frame


def nodelay(transport: WebSocketTransport) -> int:
    sock = transport._ws.transport.get_extra_info("socket")
    return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def serve_and_record(options: ListenerOptions, early: EarlyListener | None) -> list[int]:
    """Serve the early connection (if any) and one more; each one's TCP_NODELAY."""
    seen: list[int] = []
    both = anyio.Event()

    async def on_connection(transport: WebSocketTransport) -> None:
        seen.append(nodelay(transport))
        if len(seen) == (2 if early is not None and early.accepted is not None else 1):
            both.set()
        await transport.close()

    server = await start_listener(options, on_connection, lambda: True, early=early)
    try:
        with anyio.fail_after(10):
            async with connect(f"ws://127.0.0.1:{bound_port(server)}/ws"):
                await both.wait()
    finally:
        server.close()
        with anyio.fail_after(5):
            await server.wait_closed()
    return seen


async def test_the_early_socket_and_its_connections_turn_nagle_off() -> None:
    # The raw client never answers the close: the library gives up after close_timeout.
    options = ListenerOptions(host="127.0.0.1", port=0, close_timeout=0.5)
    listener = bind(options)
    assert listener.proto == socket.IPPROTO_TCP
    with socket.create_connection(listener.getsockname()) as client:
        client.sendall(UPGRADE + client_frame(INITIALIZE))
        accepted = first_connection(listener, answer, token_required=False, wait=5)
        assert accepted is not None and accepted.early is not None
        early = EarlyListener(listener, accepted)
        assert await serve_and_record(options, early) == [1, 1]


async def test_a_listener_bound_by_the_library_turns_nagle_off() -> None:
    assert await serve_and_record(ListenerOptions(host="127.0.0.1", port=0), None) == [1]
