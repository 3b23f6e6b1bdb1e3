"""The two ways to reach a server: a child process over stdio, or WebSocket.

A transport moves whole JSON-RPC frames (text). ``receive`` raises
:class:`~appserver_client.errors.ConnectionLost` when the peer is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import IO, Any, Literal, Protocol, TextIO
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from appserver_client.errors import ConnectFailed, ConnectionLost

log = logging.getLogger("appserver_client")

MAX_FRAME_BYTES = 64 * 1024 * 1024
StderrMode = Literal["inherit", "capture", "discard"] | int | IO[Any]


class Transport(Protocol):
    """What the client needs from a connection."""

    kind: str

    async def send(self, frame: str) -> None:
        """Write one frame; raises ``ConnectionLost`` if the peer is gone."""

    async def receive(self) -> str:
        """The next frame; raises ``ConnectionLost`` at the end."""

    async def close(self) -> None:
        """Close the connection (idempotent)."""


class StdioTransport:
    """JSON lines over a child process's stdin/stdout (one client per process)."""

    kind = "stdio"

    def __init__(self, process: asyncio.subprocess.Process, close_timeout: float) -> None:
        self.process = process
        self.close_timeout = close_timeout
        self._write_lock = asyncio.Lock()
        self._stderr_lines: deque[str] = deque(maxlen=200)
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr_echo: TextIO | None = None
        self._closed = False

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stderr: StderrMode = "inherit",
        close_timeout: float = 5.0,
        new_session: bool = True,
    ) -> StdioTransport:
        """Spawn ``argv``. ``stderr``: ``"inherit"`` passes it through to
        ``sys.stderr`` line by line, ``"capture"`` keeps it instead; both keep
        the last 200 lines (:attr:`stderr_text`) for the error raised when the
        server exits. ``"discard"`` drops it, or a file object / descriptor
        receives it (no tail is kept then).
        ``new_session`` keeps a terminal's Ctrl-C from reaching the server."""
        if not argv:
            raise ValueError("argv must name a command")
        target: Any
        if stderr in ("inherit", "capture"):
            # Read through a pipe even when passing it through: the lines that
            # explain an exit at start belong in the error we raise.
            target = asyncio.subprocess.PIPE
        elif stderr == "discard":
            target = asyncio.subprocess.DEVNULL
        else:
            target = stderr
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=target,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                limit=MAX_FRAME_BYTES,
                start_new_session=new_session,
            )
        except OSError as exc:
            raise ConnectFailed(f"could not start {argv[0]!r}: {exc}") from exc
        transport = cls(process, close_timeout)
        if stderr in ("inherit", "capture"):
            transport._stderr_echo = sys.stderr if stderr == "inherit" else None
            transport._stderr_task = asyncio.get_running_loop().create_task(
                transport._collect_stderr()
            )
        return transport

    @property
    def stderr_text(self) -> str:
        """The server's last stderr lines (``stderr="capture"`` or ``"inherit"``)."""
        return "".join(self._stderr_lines)

    async def _collect_stderr(self) -> None:
        assert self.process.stderr is not None
        while True:
            try:
                line = await self.process.stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue  # an absurdly long log line: skip it, keep reading
            if not line:
                return
            text = line.decode("utf-8", "replace")
            self._stderr_lines.append(text)
            if self._stderr_echo is not None:
                with contextlib.suppress(OSError, ValueError):  # our stderr is gone
                    self._stderr_echo.write(text)
                    self._stderr_echo.flush()

    def _gone(self) -> ConnectionLost:
        code = self.process.returncode
        if code is None:
            status = "is closing"
        elif code < 0:
            status = f"exited (killed by signal {-code})"
        else:
            status = f"exited with code {code}"
        lines = [line.strip() for line in self._stderr_lines if line.strip()]
        tail = lines[-5:]
        detail = ("; stderr: " + " | ".join(tail)) if tail else ""
        return ConnectionLost(f"server process {status}{detail}")

    async def _ended(self) -> ConnectionLost:
        """:meth:`_gone` once the process has exited and its last stderr lines
        are read (each wait bounded), so the error says why it ended."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), 1.0)
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        return self._gone()

    async def send(self, frame: str) -> None:
        stdin = self.process.stdin
        if stdin is None or self._closed:
            raise self._gone()
        if stdin.is_closing():
            raise await self._ended()
        async with self._write_lock:
            try:
                stdin.write(frame.encode("utf-8") + b"\n")
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise await self._ended() from exc

    async def receive(self) -> str:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except (ValueError, asyncio.LimitOverrunError) as exc:
                raise ConnectionLost(f"frame over {MAX_FRAME_BYTES} bytes from server") from exc
            if not line:
                raise await self._ended()
            text = line.decode("utf-8").strip()
            if text:
                return text

    async def close(self) -> None:
        """Close stdin (the server finishes and exits), wait, then terminate/kill."""
        if self._closed:
            return
        self._closed = True
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        for step in ("wait", "terminate", "kill"):
            if step == "terminate" and self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.terminate()
            elif step == "kill" and self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
            try:
                await asyncio.wait_for(self.process.wait(), self.close_timeout)
                break
            except TimeoutError:
                continue
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stderr_task


def websocket_url(url: str, token: str | None) -> str:
    """``url`` with the default ``/ws`` path and ``?token=`` added.

    Raises ``ValueError`` (one line, naming the expected form) for anything
    but ``ws://HOST[:PORT][/PATH]`` or ``wss://…``.
    """
    expected = f"expected ws://HOST:PORT or wss://HOST:PORT, got {url!r}"
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(expected)
    try:
        parts.port  # noqa: B018  (parsing the port is the check)
    except ValueError:
        raise ValueError(f"{expected} (the port is not a number)") from None
    path = parts.path if parts.path not in ("", "/") else "/ws"
    query = parse_qsl(parts.query, keep_blank_values=True)
    if token is not None:
        query = [(key, value) for key, value in query if key != "token"] + [("token", token)]
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), parts.fragment))


class WebSocketTransport:
    """One JSON-RPC frame per WebSocket text message."""

    kind = "websocket"

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, url: str, open_timeout: float = 10.0) -> WebSocketTransport:
        """Connect to a full URL (see :func:`websocket_url`).

        Raises :class:`ConnectFailed` (``permanent`` for 401/403/404 and bad URLs).
        """
        try:
            ws = await connect(url, max_size=MAX_FRAME_BYTES, open_timeout=open_timeout)
        except InvalidStatus as exc:
            status = exc.response.status_code
            why = {
                401: " (the token is missing or wrong)",
                403: " (the Origin is not allowed)",
                404: " (no WebSocket endpoint at this path)",
            }.get(status, "")
            raise ConnectFailed(
                f"server refused the WebSocket upgrade with HTTP {status}{why}",
                permanent=status in (401, 403, 404),
                status=status,
            ) from exc
        except (InvalidURI, ValueError) as exc:
            raise ConnectFailed(f"invalid URL: {exc}", permanent=True) from exc
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise ConnectFailed(f"could not connect: {exc}") from exc
        return cls(ws)

    async def send(self, frame: str) -> None:
        try:
            await self.ws.send(frame)
        except ConnectionClosed as exc:
            raise ConnectionLost(f"WebSocket closed: {exc}") from exc

    async def receive(self) -> str:
        try:
            message = await self.ws.recv()
        except ConnectionClosed as exc:
            raise ConnectionLost(f"WebSocket closed: {exc}") from exc
        return message if isinstance(message, str) else message.decode("utf-8")

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
