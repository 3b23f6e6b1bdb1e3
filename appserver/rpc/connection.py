"""One peer connection: the JSON-RPC core over a transport.

The read loop reads frames and answers envelope-level errors itself
(:mod:`appserver.rpc.envelope`); each request then runs in its own task so a
slow handler never blocks the loop (:mod:`appserver.rpc.request_runner`: the
in-flight gate, per-connection ordering, the answer). Everything written goes
through the bounded :class:`Outbox` and one writer task. Server->client
requests wait in :mod:`appserver.rpc.server_requests`. The core knows no
method, no handshake and no application error code: an :class:`Application`
admits, answers and orders requests (the DotCraft application adds
``initialize``/``initialized``). This module holds the connection itself
(its state, what it sends, its lifecycle, its read loop) and what an
application sees of it (:class:`Application`, :class:`RequestContext`).

For the methods the application says so (``Application.holds``), a caller
sees the response before any notification or server request queued to it
while the request ran: those frames are held back until the response is
queued.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from appserver.protocol.errors import RpcError
from appserver.rpc import framing
from appserver.rpc.envelope import Answer, Notification, Refusal, Request, RequestId, read_envelope
from appserver.rpc.outbox import Merge, Outbox, OutboxClosed
from appserver.rpc.request_runner import Call, RequestRunner
from appserver.rpc.server_requests import PeerClosed, ServerRequests
from appserver.transport.base import FrameRejected, Transport, TransportClosed
from appserver.transport.peer_writer import write_within

log = logging.getLogger("appserver.rpc")

_connection_ids = itertools.count(1)
# Longest wait for a transport's close (above the WebSocket close timeout).
_CLOSE_BOUND = 15.0


class State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True)
class Limits:
    """Per-connection bounds."""

    max_in_flight: int = 32
    outbox_bytes: int = 64 * 1024 * 1024  # hard bound: past it the peer is closed
    outbox_soft_bytes: int = 256 * 1024  # past it, deltas are coalesced
    # A write that makes no progress for this long means the peer stopped
    # reading (keepalive pings queue behind the full buffer): close it.
    send_timeout: float = 30.0
    server_request_timeout: float = 120.0
    drain_timeout: float = 5.0


@dataclass
class RequestContext:
    """What a handler knows about the request it serves."""

    connection: Connection
    request_id: RequestId
    method: str
    _after_response: list[Callable[[], Any]] = field(default_factory=list)

    def after_response(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` once the response is queued, so anything it sends
        to this connection is written after the response. (Called from such a
        callback, it adds one that runs after it.)"""
        self._after_response.append(callback)


class Application(Protocol):
    """What the JSON-RPC core calls into: one protocol's methods and handshake."""

    def admit(self, connection: Connection, method: str) -> RpcError | None:
        """Check a request at arrival (before it is ordered or counted);
        an error is answered at once. Handshake gates go here."""

    def access(self, method: str) -> str:
        """How a request orders against others on its connection.

        ``"inline"`` runs in the read loop before the next frame is read
        (a handshake, so pipelined requests see it take effect);
        ``"read"`` runs alongside other reads but after every earlier write;
        ``"write"`` runs after everything that arrived before it;
        ``"detached"`` (long-running work) is not ordered at all.
        """

    async def handle_request(self, ctx: RequestContext, params: Any) -> Any:
        """Answer a request (raise :class:`RpcError` to fail it)."""

    def handle_notification(self, connection: Connection, method: str, params: Any) -> None:
        """A client notification, handled in the read loop in arrival order."""

    def overloaded(self) -> RpcError:
        """The error for a request past the in-flight limit."""

    def holds(self, method: str) -> bool:
        """Whether frames queued to the caller while ``method`` runs (the
        notifications it causes) are held back until its response is queued."""

    def connection_closed(self, connection: Connection) -> None:
        """The connection is gone; drop its subscriptions."""


class Connection:
    """A JSON-RPC peer. Create it and ``await serve()``; it returns on close."""

    def __init__(self, transport: Transport, app: Application, limits: Limits | None = None):
        self.id = next(_connection_ids)
        self.transport = transport
        self.app = app
        self.limits = limits or Limits()
        self.state = State.OPEN
        self.outbox = Outbox(self.limits.outbox_bytes, self.limits.outbox_soft_bytes)
        # The application's per-connection state (the DotCraft application's Peer).
        self.session: Any = None
        # Frames held back while a holding request runs (sent after its response).
        self._holding = 0
        self._held: list[tuple[str | Iterator[str], tuple[object, Merge] | None]] = []
        self._requests = RequestRunner(
            self.id, self.limits.max_in_flight, self._put, self._hold, self._release
        )
        self._server_requests = ServerRequests()
        self._tg: TaskGroup | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._close_reason = ""
        self._close_code = 1000
        self._writer_idle = False
        # Run once the peer's input ended (not at close()) and its requests are
        # answered, before the connection closes: what it sends still reaches the
        # peer (the stdio door ends its turns there, so a client still reading
        # gets their ends).
        self.at_end_of_input: Callable[[], Awaitable[None]] | None = None

    def __repr__(self) -> str:
        return f"<Connection #{self.id} {self.transport.kind} {self.state.value}>"

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def close_reason(self) -> str:
        """Why the connection ended (``end of input``, ``peer gone``, ...); empty while open."""
        return self._close_reason

    @property
    def close_code(self) -> int:
        """The WebSocket close code it ended (or ends) with."""
        return self._close_code

    # --- outbound ---------------------------------------------------------

    def send(self, frame: str, coalesce: tuple[object, Merge] | None = None) -> None:
        """Queue an encoded notification. ``coalesce`` lets a lagging peer get
        merged deltas; see :class:`~appserver.rpc.outbox.Outbox`. While a request
        the application holds for runs, the frame waits for its response."""
        Connection.send_to_each((self,), frame, coalesce)

    @staticmethod
    def send_to_each(
        connections: Sequence[Connection],
        frame: str,
        coalesce: tuple[object, Merge] | None = None,
    ) -> None:
        """:meth:`send` of one frame to each of ``connections`` (a broadcast:
        no method call per connection)."""
        for connection in connections:
            if connection._holding:
                connection._held.append((frame, coalesce))
            # The fast path of _put, inline: this runs once per frame per
            # connection (a broadcast to 200 connections, 200 times).
            elif not (connection._writer_idle and connection.transport.try_send(frame)):
                connection._queue(frame, coalesce)

    def send_source(self, frames: Iterator[str]) -> None:
        """Queue a run of notifications (a replay) made only as the writer takes
        them, at the peer's pace (:meth:`Outbox.put_source`); what is sent
        later comes after all of them."""
        if self._holding:
            self._held.append((frames, None))
        else:
            self._queue_source(frames)

    def _queue_source(self, frames: Iterator[str]) -> None:
        if self.state is State.CLOSED:
            return
        self._writer_idle = False  # every later frame queues behind it
        self.outbox.put_source(frames)

    def notify(self, method: str, params: Any) -> None:
        """Encode and queue one notification."""
        self.send(framing.notification_frame(method, params))

    def _hold(self) -> None:
        self._holding += 1

    def _release(self) -> None:
        self._holding -= 1
        if not self._holding and self._held:
            held, self._held = self._held, []
            for frame, coalesce in held:
                if isinstance(frame, str):
                    self._put(frame, coalesce)
                else:
                    self._queue_source(frame)

    async def request(self, method: str, params: Any, timeout: float | None = None) -> Any:
        """Send a server->client request and wait for its result.

        Raises :class:`PeerClosed`, :class:`PeerTimeout` or
        :class:`PeerErrorResponse`; never hangs past ``timeout``.
        """
        if self.state is State.CLOSED:
            raise PeerClosed("connection closed")
        limit = self.limits.server_request_timeout if timeout is None else timeout
        return await self._server_requests.ask(method, params, self.send, limit)

    def _put(self, frame: str, coalesce: tuple[object, Merge] | None = None) -> None:
        # Fast path: the writer waiting (so nothing is queued and no batch is
        # being written, and the connection is open) means the peer keeps up,
        # so write now instead of waking the writer for one frame (fan-out to
        # many connections costs a third as much). Order is preserved.
        if not (self._writer_idle and self.transport.try_send(frame)):
            self._queue(frame, coalesce)

    def _queue(self, frame: str, coalesce: tuple[object, Merge] | None) -> None:
        """Queue ``frame`` for the writer (or drop it: the connection is closed)."""
        if self.state is State.CLOSED:
            return
        # Every later frame queues behind this one until the writer has taken it.
        self._writer_idle = False
        if not self.outbox.put(frame, coalesce):
            # The peer is not reading; closing is the only way to never drop a
            # frame silently. The client reconnects and re-reads state.
            log.warning("closing %r: outbox over %d bytes", self, self.outbox.max_bytes)
            self.close("outbox overflow", code=1008, abort=True)

    # --- lifecycle --------------------------------------------------------

    async def serve(self) -> None:
        """Run the connection until the peer leaves or :meth:`close` is called."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._writer)
                with anyio.CancelScope() as scope:
                    self._reader_scope = scope
                    await self._read_loop()
                # Peer finished sending (EOF): answer what it asked, then stop.
                with anyio.move_on_after(self.limits.drain_timeout):
                    await self._requests.wait_idle()
                if self.at_end_of_input is not None and not self.closed:  # EOF, not close()
                    with anyio.move_on_after(self.limits.drain_timeout):
                        await self.at_end_of_input()
                self.close("end of input")
        finally:
            self._mark_closed("connection ended")
            self._requests.cancel()
            # Transports bound their own closing (WebSocket: its close timeout,
            # during which a peer that reads again still gets our close code);
            # this only guards against one that hangs.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_BOUND):
                await self.transport.close(self._close_code, self._close_reason)

    def close(self, reason: str = "", code: int = 1000, *, abort: bool = False) -> None:
        """End the connection with WebSocket close ``code``.

        Normally reading stops and the writer flushes what is queued first;
        ``abort`` (a stuck or vanished peer) ends at once and discards what is
        queued. Either way the transport then sends ``code`` behind whatever
        it already holds. Running request handlers are cancelled when the
        writer stops.
        """
        if self.state is State.CLOSED:
            return
        self._close_reason = reason
        self._close_code = code
        self._mark_closed(reason)
        if abort:
            # Nothing queued will be written: free it now rather than while
            # the transport waits for the peer to read the close frame.
            self.outbox.discard()
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        if self._tg is not None and abort:
            self._tg.cancel_scope.cancel()
            self._requests.cancel()

    def _mark_closed(self, reason: str) -> None:
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        self._writer_idle = False  # no fast path past the close
        self.outbox.close()
        self._server_requests.fail_all(reason)
        try:
            self.app.connection_closed(self)
        except Exception:
            log.exception("connection_closed hook failed for %r", self)

    async def _writer(self) -> None:
        deadline = anyio.CancelScope()  # set only while a batch is being written
        timeout = self.limits.send_timeout
        try:
            with deadline:
                while True:
                    self._writer_idle = True
                    batch = await self.outbox.get_batch()
                    self._writer_idle = False
                    await write_within(deadline, timeout, self.transport.send_batch, batch)
            if deadline.cancelled_caught:
                raise TimeoutError
        except OutboxClosed:
            pass
        except TransportClosed:
            self.close("peer gone", code=1001, abort=True)
        except TimeoutError:
            log.warning("closing %r: peer stopped reading", self)
            self.close("peer stopped reading", code=1008, abort=True)
        except Exception:
            log.exception("closing %r: writing failed", self)
            self.close("internal error", code=1011, abort=True)
        finally:
            self._writer_idle = False  # nobody writes from here on
        # Nothing more can be written: stop the reader and any running handler.
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        self._requests.cancel()

    # --- inbound ----------------------------------------------------------

    async def _read_loop(self) -> None:
        while True:
            try:
                frame = await self.transport.receive()
            except TransportClosed:
                return
            except FrameRejected as exc:
                error = RpcError(exc.code, exc.message, {"detail": exc.detail})
                self._put(framing.error_frame(None, error.to_wire()))
                continue
            await self._handle_frame(frame)

    async def _handle_frame(self, frame: str) -> None:
        envelope = read_envelope(frame, self._server_requests.waits_for)
        if isinstance(envelope, Request):
            await self._on_request(envelope.request_id, envelope.method, envelope.params)
        elif isinstance(envelope, Notification):
            self._on_notification(envelope.method, envelope.params)
        elif isinstance(envelope, Answer):
            self._server_requests.settle(envelope.raw_id, envelope.message, self)
        elif isinstance(envelope, Refusal):
            self._put(framing.error_frame(envelope.reply_id, envelope.error.to_wire()))

    def _on_notification(self, method: str, params: Any) -> None:
        try:
            self.app.handle_notification(self, method, params)
        except Exception:
            log.exception("notification %s failed on %r", method, self)

    async def _on_request(self, request_id: RequestId, method: str, params: Any) -> None:
        refused = self.app.admit(self, method)
        if refused is not None:
            self._requests.refuse(request_id, method, refused)
            return
        access = self.app.access(method)
        ctx = RequestContext(self, request_id, method)
        if access == "inline":
            # In the read loop, ungated: a handshake takes effect before the
            # next pipelined frame is read.
            await self._requests.run_inline(self._call(ctx, params))
            return
        if self._requests.full:
            self._requests.refuse(request_id, method, self.app.overloaded())
            return
        self._requests.start(self._call(ctx, params), access)

    def _call(self, ctx: RequestContext, params: Any) -> Call:
        return Call(
            ctx.request_id,
            ctx.method,
            lambda: self.app.handle_request(ctx, params),
            ctx._after_response,
            self.app.holds(ctx.method),
        )
