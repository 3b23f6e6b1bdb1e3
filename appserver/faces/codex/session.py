"""One Codex client connection: reading its frames, answering its requests,
asking it our questions, and streaming the runtime's events to it.

Each request runs in its own task (a ``turn/interrupt`` or an approval answer
arrives while another request waits). The connection's :class:`CodexSeat`
subscribes to the threads this client starts or resumes; one task turns their
events into Codex notifications in order (:mod:`~appserver.faces.codex.turns`).
Server requests (approvals) get integer ids from 0, as Codex numbers them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from appserver.faces.codex import wire
from appserver.faces.codex.streams import Streams
from appserver.faces.codex.wire import CodexError, Message, Reply
from appserver.faces.seat import Seat

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel
    from appserver.runtime.host import Runtime
    from appserver.transport.base import Transport
    from appserver.transport.peer_writer import PeerWriter

log = logging.getLogger("appserver.faces.codex")

CHANNEL = "codex"
DRAIN_SECONDS = 30.0  # at end of input, how long requests in flight may take to answer
Handler = Callable[["CodexSession", Message], Awaitable[Any]]
Ask = Callable[["CodexSession", "WireModel", float], Awaitable[str | Mapping[str, object]]]


class CodexSeat(Seat):
    """The connection's participant: every event of its threads (command output
    included) and the approval questions of their turns."""

    def __init__(self, session: CodexSession) -> None:
        super().__init__(CHANNEL, topics_hidden=frozenset())
        self.session = session

    def can_answer_approvals(self) -> bool:
        return not self.closed and not self.session.ended

    async def ask_approval(self, request: WireModel, timeout: float) -> str | Mapping[str, object]:
        return await self.session.ask(self.session, request, timeout)


class Pending:
    """A server request waiting for the client's answer."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.done = anyio.Event()
        self.answer: Message = {}


class CodexSession:
    """What one client conversation holds."""

    def __init__(
        self,
        runtime: Runtime,
        writer: PeerWriter,
        approval_policy: str | None,
        methods: Mapping[str, Handler],
        ask: Ask,
    ) -> None:
        self.methods = methods
        self.ask = ask
        self.runtime = runtime
        self.writer = writer
        self.workspace = runtime.threads.workspace
        self.approval_policy = approval_policy  # ours, from -c approval_policy / the flag
        self.model: str | None = None
        self.client_name = "codex"
        self.initialized = False
        self.client_known = False  # initialize was answered
        # Notification methods the client opted out of at initialize (exact names).
        self.opted_out: frozenset[str] = frozenset()
        self.ended = False
        self.seat = CodexSeat(self)
        self.streams = Streams(
            runtime, self.seat, self.notify, self.workspace, send_frame=self.writer.put
        )
        self.policies: dict[str, tuple[Any, str]] = {}  # thread -> (Codex policy, reviewer)
        # thread -> files an acceptForSession of a file change covers (Codex's rule)
        self.file_grants: dict[str, set[str]] = {}
        self._next_request = 0
        self._pending: dict[int, Pending] = {}
        self._running = 0  # requests being answered
        self._idle = anyio.Event()

    # --- output ----------------------------------------------------------------------

    def send(self, message: Message) -> None:
        """Queue a frame (never waits; a gone or dropped client gets nothing)."""
        self.writer.put(wire.encode(message))

    def notify(self, method: str, params: Message) -> None:
        if method not in self.opted_out:
            self.send(wire.notification(method, params))

    async def request(
        self, method: str, params: Message, thread_id: str, timeout: float
    ) -> Message:
        """Ask the client; its ``result`` (``{}`` for an error answer). Raises
        ``TimeoutError`` without an answer in ``timeout``. ``serverRequest/resolved``
        follows every ending."""
        request_id = self._next_request
        self._next_request += 1
        pending = self._pending[request_id] = Pending(thread_id)
        try:
            self.send({"id": request_id, "method": method, "params": params})
            with anyio.fail_after(timeout):
                await pending.done.wait()
            return pending.answer
        finally:
            self._pending.pop(request_id, None)
            self.notify("serverRequest/resolved", {"threadId": thread_id, "requestId": request_id})

    def _answered(self, message: Message) -> None:
        request_id = message.get("id")
        pending = self._pending.get(request_id) if type(request_id) is int else None
        if pending is None:
            log.warning("an answer to no request of ours: id %r", request_id)
            return
        if pending.done.is_set():
            log.warning("request %r was already answered (the first answer counts)", request_id)
            return
        result = message.get("result")
        pending.answer = result if isinstance(result, dict) else {}
        pending.done.set()

    # --- input -----------------------------------------------------------------------

    async def serve(self, lines: Transport) -> None:
        """Answer the client until its input ends."""
        from appserver.transport.base import FrameRejected, TransportClosed

        self.runtime.join(self.seat)
        try:
            async with anyio.create_task_group() as requests:
                requests.start_soon(self.streams.pump)
                while True:
                    try:
                        line = await lines.receive()
                    except TransportClosed:
                        break
                    except FrameRejected as exc:
                        log.warning("dropped a line: %s", exc.detail)
                        continue
                    message = wire.check(line)
                    if message is None:
                        continue
                    if "method" not in message:
                        self._answered(message)
                    elif "id" in message:
                        # Counted as it is received, not when its task starts: input
                        # already read (all of it, at once) may end before any runs.
                        self._running += 1
                        requests.start_soon(self._run, message)
                    elif message["method"] == "initialized":
                        self.initialized = True
                self.ended = True
                for pending in self._pending.values():
                    pending.done.set()  # nobody will answer: declined
                with anyio.move_on_after(DRAIN_SECONDS):
                    while self._running:  # every request received gets its answer
                        self._idle = anyio.Event()
                        await self._idle.wait()
                await self.streams.end()
                requests.cancel_scope.cancel()
        finally:
            self.ended = True
            self.seat.close()
            self.runtime.leave(self.seat)

    async def _run(self, message: Message) -> None:
        from appserver.protocol.encoding import scrub_surrogates
        from appserver.runtime.errors import Refusal

        request_id = message["id"]
        method = message["method"]
        try:
            handler = self.methods.get(method)
            if handler is None:
                raise CodexError(f"Method not found: {method}", wire.METHOD_NOT_FOUND)
            if method != "initialize" and not self.client_known:
                raise CodexError("Not initialized")
            params = message.get("params")
            if params is None:
                params = {}
            if not isinstance(params, dict):
                raise CodexError("Invalid request: params must be an object")
            if scrub_surrogates(params) is not params:
                # Text that is no Unicode (JSON allows "\ud800"): it could be neither
                # stored nor sent back, so it is refused here, whatever the method.
                raise CodexError("Invalid request: params hold a lone UTF-16 surrogate")
            result = await handler(self, params)
        except CodexError as exc:
            self.send(wire.error(request_id, exc.code, exc.message))
        except Refusal as exc:
            self.send(wire.error(request_id, wire.INVALID_REQUEST, exc.message))
        except Exception:
            log.exception("%s failed", method)
            self.send(wire.error(request_id, wire.INTERNAL_ERROR, f"{method} failed; see the log"))
        else:
            then = []
            if isinstance(result, Reply):
                result, then = result.result, result.then
            self.send(wire.response(request_id, result))
            for method_name, params in then:
                self.notify(method_name, params)
        finally:
            self._running -= 1
            self._idle.set()
