"""The fake model behind bench/peer.py: one loopback HTTP/1.1 server that
streams the same text in both wire formats the two servers speak.

    python bench/peer_model.py [--port 0]

prints ``{"port": P}`` on stdout once it listens, then one JSON line per
request it answered (``{"path":..,"kind":..,"deltas":N,"bytes":B,"t":..}``),
and exits at EOF on stdin. Unexpected requests are also logged to stderr.

* ``POST .../chat/completions`` (appserver's ``openai`` provider): ``data:
  {chat.completion.chunk}`` events, a finish chunk, a usage chunk, ``data:
  [DONE]``.
* ``POST .../responses`` (Codex, ``wire_api = "responses"``):
  ``response.created``, ``response.output_item.added`` (an assistant message),
  N ``response.output_text.delta``, ``response.output_item.done`` (the whole
  text), ``response.completed`` with usage -- the events Codex's own test
  fixtures use (codex-rs/core/tests/common/responses.rs).
* ``POST .../messages`` (Anthropic, for bench/stream_cpu.py): ``message_start``,
  a text block of N ``text_delta`` events, ``message_delta``, ``message_stop``.
* ``GET .../models``: a one-model list.

The number of deltas N comes from the last ``BENCH_STREAM <N>`` in the request
body (the newest user message; earlier turns' prompts are in the history
before it), and the deltas are ``chunk 1 ``, ``chunk 2 ``, ... like the
offline model's ``?stream N``. Every SSE event is its own HTTP chunk
(chunked transfer encoding); events are written in batches of about
``WRITE_BYTES`` with a drain after each, the same for both formats, and the
delta events are built once per (format, N), so the model costs little CPU
next to the servers it feeds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
from typing import Any

MARKER = re.compile(rb"BENCH_STREAM (\d+)")
MODEL = "fake-model"
WRITE_BYTES = 16 * 1024
MAX_DELTAS = 100_000
HEAD_TIMEOUT = 300.0  # an idle keep-alive connection may wait this long for its next request


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def delta_text(i: int) -> str:
    return f"chunk {i} "


def expected_text(count: int) -> str:
    return "".join(delta_text(i) for i in range(1, count + 1))


def chunked(event: str) -> bytes:
    """One SSE event as one HTTP/1.1 chunk."""
    data = event.encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(data: Any, name: str | None = None) -> bytes:
    text = data if isinstance(data, str) else dumps(data)
    head = f"event: {name}\n" if name else ""
    return chunked(f"{head}data: {text}\n\n")


# --- chat completions -------------------------------------------------------------------------


def chat_chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }


def chat_deltas(count: int) -> list[bytes]:
    return [sse(chat_chunk({"content": delta_text(i)})) for i in range(1, count + 1)]


def chat_head(_seq: int) -> list[bytes]:
    return [sse(chat_chunk({"role": "assistant", "content": ""}))]


def chat_tail(_seq: int, count: int, prompt_tokens: int) -> list[bytes]:
    usage = chat_chunk(None)
    usage["choices"] = []
    usage["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": count,
        "total_tokens": prompt_tokens + count,
    }
    return [sse(chat_chunk({}, "stop")), sse(usage), sse("[DONE]")]


# --- responses ------------------------------------------------------------------------------


def responses_deltas(count: int) -> list[bytes]:
    return [
        sse(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_bench",
                "output_index": 0,
                "content_index": 0,
                "delta": delta_text(i),
            },
            "response.output_text.delta",
        )
        for i in range(1, count + 1)
    ]


def _message(seq: int, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    return {
        "type": "message",
        "id": f"msg_bench_{seq}",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def responses_head(seq: int) -> list[bytes]:
    response = {"id": f"resp_bench_{seq}", "object": "response", "model": MODEL}
    return [
        sse(
            {"type": "response.created", "response": {**response, "status": "in_progress"}},
            "response.created",
        ),
        sse(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": _message(seq, "", "in_progress"),
            },
            "response.output_item.added",
        ),
    ]


def responses_tail(seq: int, count: int, prompt_tokens: int) -> list[bytes]:
    done = {
        "type": "response.output_item.done",
        "output_index": 0,
        "item": _message(seq, expected_text(count), "completed"),
    }
    completed = {
        "type": "response.completed",
        "response": {
            "id": f"resp_bench_{seq}",
            "object": "response",
            "model": MODEL,
            "status": "completed",
            "usage": {
                "input_tokens": prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": count,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt_tokens + count,
            },
        },
    }
    return [sse(done, "response.output_item.done"), sse(completed, "response.completed")]


# --- messages (Anthropic; bench/stream_cpu.py --provider anthropic) --------------------------


def messages_deltas(count: int) -> list[bytes]:
    return [
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": delta_text(i)},
            },
            "content_block_delta",
        )
        for i in range(1, count + 1)
    ]


def messages_head(seq: int) -> list[bytes]:
    message = {
        "id": f"msg_bench_{seq}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    return [
        sse({"type": "message_start", "message": message}, "message_start"),
        sse(start, "content_block_start"),
        sse({"type": "ping"}, "ping"),
    ]


def messages_tail(_seq: int, count: int, _prompt_tokens: int) -> list[bytes]:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": count},
    }
    return [
        sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        sse(delta, "message_delta"),
        sse({"type": "message_stop"}, "message_stop"),
    ]


STREAMS = {
    "chat": (chat_head, chat_deltas, chat_tail),
    "responses": (responses_head, responses_deltas, responses_tail),
    "messages": (messages_head, messages_deltas, messages_tail),
}


# --- the server -------------------------------------------------------------------------------


class FakeModel:
    def __init__(self, out: Any = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.seq = 0
        self._deltas: dict[tuple[str, int], list[bytes]] = {}
        self.server: asyncio.Server | None = None

    def report(self, record: dict[str, Any]) -> None:
        self.out.write(dumps(record) + "\n")
        self.out.flush()

    async def start(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", port)
        return int(self.server.sockets[0].getsockname()[1])

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self.one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is done."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = [*lines[0].split(" ", 2), "", ""][:3]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await self.read_body(reader, headers)
        path = target.split("?", 1)[0]
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if headers.get("upgrade"):
            print(f"peer_model: refusing upgrade {headers['upgrade']!r} on {path}", file=sys.stderr)
            await self.send_json(writer, 404, {"error": {"message": "no upgrade here"}}, keep)
            self.report({"path": path, "method": method, "kind": "upgrade-refused", "t": now()})
            return keep
        if method == "POST" and path.endswith("/chat/completions"):
            await self.stream(writer, "chat", body, keep, path, headers)
        elif method == "POST" and path.endswith("/responses"):
            await self.stream(writer, "responses", body, keep, path, headers)
        elif method == "POST" and path.endswith("/messages"):
            await self.stream(writer, "messages", body, keep, path, headers)
        elif method == "GET" and path.endswith("/models"):
            model = {"id": MODEL, "object": "model", "created": 1_700_000_000, "owned_by": "bench"}
            await self.send_json(writer, 200, {"object": "list", "data": [model]}, keep)
            self.report({"path": path, "method": method, "kind": "models", "t": now()})
        else:
            print(f"peer_model: unexpected {method} {target}", file=sys.stderr)
            await self.send_json(writer, 404, {"error": {"message": f"no {path} here"}}, keep)
            self.report({"path": path, "method": method, "kind": "unexpected", "t": now()})
        return keep

    async def read_body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                parts.append(await reader.readexactly(size + 2))
                if not size:
                    # trailers, if any, end with an empty line
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    return b"".join(p[:-2] for p in parts)
        length = int(headers.get("content-length", "0") or 0)
        return await reader.readexactly(length) if length else b""

    async def send_json(
        self, writer: asyncio.StreamWriter, status: int, body: Any, keep: bool
    ) -> None:
        data = dumps(body).encode()
        reason = "OK" if status == 200 else "Not Found"
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: {'keep-alive' if keep else 'close'}"
            f"\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def stream(
        self,
        writer: asyncio.StreamWriter,
        kind: str,
        body: bytes,
        keep: bool,
        path: str,
        headers: dict[str, str],
    ) -> None:
        t0 = now()
        self.seq += 1
        seq = self.seq
        encoding = headers.get("content-encoding")
        marks = MARKER.findall(body)
        count = min(int(marks[-1]), MAX_DELTAS) if marks else 1
        if not marks:
            print(
                f"peer_model: no BENCH_STREAM in {path} body ({len(body)} bytes, "
                f"content-encoding {encoding!r}); streaming 1 delta",
                file=sys.stderr,
            )
        head, deltas, tail = STREAMS[kind]
        cached = self._deltas.get((kind, count))
        if cached is None:
            cached = self._deltas[(kind, count)] = deltas(count)
        events = [*head(seq), *cached, *tail(seq, count, max(1, len(body) // 4))]
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: "
            + (b"keep-alive" if keep else b"close")
            + b"\r\n\r\n"
        )
        batch: list[bytes] = []
        size = 0
        for event in events:
            batch.append(event)
            size += len(event)
            if size >= WRITE_BYTES:
                writer.write(b"".join(batch))
                await writer.drain()
                batch, size = [], 0
        batch.append(b"0\r\n\r\n")
        writer.write(b"".join(batch))
        await writer.drain()
        self.report(
            {
                "path": path,
                "method": "POST",
                "kind": kind,
                "deltas": count,
                "bytes": len(body),
                "encoding": encoding,
                "t0": t0,
                "t": now(),
            }
        )


def now() -> float:
    return time.monotonic()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    model = FakeModel()
    port = await model.start(args.port)
    model.report({"port": port})
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    while await stdin.read(4096):
        pass
    assert model.server is not None
    model.server.close()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
