"""One Zene host process: its stdio, the runtime it opens and the requests it serves.

``--single-request`` reads one line, answers it and exits (a one-shot process per
request: the workspace lock queues processes of one workspace); its ``timeout_ms``
counts from the process's start and covers the exit too. Without it the
process serves one request per line until stdin closes: different sessions at
once, one session's requests in arrival order. A runtime that cannot be opened
still answers the request that was read (:class:`StartupFailure`).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appserver.faces.zene.session import Conversations
from appserver.faces.zene.wire import (
    EXIT_CONFIG,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_RUNTIME,
    EXIT_STALLED,
    INTERNAL,
    TIMEOUT,
    Rejected,
    Request,
    encode,
    exit_reserve,
    failure,
    invalid,
    parse_request,
)

if TYPE_CHECKING:
    from appserver.runtime.host import Runtime
    from appserver.transport.base import Transport

log = logging.getLogger("appserver.faces.zene")

# A long-lived process reads no further request while this many are unanswered
# (as many as a JSON-RPC connection may have in flight): the client's writes
# wait instead, so a burst of requests cannot grow the process without bound.
MAX_PENDING_REQUESTS = 32


def _leaf(exc: Exception) -> Exception:
    """The one exception inside (nested) single-member exception groups."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@dataclass
class StartupFailure:
    exit_code: int
    error_code: str
    message: str


async def open_runtime(
    host: Callable[[], Any], stack: Any, request: Request | None
) -> Runtime | StartupFailure:
    """Open the runtime into ``stack``, or say why it could not be."""
    from appserver.providers.base import ProviderConfigError
    from appserver.storage.failures import disk_failure
    from appserver.storage.lock import WorkspaceLocked
    from appserver.transport.base import ListenerError

    try:
        runtime: Runtime = await stack.enter_async_context(host())
        return runtime
    except Exception as error:
        exc = _leaf(error)  # task groups wrap what fails inside them
        if isinstance(exc, ProviderConfigError):
            log.error("provider configuration: %s", exc)
            message = f"provider configuration error: {exc}"
            return StartupFailure(EXIT_CONFIG, INTERNAL, message)
        if isinstance(exc, WorkspaceLocked):
            log.error("%s", exc)
            if request is not None and request.remaining() <= 0.05:
                message = f"request exceeded timeout_ms waiting for the workspace: {exc}"
                return StartupFailure(EXIT_OK, TIMEOUT, message)
            return StartupFailure(EXIT_RUNTIME, INTERNAL, str(exc))
        if isinstance(exc, ListenerError):  # e.g. the --websocket port is taken
            log.error("%s", exc)
            return StartupFailure(EXIT_RUNTIME, INTERNAL, f"host failure: {exc}")
        disk = disk_failure(exc)
        if disk is not None:  # a full or failing disk: one line, not a traceback
            log.error("cannot start: %s", disk)
            return StartupFailure(EXIT_RUNTIME, INTERNAL, f"cannot start: {disk}")
        log.exception("could not open the workspace runtime")
        message = f"host failure: {type(exc).__name__}: {exc}"
        return StartupFailure(EXIT_RUNTIME, INTERNAL, message)


class ZeneFace:
    """One process: its stdio, its flags, the runtime once opened."""

    def __init__(self, args: argparse.Namespace, transport: Transport) -> None:
        from appserver.transport.peer_writer import PeerWriter

        self.args = args
        self.transport = transport
        self.bridge_compat: bool = args.bridge_compat
        # Responses queue here (bounded) and one task writes them: a client
        # that stops reading is dropped, it cannot grow the process.
        self.writer = PeerWriter(
            transport.send_batch,
            max_bytes=args.max_client_backlog,
            on_stall=self._stalled,
            try_send=transport.try_send,
        )
        self._serving: Any = None  # the long-lived loop's cancel scope
        # Why a one-shot ends without a request (also logged): a warm process
        # hands it to the one-shot's stderr.
        self.no_request: str | None = None

    def _stalled(self) -> None:
        if self._serving is not None:
            self._serving.cancel()  # stop reading; the runtime cancels the turns in flight

    async def write(self, message: dict[str, Any]) -> None:
        """Queue one response line (never waits for the client)."""
        if not self.writer.put(encode(message)):
            why = self.writer.dropped or "stdout is closed"
            log.warning("response to %s lost: %s", message.get("request_id"), why)

    async def receive(self) -> str | Rejected | None:
        """The next request line, a :class:`Rejected` for an unusable one, or
        ``None`` at end of input."""
        from appserver.transport.base import FrameRejected, FrameTooLarge, TransportClosed

        limit = self.args.max_input_bytes
        try:
            return await self.transport.receive()
        except FrameTooLarge:
            return Rejected(f"request exceeds --max-input-bytes ({limit} bytes)")
        except FrameRejected as exc:
            return Rejected(f"request is not valid UTF-8 JSON: {exc.detail}")
        except TransportClosed:
            return None

    async def receive_first(self) -> str | Rejected | None:
        """The first request line within --stdin-timeout-ms (``None``: none came)."""
        import anyio

        wait = self.args.stdin_timeout_ms
        with anyio.move_on_after(wait / 1000 if wait else math.inf) as scope:
            return await self.receive()
        if scope.cancelled_caught:
            self.no_request = f"no request on stdin within {wait} ms"
            log.error("%s", self.no_request)
        return None

    async def report(self, first: str | Rejected | None, fail: StartupFailure) -> int:
        """Answer the request read (if any) with a startup failure."""
        if first is None:
            return fail.exit_code
        if isinstance(first, Rejected):
            await self.write(invalid(first))
            return fail.exit_code
        try:
            request = parse_request(first, time.monotonic())
        except Rejected as rejected:
            await self.write(invalid(rejected))
            return fail.exit_code
        await self.write(failure(request, fail.error_code, fail.message))
        return fail.exit_code

    async def read_one(self, started: float) -> Request | int:
        """A one-shot's request, its ``timeout_ms`` counted from ``started``; or
        the exit status when there is none (nothing written) or it is invalid
        (answered)."""
        line = await self.receive_first()
        if line is None:
            if self.no_request is None:
                self.no_request = "no request: end of input before a request line"
                log.error("%s", self.no_request)
            return EXIT_INPUT
        try:
            if isinstance(line, Rejected):
                raise line
            request = parse_request(line, started)
        except Rejected as rejected:
            await self.write(invalid(rejected))
            return EXIT_OK if self.bridge_compat else EXIT_INPUT
        # timeout_ms ends early enough to answer and exit within it.
        request.reserve = exit_reserve(request.timeout_ms)
        return request

    async def serve_one(self, options: Any, host: Callable[[], Any]) -> int:
        """``--single-request``: read, validate, answer, exit."""
        from contextlib import AsyncExitStack

        from appserver.startup import process_started

        # timeout_ms counts from the process's spawn, as the client's own deadline does.
        request = await self.read_one(process_started())
        if isinstance(request, int):
            return request
        # Processes share the workspace; only an exclusive holder of its lock
        # keeps this one out: wait for it as long as the request may take.
        options.lock_wait = request.remaining()
        options.warm_provider = False  # one turn, then exit
        async with AsyncExitStack() as stack:
            opened = await open_runtime(host, stack, request)
            if isinstance(opened, StartupFailure):
                await self.write(failure(request, opened.error_code, opened.message))
                return opened.exit_code
            await self.write(await Conversations(opened, self.args).answer(request))
        if self.args.keep_warm and self.args.websocket is None:
            from appserver.faces.zene.warm import start

            try:
                start()
            except Exception:  # the answer stands: only later one-shots run cold
                log.warning("could not start a warm process", exc_info=True)
        return EXIT_OK

    async def answer_warm(
        self, conversations: Conversations, order: SessionOrder, started: float
    ) -> int:
        """A warm process's one-shot: as :meth:`serve_one`, on a runtime already open."""
        request = await self.read_one(started)
        if isinstance(request, int):
            return request
        await self.answer_in_turn(conversations, request, order.join(request))
        return EXIT_OK

    async def answer_in_turn(
        self, conversations: Conversations, request: Request, ticket: Ticket
    ) -> None:
        """Answer ``request`` once the session's earlier ones are answered, or
        ``TIMEOUT`` if its ``timeout_ms`` passes while it waits for them."""
        async with ticket as in_time:
            if in_time:
                await self.write(await conversations.answer(request))
            else:
                await self.write(_late(request))

    async def serve(self, options: Any, host: Callable[[], Any]) -> int:
        """Long-lived: one request per line until stdin closes."""
        from contextlib import AsyncExitStack

        import anyio

        async with AsyncExitStack() as stack:
            opened = await open_runtime(host, stack, None)
            if isinstance(opened, StartupFailure):
                return await self.report(await self.receive_first(), opened)
            conversations = Conversations(opened, self.args)
            order = SessionOrder()
            pending = anyio.Semaphore(MAX_PENDING_REQUESTS)
            self._serving = anyio.CancelScope()

            async def run(request: Request, ticket: Ticket) -> None:
                try:
                    await self.answer_in_turn(conversations, request, ticket)
                finally:
                    pending.release()

            with self._serving:
                async with anyio.create_task_group() as tg:
                    while True:
                        await pending.acquire()
                        line = await self.receive()
                        if line is None:
                            break
                        try:
                            if isinstance(line, Rejected):
                                raise line
                            request = parse_request(line, time.monotonic())
                        except Rejected as rejected:
                            await self.write(invalid(rejected))
                            pending.release()
                            continue
                        # Registered here, in the order the lines came.
                        tg.start_soon(run, request, order.join(request))
        return EXIT_STALLED if self.writer.dropped is not None else EXIT_OK


def _late(request: Request) -> dict[str, Any]:
    limit = f"{request.timeout_ms:g} ms"
    return failure(request, TIMEOUT, f"request exceeded timeout_ms ({limit})")


class Ticket:
    """A request's place in its session's line (:class:`SessionOrder`). Entered,
    it waits for the session's earlier requests, at most until the request's
    ``timeout_ms`` (``as`` gives whether they finished in time); left, it lets
    the next one go, never before the earlier ones have finished."""

    def __init__(self, order: SessionOrder, request: Request, previous: Any) -> None:
        import anyio

        self._order = order
        self._request = request
        self._previous = previous
        self.done = anyio.Event()

    async def __aenter__(self) -> bool:
        import anyio

        if self._previous is None:
            return True
        # Waiting behind the session's earlier requests counts towards timeout_ms.
        with anyio.move_on_after(self._request.remaining()):
            await self._previous.wait()
        return bool(self._previous.is_set())

    async def __aexit__(self, *exc_info: object) -> None:
        import anyio

        if self._previous is not None and not self._previous.is_set():
            # Timed out while waiting: the next request of the session still
            # waits for the earlier ones.
            with anyio.CancelScope(shield=True):
                await self._previous.wait()
        self.done.set()
        self._order.left(self._request.session_id, self)


class SessionOrder:
    """Each session's requests one after another, in the order they were
    joined; different sessions at once."""

    def __init__(self) -> None:
        self._tails: dict[str, Ticket] = {}

    def join(self, request: Request) -> Ticket:
        """The request's place, behind the session's requests joined before."""
        previous = self._tails.get(request.session_id)
        ticket = Ticket(self, request, None if previous is None else previous.done)
        self._tails[request.session_id] = ticket
        return ticket

    def left(self, session_id: str, ticket: Ticket) -> None:
        if self._tails.get(session_id) is ticket:
            del self._tails[session_id]
