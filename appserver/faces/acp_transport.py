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
  that is neither a request, a notification nor a response: ``-32600``;
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
import json
import logging
import math
from typing import Any

import anyio

from appserver.protocol.encoding import finish
from appserver.transport.base import (
    INVALID_REQUEST,
    PARSE_ERROR,
    FrameRejected,
    TransportClosed,
)
from appserver.transport.stdio import StdioTransport

log = logging.getLogger("appserver.faces.acp")

Message = dict[str, Any]


def encode(message: Message) -> str:
    """One message as one line of compact JSON (never fails: odd values become text)."""
    # finish(): a lone surrogate echoed from a peer's id is escaped, not fatal.
    return finish(json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str))


def error_reply(request_id: Any, code: int, message: str, detail: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": message, "data": {"details": detail}},
    }


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"number out of range: {text[:40]}")
    return number


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (type(value) is int)


def check(line: str) -> tuple[Message | None, Message | None]:
    """``(message for the connection, None)`` or ``(None, error reply or None)``."""
    try:
        # Numbers past a double's range (1e999) would become inf and fail deep
        # inside the schema models: refuse them as unparsable instead.
        value = json.loads(line, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
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
        return value, None
    if has_id and ("result" in value or "error" in value):
        return value, None  # the answer to one of our requests
    return None, error_reply(
        request_id,
        INVALID_REQUEST,
        "Invalid request",
        "not a request, a notification or a response",
    )


class LineTransport:
    """``acp``'s message transport over a :class:`StdioTransport` (one message a line)."""

    def __init__(self, lines: StdioTransport) -> None:
        self.lines = lines
        # One writer at a time: the pipe's drain waiter is not shared.
        self._write = anyio.Lock()
        self._closed = False
        self.unanswered: set[Any] = set()  # ids of requests received and not yet answered
        self._answered = anyio.Event()

    async def drained(self) -> None:
        """Return once every request received so far has been answered."""
        while self.unanswered:
            self._answered = anyio.Event()
            await self._answered.wait()

    async def send(self, message: Message) -> None:
        if self._closed:
            raise ConnectionError("the transport is closed")
        line = encode(message)
        try:
            async with self._write:
                try:
                    await self.lines.send_batch([line])
                except TransportClosed as exc:
                    self._closed = True
                    raise ConnectionError("stdout is closed") from exc
        finally:
            if "method" not in message and message.get("id") in self.unanswered:
                self.unanswered.discard(message["id"])  # written (or never will be)
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
            if message is not None:
                if "method" in message and "id" in message:
                    self.unanswered.add(message["id"])
                return message
            if reply is not None:
                await self._reply(reply)

    async def _reply(self, reply: Message) -> None:
        with contextlib.suppress(ConnectionError):  # nobody reads stdout; read stdin to EOF
            await self.send(reply)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.lines.close()
