"""JSON frames, one a line: read from a byte stream (a face process's stdout,
a TCP connection), each checked as it arrives, with a deadline on every read;
and a process spoken to that way.

Every face test reads its face this way; the face's own check (its frame
schema) is what differs, so it is passed in.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

TIMEOUT = 20.0
Frame = dict[str, Any]


def json_object(line: bytes) -> Frame:
    """The plainest check: the line is one JSON object."""
    frame = json.loads(line)
    assert isinstance(frame, dict), line
    return frame


class JsonLines:
    """The frames of one byte stream, in order; ``seen`` keeps every one read."""

    def __init__(
        self,
        receive: Callable[[], Awaitable[bytes]],
        check: Callable[[bytes], Frame] = json_object,
        timeout: float = TIMEOUT,
        wait_timeout: float | None = None,
    ) -> None:
        """``check`` parses (and asserts on) one line; ``timeout`` bounds each
        frame's read, ``wait_timeout`` (if set) a whole ``until`` or ``rest``."""
        self._receive = receive
        self.check = check
        self.timeout = timeout
        self.wait_timeout = wait_timeout
        self._buffer = b""
        self.seen: list[Frame] = []
        self.bytes = 0  # received so far
        self.eof = False

    async def next(self, timeout: float | None = None) -> Frame:
        """The next frame. At the end of the stream: ``EOFError`` whose
        argument is the partial line left (``b""`` when there is none)."""
        with anyio.fail_after(self.timeout if timeout is None else timeout):
            while b"\n" not in self._buffer:
                try:
                    chunk = await self._receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                    self.eof = True
                    raise EOFError(self._buffer) from exc
                self.bytes += len(chunk)
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        frame = self.check(line)
        self.seen.append(frame)
        return frame

    async def until(
        self, predicate: Callable[[Frame], bool], timeout: float | None = None
    ) -> list[Frame]:
        """Frames up to and including the first ``predicate`` accepts."""
        with anyio.fail_after(self._wait(timeout)):
            found = []
            while True:
                frame = await self.next()
                found.append(frame)
                if predicate(frame):
                    return found

    async def rest(self, timeout: float | None = None) -> list[Frame]:
        """Every frame until the stream ends, which must not end mid-line."""
        with anyio.fail_after(self._wait(timeout)):
            found = []
            while True:
                try:
                    found.append(await self.next())
                except EOFError as exc:
                    assert exc.args[0] == b"", f"a partial line at the end: {exc.args[0]!r}"
                    return found

    def _wait(self, timeout: float | None) -> float | None:
        return self.wait_timeout if timeout is None else timeout


class JsonLinesProcess:
    """A process spoken to one JSON line at a time: lines to its stdin, checked
    frames from its stdout (``frames``: every one read so far)."""

    #: How a frame sent is encoded (``None``: json's default, with spaces).
    separators: tuple[str, str] | None = None

    def __init__(
        self,
        process: Process,
        check: Callable[[bytes], Frame] = json_object,
        timeout: float = TIMEOUT,
    ) -> None:
        assert process.stdout is not None
        self.process = process
        self.timeout = timeout
        self.lines = JsonLines(process.stdout.receive, check, timeout)
        self.frames = self.lines.seen

    async def send(self, message: Frame | str | bytes) -> None:
        """A frame or a text as one line; bytes exactly as given."""
        assert self.process.stdin is not None
        if isinstance(message, dict):
            data = json.dumps(message, separators=self.separators).encode() + b"\n"
        elif isinstance(message, str):
            data = message.encode() + b"\n"
        else:
            data = message
        await self.process.stdin.send(data)

    async def next(self) -> Frame:
        return await self.lines.next()

    async def until(self, predicate: Callable[[Frame], bool]) -> list[Frame]:
        """Frames up to and including the first matching one."""
        return await self.lines.until(predicate)

    async def close(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def finish(self) -> tuple[list[Frame], int]:
        """Close stdin; the rest of stdout and the exit code."""
        await self.close()
        rest = await self.lines.rest()
        with anyio.fail_after(self.timeout):
            code = await self.process.wait()
        return rest, code


@asynccontextmanager
async def piped_process(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    stderr_path: Path,
    stderr: Any = None,
    timeout: float = TIMEOUT,
) -> AsyncIterator[Process]:
    """``argv`` with pipes on stdin and stdout, stderr appended to ``stderr_path``
    (or to ``stderr``, e.g. ``subprocess.PIPE``); killed on the way out if it
    still runs."""
    with open(stderr_path, "ab") as log:
        process = await anyio.open_process(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else log,
        )
        async with process:
            try:
                yield process
            finally:
                if process.returncode is None:
                    process.kill()
                with anyio.fail_after(timeout):
                    await process.wait()
