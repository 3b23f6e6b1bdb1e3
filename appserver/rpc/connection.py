"""One peer connection: the JSON-RPC core over a transport.

The read loop parses frames and answers envelope-level errors itself; each
request then runs in its own task so a slow handler never blocks the loop.
Everything written goes through the bounded :class:`Outbox` and one writer
task. The core keeps envelopes, ids, per-connection ordering, the in-flight
gate and server->client requests; it knows no method, no handshake and no
application error code: an :class:`Application` admits, answers and
orders requests (the DotCraft application adds ``initialize``/``initialized``).

For the methods the application says so (``Application.holds``), a caller
sees the response before any notification or server request queued to it
while the request ran: those frames are held back until the response is
queued.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from appserver.protocol import errors as rpc_errors
from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.protocol.encoding import scrub_surrogates
from appserver.protocol.errors import RpcError
from appserver.rpc import framing
from appserver.rpc.outbox import Merge, Outbox, OutboxClosed
from appserver.transport.base import FrameRejected, Transport, TransportClosed

log = logging.getLogger("appserver.rpc")

RequestId = str | int
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


class ServerRequestError(Exception):
    """A server->client request got no usable answer."""


class PeerClosed(ServerRequestError):
    """The connection closed before the peer answered."""


class PeerTimeout(ServerRequestError):
    """The peer did not answer in time."""


class PeerErrorResponse(ServerRequestError):
    """The peer answered with a JSON-RPC error."""

    def __init__(self, error: Any) -> None:
        super().__init__(f"peer answered with an error: {error!r}")
        self.error = error


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


class _Ordering:
    """Arrival-order read/write ordering of one connection's requests.

    A client that pipelines ``thread/rename`` then ``thread/read`` sees the
    rename; independent reads still run concurrently.
    """

    def __init__(self) -> None:
        # asyncio events: one per request, and anyio.Event costs 8x more to create.
        self._pending: list[tuple[str, asyncio.Event]] = []

    def enter(self, access: str) -> tuple[list[asyncio.Event], asyncio.Event | None]:
        """Take a ticket now (at arrival); returns what to wait for and our event."""
        if access == "detached":
            return [], None
        if access == "write":
            before = [event for _, event in self._pending]
        else:
            before = [event for kind, event in self._pending if kind == "write"]
        mine = asyncio.Event()
        self._pending.append((access, mine))
        return before, mine

    def leave(self, mine: asyncio.Event | None) -> None:
        if mine is None:
            return
        mine.set()
        self._pending = [entry for entry in self._pending if entry[1] is not mine]


class _Waiter:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: ServerRequestError | None = None


def _valid_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


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
        self._held: list[tuple[str, tuple[object, Merge] | None]] = []
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._request_ids = itertools.count(1)
        self._pending: dict[int, _Waiter] = {}
        self._ordering = _Ordering()
        self._requests: set[asyncio.Task[None]] = set()
        self._tg: TaskGroup | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._close_reason = ""
        self._close_code = 1000
        self._writer_idle = False

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
        if self._holding:
            self._held.append((frame, coalesce))
        else:
            self._put(frame, coalesce)

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
                self._put(frame, coalesce)

    async def request(self, method: str, params: Any, timeout: float | None = None) -> Any:
        """Send a server->client request and wait for its result.

        Raises :class:`PeerClosed`, :class:`PeerTimeout` or
        :class:`PeerErrorResponse`; never hangs past ``timeout``.
        """
        if self.state is State.CLOSED:
            raise PeerClosed("connection closed")
        request_id = next(self._request_ids)
        waiter = _Waiter()
        self._pending[request_id] = waiter
        try:
            self.send(framing.request_frame(request_id, method, params))
            limit = self.limits.server_request_timeout if timeout is None else timeout
            with anyio.move_on_after(limit):
                await waiter.done.wait()
            if not waiter.done.is_set():
                raise PeerTimeout(f"no answer to {method} within {limit:g}s")
            if waiter.error is not None:
                raise waiter.error
            return waiter.result
        finally:
            self._pending.pop(request_id, None)

    def _put(self, frame: str, coalesce: tuple[object, Merge] | None = None) -> None:
        if self.state is State.CLOSED:
            return
        # Fast path: nothing queued and the writer waiting means the peer keeps
        # up, so write now instead of waking the writer for one frame (fan-out
        # to many connections costs a third as much). Order is preserved: the
        # outbox is empty and no batch is being written.
        if self._writer_idle and not len(self.outbox) and self.transport.try_send(frame):
            return
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
                    await self._idle.wait()
                self.close("end of input")
        finally:
            self._mark_closed("connection ended")
            self._cancel_requests()
            # Transports bound their own closing (WebSocket: its close timeout,
            # during which a peer that reads again still gets our close code);
            # this only guards against one that hangs.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_BOUND):
                await self.transport.close(self._close_code, self._close_reason)

    def _cancel_requests(self) -> None:
        for task in list(self._requests):
            task.cancel()

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
            self._cancel_requests()

    def _mark_closed(self, reason: str) -> None:
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        self.outbox.close()
        for waiter in self._pending.values():
            if waiter.done.is_set():
                continue  # answered before the close: that answer stands
            waiter.error = PeerClosed(f"connection closed: {reason}")
            waiter.done.set()
        self._pending.clear()
        try:
            self.app.connection_closed(self)
        except Exception:
            log.exception("connection_closed hook failed for %r", self)

    async def _writer(self) -> None:
        try:
            while True:
                self._writer_idle = True
                batch = await self.outbox.get_batch()
                self._writer_idle = False
                with anyio.fail_after(self.limits.send_timeout):
                    await self.transport.send_batch(batch)
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
        # Nothing more can be written: stop the reader and any running handler.
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        self._cancel_requests()

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
        try:
            message = loads_client(frame)  # the bounded decoder every door uses
        except JsonRejected as exc:
            error = RpcError(rpc_errors.PARSE_ERROR, "Parse error", {"detail": str(exc)})
            self._put(framing.error_frame(None, error.to_wire()))
            return
        if isinstance(message, list):
            # Batches are refused: no DotCraft or Codex client sends them and
            # per-request ordering guarantees are defined for single messages.
            detail = "batch requests are not supported; send one message per frame"
            self._put(framing.error_frame(None, rpc_errors.invalid_request(detail).to_wire()))
            return
        if not isinstance(message, dict):
            self._put(
                framing.error_frame(
                    None, rpc_errors.invalid_request("expected an object").to_wire()
                )
            )
            return
        has_id = "id" in message
        raw_id = message.get("id")
        if has_id and not _valid_id(raw_id) and raw_id is not None:
            error = rpc_errors.invalid_request("'id' must be a string or an integer")
            self._put(framing.error_frame(None, error.to_wire()))
            return
        reply_id: RequestId | None = raw_id
        if message.get("jsonrpc") != "2.0":
            if has_id:
                detail = "'jsonrpc' must be \"2.0\""
                self._put(
                    framing.error_frame(reply_id, rpc_errors.invalid_request(detail).to_wire())
                )
            return
        method = message.get("method")
        if method is None:
            if has_id and ("result" in message or "error" in message or self._waits_for(raw_id)):
                # An answer to a server->client request; one with neither
                # result nor error still answers (as a refusal), at once.
                self._on_response(raw_id, message)
                return
            self._put(
                framing.error_frame(
                    reply_id, rpc_errors.invalid_request("missing 'method'").to_wire()
                )
            )
            return
        if not isinstance(method, str):
            if has_id:
                error = rpc_errors.invalid_request("'method' must be a string")
                self._put(framing.error_frame(reply_id, error.to_wire()))
            return
        params = message.get("params")
        if not has_id:
            self._on_notification(method, params)
            return
        if raw_id is None:
            error = rpc_errors.invalid_request("'id' must be a string or an integer")
            self._put(framing.error_frame(None, error.to_wire()))
            return
        assert _valid_id(raw_id)
        await self._on_request(raw_id, method, params)

    def _on_notification(self, method: str, params: Any) -> None:
        try:
            self.app.handle_notification(self, method, params)
        except Exception:
            log.exception("notification %s failed on %r", method, self)

    def _waits_for(self, raw_id: Any) -> bool:
        """Whether ``raw_id`` names a server->client request still waiting."""
        return isinstance(raw_id, int) and raw_id in self._pending

    def _on_response(self, raw_id: Any, message: dict[str, Any]) -> None:
        """Settle the request ``raw_id`` names with its first answer.

        Only the first answer counts: a later one (two answers in one write
        both arrive before the waiting task wakes) must not replace it, or
        ``decline`` then ``accept`` would run what was declined. Later answers,
        and answers to requests nobody waits for any more, are ignored and
        logged. An answer with neither ``result`` nor ``error`` is an error
        answer (approvals fail closed on it).
        """
        waiter = self._pending.get(raw_id) if isinstance(raw_id, int) else None
        if waiter is None or waiter.done.is_set():
            log.warning(
                "%r: ignored an answer to server request %.40r: %s",
                self,
                raw_id,
                "it was already answered (the first answer counts)"
                if waiter is not None
                else "no request of that id is waiting (answered, timed out or never sent)",
            )
            return
        # What the client answers becomes items, tool results and stored rows.
        if "error" in message:
            waiter.error = PeerErrorResponse(scrub_surrogates(message["error"]))
        elif "result" in message:
            waiter.result = scrub_surrogates(message["result"])
        else:
            waiter.error = PeerErrorResponse(
                {
                    "code": rpc_errors.INVALID_REQUEST,
                    "message": "an answer with neither result nor error",
                }
            )
        waiter.done.set()

    async def _on_request(self, request_id: RequestId, method: str, params: Any) -> None:
        refused = self.app.admit(self, method)
        if refused is not None:
            self._put(framing.error_frame(request_id, refused.to_wire()))
            self._log_request(method, request_id, None, refused.code)
            return
        access = self.app.access(method)
        ctx = RequestContext(self, request_id, method)
        if access == "inline":
            # In the read loop, ungated: a handshake takes effect before the
            # next pipelined frame is read.
            await self._run(ctx, params, gate=False, hold=self.app.holds(method))
            return
        if self._in_flight >= self.limits.max_in_flight:
            overloaded = self.app.overloaded()
            self._put(framing.error_frame(request_id, overloaded.to_wire()))
            self._log_request(method, request_id, None, overloaded.code)
            return
        self._in_flight += 1
        self._idle = asyncio.Event() if self._idle.is_set() else self._idle
        before, mine = self._ordering.enter(access)
        # A plain asyncio task, tracked here and cancelled when the connection
        # ends: anyio's start_soon costs ~40 us more per request, which is a
        # tenth of a small request's whole round trip. (We run on asyncio only.)
        task = asyncio.get_running_loop().create_task(
            self._run_gated(ctx, params, before, mine, self.app.holds(method)),
            name=f"rpc {method}",
        )
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _run_gated(
        self,
        ctx: RequestContext,
        params: Any,
        before: list[asyncio.Event],
        mine: asyncio.Event | None,
        hold: bool,
    ) -> None:
        try:
            for event in before:
                await event.wait()
            await self._run(ctx, params, gate=True, hold=hold)
        finally:
            self._ordering.leave(mine)

    async def _run(self, ctx: RequestContext, params: Any, gate: bool, hold: bool) -> bool:
        """Run one handler and queue its answer; ``True`` if it succeeded.

        With ``hold``, frames sent to this connection while the handler runs
        (the notifications it causes, or anything else) follow the response.
        """
        if hold:
            self._hold()
        # Timed only when someone reads it: the request path is hot.
        started = time.perf_counter() if log.isEnabledFor(logging.DEBUG) else None
        try:
            try:
                result = await self.app.handle_request(ctx, params)
            except RpcError as exc:
                self._put(framing.error_frame(ctx.request_id, exc.to_wire()))
                self._log_request(ctx.method, ctx.request_id, started, exc.code)
                return False
            except UnicodeEncodeError:
                # JSON allows "\ud800" escapes that are not text; they fail where
                # they meet storage or the OS. That is the client's input, not a crash.
                error = rpc_errors.invalid_params("a string contains an unpaired UTF-16 surrogate")
                self._put(framing.error_frame(ctx.request_id, error.to_wire()))
                self._log_request(ctx.method, ctx.request_id, started, error.code)
                return False
            except Exception:
                ref = os.urandom(4).hex()  # 8 random hex digits (uuid costs ~2 ms to import)
                log.exception("internal error in %s (ref %s)", ctx.method, ref)
                error = RpcError(
                    rpc_errors.INTERNAL_ERROR,
                    "Internal error",
                    {"detail": f"see server log, ref {ref}"},
                )
                self._put(framing.error_frame(ctx.request_id, error.to_wire()))
                self._log_request(ctx.method, ctx.request_id, started, error.code)
                return False
            try:
                frame = framing.response_frame(ctx.request_id, result)
            except Exception:
                log.exception("could not encode the result of %s", ctx.method)
                error = RpcError(rpc_errors.INTERNAL_ERROR, "Internal error")
                self._put(framing.error_frame(ctx.request_id, error.to_wire()))
                self._log_request(ctx.method, ctx.request_id, started, error.code)
                return False
            self._put(frame)
            self._log_request(ctx.method, ctx.request_id, started, None)
            if hold:
                hold = False
                self._release()  # what the request caused follows its response
            if gate:
                # The request is answered: free its slot now. Its after-response
                # work below still holds its ordering ticket, so later requests
                # wait for it, but a client that fires its next request on the
                # response is never told the server is overloaded.
                gate = False
                self._release_slot()
            # By index: a callback may add more (they run after it).
            index = 0
            while index < len(ctx._after_response):
                callback = ctx._after_response[index]
                index += 1
                try:
                    outcome = callback()
                    if outcome is not None:
                        await outcome
                except Exception:
                    log.exception("after-response callback of %s failed", ctx.method)
            return True
        finally:
            if hold:
                self._release()
            if gate:
                self._release_slot()

    def _log_request(
        self, method: str, request_id: RequestId, started: float | None, code: int | None
    ) -> None:
        """One debug line per answered request (method, id, duration, error code)."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        fields: dict[str, Any] = {
            "connection": self.id,
            "method": method,
            "requestId": request_id,
            "durationMs": (
                round((time.perf_counter() - started) * 1000, 3) if started is not None else 0
            ),
        }
        if code is not None:
            fields["errorCode"] = code
        log.debug(
            "#%d %s (id %r) %s in %.1f ms",
            self.id,
            method,
            request_id,
            "ok" if code is None else f"error {code}",
            fields["durationMs"],
            extra=fields,
        )

    def _release_slot(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()
