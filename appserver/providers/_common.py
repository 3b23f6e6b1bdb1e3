"""Pieces shared by the SDK-backed providers (not part of the public API).

* :class:`ToolCallAssembler` turns streamed tool-call fragments into
  :class:`ToolCallDelta` / :class:`ToolCallDone` events.
* :func:`parse_arguments` parses a tool call's JSON arguments without raising.
* :func:`transport_error` classifies network failures that an SDK lets
  escape unwrapped (the Anthropic SDK does this for errors in the middle of a
  stream), so the providers can keep their "never raise" promise.
* :func:`unavailable_code` names :class:`ProviderUnavailable` codes.
* :func:`server_sent_events` reads a ``text/event-stream`` body line by line,
  so the providers map each event's JSON straight to our events instead of
  having the SDKs build a typed object per chunk (see docs/providers.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from appserver.providers.base import ErrorKind, ToolCall, ToolCallDelta, ToolCallDone


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse a tool call's JSON arguments: ``(arguments, error)``.

    An empty string means "no arguments" (models send that for tools without
    parameters). Anything that is not a JSON object becomes ``{}`` plus an
    error message, so the turn can report it to the model instead of failing.
    """
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {}, f"tool arguments are not valid JSON ({exc}): {_clip(raw)}"
    if not isinstance(value, dict):
        return {}, f"tool arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class _Pending:
    ordinal: int
    call_id: str
    name: str
    parts: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """Collects tool-call fragments keyed by the API's own index.

    Our events number tool calls 0, 1, 2... in order of first appearance (the
    Anthropic API numbers all content blocks, text included, and OpenAI-style
    servers are not guaranteed to start at 0), so the engine can rely on it.
    """

    def __init__(self, id_prefix: str) -> None:
        self._id_prefix = id_prefix
        self._pending: dict[int, _Pending] = {}
        self._done: set[int] = set()
        self._unindexed: dict[str, int] = {}  # call id -> synthetic key
        self._last_unindexed: int | None = None

    def key_for(self, index: int | None, call_id: str | None) -> int:
        """The key for a fragment, tolerating servers that send no ``index``.

        Without an index, a new call id starts a new call and fragments without
        an id continue the latest one.
        """
        if index is not None:
            return index
        if call_id is not None and call_id not in self._unindexed:
            # Negative keys cannot collide with real indexes.
            self._unindexed[call_id] = -1 - len(self._unindexed)
        if call_id is not None:
            self._last_unindexed = self._unindexed[call_id]
        if self._last_unindexed is None:
            self._last_unindexed = -1 - len(self._unindexed)
            self._unindexed[""] = self._last_unindexed
        return self._last_unindexed

    @property
    def started(self) -> bool:
        """Whether any tool call has been seen in this response."""
        return bool(self._pending)

    def fragment(
        self, key: int, arguments: str, *, call_id: str | None = None, name: str | None = None
    ) -> ToolCallDelta | None:
        """Record a fragment; returns the event to emit (``None`` if there is nothing new)."""
        pending = self._pending.get(key)
        if pending is None:
            ordinal = len(self._pending)
            # Some OpenAI-compatible servers omit ids; the engine still needs one to
            # pair the result with the call. One that repeats an earlier call's id
            # gets its own: sent back twice, it is refused by the API at every
            # later turn of the thread.
            if call_id is None or any(p.call_id == call_id for p in self._pending.values()):
                call_id = f"{call_id or self._id_prefix}{'_' if call_id else ''}{ordinal}"
            pending = _Pending(ordinal, call_id, name or "")
            self._pending[key] = pending
            pending.parts.append(arguments)
            return ToolCallDelta(ordinal, arguments, call_id=pending.call_id, name=pending.name)
        if name and not pending.name:
            pending.name = name
        if not arguments:
            return None
        pending.parts.append(arguments)
        return ToolCallDelta(pending.ordinal, arguments)

    def finish(self, key: int, fallback_arguments: dict[str, Any] | None = None) -> ToolCallDone:
        """Complete one call. ``fallback_arguments`` is used when no JSON was streamed."""
        pending = self._pending[key]
        self._done.add(key)
        raw = "".join(pending.parts)
        if not raw.strip() and fallback_arguments:
            arguments, error = dict(fallback_arguments), None
        else:
            arguments, error = parse_arguments(raw)
        call = ToolCall(pending.call_id, pending.name, arguments, arguments_error=error)
        return ToolCallDone(pending.ordinal, call)

    def finish_all(self) -> list[ToolCallDone]:
        """Complete every call not finished yet, in order."""
        keys = sorted(
            (k for k in self._pending if k not in self._done),
            key=lambda k: self._pending[k].ordinal,
        )
        return [self.finish(k) for k in keys]


def transport_error(exc: BaseException) -> tuple[ErrorKind, str] | None:
    """Classify a raw network error, or ``None`` if ``exc`` is not one."""
    if isinstance(exc, TimeoutError):
        return "timeout", f"the model API did not answer in time ({type(exc).__name__})"
    # httpx2's errors, only where it is loaded (the providers' own client does
    # not load it for a plain-http endpoint).
    httpx2 = sys.modules.get("httpx2")
    if httpx2 is not None and isinstance(exc, httpx2.TimeoutException):
        return "timeout", f"the model API did not answer in time ({type(exc).__name__})"
    if isinstance(exc, OSError) or (httpx2 is not None and isinstance(exc, httpx2.RequestError)):
        return "unavailable", f"connection to the model API failed: {exc or type(exc).__name__}"
    if isinstance(exc, anyio.EndOfStream | anyio.BrokenResourceError):
        return "unavailable", "the connection to the model API closed unexpectedly"
    return None


_UNAVAILABLE_CODES: dict[ErrorKind, str] = {
    "auth": "Unauthorized",
    "rate_limit": "RateLimited",
    "unavailable": "Unavailable",
    "timeout": "Timeout",
    "other": "ProviderError",
}


def unavailable_code(kind: ErrorKind) -> str:
    """The :class:`ProviderUnavailable` code for an error kind (``list_models`` failures)."""
    return _UNAVAILABLE_CODES[kind]


def status_message(status: int, api_message: str | None, fallback: str) -> str:
    """A short human message for an HTTP error answer."""
    return f"HTTP {status}: {api_message or fallback}"


# The longest event line taken (a model's delta is a few bytes; a reply of this
# size in one line is a broken server): a longer one fails the call.
MAX_SSE_LINE = 8 * 1024 * 1024


async def server_sent_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[tuple[str, str]]:
    """``(event name or "", data)`` for each event of a ``text/event-stream``
    body given as byte chunks (httpx's ``aiter_bytes``).

    The parts of the WHATWG rules the model APIs use: lines end with LF, CRLF
    or CR; ``data`` lines are joined with newlines; ``event`` names the event;
    comments (``:``) and other fields are ignored; an event is dispatched at
    its blank line (or at the end of the body, as the SDKs do). Lines are split
    as bytes and only data is decoded: this runs for every streamed delta.
    """
    event = ""
    data: list[str] = []
    pending = b""
    partial: list[bytes] = []  # pieces of a line longer than one chunk, joined at its end
    partial_size = 0
    async for chunk in chunks:
        if b"\n" not in chunk and b"\r" not in chunk:
            # Kept aside, not added to what is split: a line of megabytes
            # re-split at every chunk cost the square of its length.
            partial.append(chunk)
            partial_size += len(chunk)
            if partial_size + len(pending) > MAX_SSE_LINE:
                raise ValueError(f"an event line longer than {MAX_SSE_LINE} bytes")
            continue
        if partial:
            pending += b"".join(partial)
            partial, partial_size = [], 0
        pending += chunk
        if len(pending) > MAX_SSE_LINE and (
            max(map(len, pending.splitlines(keepends=True))) > MAX_SSE_LINE
        ):
            raise ValueError(f"an event line longer than {MAX_SSE_LINE} bytes")
        if b"\r" in pending:
            # A CR at the very end may be the first half of a CRLF: keep it.
            keep = pending.endswith(b"\r")
            body = pending[:-1] if keep else pending
            body = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines = body.split(b"\n")
            pending = lines.pop() + (b"\r" if keep else b"")
        else:
            lines = pending.split(b"\n")
            pending = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                # The hot path: one line per streamed chunk.
                start = 6 if line.startswith(b"data: ") else 5
                data.append(line[start:].decode("utf-8", "replace"))
            elif not line:
                if data:
                    yield event, "\n".join(data)
                event, data = "", []
            elif line.startswith(b"event:"):
                event = line[6:].decode("utf-8", "replace").removeprefix(" ")
    pending += b"".join(partial)
    if pending.startswith(b"data:"):
        data.append(pending[6 if pending.startswith(b"data: ") else 5 :].decode("utf-8", "replace"))
    if data:
        yield event, "\n".join(data)
