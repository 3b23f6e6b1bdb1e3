"""Background terminals: commands that outlive the tool call that started them.

The ``shell`` tool's ``run_in_background`` starts a command here (DotCraft's
``BackgroundTerminalService``): it runs with ``bash -c`` in its own session and
process group, its merged stdout and stderr go to a file under
``.craft/terminals/<thread>/<sessionId>.log`` and, live, to the listener
(``terminal/outputDelta``), and the call returns after ``yield_time_ms`` with
a snapshot: the session id and the output so far. Later the model (the
``write_stdin`` and ``stop_terminal`` tools) and clients (``terminal/*``)
read it, write to its standard input (``interactive`` keeps it open; a pipe,
not a PTY), stop it, or stop every terminal of a thread.

Snapshots follow DotCraft's truncation rule: ``output`` is the last
``max_output_chars`` characters (trailing newlines dropped), after a
``... (truncated, N earlier chars)`` line when cut; ``originalOutputChars``
counts all of it; ``truncated`` says whether something was left out.

Every terminal is stored (a :class:`TerminalStore`, the runtime's SQLite
repository) when it starts and when it ends. None outlives the server: while
one runs, its process group is known to the watchdog (``tools.reaper``), which
kills it if the server dies, even by SIGKILL; a clean shutdown stops them all
(``killed``). A terminal still stored as ``running`` that this server does not
run belonged to a server that went away: it is reported, and rewritten, as
``lost``.

Events (``started``, ``outputDelta``, ``completed``, ``cleaned``) go to one
listener, which knows nothing of processes; the runtime turns them into
notifications. (DotCraft also declares ``stalled``, but its service never
raises it; neither does this one.)
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import subprocess
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Protocol

import anyio
from anyio.abc import Process, TaskGroup

from appserver.protocol.ids import now_iso
from appserver.protocol.terminals import BackgroundTerminal
from appserver.tools.groups import KILL_GRACE_S, kill_process_group
from appserver.tools.reaper import REAPER, group_alive
from appserver.tools.terminal_files import KEPT_CHARS, TerminalFiles

log = logging.getLogger("appserver.tools")

DEFAULT_YIELD_MS = 1000
MAX_YIELD_MS = 30_000
DEFAULT_MAX_OUTPUT_CHARS = 10_000
LIVE_LIMIT_CHARS = 1024 * 1024  # outputDelta text per terminal; the file keeps the rest
MAX_RUNNING_PER_THREAD = 16
MAX_RUNNING = 64
DRAIN_GRACE_S = 0.5
BACKGROUND_REASON = "runInBackground"
WRITE = "not_writable"  # the TerminalError kind of a write that cannot be done

TerminalListener = Callable[[str, BackgroundTerminal, "str | None"], None]
"""``(event, terminal, delta)``: ``started``, ``outputDelta``, ``completed`` or ``cleaned``."""


class TerminalError(Exception):
    """An unknown terminal (``not_found``), one that cannot take input
    (``not_writable``), or one that cannot start (``other``)."""

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind


class TerminalStore(Protocol):
    """Where terminals are kept (``storage.terminals.TerminalRepository``)."""

    async def put(self, terminal: BackgroundTerminal) -> None:
        """Store ``terminal`` (without its output), replacing an earlier state."""
        ...

    async def get(self, session_id: str) -> BackgroundTerminal | None:
        """The stored terminal, or ``None``."""
        ...

    async def list_terminals(self, thread_id: str | None = None) -> list[BackgroundTerminal]:
        """Stored terminals (of ``thread_id``), newest first."""
        ...

    async def running(self) -> list[BackgroundTerminal]:
        """Terminals stored as ``running``."""
        ...


def limit_output(raw: str, total: int, max_chars: int | None) -> tuple[str, int, bool]:
    """``(output, originalOutputChars, truncated)`` of ``raw``, the kept tail of
    ``total`` characters of output, shown up to ``max_chars`` (DotCraft's rule)."""
    text = raw.rstrip("\r\n")
    total = max(0, total - (len(raw) - len(text)))
    limit = KEPT_CHARS
    if max_chars is not None and max_chars > 0:
        limit = min(max_chars, KEPT_CHARS)
    shown = text[len(text) - limit :] if len(text) > limit else text
    omitted = total - len(shown)
    if omitted > 0:
        return f"... (truncated, {omitted} earlier chars)\n{shown}", total, True
    return shown or "(no output)", total, False


def normalize_yield_ms(yield_ms: int | None) -> int:
    """DotCraft's rule: absent or not positive -> the default; at most :data:`MAX_YIELD_MS`."""
    if yield_ms is None or yield_ms <= 0:
        return DEFAULT_YIELD_MS
    return min(yield_ms, MAX_YIELD_MS)


def _elapsed_ms(started_at: str, ended_at: str | None) -> int:
    try:
        start = datetime.fromisoformat(started_at)
        end = datetime.fromisoformat(ended_at or now_iso())
    except ValueError:
        return 0
    return max(0, int((end - start).total_seconds() * 1000))


class _Tail:
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
class _Running:
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
    tail: _Tail = field(default_factory=_Tail)
    done: anyio.Event = field(default_factory=anyio.Event)

    def snapshot(
        self, max_output_chars: int | None = DEFAULT_MAX_OUTPUT_CHARS, *, output: bool = True
    ) -> BackgroundTerminal:
        if output:
            shown, total, truncated = limit_output(
                self.tail.text(), self.tail.total, max_output_chars
            )
        else:
            shown, total, truncated = "", self.tail.total - self.tail.trailing_newlines(), False
        ended = self.ended if self.ended is not None else time.monotonic()
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


class TerminalManager:
    """The background terminals of one workspace (run :meth:`run` for the server's life)."""

    def __init__(
        self,
        root: Path,
        store: TerminalStore,
        listener: TerminalListener | None = None,
        *,
        kill_grace_s: float = KILL_GRACE_S,
        drain_grace_s: float = DRAIN_GRACE_S,
    ) -> None:
        self.root = root
        self.files = TerminalFiles(root)
        self.store = store
        self.listener = listener
        self.kill_grace_s = kill_grace_s
        self.drain_grace_s = drain_grace_s
        self._active: dict[str, _Running] = {}
        # Ended terminals whose process group still runs (session id -> pgid).
        self._leftovers: dict[str, int] = {}
        self._starting: list[str] = []  # thread ids of terminals being started
        self._tg: TaskGroup | None = None
        self._closing = False

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Own the terminals' tasks until cancelled; first rewrite lost terminals as ``lost``."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for stored in await self.store.running():
                    if stored.session_id not in self._active:
                        await self.store.put(self._lost(stored))
                await anyio.sleep_forever()
        finally:
            self._tg = None

    async def shutdown(self) -> None:
        """Stop every running terminal (``killed``); no new one starts."""
        self._closing = True
        async with anyio.create_task_group() as tg:
            for terminal in list(self._active.values()):
                tg.start_soon(self._kill, terminal)
            for session_id in list(self._leftovers):
                tg.start_soon(self._kill_leftovers, session_id)

    # -- operations -------------------------------------------------------------------------

    async def start(
        self,
        *,
        thread_id: str,
        turn_id: str | None,
        call_id: str | None,
        command: str,
        cwd: Path,
        argv: list[str],
        env: Mapping[str, str],
        interactive: bool = False,
        yield_ms: int | None = None,
        max_output_chars: int | None = None,
        start_in: str | None = None,
    ) -> BackgroundTerminal:
        """Start ``argv`` (``bash -c command``) in the background; return after
        ``yield_ms`` (or once it ends, if sooner) with its snapshot.

        ``start_in``: where the process starts if not ``cwd`` by name (the
        shell passes its opened working directory, ``/proc/self/fd/N``);
        ``cwd`` is what the terminal reports."""
        tg = self._tg
        if tg is None or self._closing:
            raise TerminalError(
                "background terminals are not running (the server is starting or stopping)"
            )
        # Terminals being started count too: concurrent turns must not pass the limits.
        running = [t.thread_id for t in self._active.values()] + self._starting
        if running.count(thread_id) >= MAX_RUNNING_PER_THREAD:
            raise TerminalError(
                f"this thread already runs {MAX_RUNNING_PER_THREAD} background terminals; "
                "stop one first"
            )
        if len(running) >= MAX_RUNNING:
            raise TerminalError(f"the workspace already runs {MAX_RUNNING} background terminals")
        self._starting.append(thread_id)  # counted until it is in _active (or failed)
        try:
            session_id = "term_" + uuid.uuid4().hex[:12]
            output_path = self.files.path_of(thread_id, session_id)
            try:
                log_file = self.files.create(thread_id, session_id)  # closed by _watch
            except OSError as exc:
                raise TerminalError(f"cannot create the output file {output_path}: {exc}") from exc
            try:
                # Own session and process group: stopping it kills everything it started.
                process = await anyio.open_process(
                    argv,
                    stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    cwd=start_in or cwd,
                    env=dict(env),
                    start_new_session=True,
                )
            except OSError as exc:
                log_file.close()
                raise TerminalError(f"failed to start the command: {exc}") from exc
            REAPER.track(process.pid)  # from now on it dies with the server
            terminal = _Running(
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
            self._active[session_id] = terminal
        finally:
            self._starting.remove(thread_id)
        try:
            with anyio.CancelScope(shield=True):
                await self.store.put(terminal.snapshot(output=False))
        except Exception as exc:
            del self._active[session_id]
            with anyio.CancelScope(shield=True):
                await kill_process_group(process.pid, self.kill_grace_s)
                REAPER.untrack(process.pid)
                await process.aclose()
            log_file.close()
            raise TerminalError(f"cannot record the terminal: {exc}") from exc
        # Announced before its output can be (the pump starts with _watch).
        self._emit("started", terminal.snapshot(_max(max_output_chars)))
        tg.start_soon(self._watch, terminal)
        try:
            with anyio.move_on_after(normalize_yield_ms(yield_ms) / 1000):
                await terminal.done.wait()
        except anyio.get_cancelled_exc_class():
            # The call that started it was interrupted before it could say so: nobody
            # was told its session id, so it does not outlive the call.
            with anyio.CancelScope(shield=True):
                await self._kill(terminal)
            raise
        return terminal.snapshot(_max(max_output_chars))

    async def read(
        self,
        session_id: str,
        wait_ms: int = 0,
        max_output_chars: int | None = None,
        *,
        thread_id: str | None = None,
    ) -> BackgroundTerminal:
        """The terminal now; with ``wait_ms``, after waiting up to that long for it to end."""
        terminal = self._active.get(session_id)
        if terminal is not None and thread_id in (None, terminal.thread_id):
            if wait_ms > 0:
                with anyio.move_on_after(min(wait_ms, MAX_YIELD_MS) / 1000):
                    await terminal.done.wait()
            return terminal.snapshot(_max(max_output_chars))
        return await self._stored(session_id, max_output_chars, thread_id)

    async def write(
        self,
        session_id: str,
        text: str,
        yield_ms: int | None = DEFAULT_YIELD_MS,
        max_output_chars: int | None = None,
        *,
        thread_id: str | None = None,
    ) -> BackgroundTerminal:
        """Write ``text`` to a running terminal's standard input (empty: only poll),
        then wait ``yield_ms`` (less if it ends) and return its snapshot."""
        terminal = self._active.get(session_id)
        if terminal is None or thread_id not in (None, terminal.thread_id):
            await self._stored(session_id, max_output_chars, thread_id)  # not found?
            raise TerminalError(f"Background terminal '{session_id}' is not running.", WRITE)
        if text:
            stdin = terminal.process.stdin
            if stdin is None:
                raise TerminalError(
                    f"Background terminal '{session_id}' was not started with interactive; "
                    "its standard input is closed.",
                    WRITE,
                )
            if terminal.status != "running":
                raise TerminalError(f"Background terminal '{session_id}' is not running.", WRITE)
            try:
                with anyio.fail_after(5):
                    await stdin.send(text.encode())
            except TimeoutError:
                raise TerminalError(
                    f"Background terminal '{session_id}' does not read its standard input.", WRITE
                ) from None
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                raise TerminalError(
                    f"Background terminal '{session_id}' closed its standard input.", WRITE
                ) from None
        with anyio.move_on_after(normalize_yield_ms(yield_ms) / 1000):
            await terminal.done.wait()
        return terminal.snapshot(_max(max_output_chars))

    async def stop(self, session_id: str, *, thread_id: str | None = None) -> BackgroundTerminal:
        """Kill a running terminal and its process group (``killed``); an ended one as it is."""
        terminal = self._active.get(session_id)
        if terminal is None or thread_id not in (None, terminal.thread_id):
            stored = await self._stored(session_id, None, thread_id)
            await self._kill_leftovers(session_id)
            return stored
        await self._kill(terminal)
        return terminal.snapshot(DEFAULT_MAX_OUTPUT_CHARS)

    async def clean(self, thread_id: str) -> list[BackgroundTerminal]:
        """Stop every running terminal of ``thread_id`` (``cleaned`` after each
        ``completed``); return all of the thread's terminals."""
        targets = [t for t in self._active.values() if t.thread_id == thread_id]
        for terminal in targets:
            await self._kill(terminal)
            self._emit("cleaned", terminal.snapshot(DEFAULT_MAX_OUTPUT_CHARS))
        terminals = await self.list(thread_id)
        for ended in terminals:
            await self._kill_leftovers(ended.session_id)
        return terminals

    async def thread_closing(self, thread_id: str, deleted: bool) -> None:
        """The thread is archived (its terminals stop) or deleted (and its output
        files go too; its records go with the thread)."""
        await self.clean(thread_id)
        if deleted:
            await anyio.to_thread.run_sync(self.files.remove_thread, thread_id)

    async def list(self, thread_id: str | None = None) -> list[BackgroundTerminal]:
        """Every terminal (of ``thread_id``), newest first."""
        found = []
        for stored in await self.store.list_terminals(thread_id):
            terminal = self._active.get(stored.session_id)
            if terminal is not None:
                found.append(terminal.snapshot(DEFAULT_MAX_OUTPUT_CHARS))
            else:
                found.append(await self._with_output(stored, DEFAULT_MAX_OUTPUT_CHARS))
        return found

    def thread_of(self, session_id: str) -> str | None:
        """The thread of a terminal this server runs."""
        terminal = self._active.get(session_id)
        return terminal.thread_id if terminal is not None else None

    def input_target(self, session_id: str, *, thread_id: str) -> tuple[str, str] | None:
        """``(command, working directory)`` of a running terminal of ``thread_id``
        whose standard input is open (``interactive``); ``None`` for any other
        (a write to it fails, so there is nothing to approve)."""
        terminal = self._active.get(session_id)
        if terminal is None or terminal.thread_id != thread_id:
            return None
        if terminal.process.stdin is None or terminal.status != "running":
            return None
        return terminal.command, terminal.working_directory

    # -- internals --------------------------------------------------------------------------

    async def _stored(
        self, session_id: str, max_output_chars: int | None, thread_id: str | None
    ) -> BackgroundTerminal:
        stored = await self.store.get(session_id)
        if stored is None or thread_id not in (None, stored.thread_id):
            raise TerminalError(f"Background terminal '{session_id}' was not found.", "not_found")
        return await self._with_output(stored, _max(max_output_chars))

    async def _with_output(
        self, stored: BackgroundTerminal, max_output_chars: int | None
    ) -> BackgroundTerminal:
        if stored.status == "running" and stored.session_id not in self._active:
            stored = self._lost(stored)
        counted = None if stored.status == "lost" else stored.original_output_chars
        # The file is found from the ids: a stored outputPath is never opened.
        raw, total = await anyio.to_thread.run_sync(
            self.files.read_tail, stored.thread_id, stored.session_id, counted
        )
        output, total, truncated = limit_output(raw, total, max_output_chars)
        update = {
            "output": output,
            "original_output_chars": total,
            "truncated": truncated,
            "output_path": str(self.files.path_of(stored.thread_id, stored.session_id)),
        }
        if stored.completed_at is None:
            update["wall_time_ms"] = _elapsed_ms(stored.started_at, None)
        return stored.model_copy(update=update)

    @staticmethod
    def _lost(stored: BackgroundTerminal) -> BackgroundTerminal:
        completed_at = stored.completed_at or now_iso()
        return stored.model_copy(
            update={
                "status": "lost",
                "completed_at": completed_at,
                "wall_time_ms": _elapsed_ms(stored.started_at, completed_at),
            }
        )

    async def _kill_leftovers(self, session_id: str) -> None:
        """Kill what an ended terminal's command left running in its process
        group (``cmd &``); a process that left the group (``setsid``) escapes,
        as it would a terminal."""
        pgid = self._leftovers.pop(session_id, None)
        if pgid is not None and group_alive(pgid):
            await kill_process_group(pgid, self.kill_grace_s)
            REAPER.untrack(pgid)

    async def _kill(self, terminal: _Running) -> None:
        # One that already exited (its output still draining) ended by itself.
        if (
            terminal.status == "running"
            and terminal.kill_status is None
            and terminal.process.returncode is None
        ):
            terminal.kill_status = "killed"
            await kill_process_group(terminal.process.pid, self.kill_grace_s)
        await terminal.done.wait()

    async def _watch(self, terminal: _Running) -> None:
        """Wait until the command exits (and its output drained a moment), then store
        its end. The output is read by its own task in the manager's task group, as
        long as anything holds the pipe: processes the command left running
        (`dev-server &`) keep writing to the log instead of dying of SIGPIPE."""
        process = terminal.process
        stdout = process.stdout
        assert stdout is not None and self._tg is not None
        drained = anyio.Event()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        async def pump() -> None:
            try:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    async for chunk in stdout:
                        self._append(terminal, decoder.decode(chunk))
                self._append(terminal, decoder.decode(b"", final=True))
            finally:
                drained.set()
                # Nothing holds the pipe any more (or the server is stopping).
                with anyio.CancelScope(shield=True):
                    with contextlib.suppress(Exception):
                        await process.aclose()
                    with contextlib.suppress(OSError):
                        terminal.log_file.close()

        self._tg.start_soon(pump)
        exit_code: int | None = None
        try:
            exit_code = await process.wait()
            # Output written just before the exit may still be in the pipe.
            with anyio.move_on_after(self.drain_grace_s):
                await drained.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if exit_code is None:  # the server is going away mid-run
                    terminal.kill_status = terminal.kill_status or "killed"
                    await kill_process_group(process.pid, self.kill_grace_s)
                if terminal.kill_status is not None:
                    REAPER.untrack(process.pid)
                else:
                    REAPER.finished(process.pid)  # still watched while leftovers run
                    if group_alive(process.pid):
                        # `dev-server &`: stop, clean and archive still end it.
                        self._leftovers[terminal.session_id] = process.pid
                await self._finish(terminal, exit_code)

    def _append(self, terminal: _Running, text: str) -> None:
        if not text:
            return
        try:
            terminal.log_file.write(text)
            terminal.log_file.flush()
        except (OSError, ValueError):
            pass  # a full disk must not stop the terminal; the tail is still kept
        terminal.tail.add(text)
        if terminal.live_left <= 0:
            return
        delta = text[: terminal.live_left]
        terminal.live_left -= len(delta)
        self._emit("outputDelta", terminal.snapshot(output=False), delta)

    async def _finish(self, terminal: _Running, exit_code: int | None) -> None:
        if terminal.kill_status is not None:
            terminal.status, terminal.exit_code = terminal.kill_status, None
        else:
            terminal.status = "completed" if exit_code == 0 else "failed"
            terminal.exit_code = exit_code
        terminal.completed_at = now_iso()
        terminal.ended = time.monotonic()
        try:
            await self.store.put(terminal.snapshot(output=False))
        except Exception:
            log.warning("cannot store the end of background terminal %s", terminal.session_id)
        self._active.pop(terminal.session_id, None)
        self._emit("completed", terminal.snapshot(DEFAULT_MAX_OUTPUT_CHARS))
        terminal.done.set()

    def _emit(self, event: str, terminal: BackgroundTerminal, delta: str | None = None) -> None:
        if self.listener is None:
            return
        try:
            self.listener(event, terminal, delta)
        except Exception:  # listeners must not affect process management
            log.exception("terminal listener failed on %s", event)


def _max(max_output_chars: int | None) -> int:
    """A caller's ``maxOutputChars``: absent -> the default (0: all that is kept)."""
    return DEFAULT_MAX_OUTPUT_CHARS if max_output_chars is None else max_output_chars
