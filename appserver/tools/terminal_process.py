"""One background terminal this server runs: its process, its output, its end.

:func:`start_terminal` creates its output file and starts its process in a
session and process group of its own, known to the watchdog from then on. A
:class:`RunningTerminal` holds the process, the output file it writes to, the
tail of its output kept in memory (:class:`OutputTail`) and how much may still
go out live. :meth:`RunningTerminal.watch` reads its output until nothing
holds the pipe and waits for it to exit; :meth:`RunningTerminal.kill` stops
its process group. What the terminal means to the workspace (the limits, the
store, the events) is the manager's (:mod:`appserver.tools.terminals`).
"""

from __future__ import annotations

import codecs
import contextlib
import subprocess
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import anyio
from anyio.abc import Process, TaskGroup

from appserver.protocol.ids import now_iso
from appserver.tools.groups import kill_process_group, open_group_process
from appserver.tools.reaper import REAPER
from appserver.tools.terminal_files import KEPT_CHARS, TerminalFiles
from appserver.tools.terminal_snapshots import DEFAULT_MAX_OUTPUT_CHARS, limit_output

if TYPE_CHECKING:
    # The terminals' wire model loads with the first terminal (a plain turn runs none).
    from appserver.protocol.terminals import BackgroundTerminal

LIVE_LIMIT_CHARS = 1024 * 1024  # outputDelta text per terminal; the file keeps the rest
DRAIN_GRACE_S = 0.5
BACKGROUND_REASON = "runInBackground"


class StartFailed(Exception):
    """A terminal could not start; the message says why."""


class OutputTail:
    """The last :data:`KEPT_CHARS` characters of a stream, and how many there were."""

    def __init__(self) -> None:
        self._chunks: deque[str] = deque()
        self._kept = 0
        self.total = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        self._chunks.append(text)
        self._kept += len(text)
        while self._kept - len(self._chunks[0]) >= KEPT_CHARS:
            self._kept -= len(self._chunks.popleft())

    def trailing_newlines(self) -> int:
        """How many ``\r``/``\n`` end the kept text (not counted as output)."""
        count = 0
        for chunk in reversed(self._chunks):
            stripped = chunk.rstrip("\r\n")
            count += len(chunk) - len(stripped)
            if stripped:
                break
        return count

    def text(self) -> str:
        joined = "".join(self._chunks)
        return joined[len(joined) - KEPT_CHARS :] if len(joined) > KEPT_CHARS else joined


@dataclass(eq=False)
class RunningTerminal:
    """A terminal this server runs (until its end is stored)."""

    session_id: str
    thread_id: str
    turn_id: str | None
    call_id: str | None
    command: str
    working_directory: str
    output_path: Path
    process: Process
    log_file: IO[str]
    started_at: str = field(default_factory=now_iso)
    started: float = field(default_factory=time.monotonic)
    status: str = "running"
    exit_code: int | None = None
    completed_at: str | None = None
    ended: float | None = None
    kill_status: str | None = None  # set when we kill it: the status it ends with
    live_left: int = LIVE_LIMIT_CHARS
    tail: OutputTail = field(default_factory=OutputTail)
    done: anyio.Event = field(default_factory=anyio.Event)

    def snapshot(
        self, max_output_chars: int | None = DEFAULT_MAX_OUTPUT_CHARS, *, output: bool = True
    ) -> BackgroundTerminal:
        """The terminal now; without ``output``, its facts only (what is stored)."""
        if output:
            shown, total, truncated = limit_output(
                self.tail.text(), self.tail.total, max_output_chars
            )
        else:
            shown, total, truncated = "", self.tail.total - self.tail.trailing_newlines(), False
        ended = self.ended if self.ended is not None else time.monotonic()
        from appserver.protocol.terminals import BackgroundTerminal

        return BackgroundTerminal(
            session_id=self.session_id,
            thread_id=self.thread_id,
            turn_id=self.turn_id,
            call_id=self.call_id,
            command=self.command,
            working_directory=self.working_directory,
            source="host",
            status=self.status,
            output=shown,
            output_path=str(self.output_path),
            exit_code=None if self.status == "running" else self.exit_code,
            started_at=self.started_at,
            completed_at=self.completed_at,
            wall_time_ms=max(0, int((ended - self.started) * 1000)),
            original_output_chars=total,
            truncated=truncated,
            background_reason=BACKGROUND_REASON,
        )

    def take_output(self, text: str) -> str:
        """Write ``text`` to the output file and the tail; return what of it
        goes out live (empty once :data:`LIVE_LIMIT_CHARS` went out)."""
        if not text:
            return ""
        try:
            self.log_file.write(text)
            self.log_file.flush()
        except (OSError, ValueError):
            pass  # a full disk must not stop the terminal; the tail is still kept
        self.tail.add(text)
        if self.live_left <= 0:
            return ""
        delta = text[: self.live_left]
        self.live_left -= len(delta)
        return delta

    async def abandon(self, grace_s: float) -> None:
        """Kill it before it was ever watched (it could not be recorded)."""
        with anyio.CancelScope(shield=True):
            await kill_process_group(self.process.pid, grace_s)
            REAPER.untrack(self.process.pid)
            await self.process.aclose()
        self.log_file.close()

    async def kill(self, grace_s: float) -> None:
        """Kill its process group (it ends ``killed``) and wait for its end to be stored."""
        # One that already exited (its output still draining) ended by itself.
        if (
            self.status == "running"
            and self.kill_status is None
            and self.process.returncode is None
        ):
            self.kill_status = "killed"
            await kill_process_group(self.process.pid, grace_s)
        await self.done.wait()

    async def watch(
        self,
        task_group: TaskGroup,
        *,
        drain_grace_s: float,
        kill_grace_s: float,
        on_output: Callable[[str], None],
        on_end: Callable[[bool], Awaitable[None]],
    ) -> None:
        """Wait until the command exits (and its output drained a moment), then
        set how it ended and call ``on_end(leftovers)``: whether its process group
        still runs. ``on_output`` gets each piece of output that goes out live.

        The output is read by its own task in ``task_group``, as long as anything
        holds the pipe: processes the command left running (`dev-server &`) keep
        writing to the log instead of dying of SIGPIPE."""
        process = self.process
        stdout = process.stdout
        assert stdout is not None
        drained = anyio.Event()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def take(text: str) -> None:
            delta = self.take_output(text)
            if delta:
                on_output(delta)

        async def pump() -> None:
            try:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    async for chunk in stdout:
                        take(decoder.decode(chunk))
                take(decoder.decode(b"", final=True))
            finally:
                drained.set()
                # Nothing holds the pipe any more (or the server is stopping).
                with anyio.CancelScope(shield=True):
                    with contextlib.suppress(Exception):
                        await process.aclose()
                    with contextlib.suppress(OSError):
                        self.log_file.close()

        task_group.start_soon(pump)
        exit_code: int | None = None
        try:
            exit_code = await process.wait()
            # Output written just before the exit may still be in the pipe.
            with anyio.move_on_after(drain_grace_s):
                await drained.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if exit_code is None:  # the server is going away mid-run
                    self.kill_status = self.kill_status or "killed"
                    await kill_process_group(process.pid, kill_grace_s)
                leftovers = False
                if self.kill_status is not None:
                    REAPER.untrack(process.pid)
                else:
                    REAPER.finished(process.pid)  # still watched while leftovers run
                    leftovers = REAPER.lingers(process.pid)
                self._end(exit_code)
                await on_end(leftovers)

    def _end(self, exit_code: int | None) -> None:
        if self.kill_status is not None:
            self.status, self.exit_code = self.kill_status, None
        else:
            self.status = "completed" if exit_code == 0 else "failed"
            self.exit_code = exit_code
        self.completed_at = now_iso()
        self.ended = time.monotonic()


async def start_terminal(
    files: TerminalFiles,
    *,
    session_id: str,
    thread_id: str,
    turn_id: str | None,
    call_id: str | None,
    command: str,
    cwd: Path,
    argv: list[str],
    env: Mapping[str, str],
    interactive: bool,
    start_in: str | None,
) -> RunningTerminal:
    """Create the terminal's output file and start ``argv`` in ``start_in`` (or
    ``cwd``); raises :class:`StartFailed`."""
    output_path = files.path_of(thread_id, session_id)
    try:
        log_file = files.create(thread_id, session_id)  # closed by watch()
    except OSError as exc:
        raise StartFailed(f"cannot create the output file {output_path}: {exc}") from exc
    try:
        # Own session and process group: stopping it kills everything it started.
        process = await open_group_process(
            argv,
            stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=start_in or cwd,
            env=dict(env),
        )
    except OSError as exc:
        log_file.close()
        raise StartFailed(f"failed to start the command: {exc}") from exc
    REAPER.track(process.pid)  # from now on it dies with the server
    return RunningTerminal(
        session_id=session_id,
        thread_id=thread_id,
        turn_id=turn_id,
        call_id=call_id,
        command=command,
        working_directory=str(cwd),
        output_path=output_path,
        process=process,
        log_file=log_file,
    )
