"""The echo floor: answers every JSON-RPC request with ``{"result": {}}``.

``_echo.py stdio`` reads JSON lines from stdin and writes one line per
request, in the asyncio pipe style of appserver's stdio transport
(``connect_read_pipe`` + 64 KiB reads, ``connect_write_pipe``).
``_echo.py ws`` is a plain ``websockets`` server on 127.0.0.1 (free port)
answering each text frame; it prints ``listening on ws://...`` to stderr.
json.loads/dumps once per message in both.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from websockets.asyncio.server import ServerConnection, serve

_READ_CHUNK = 1 << 16


def answer(frame: str | bytes) -> str:
    message = json.loads(frame)
    return json.dumps(
        {"jsonrpc": "2.0", "id": message.get("id"), "result": {}}, separators=(",", ":")
    )


async def stdio_echo() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_CHUNK * 4)
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    stdout = os.fdopen(os.dup(1), "wb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    writer, _ = await loop.connect_write_pipe(asyncio.Protocol, stdout)
    buffer = b""
    while data := await reader.read(_READ_CHUNK):
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                writer.write(answer(line).encode() + b"\n")
    writer.close()


async def ws_echo() -> None:
    async def handler(ws: ServerConnection) -> None:
        async for frame in ws:
            await ws.send(answer(frame))

    async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"echo: listening on ws://127.0.0.1:{port}/ws", file=sys.stderr, flush=True)
        # Run until stdin closes (the bench closes it, or SIGTERM ends us).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    asyncio.run(stdio_echo() if mode == "stdio" else ws_echo())
