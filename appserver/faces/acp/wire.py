"""ACP's JSON-RPC messages over the process's stdio.

The ``acp`` package's connection moves decoded messages through a
``Transport`` (``send(dict)``, ``receive() -> dict | None``, ``close()``).
Its own stdio framing reads ``sys.stdin`` and silently drops a line that is
not JSON; here the lines come from :class:`~appserver.transport.stdio.StdioTransport`
over the streams the CLI handed us (size cap, UTF-8 check), and every line the
connection could not use is answered the JSON-RPC way, with ``id: null``:

* not JSON, or not UTF-8: ``-32700 Parse error``;
* a batch (JSON array), not an object, an ``id`` that is not a string,
  integer or null, a ``method`` that is not a non-empty string, or an object
  that is neither a request, a notification nor a response: ``-32600`` (an
  object with an ``id`` and neither ``result`` nor ``error`` is also passed on
  as an error answer to our request of that id, so a permission asked is
  refused at once);
* a line over the size cap: ``-32600`` (the line is skipped);
* ``jsonrpc`` other than ``"2.0"``: ``-32600`` for a request (with its id),
  a notification or response is dropped.

Everything else goes to the connection, which answers unknown methods with
``-32601`` and bad params with ``-32602``. The transport also keeps the ids
of requests not yet answered, so the face can answer them all before it
exits at end of input.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio

from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.protocol.encoding import dumps_lenient
from appserver.transport.base import (
    INVALID_REQUEST,
    PARSE_ERROR,
    FrameRejected,
    TransportClosed,
)
from appserver.transport.outbox import Merge, text_merger
from appserver.transport.peer_writer import DEFAULT_MAX_BYTES, PeerWriter
from appserver.transport.stdio import StdioTransport

log = logging.getLogger("appserver.faces.acp")

Message = dict[str, Any]


def encode(message: Message) -> str:
    """One message as one line of compact JSON (never fails: odd values become
    text; a lone surrogate echoed from a peer's id is escaped)."""
    return dumps_lenient(message)


def error_reply(request_id: Any, code: int, message: str, detail: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": message, "data": {"details": detail}},
    }


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (type(value) is int)


def _cancels_a_session(message: Message) -> bool:
    params = message.get("params")
    return isinstance(params, dict) and isinstance(params.get("sessionId"), str)


def check(line: str) -> tuple[Message | None, Message | None]:
    """``(message for the connection, None)``, ``(None, error reply or None)``, or
    for an answer with neither result nor error, both."""
    try:
        # Numbers past a double's range (1e999) would become inf and fail deep
        # inside the schema models: refuse them as unparsable instead.
        value = loads_client(line, strict_numbers=True)
    except JsonRejected as exc:
        return None, error_reply(None, PARSE_ERROR, "Parse error", str(exc))
    if isinstance(value, list):
        return None, error_reply(
            None, INVALID_REQUEST, "Invalid request", "batches are not supported"
        )
    if not isinstance(value, dict):
        return None, error_reply(
            None, INVALID_REQUEST, "Invalid request", "a message must be a JSON object"
        )
    has_id = "id" in value
    if has_id and not _valid_id(value["id"]):
        return None, error_reply(
            None, INVALID_REQUEST, "Invalid request", "'id' must be a string, an integer or null"
        )
    request_id = value.get("id")
    is_call = "method" in value
    if value.get("jsonrpc") != "2.0":
        if is_call and has_id:
            return None, error_reply(
                request_id, INVALID_REQUEST, "Invalid request", "'jsonrpc' must be \"2.0\""
            )
        log.warning("dropped a message without jsonrpc 2.0: %.200s", line)
        return None, None
    if is_call:
        method = value["method"]
        if not isinstance(method, str) or not method:
            return None, error_reply(
                request_id,
                INVALID_REQUEST,
                "Invalid request",
                "'method' must be a non-empty string",
            )
        if not has_id and method == "session/cancel" and not _cancels_a_session(value):
            # A notification gets no answer: a line here, not the library's
            # traceback of its model's validation.
            log.warning("dropped a session/cancel without a string sessionId: %.200s", line)
            return None, None
        return value, None
    if has_id and ("result" in value or "error" in value):
        return value, None  # the answer to one of our requests
    invalid = error_reply(
        request_id,
        INVALID_REQUEST,
        "Invalid request",
        "not a request, a notification or a response",
    )
    if has_id:
        # An answer with neither: told so, and also an error answer, so whatever
        # waits on that id (a permission request) ends now, as a refusal,
        # instead of at its timeout.
        log.warning("an answer to request %r had neither result nor error", request_id)
        refused = {"code": INVALID_REQUEST, "message": "answer without result or error"}
        return {"jsonrpc": "2.0", "id": request_id, "error": refused}, invalid
    return None, invalid


def _coalescing(message: Message) -> tuple[object, Merge] | None:
    """A streamed message chunk a lagging client may get in fewer, larger frames."""
    if message.get("method") != "session/update":
        return None
    params = message.get("params") or {}
    update = params.get("update") or {}
    kind = update.get("sessionUpdate")
    content = update.get("content")
    if kind not in _CHUNKS or not isinstance(content, dict) or content.get("type") != "text":
        return None
    return ("chunk", params.get("sessionId"), kind), _MERGE_CHUNKS


_CHUNKS = frozenset({"agent_message_chunk", "agent_thought_chunk"})
_MERGE_CHUNKS = text_merger("params", "update", "content", "text")


class LineTransport:
    """``acp``'s message transport over a :class:`StdioTransport` (one message a line).

    Messages queue in a bounded :class:`PeerWriter` (its :meth:`PeerWriter.run`
    must run in a task): a client that stops reading is dropped and
    ``on_stall`` called."""

    def __init__(
        self,
        lines: StdioTransport,
        max_backlog: int = DEFAULT_MAX_BYTES,
        on_stall: Callable[[], None] | None = None,
    ) -> None:
        self.lines = lines
        self.writer = PeerWriter(
            lines.send_batch, max_bytes=max_backlog, on_stall=on_stall, try_send=lines.try_send
        )
        self._closed = False
        # Ids of requests received and not yet answered, counted: a client may
        # reuse an id before its first request is answered.
        self.unanswered: Counter[Any] = Counter()
        self._answered = anyio.Event()

    async def drained(self) -> None:
        """Return once every request received so far has been answered."""
        while self.unanswered.total():
            self._answered = anyio.Event()
            await self._answered.wait()

    async def send(self, message: Message) -> None:
        """Queue ``message`` (never waits for the client). ``ConnectionError``
        once stdout is closed; a client dropped for not reading gets nothing
        more, quietly: the process is ending and its answers go nowhere."""
        try:
            if self.writer.dropped is not None:
                return
            if self._closed:
                raise ConnectionError("the transport is closed")
            # Queued here; the writer task writes it.
            if not self.writer.put(encode(message), _coalescing(message)):
                if self.writer.dropped is not None:
                    return  # this message was one too many
                self._closed = True
                raise ConnectionError("stdout is closed")
        finally:
            if "method" not in message and self.unanswered[message.get("id")] > 0:
                self.unanswered[message["id"]] -= 1  # written (or never will be)
                self._answered.set()

    async def receive(self) -> Message | None:
        while True:
            try:
                line = await self.lines.receive()
            except TransportClosed:
                return None
            except FrameRejected as exc:
                await self._reply(error_reply(None, exc.code, exc.message, exc.detail))
                continue
            message, reply = check(line)
            if reply is not None and message is not None:
                await self._reply(reply)  # both: told, and passed on (see check)
            if message is not None:
                if "method" in message and "id" in message:
                    self.unanswered[message["id"]] += 1
                return message
            if reply is not None:
                await self._reply(reply)

    async def _reply(self, reply: Message) -> None:
        with contextlib.suppress(ConnectionError):  # nobody reads stdout; read stdin to EOF
            await self.send(reply)

    async def close(self) -> None:
        """Write what is queued (bounded by the writer's send timeout), then close."""
        self._closed = True
        self.writer.close()
        await self.writer.flushed()
        await self.lines.close(self.writer.close_code)
