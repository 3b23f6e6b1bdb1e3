"""The floor for bench/turns.py: a trivial server that streams a recorded turn.

``bench/script {path}`` loads frames recorded from a real appserver turn (a
JSON list of messages). ``turn/start {script, fanout}`` then answers with the
recorded response and pushes the recorded notifications, each encoded with
``json.dumps`` once, yielding to the loop after each frame like a streaming
producer. Same frame count and sizes as appserver; none of its work.

    turns_floor.py ws      # plain `websockets` server on 127.0.0.1:<free>; prints the URL on stderr
    turns_floor.py stdio   # JSON lines on stdin/stdout, asyncio pipes

fanout (WebSocket only): null -> to the caller with ``await ws.send``;
"broadcast" -> ``websockets.broadcast`` to every subscriber and the caller;
"queues" -> one queue + ``await ws.send`` writer task per connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast, serve

_READ_CHUNK = 1 << 16


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Floor:
    def __init__(self) -> None:
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.subscribers: set[ServerConnection] = set()
        self.queues: dict[ServerConnection, asyncio.Queue[str]] = {}
        self.writers: set[asyncio.Task[None]] = set()

    def answer(self, message: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
        """``(simple reply, turn request)``: one of them is set for a request."""
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if request_id is None:
            return None, None
        if method == "bench/script":
            path = params["path"]
            with open(path, encoding="utf-8") as handle:
                self.scripts[path] = json.load(handle)
            result: Any = {"frames": len(self.scripts[path])}
        elif method == "turn/start":
            return None, message
        elif method == "thread/start":
            result = {"thread": {"id": "floor"}}
        else:  # initialize, thread/subscribe, anything else
            result = {}
        return _dumps({"jsonrpc": "2.0", "id": request_id, "result": result}), None

    def frames(self, request: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """The encoded response and the notifications (still to encode)."""
        script = self.scripts[request["params"]["script"]]
        response = next(frame for frame in script if "result" in frame)
        notifications = [frame for frame in script if "method" in frame]
        return _dumps({**response, "id": request["id"]}), notifications

    # --- WebSocket ----------------------------------------------------------------------

    def _queue(self, ws: ServerConnection) -> asyncio.Queue[str]:
        queue = self.queues.get(ws)
        if queue is None:
            queue = self.queues[ws] = asyncio.Queue()

            async def writer() -> None:
                while True:
                    await ws.send(await queue.get())

            task = asyncio.get_running_loop().create_task(writer())
            self.writers.add(task)
            task.add_done_callback(self.writers.discard)
        return queue

    async def ws_handler(self, ws: ServerConnection) -> None:
        try:
            async for raw in ws:
                message = json.loads(raw)
                if message.get("method") == "thread/subscribe":
                    self.subscribers.add(ws)
                reply, turn = self.answer(message)
                if reply is not None:
                    await ws.send(reply)
                if turn is not None:
                    await self.ws_turn(ws, turn)
        finally:
            self.subscribers.discard(ws)
            self.queues.pop(ws, None)

    async def ws_turn(self, ws: ServerConnection, request: dict[str, Any]) -> None:
        response, notifications = self.frames(request)
        fanout = request["params"].get("fanout")
        if fanout is None:
            await ws.send(response)
            for frame in notifications:
                await ws.send(_dumps(frame))
                await asyncio.sleep(0)
        elif fanout == "broadcast":
            await ws.send(response)
            targets = [*self.subscribers - {ws}, ws]
            for frame in notifications:
                broadcast(targets, _dumps(frame))
                await asyncio.sleep(0)
        else:
            self._queue(ws).put_nowait(response)
            queues = [self._queue(c) for c in [*self.subscribers - {ws}, ws]]
            for frame in notifications:
                text = _dumps(frame)
                for queue in queues:
                    queue.put_nowait(text)
                await asyncio.sleep(0)


async def main_ws() -> None:
    floor = Floor()
    async with serve(
        floor.ws_handler,
        "127.0.0.1",
        0,
        max_size=None,
        compression=None,
        ping_interval=None,
        close_timeout=2,
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"floor: listening on ws://127.0.0.1:{port}/ws", file=sys.stderr, flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await reader.read()  # serve until stdin closes (the bench closes it)


class _WriteProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.paused = False
        self.resumed = asyncio.Event()

    def pause_writing(self) -> None:
        self.paused = True
        self.resumed.clear()

    def resume_writing(self) -> None:
        self.paused = False
        self.resumed.set()


async def main_stdio() -> None:
    floor = Floor()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_CHUNK * 4)
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    stdout = os.fdopen(os.dup(1), "wb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    writer, protocol = await loop.connect_write_pipe(_WriteProtocol, stdout)

    async def write(text: str) -> None:
        writer.write(text.encode() + b"\n")
        if protocol.paused:
            await protocol.resumed.wait()

    buffer = b""
    while data := await reader.read(_READ_CHUNK):
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            reply, turn = floor.answer(json.loads(line))
            if reply is not None:
                await write(reply)
            if turn is not None:
                response, notifications = floor.frames(turn)
                await write(response)
                for frame in notifications:
                    await write(_dumps(frame))
                    await asyncio.sleep(0)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "ws":
        asyncio.run(main_ws())
    elif mode == "stdio":
        asyncio.run(main_stdio())
    else:
        sys.exit("usage: turns_floor.py ws|stdio")
