"""stdio transport: UTF-8 JSON lines, one message per line.

stdout carries protocol frames only. :func:`claim_stdio` moves the process's
own fd 1 to stderr (and fd 0 to /dev/null) so nothing else in the process or
its children can write into, or read from, the protocol stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import IO

from appserver.transport.base import PARSE_ERROR, FrameRejected, FrameTooLarge, TransportClosed
from appserver.transport.early import Answered, EarlyAnswer

log = logging.getLogger("appserver.transport")

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
_READ_CHUNK = 1 << 16
# What try_send lets wait for the pipe (asyncio's own high-water mark for it).
_HIGH_WATER = 1 << 16
# How long closing waits for a reader to take what is left (as a stuck write does).
CLOSE_DRAIN_SECONDS = 30.0


def claim_stdio() -> tuple[IO[bytes], IO[bytes]]:
    """Take stdin/stdout for the protocol; return private binary streams.

    Afterwards ``print`` and stray library output go to stderr, and child
    processes inherit /dev/null as stdin and stderr as stdout.
    """
    sys.stdout.flush()
    protocol_in = os.fdopen(os.dup(0), "rb", buffering=0)
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


class LineReader:
    """Splits a byte stream into lines, skipping (and reporting) over-long ones."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._scan = 0
        self._discarded = 0  # bytes thrown away of the current over-long line

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_line(self) -> bytes | None:
        """The next complete line, or ``None`` if more data is needed.

        Raises :class:`FrameTooLarge` once for each over-long line.
        """
        index = self._buf.find(b"\n", self._scan)
        if index < 0:
            if len(self._buf) > self.max_line_bytes:
                self._discarded += len(self._buf)
                self._buf.clear()
            self._scan = len(self._buf)
            return None
        line = bytes(self._buf[:index])
        del self._buf[: index + 1]
        self._scan = 0
        if self._discarded or len(line) > self.max_line_bytes:
            size = self._discarded + len(line)
            self._discarded = 0
            raise FrameTooLarge(size, self.max_line_bytes)
        return line

    def rest(self) -> bytes | None:
        """What is left at EOF (a final line without newline), if any.

        Raises :class:`FrameTooLarge` when that last line was too long: it is
        refused like any other, not mistaken for a quiet end of input.
        """
        if self._discarded:
            size = self._discarded + len(self._buf)
            self._discarded = 0
            self._buf.clear()
            raise FrameTooLarge(size, self.max_line_bytes)
        line = bytes(self._buf)
        self._buf.clear()
        return line if line.strip() else None


class LineSource:
    """The frames of a byte stream read with ``read`` (``b""`` at its end): one
    per non-blank line, a last line without newline included.

    ``receive`` raises :class:`FrameTooLarge` for an over-long line,
    :class:`FrameRejected` for one that is not UTF-8 and :class:`TransportClosed`
    at the end."""

    def __init__(self, read: Callable[[], Awaitable[bytes]], max_line_bytes: int) -> None:
        self._read = read
        self.lines = LineReader(max_line_bytes)
        self._eof = False

    async def receive(self) -> str:
        """The next frame."""
        while True:
            line = self.lines.next_line()
            if line is None:
                if self._eof:
                    rest = self.lines.rest()
                    if rest is None:
                        raise TransportClosed
                    return _decode(rest)
                data = await self._read()
                if not data:
                    self._eof = True
                else:
                    self.lines.feed(data)
                continue
            if line.strip():
                return _decode(line.rstrip(b"\r"))


def _decode(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameRejected(PARSE_ERROR, "Parse error", "message is not valid UTF-8") from exc


class _WriteProtocol(asyncio.Protocol):
    """Tracks pipe flow control so writers can wait for the peer to read."""

    def __init__(self) -> None:
        self._paused = False
        self._lost = False
        self._waiter: asyncio.Future[None] | None = None
        self.closed = asyncio.Event()  # the pipe is closed: everything written is out

    @property
    def paused(self) -> bool:
        return self._paused or self._lost

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake()
        self.closed.set()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._waiter = None

    async def drain(self) -> None:
        while self._paused and not self._lost:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self._lost:
            raise TransportClosed


class StdioTransport:
    """JSON lines over a pair of byte streams (normally the process's stdio)."""

    kind = "stdio"
    peer = "stdio"  # who is at the other end, for the logs

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.WriteTransport | None,
        protocol: _WriteProtocol | None,
        raw_out: IO[bytes],
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        early: EarlyAnswer | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._protocol = protocol
        self._raw_out = raw_out
        self._source = LineSource(lambda: reader.read(_READ_CHUNK), max_message_bytes)
        self._pending: list[str] = []  # accepted by try_send, written at the loop's next turn
        self._pending_size = 0  # their bytes (about: characters), newlines included
        # The answer already written to the first line (see appserver/transport/early.py):
        # the door's own answer to it, its first frame, is not written again.
        self._answered = Answered(early)
        if early is not None:
            self._source.lines.feed(early.read)

    @classmethod
    async def open(
        cls,
        stdin: IO[bytes],
        stdout: IO[bytes],
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        early: EarlyAnswer | None = None,
    ) -> StdioTransport:
        """Wrap binary streams; pipes and sockets are read without threads.
        ``early``: what was read from ``stdin`` and answered before (it is read
        first, and the door's answer to it is not written twice)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_READ_CHUNK * 4)
        try:
            if not _pollable(stdin):
                raise ValueError("not a pipe or socket")
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        except (ValueError, OSError):
            # A regular file or a character device (a tty, /dev/null): feed the
            # reader from a thread.
            _start_thread_reader(loop, reader, stdin)
        writer: asyncio.WriteTransport | None = None
        protocol: _WriteProtocol | None = None
        # Anything but a pipe or socket (a regular file, /dev/null, a tty) can't be
        # a pipe transport: plain blocking writes are fine.
        if _pollable(stdout):
            with contextlib.suppress(ValueError, OSError):
                writer, protocol = await loop.connect_write_pipe(_WriteProtocol, stdout)
        return cls(reader, writer, protocol, stdout, max_message_bytes, early)

    async def receive(self) -> str:
        return await self._source.receive()

    async def send_batch(self, frames: list[str]) -> None:
        if self._answered.answer is not None:
            frames = self._answered.drop(frames)
            if not frames:
                return
        data = ("\n".join(frames) + "\n").encode("utf-8")
        if self._writer is None or self._protocol is None:
            try:
                self._raw_out.write(data)
                self._raw_out.flush()
            except (OSError, ValueError) as exc:
                raise TransportClosed from exc
            return
        if self._writer.is_closing():
            raise TransportClosed
        self._flush()  # frames accepted by try_send go first
        self._writer.write(data)
        # Respect pipe backpressure: wait while the peer is not reading.
        await self._protocol.drain()

    def try_send(self, frame: str) -> bool:
        if self._answered.answer is not None and not self._answered.drop([frame]):
            return True  # the answer written early: not written again
        writer, protocol = self._writer, self._protocol
        if writer is None or protocol is None or protocol.paused or writer.is_closing():
            return False
        # Taken only while what waits to be written stays under the pipe's
        # high-water mark: a burst of frames in one loop iteration (a replayed
        # history) goes on to the caller's bounded queue, whose limit and
        # stall check then apply, rather than piling up here unbounded.
        size = len(frame) + 1
        if self._pending_size + size + writer.get_write_buffer_size() > _HIGH_WATER:
            return False
        # Frames accepted in one event-loop iteration leave in one write at its
        # end: pipelined answers cost one syscall, not one each, and a single
        # answer is not delayed.
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(frame)
        self._pending_size += size
        return True

    def _flush(self) -> None:
        if not self._pending or self._writer is None:
            return
        data = ("\n".join(self._pending) + "\n").encode("utf-8")
        self._pending.clear()
        self._pending_size = 0
        if not self._writer.is_closing():
            self._writer.write(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Write what is left and close the pipe. A normal close (``code``
        1000 or 1001) waits, at most ``CLOSE_DRAIN_SECONDS``, until the reader
        has taken it, so a process that exits next does not lose the end of
        its last answer; any other code (a client dropped for not reading)
        does not wait."""
        self._flush()
        writer, protocol = self._writer, self._protocol
        if writer is None or protocol is None or writer.is_closing():
            return
        writer.close()  # the pipe closes once its buffer is written
        if code in (1000, 1001):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(protocol.closed.wait(), CLOSE_DRAIN_SECONDS)


def _pollable(stream: IO[bytes]) -> bool:
    """Whether the event loop can watch ``stream``: a pipe or a socket.

    asyncio also accepts character devices, but epoll refuses some of them
    (``/dev/null``: EPERM) only later, inside the loop, and the read then never
    happens: those are read from a thread instead.
    """
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _start_thread_reader(
    loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, stream: IO[bytes]
) -> None:
    def pump() -> None:
        try:
            while chunk := stream.read(_READ_CHUNK):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except (OSError, ValueError):
            pass
        finally:
            loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="stdin-reader", daemon=True).start()
