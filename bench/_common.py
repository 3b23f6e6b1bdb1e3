"""Shared bench helpers: subprocess servers, one JSON-RPC client for every
transport, and percentile arithmetic. Loopback only; everything is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STREAM_LIMIT = 64 * 1024 * 1024  # a full 2,000-thread list is one long line
START_TIMEOUT = 30.0
CALL_TIMEOUT = 30.0


class BenchError(Exception):
    """A server answered with an error or misbehaved."""


# --- statistics ---------------------------------------------------------------


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile of ``samples`` (seconds in, seconds out)."""
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summarize(samples: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(samples),
        "p95": percentile(samples, 95),
        "max": max(samples),
        "n": float(len(samples)),
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


# --- one client, two wire styles --------------------------------------------------


class Client:
    """JSON-RPC client: one reader task resolves futures by id.

    The same code drives appserver and the echo floors; only ``_send`` and
    ``_receive`` differ per transport.
    """

    def __init__(self) -> None:
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self.errors = 0
        self.notifications = 0
        self.junk = 0

    async def _send(self, frame: str) -> None:
        raise NotImplementedError

    async def _receive(self) -> str | None:
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        try:
            while True:
                frame = await self._receive()
                if frame is None:
                    break
                try:
                    message = json.loads(frame)
                except ValueError:
                    self.junk += 1  # not JSON-RPC (e.g. a profiler's banner)
                    continue
                request_id = message.get("id")
                if "method" in message:
                    self.notifications += 1
                    continue
                future = self._pending.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_result(message)
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(BenchError("connection closed"))
            self._pending.clear()

    def _message(self, method: str, params: Any) -> tuple[asyncio.Future[dict[str, Any]], str]:
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        frame = json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params},
            separators=(",", ":"),
        )
        return future, frame

    async def call(self, method: str, params: Any = None) -> Any:
        """Send one request, wait for its answer, return ``result``."""
        future, frame = self._message(method, params or {})
        await self._send(frame)
        reply = await asyncio.wait_for(future, CALL_TIMEOUT)
        if "error" in reply:
            raise BenchError(f"{method}: {reply['error']}")
        return reply["result"]

    async def notify(self, method: str, params: Any = None) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        await self._send(json.dumps(message, separators=(",", ":")))

    async def initialize(self) -> Any:
        result = await self.call(
            "initialize", {"clientInfo": {"name": "bench", "version": "1"}, "capabilities": {}}
        )
        await self.notify("initialized")
        return result

    async def sequential(self, method: str, params: Any, count: int) -> list[float]:
        """``count`` round trips, one at a time; per-request latency in seconds."""
        samples: list[float] = []
        clock = time.perf_counter
        for _ in range(count):
            start = clock()
            await self.call(method, params)
            samples.append(clock() - start)
        return samples

    async def pipelined(self, method: str, params: Any, count: int, window: int) -> float:
        """``count`` requests with at most ``window`` outstanding; requests/second."""
        slots = asyncio.Semaphore(window)
        futures: list[asyncio.Future[dict[str, Any]]] = []

        def release(_: asyncio.Future[dict[str, Any]]) -> None:
            slots.release()

        start = time.perf_counter()
        for _ in range(count):
            await slots.acquire()
            future, frame = self._message(method, params)
            future.add_done_callback(release)
            futures.append(future)
            await self._send(frame)
        replies = await asyncio.wait_for(asyncio.gather(*futures), CALL_TIMEOUT * 4)
        elapsed = time.perf_counter() - start
        self.errors += sum(1 for reply in replies if "error" in reply)
        return count / elapsed


class PipeClient(Client):
    """JSON lines over a child's stdin/stdout."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        super().__init__()
        assert process.stdin is not None and process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout

    async def _send(self, frame: str) -> None:
        self._stdin.write(frame.encode() + b"\n")
        await self._stdin.drain()

    async def _receive(self) -> str | None:
        line = await self._stdout.readline()
        return line.decode() if line else None


class WsClient(Client):
    """One message per text frame."""

    def __init__(self, ws: ClientConnection) -> None:
        super().__init__()
        self._ws = ws

    async def _send(self, frame: str) -> None:
        await self._ws.send(frame)

    async def _receive(self) -> str | None:
        try:
            message = await self._ws.recv()
        except Exception:
            return None
        return message if isinstance(message, str) else message.decode()

    async def aclose(self) -> None:
        await self._ws.close()
        await super().aclose()


# --- subprocess servers -----------------------------------------------------------


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("APPSERVER_TOKEN", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def appserver_command(workspace: Path, *extra: str, wrap: list[str] | None = None) -> list[str]:
    """``python -m appserver app-server`` for ``workspace`` (``wrap``: e.g. cProfile)."""
    return [
        sys.executable,
        *(wrap or []),
        "-m",
        "appserver",
        "app-server",
        "--workspace",
        str(workspace),
        "--log-level",
        "warning",
        *extra,
    ]


def echo_command(mode: str) -> list[str]:
    return [sys.executable, str(HERE / "_echo.py"), mode]


async def _drain(stream: asyncio.StreamReader | None, keep: bytearray) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        keep += chunk[-4096:]
        del keep[:-8192]


async def _stop(process: asyncio.subprocess.Process, close_stdin: bool) -> None:
    """Ask politely (EOF or SIGTERM), then insist; never leave a child behind."""
    if process.returncode is None and not close_stdin:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    if process.stdin is not None:
        process.stdin.close()
    if process.returncode is None:
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


@contextlib.asynccontextmanager
async def stdio_server(command: list[str]) -> AsyncIterator[PipeClient]:
    """Start ``command`` speaking JSON lines on stdio; yield a client to it."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
        limit=STREAM_LIMIT,
    )
    stderr_tail = bytearray()
    drain = asyncio.get_running_loop().create_task(_drain(process.stderr, stderr_tail))
    client = PipeClient(process)
    client.start()
    try:
        yield client
    finally:
        await _stop(process, close_stdin=True)
        await client.aclose()
        drain.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drain


@contextlib.asynccontextmanager
async def ws_server(command: list[str]) -> AsyncIterator[Callable[[], Any]]:
    """Start ``command`` (prints ``listening on ws://...`` on stderr); yield a
    function that opens a connected :class:`WsClient`."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    assert process.stderr is not None
    seen = b""
    clients: list[WsClient] = []
    drain: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while not (match := re.search(rb"listening on (ws://\S+)", seen)):
                chunk = await process.stderr.read(4096)
                if not chunk:
                    raise BenchError(f"server exited: {seen.decode(errors='replace')}")
                seen += chunk
        url = match.group(1).decode()
        tail = bytearray()
        drain = asyncio.get_running_loop().create_task(_drain(process.stderr, tail))

        async def open_client() -> WsClient:
            ws = await connect(url, max_size=None, compression=None, ping_interval=None)
            client = WsClient(ws)
            client.start()
            clients.append(client)
            return client

        yield open_client
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()
        await _stop(process, close_stdin=False)
        if drain is not None:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
