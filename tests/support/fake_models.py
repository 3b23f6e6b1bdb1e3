"""A scripted, loopback-only model API server for provider tests.

One tiny HTTP/1.1 server (anyio sockets, no extra dependencies) that speaks
the *real* wire formats the official SDKs parse:

* OpenAI Chat Completions: ``POST /v1/chat/completions`` answering with
  ``text/event-stream`` ``data: {chat.completion.chunk}`` lines ending in
  ``data: [DONE]``, and ``GET /v1/models``.
* Anthropic Messages: ``POST /v1/messages`` answering with named SSE events
  (``message_start`` ... ``message_stop``), and ``GET /v1/models``.

Each test scripts the replies (a FIFO queue per ``METHOD path``) and reads
back what the client sent from :attr:`FakeModelServer.requests`. Streams are
sent with chunked transfer encoding, one SSE event per chunk, so the SDKs
really do see them arrive piece by piece.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

# --- replies -------------------------------------------------------------------


@dataclass
class Reply:
    """One canned HTTP answer.

    ``sse`` (a list of ``(event name or None, data)``; ``data`` is JSON-encoded
    unless it is already a string) makes a streamed answer, otherwise ``body``
    is sent as JSON. ``stall_after`` sends that many events and then stops
    writing while keeping the connection open (client read timeouts,
    cancellation); ``drop_after`` sends that many events and then closes the
    connection mid-body. ``hang`` never answers at all.
    """

    status: int = 200
    body: Any = None
    sse: list[tuple[str | None, Any]] | None = None
    stall_after: int | None = None
    drop_after: int | None = None
    hang: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorded:
    """A request the fake received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # decoded JSON, or None for an empty body


# --- OpenAI wire format --------------------------------------------------------------


def openai_chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = None,
    no_choices: bool = False,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` object."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "fake-model",
        "system_fingerprint": None,
        "choices": []
        if no_choices
        else [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        prompt, completion = usage
        chunk["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return chunk


def openai_stream(chunks: Sequence[dict[str, Any]], **reply: Any) -> Reply:
    """A streamed Chat Completions answer: the chunks, then ``data: [DONE]``."""
    events: list[tuple[str | None, Any]] = [(None, c) for c in chunks]
    events.append((None, "[DONE]"))
    return Reply(sse=events, **reply)


def openai_text_reply(
    parts: Sequence[str], *, usage: tuple[int, int] = (11, 7), finish_reason: str = "stop"
) -> Reply:
    """The usual shape of a streamed text answer with ``include_usage``."""
    chunks = [openai_chunk({"role": "assistant", "content": ""})]
    chunks += [openai_chunk({"content": p}) for p in parts]
    chunks.append(openai_chunk({}, finish_reason=finish_reason))
    chunks.append(openai_chunk(no_choices=True, usage=usage))
    return openai_stream(chunks)


def openai_error(status: int, message: str, *, type_: str, code: str | None = None) -> Reply:
    """An OpenAI-style JSON error body."""
    error = {"message": message, "type": type_, "param": None, "code": code}
    return Reply(status=status, body={"error": error})


def openai_models(*ids: str) -> Reply:
    """``GET /v1/models``."""
    data = [{"id": i, "object": "model", "created": 1_700_000_000, "owned_by": "fake"} for i in ids]
    return Reply(body={"object": "list", "data": data})


# --- Anthropic wire format ---------------------------------------------------------


@dataclass
class Text:
    """A text content block streamed as these ``text_delta`` parts."""

    parts: list[str]


@dataclass
class Thinking:
    """A thinking content block streamed as these ``thinking_delta`` parts."""

    parts: list[str]


@dataclass
class ToolUse:
    """A ``tool_use`` block whose input arrives as ``input_json_delta`` parts."""

    id: str
    name: str
    json_parts: list[str]


def anthropic_stream(
    blocks: Sequence[Text | Thinking | ToolUse],
    *,
    stop_reason: str = "end_turn",
    input_tokens: int = 21,
    output_tokens: int = 9,
    cache_read_input_tokens: int = 0,
    **reply: Any,
) -> Reply:
    """A full Messages stream, exactly as the API sends it (including a ping)."""
    events: list[tuple[str | None, Any]] = []
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "fake-claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cache_read_input_tokens,
        },
    }
    events.append(("message_start", {"type": "message_start", "message": message}))
    events.append(("ping", {"type": "ping"}))
    for index, block in enumerate(blocks):
        start: dict[str, Any]
        deltas: list[dict[str, Any]]
        if isinstance(block, Text):
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in block.parts]
        elif isinstance(block, Thinking):
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in block.parts]
            deltas.append({"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in block.json_parts]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return Reply(sse=events, **reply)


def anthropic_error(status: int, message: str, *, type_: str) -> Reply:
    """An Anthropic-style JSON error body."""
    body = {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_1"}
    return Reply(status=status, body=body)


def anthropic_models(*ids: str) -> Reply:
    """``GET /v1/models`` (one page)."""
    data = [
        {
            "type": "model",
            "id": i,
            "display_name": i.replace("-", " ").title(),
            "created_at": "2025-02-19T00:00:00Z",
            "lifecycle": "active",
        }
        for i in ids
    ]
    return Reply(
        body={
            "data": data,
            "has_more": False,
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
        }
    )


# --- the server ---------------------------------------------------------------------

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}
_REASONS |= {404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}
_REASONS |= {503: "Service Unavailable", 529: "Overloaded"}


class FakeModelServer:
    """Scripted HTTP/1.1 server on ``127.0.0.1:<ephemeral>``; use :func:`fake_model_server`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.requests: list[Recorded] = []
        self._queues: dict[str, deque[Reply]] = {}
        self._arrived = anyio.Event()  # set (and replaced) at each request

    @property
    def base_url(self) -> str:
        """Root URL (what the Anthropic SDK wants)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Root URL plus ``/v1`` (what the OpenAI SDK wants)."""
        return f"{self.base_url}/v1"

    def script(self, route: str, *replies: Reply) -> None:
        """Queue replies for ``route``, e.g. ``"POST /v1/messages"``."""
        self._queues.setdefault(route, deque()).extend(replies)

    def bodies(self, route: str) -> list[Any]:
        """JSON bodies received on ``route``, oldest first."""
        return [r.body for r in self.requests if f"{r.method} {r.path}" == route]

    async def received(self, route: str, count: int = 1) -> None:
        """Wait until ``count`` requests have come in on ``route``."""
        while len(self.bodies(route)) < count:
            await self._arrived.wait()

    async def _handle(self, stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            try:
                while await self._one_request(reader, stream):
                    pass
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.IncompleteRead):
                pass  # the client went away; nothing to answer

    async def _one_request(self, reader: BufferedByteReceiveStream, stream: SocketStream) -> bool:
        head = await reader.receive_until(b"\r\n\r\n", 65536)
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, _version = request_line.split(" ", 2)
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        raw = await reader.receive_exactly(length) if length else b""
        path = target.split("?", 1)[0]
        self.requests.append(Recorded(method, path, headers, json.loads(raw) if raw else None))
        self._arrived.set()
        self._arrived = anyio.Event()

        queue = self._queues.get(f"{method} {path}")
        if queue:
            reply = queue.popleft()
        else:
            reply = Reply(
                status=500,
                body={"error": {"message": f"fake: nothing scripted for {method} {path}"}},
            )
        if reply.hang:
            await anyio.sleep_forever()
        if reply.sse is None:
            await self._send_json(stream, reply)
            return True
        return await self._send_sse(stream, reply)

    @staticmethod
    def _status_line(reply: Reply) -> str:
        return f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"

    async def _send_json(self, stream: SocketStream, reply: Reply) -> None:
        payload = json.dumps(reply.body).encode()
        head = self._status_line(reply)
        head += "content-type: application/json\r\n"
        head += f"content-length: {len(payload)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        await stream.send(head.encode() + b"\r\n" + payload)

    async def _send_sse(self, stream: SocketStream, reply: Reply) -> bool:
        head = self._status_line(reply)
        head += "content-type: text/event-stream; charset=utf-8\r\n"
        head += "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        await stream.send(head.encode() + b"\r\n")
        assert reply.sse is not None
        for sent, (event, data) in enumerate(reply.sse):
            if sent == reply.stall_after:
                await anyio.sleep_forever()
            if sent == reply.drop_after:
                return False  # closes the socket in the middle of the chunked body
            text = data if isinstance(data, str) else json.dumps(data)
            frame = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
            encoded = frame.encode()
            await stream.send(f"{len(encoded):x}\r\n".encode() + encoded + b"\r\n")
        await stream.send(b"0\r\n\r\n")
        return True


@asynccontextmanager
async def fake_model_server() -> AsyncIterator[FakeModelServer]:
    """Run a :class:`FakeModelServer` for the duration of the block."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        port = listener.extra(SocketAttribute.local_port)
        server = FakeModelServer(port)
        tg.start_soon(listener.serve, server._handle, tg)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


# --- helpers for provider tests ---------------------------------------------------------


async def collect(events: AsyncIterator[Any]) -> list[Any]:
    """Drain a provider stream into a list."""
    return [event async for event in events]


def closed_port() -> int:
    """A loopback port nothing listens on (connection refused)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
