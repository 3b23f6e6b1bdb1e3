"""WebSocket transport and listener (the ``websockets`` library).

One JSON-RPC message per text frame on path ``/ws`` (or ``/``). The same
listener answers ``GET /healthz`` and ``GET /readyz``, serves the browser client
(``GET /`` and ``/assets/...``, :mod:`appserver.transport.webclient`); other
plain GETs get a short text naming the WebSocket URL. Before the upgrade it
checks the ``Origin`` header and the token
(:class:`~appserver.transport.ws_admission.Admission`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from websockets.asyncio.connection import Connection
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import Event, State
from websockets.server import ServerProtocol

from appserver.transport.base import (
    INVALID_REQUEST,
    FrameRejected,
    TransportClosed,
)
from appserver.transport.early import Answered, EarlyAnswer
from appserver.transport.early_ws import Accepted, EarlyListener, listen_failure
from appserver.transport.listen_options import (
    DEFAULT_CLOSE_TIMEOUT,
    ListenerOptions,
    check_options,
)
from appserver.transport.ws_admission import Admission

log = logging.getLogger("appserver.websocket")

# What try_send takes within one loop iteration (the socket's own high-water mark).
_PENDING_LIMIT = 1 << 16


class WebSocketTransport:
    """One accepted WebSocket connection."""

    kind = "websocket"

    def __init__(
        self,
        ws: ServerConnection,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        early: EarlyAnswer | None = None,
    ) -> None:
        self._ws = ws
        self._close_timeout = close_timeout
        self._pending: list[str] = []  # accepted by try_send, written at the loop's turn
        self._pending_size = 0  # their characters
        # A first frame read and answered before the server was built
        # (appserver/transport/early_ws.py): read first, not answered twice.
        self._first = None if early is None else early.read.decode("utf-8", "replace")
        self._answered = Answered(early)

    @property
    def peer(self) -> str:
        """The client's address, ``HOST:PORT`` (for the logs)."""
        address = self._ws.remote_address
        if isinstance(address, tuple) and len(address) >= 2:
            host = str(address[0])
            return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
        return str(address)

    async def receive(self) -> str:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        try:
            message = await self._ws.recv()
        except ConnectionClosed as exc:
            raise TransportClosed from exc
        if isinstance(message, bytes):
            raise FrameRejected(
                INVALID_REQUEST, "Invalid request", "binary frames are not supported; send text"
            )
        return message

    def try_send(self, frame: str) -> bool:
        pending = self._pending
        if pending:
            # Already taking frames this iteration: what allowed the first
            # still holds (the socket is written, and may pause, only at the
            # flush; a connection closed meanwhile drops them there), so only
            # the size is checked: a burst of broadcasts costs less a frame.
            size = self._pending_size + len(frame)
            if size > _PENDING_LIMIT:
                return False
            pending.append(frame)
            self._pending_size = size
            return True
        if self._answered.answer is not None and not self._answered.drop([frame]):
            return True  # the answer written early: not written again
        ws = self._ws
        # `paused` is set while the socket's write buffer is above its high-water
        # mark: then the frame waits in the outbox, where it can be coalesced.
        if ws.paused or ws.protocol.state is not State.OPEN:
            return False
        # Taken only up to the socket's high-water mark within one loop
        # iteration: a burst (a replayed history) goes on to the connection's
        # bounded outbox, whose limit then applies, not piling up here.
        size = len(frame)
        if size > _PENDING_LIMIT:
            return False
        # Frames accepted in one event-loop iteration leave in one socket write
        # at its end (a burst of broadcasts to many connections costs one
        # syscall per connection, not one per frame); a single frame is not
        # delayed.
        asyncio.get_running_loop().call_soon(self._flush)
        pending.append(frame)
        self._pending_size = size
        return True

    def _flush(self) -> None:
        """Frame what :meth:`try_send` accepted and write it in one go."""
        frames, self._pending = self._pending, []
        self._pending_size = 0
        ws = self._ws
        protocol = ws.protocol
        if not frames or protocol.state is not State.OPEN:
            return  # closing: what was not written is lost with the connection
        try:
            if protocol.extensions:  # compressed: each connection frames its own
                for frame in frames:
                    protocol.send_text(frame.encode())
                chunks = protocol.data_to_send()
            else:
                # What the library queued itself (a pong, say) goes first, then
                # the frames, serialized once for every connection they go to.
                chunks = [*protocol.data_to_send(), *map(_server_text_frame, frames)]
            if all(chunks):
                ws.transport.write(b"".join(chunks))
            else:  # an end-of-stream marker among them: the library's own path
                for chunk in chunks:
                    if chunk:
                        ws.transport.write(chunk)
                    elif ws.transport.can_write_eof():
                        ws.transport.write_eof()
        except Exception:
            log.debug("write to %s failed", ws.remote_address, exc_info=True)

    async def send_batch(self, frames: list[str]) -> None:
        if self._answered.answer is not None:
            frames = self._answered.drop(frames)
        # After what try_send took, in one write (a broadcast serialized once for
        # all connections), then one wait for the socket to drain (an awaited
        # library send per frame cost a lagging connection ~25 µs a frame).
        self._pending.extend(frames)
        self._flush()
        ws = self._ws
        try:
            if ws.protocol.state is State.OPEN:
                await ws.drain()  # a connection lost meanwhile fails the wait
        except OSError as exc:
            raise TransportClosed from exc
        if ws.protocol.state is not State.OPEN:
            raise TransportClosed

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame with ``code`` and wait at most the close timeout.

        The frame goes out behind what the socket still holds (the kernel's
        buffers and, in the process, at most the last batch the writer handed
        over, which the outbox's bound limits; asyncio offers no clean way to
        discard those without cutting a frame in half). A peer that reads up
        to it within the close timeout gets ``code`` and ``reason``; for one
        that does not, we stop waiting here and the library drops the TCP
        connection when the handler returns (its own deadline, set with the
        same close timeout), so that peer sees 1006.
        """
        # The library waits for a full write buffer to drain before it applies
        # its close deadline, so a peer that never reads would hold us forever.
        self._flush()
        with anyio.move_on_after(self._close_timeout):
            await self._ws.close(code, reason[:120])


# A server's text frame is the same bytes on every connection without
# extensions (servers do not mask): a broadcast is serialized once, not once
# per connection. Entries live for one event-loop iteration.
_serialized: dict[str, bytes] = {}


def _server_text_frame(text: str) -> bytes:
    data = _serialized.get(text)
    if data is None:
        if not _serialized:
            asyncio.get_running_loop().call_soon(_serialized.clear)
        data = _serialized[text] = Frame(Opcode.TEXT, text.encode()).serialize(mask=False)
    return data


async def start_listener(
    options: ListenerOptions,
    on_connection: Callable[[WebSocketTransport], Awaitable[None]],
    is_ready: Callable[[], bool],
    *,
    clock: Callable[[], float] = time.monotonic,
    early: EarlyListener | None = None,
) -> Server:
    """Bind and start accepting. Raises :class:`ListenerError` for unsafe options
    or an address that cannot be bound (:class:`AddressInUse` when taken).

    ``clock`` times token lockouts (tests pass a fake one). ``early``: the
    socket bound before the server was built and its first connection
    (appserver/transport/early_ws.py), served from here on.
    """
    check_options(options)

    async def handler(ws: ServerConnection) -> None:
        await on_connection(WebSocketTransport(ws, options.close_timeout))

    try:
        server = await _serve(options, handler, is_ready, clock, early)
    except OSError as exc:
        raise listen_failure(options, exc) from None
    accepted = early.accepted if early is not None else None
    if accepted is not None:

        async def first(ws: ServerConnection) -> None:
            transport = WebSocketTransport(ws, options.close_timeout, accepted.early)
            await on_connection(transport)

        await _adopt(server, options, accepted, first)
    return server


def _connection_options(options: ListenerOptions) -> dict[str, Any]:
    """The library's per-connection settings, the same for every connection."""
    return {
        "ping_interval": options.ping_interval,
        "ping_timeout": options.ping_timeout,
        # The deadline WebSocketTransport.close waits for: when it gives up,
        # the library's own deadline falls at the same moment and it drops the TCP.
        "close_timeout": options.close_timeout,
    }


async def _serve(
    options: ListenerOptions,
    handler: Callable[[ServerConnection], Awaitable[None]],
    is_ready: Callable[[], bool],
    clock: Callable[[], float],
    early: EarlyListener | None,
) -> Server:
    address: dict[str, Any] = (
        {"sock": early.sock} if early is not None else {"host": options.host, "port": options.port}
    )
    return await serve(
        handler,
        **address,
        process_request=Admission(options, is_ready, clock),
        max_size=options.max_message_bytes,
        compression=None,
        server_header="appserver",
        **_connection_options(options),
    )


class _Opened(ServerConnection):
    """A connection whose upgrade was done before the library took it over: the
    library's handshake task is not started (:func:`_adopt` serves it)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Connection.connection_made(self, transport)

    def process_event(self, event: Event) -> None:
        Connection.process_event(self, event)  # frames only: no request to wait for


async def _adopt(
    server: Server,
    options: ListenerOptions,
    accepted: Accepted,
    handler: Callable[[ServerConnection], Awaitable[None]],
) -> None:
    """Serve a connection accepted before the server was built, as the library
    serves its own: a request left unread goes through its handshake (and
    :class:`Admission`); an upgraded one is served open (what the library does
    after a handshake: tracked for ``server.close``, kept alive, closed at the end)."""
    loop = asyncio.get_running_loop()
    accepted.sock.setblocking(False)
    settings = _connection_options(options)
    if not accepted.upgraded:
        protocol = ServerProtocol(max_size=options.max_message_bytes)
        connection = ServerConnection(protocol, server, **settings)
        await loop.connect_accepted_socket(lambda: connection, accepted.sock)
        return
    protocol = ServerProtocol(state=State.OPEN, max_size=options.max_message_bytes)
    opened = _Opened(protocol, server, **settings)
    await loop.connect_accepted_socket(lambda: opened, accepted.sock)

    async def serve_opened() -> None:
        try:
            server.all_connections.add(opened)
            opened.start_keepalive()
            async with opened:
                await handler(opened)
        except Exception:
            log.error("connection handler failed", exc_info=True)
            opened.transport.abort()
        finally:
            server.all_connections.discard(opened)
            server.handler_tasks.discard(task)

    task = loop.create_task(serve_opened())
    server.handler_tasks.add(task)


def bound_port(server: Server) -> int:
    """The TCP port actually bound (useful with port 0)."""
    for sock in server.sockets:
        port: int = sock.getsockname()[1]
        return port
    raise RuntimeError("listener has no socket")
