"""Running one connection's client requests: the gate, the order, the answer.

:class:`RequestRunner` counts requests in flight (the connection refuses
past its limit), orders each against the others by its access kind
(:class:`Ordering`), runs its handler in a task of its own, and queues the
answer: the result, or the error a failed handler means (an :class:`RpcError`
as raised, bad text as invalid params, anything else as an internal error
with a reference to the log). Then it runs the request's after-response
callbacks. It knows no method and no connection: the connection hands it a
:class:`Call` and the means to queue frames and to hold them back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from appserver.protocol import errors as rpc_errors
from appserver.protocol.errors import RpcError
from appserver.rpc import framing
from appserver.rpc.envelope import RequestId

log = logging.getLogger("appserver.rpc")


@dataclass(frozen=True, slots=True)
class Call:
    """One request to run: ``handle()`` answers it; ``after_response`` (which
    a callback may extend) runs once the answer is queued; with ``hold``,
    frames queued meanwhile follow the answer."""

    request_id: RequestId
    method: str
    handle: Callable[[], Awaitable[Any]]
    after_response: list[Callable[[], Any]]
    hold: bool


class Ordering:
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


class RequestRunner:
    """The client requests of connection ``connection_id``: ``put`` queues a
    frame, ``hold``/``release`` hold back (and then send) the frames queued
    to the connection meanwhile."""

    def __init__(
        self,
        connection_id: int,
        max_in_flight: int,
        put: Callable[[str], None],
        hold: Callable[[], None],
        release: Callable[[], None],
    ) -> None:
        self._connection_id = connection_id
        self._max_in_flight = max_in_flight
        self._put = put
        self._hold = hold
        self._release = release
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._ordering = Ordering()
        # Each running request's cancel scope, by its task: cancelling through
        # the scope (not ``task.cancel()``) honours the shields below it, such as
        # a stored thread's announcement or a write's commit.
        self._tasks: dict[asyncio.Task[None], anyio.CancelScope] = {}

    @property
    def full(self) -> bool:
        """Whether a new gated request is past the in-flight limit."""
        return self._in_flight >= self._max_in_flight

    async def wait_idle(self) -> None:
        """Wait until no gated request is in flight."""
        await self._idle.wait()

    def cancel(self) -> None:
        """Cancel every running request (the connection is ending); what a
        handler shields from cancellation still finishes."""
        for scope in list(self._tasks.values()):
            scope.cancel()

    def refuse(self, request_id: RequestId, method: str, error: RpcError) -> None:
        """Answer a request that will not run with ``error``."""
        self._put(framing.error_frame(request_id, error.to_wire()))
        self._log_answer(method, request_id, None, error.code)

    async def run_inline(self, call: Call) -> None:
        """Run ``call`` now, ungated: a handshake takes effect before the next
        pipelined frame is read."""
        await self._run(call, gate=False)

    def start(self, call: Call, access: str) -> None:
        """Count ``call`` in flight, take its ordering ticket now (at arrival)
        and run it in a task of its own."""
        self._in_flight += 1
        self._idle = asyncio.Event() if self._idle.is_set() else self._idle
        before, mine = self._ordering.enter(access)
        # A plain asyncio task in a cancel scope of its own, tracked here and
        # cancelled through the scope when the connection ends: anyio's
        # start_soon costs ~40 us more per request, which is a tenth of a small
        # request's whole round trip. (We run on asyncio only.)
        scope = anyio.CancelScope()
        task = asyncio.get_running_loop().create_task(
            self._run_gated(call, before, mine, scope), name=f"rpc {call.method}"
        )
        self._tasks[task] = scope
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _run_gated(
        self,
        call: Call,
        before: list[asyncio.Event],
        mine: asyncio.Event | None,
        scope: anyio.CancelScope,
    ) -> None:
        try:
            with scope:
                for event in before:
                    await event.wait()
                await self._run(call, gate=True)
        finally:
            self._ordering.leave(mine)

    async def _run(self, call: Call, gate: bool) -> bool:
        """Run one handler and queue its answer; ``True`` if it succeeded.

        With ``call.hold``, frames sent to this connection while the handler
        runs (the notifications it causes, or anything else) follow the response.
        """
        hold = call.hold
        if hold:
            self._hold()
        # Timed only when someone reads it: the request path is hot.
        started = time.perf_counter() if log.isEnabledFor(logging.DEBUG) else None
        try:
            try:
                result = await call.handle()
            except RpcError as exc:
                self._answer_error(call, started, exc)
                return False
            except UnicodeEncodeError:
                # JSON allows "\ud800" escapes that are not text; they fail where
                # they meet storage or the OS. That is the client's input, not a crash.
                error = rpc_errors.invalid_params("a string contains an unpaired UTF-16 surrogate")
                self._answer_error(call, started, error)
                return False
            except Exception:
                ref = os.urandom(4).hex()  # 8 random hex digits (uuid costs ~2 ms to import)
                log.exception("internal error in %s (ref %s)", call.method, ref)
                error = RpcError(
                    rpc_errors.INTERNAL_ERROR,
                    "Internal error",
                    {"detail": f"see server log, ref {ref}"},
                )
                self._answer_error(call, started, error)
                return False
            try:
                frame = framing.response_frame(call.request_id, result)
            except Exception:
                log.exception("could not encode the result of %s", call.method)
                error = RpcError(rpc_errors.INTERNAL_ERROR, "Internal error")
                self._answer_error(call, started, error)
                return False
            self._put(frame)
            self._log_answer(call.method, call.request_id, started, None)
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
            await self._after_response(call)
            return True
        finally:
            if hold:
                self._release()
            if gate:
                self._release_slot()

    def _answer_error(self, call: Call, started: float | None, error: RpcError) -> None:
        self._put(framing.error_frame(call.request_id, error.to_wire()))
        self._log_answer(call.method, call.request_id, started, error.code)

    async def _after_response(self, call: Call) -> None:
        # By index: a callback may add more (they run after it).
        index = 0
        while index < len(call.after_response):
            callback = call.after_response[index]
            index += 1
            try:
                outcome = callback()
                if outcome is not None:
                    await outcome
            except Exception:
                log.exception("after-response callback of %s failed", call.method)

    def _log_answer(
        self, method: str, request_id: RequestId, started: float | None, code: int | None
    ) -> None:
        """One debug line per answered request (method, id, duration, error code)."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        fields: dict[str, Any] = {
            "connection": self._connection_id,
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
            self._connection_id,
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
