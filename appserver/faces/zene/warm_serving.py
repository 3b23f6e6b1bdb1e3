"""The warm Zene process: one-shot requests over a Unix socket, on a runtime
opened once (the client and the wire: :mod:`appserver.faces.zene.warm`).

Each connection is one one-shot process's request, answered as that process
would answer it cold: its stdin read with ``--stdin-timeout-ms`` and
``--max-input-bytes``, ``timeout_ms`` counted from the client's own spawn, the
same responses and exit statuses. Requests of different sessions run at once,
those of one session one after another. The process ends once it has been
idle (no request in flight) for ``--keep-warm`` seconds, or when asked to stop.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream

import appserver
from appserver import startup
from appserver.faces.zene.serving import (
    SessionOrder,
    StartupFailure,
    ZeneFace,
    open_runtime,
)
from appserver.faces.zene.session import Conversations
from appserver.faces.zene.warm import WIRE_VERSION, answer_frame
from appserver.faces.zene.wire import EXIT_OK, EXIT_RUNTIME
from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.startup import FileStamp, file_stamp
from appserver.transport.base import FrameRejected, TransportClosed
from appserver.transport.stdio import LineSource
from appserver.warm_common import CHUNK, hold_lock, log_path, peer_is_us

log = logging.getLogger("appserver.faces.zene")

# A client sends its header at once; one that does not within this is dropped.
HEADER_WAIT = 5.0
# After the answer, what the client still sends is read (and dropped) for at
# most this long, so it is not reset while it reads the answer.
DRAIN_WAIT = 1.0


async def serve_warm(args: argparse.Namespace, host: Callable[[], Any], path: str) -> int:
    """Serve one-shots at ``path`` until idle; the process's exit status."""
    holder = hold_lock(path)
    if holder is None:
        log.info("a warm process already serves %s", path)
        return EXIT_OK
    try:
        workspace = Path(args.workspace)
        # What it reads once is stamped before it is read: a change made while
        # this process starts may have been missed, so it counts as a change.
        watched = _settings_files(workspace)
        if not args.trust_workspace:
            # With the flag a cold one-shot trusts the workspace whatever the
            # record says (and every such start rewrites it): not watched then.
            watched.append(_trust_record(workspace))
        read_at_start = {**_stamps(watched), **_code_stamp()}
        async with contextlib.AsyncExitStack() as stack:
            opened = await open_runtime(host, stack, None)
            if isinstance(opened, StartupFailure):
                return opened.exit_code
            # Bound and listening under another name, then renamed into place:
            # a one-shot never finds the name before it can connect there.
            fresh = f"{path}.{os.getpid()}"
            try:
                listener = await anyio.create_unix_listener(fresh, mode=0o600)
            except OSError as exc:
                log.error("cannot listen at %s: %s", path, exc)
                return EXIT_RUNTIME
            try:
                os.replace(fresh, path)
            except OSError as exc:
                log.error("cannot listen at %s: %s", path, exc)
                await listener.aclose()
                with contextlib.suppress(OSError):
                    os.unlink(fresh)
                return EXIT_RUNTIME
            async with listener:
                warm = WarmProcess(args, Conversations(opened, args), path, read_at_start)
                await warm.run(listener)
                log.info("warm process ends after %d requests", warm.served)
    finally:
        # Gone before the lock is let go: a successor's socket is never removed.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(holder)
    return EXIT_OK


class _Captured:
    """A connection's request lines in, the responses kept (sent at the end,
    with the exit status)."""

    kind = "warm"

    def __init__(self, lines: LineSource) -> None:
        self.lines = lines
        self.sent: list[str] = []

    async def receive(self) -> str:
        return await self.lines.receive()

    async def send_batch(self, frames: list[str]) -> None:
        self.sent.extend(frames)

    def try_send(self, frame: str) -> bool:
        self.sent.append(frame)
        return True

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


class WarmProcess:
    """The listener's loop, the connections in flight and the idle clock."""

    def __init__(
        self,
        args: argparse.Namespace,
        conversations: Conversations,
        path: str,
        read_at_start: dict[Path, Stamp],
    ) -> None:
        self.args = args
        self.conversations = conversations
        self.path = path
        self.idle = float(args.keep_warm)
        self.order = SessionOrder()
        self.served = 0
        self._active = 0
        self._last = time.monotonic()
        self._accepting = anyio.CancelScope()
        self._watched = list(read_at_start)
        self._read_at_start = read_at_start  # what it read once: serve_warm

    def stale(self) -> bool:
        """Whether appserver's code, a settings file or the trust record it read
        at start changed (or came or went) since."""
        return _stamps(self._watched) != self._read_at_start

    async def run(self, listener: SocketListener) -> None:
        """Accept until idle or stopped; then let the requests in flight finish."""
        async with anyio.create_task_group() as connections:
            with self._accepting:
                async with anyio.create_task_group() as watching:
                    watching.start_soon(self._watch_idle)
                    while True:
                        stream = await listener.accept()
                        self._active += 1
                        connections.start_soon(self._connection, stream)
            # Closed now, not after the requests in flight: a one-shot still
            # queued for it is refused at once and runs cold.
            await listener.aclose()

    def finish(self) -> None:
        """No new connections (the socket's name goes first: a one-shot that
        finds none runs cold); those in flight finish."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._accepting.cancel()

    async def _watch_idle(self) -> None:
        while True:
            await anyio.sleep(max(0.05, self._last + self.idle - time.monotonic()))
            if self._active == 0 and time.monotonic() - self._last >= self.idle:
                self.finish()
                return

    async def _connection(self, stream: SocketStream) -> None:
        try:
            async with stream:
                if peer_is_us(stream.extra(SocketAttribute.raw_socket)):
                    await self._serve(stream)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the client went away; what it asked for has run
        except Exception:  # anything else ends this connection, never the process
            log.exception("a one-shot's connection failed")
        finally:
            self._active -= 1
            self._last = time.monotonic()

    async def _serve(self, stream: SocketStream) -> None:
        async def read() -> bytes:
            try:
                return await stream.receive(CHUNK)
            except anyio.EndOfStream:
                return b""

        lines = LineSource(read, self.args.max_input_bytes)
        header = await _header(lines)
        if header is None:
            return
        if header.get("stop") is True:
            self.finish()  # its socket is gone once the answer is read
            await stream.send(b"served %d\n" % self.served)
            return
        started = header.get("started")
        if type(started) is not float or not math.isfinite(started):
            return
        if self.stale():
            # What it read at start changed: later one-shots run cold (and
            # leave a warm process that reads it again).
            log.info("the code or settings changed; the warm process ends")
            self.finish()
            return
        await stream.send(b"ok\n")
        captured = _Captured(lines)
        face = ZeneFace(self.args, captured)
        async with anyio.create_task_group() as writing:
            writing.start_soon(face.writer.run)
            try:
                code = await face.answer_warm(self.conversations, self.order, float(started))
            finally:
                face.writer.close()
        self.served += 1
        stdout = "".join(frame + "\n" for frame in captured.sent)
        stderr = ""
        if code != EXIT_OK:
            why = face.no_request or f"exit status {code}"
            stderr = f"appserver: {why} (the warm process's log: {log_path(self.path)})\n"
        await stream.send(answer_frame(code, stdout.encode(), stderr.encode()))
        with anyio.move_on_after(DRAIN_WAIT):
            while await read():
                pass


#: A file's stamp (:func:`appserver.startup.file_stamp`); ``None``: absent.
Stamp = FileStamp | None
# The code's stamp when it changed since the process was launched: never equal
# to a file's, so the first request finds the process stale.
CHANGED_DURING_START: Stamp = (-1, -1, -1)


def _settings_files(workspace: Path) -> list[Path]:
    """The settings a warm process reads once and a one-shot would read again:
    the user's for every workspace and for this one, the workspace's own config."""
    from appserver.storage.user_settings import user_home, workspace_home

    home = user_home()
    return [
        home / "config.json",
        workspace_home(workspace.resolve(), home) / "config.json",
        workspace / ".craft" / "config.json",
    ]


def _trust_record(workspace: Path) -> Path:
    """Where the user's trust in this workspace is recorded (storage/trust.py)."""
    from appserver.storage.trust import TRUST_FILE
    from appserver.storage.user_settings import user_home, workspace_home

    return workspace_home(workspace.resolve(), user_home()) / TRUST_FILE


def _code_stamp() -> dict[Path, Stamp]:
    """The appserver package's stamp (an upgrade in place rewrites it), or
    :data:`CHANGED_DURING_START` when it changed since this process was
    launched: its modules may then be half old, half new."""
    package = Path(appserver.__file__)
    stamp = file_stamp(str(package))
    at_launch = startup.package_at_launch
    if at_launch is not None and at_launch != stamp:
        stamp = CHANGED_DURING_START
    return {package: stamp}


def _stamps(files: list[Path]) -> dict[Path, Stamp]:
    """Each file's :data:`Stamp`."""
    return {path: file_stamp(str(path)) for path in files}


async def _header(lines: LineSource) -> dict[str, Any] | None:
    with anyio.move_on_after(HEADER_WAIT):
        try:
            header = loads_client(await lines.receive())  # bounded, as every door's input
        except (FrameRejected, TransportClosed, JsonRejected):
            return None
        if isinstance(header, dict) and header.get("v") == WIRE_VERSION:
            return header
    return None
