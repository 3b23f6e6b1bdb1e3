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

This module is the manager: the limits, which terminals run, the operations
on them, what is stored and announced. One running terminal (its process and
output) is ``tools.terminal_process``; snapshots, ``tools.terminal_snapshots``.

Every terminal is stored (a :class:`TerminalStore`, the runtime's SQLite
repository) when it starts and when it ends. None outlives the server: while
one runs, its process group is known to the watchdog (``tools.reaper``), which
kills it if the server dies, even by SIGKILL; a clean shutdown stops them all
(``killed``). A terminal still stored as ``running`` that this server does not
run belonged to a server that went away: it is reported, and rewritten, as
``lost``; unless another live process sharing the database runs it
(:attr:`TerminalManager.elsewhere`): then it is reported as running, its
output read from the shared file, and writing to or stopping it is refused
here (its process and pipes are that process's).

Events (``started``, ``outputDelta``, ``completed``, ``cleaned``) go to one
listener, which knows nothing of processes; the runtime turns them into
notifications. (DotCraft also declares ``stalled``, but its service never
raises it; neither does this one.)
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio
from anyio.abc import TaskGroup

from appserver.tools.groups import KILL_GRACE_S, kill_process_group
from appserver.tools.reaper import REAPER
from appserver.tools.terminal_files import TerminalFiles
from appserver.tools.terminal_process import (
    DRAIN_GRACE_S,
    RunningTerminal,
    StartFailed,
    start_terminal,
)
from appserver.tools.terminal_snapshots import (
    DEFAULT_MAX_OUTPUT_CHARS,
    lost,
    shown_chars,
    stored_snapshot,
)

if TYPE_CHECKING:
    # The terminals' wire model loads with the first terminal (a plain turn runs none).
    from appserver.protocol.terminals import BackgroundTerminal

log = logging.getLogger("appserver.tools")

DEFAULT_YIELD_MS = 1000
MAX_YIELD_MS = 30_000
MAX_RUNNING_PER_THREAD = 16
MAX_RUNNING = 64
WRITE = "not_writable"  # the TerminalError kind of a write that cannot be done

TerminalListener = Callable[[str, "BackgroundTerminal", "str | None"], None]
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


async def _run_nowhere_else(_terminal: BackgroundTerminal) -> bool:
    return False


def _refuse_elsewhere(stored: BackgroundTerminal, doing: str, kind: str) -> None:
    """A terminal reported running that this server does not run is another
    process's (see ``TerminalManager.elsewhere``): only that process can touch it."""
    if stored.status == "running":
        raise TerminalError(
            f"Background terminal '{stored.session_id}' runs in another server process "
            f"sharing this workspace's database; {doing} it through a client of that process.",
            kind,
        )


def normalize_yield_ms(yield_ms: int | None) -> int:
    """DotCraft's rule: absent or not positive -> the default; at most :data:`MAX_YIELD_MS`."""
    if yield_ms is None or yield_ms <= 0:
        return DEFAULT_YIELD_MS
    return min(yield_ms, MAX_YIELD_MS)


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
        self._active: dict[str, RunningTerminal] = {}
        # Ended terminals whose process group still runs (session id -> pgid).
        self._leftovers: dict[str, int] = {}
        self._starting: list[str] = []  # thread ids of terminals being started
        self._tg: TaskGroup | None = None
        self._closing = False
        # Whether another live process sharing the database runs a terminal
        # stored as running (set by the server when there are such processes).
        self.elsewhere: Callable[[BackgroundTerminal], Awaitable[bool]] = _run_nowhere_else

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Own the terminals' tasks until cancelled; first rewrite lost terminals as ``lost``."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for stored in await self.store.running():
                    if stored.session_id not in self._active and not await self.elsewhere(stored):
                        await self.store.put(lost(stored))
                await anyio.sleep_forever()
        finally:
            self._tg = None

    async def shutdown(self) -> None:
        """Stop every running terminal (``killed``); no new one starts."""
        self._closing = True
        async with anyio.create_task_group() as tg:
            for terminal in list(self._active.values()):
                tg.start_soon(terminal.kill, self.kill_grace_s)
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
            try:
                terminal = await start_terminal(
                    self.files,
                    session_id=session_id,
                    thread_id=thread_id,
                    turn_id=turn_id,
                    call_id=call_id,
                    command=command,
                    cwd=cwd,
                    argv=argv,
                    env=env,
                    interactive=interactive,
                    start_in=start_in,
                )
            except StartFailed as exc:
                raise TerminalError(str(exc)) from exc.__cause__
            self._active[session_id] = terminal
        finally:
            self._starting.remove(thread_id)
        try:
            with anyio.CancelScope(shield=True):
                await self.store.put(terminal.snapshot(output=False))
        except Exception as exc:
            del self._active[session_id]
            await terminal.abandon(self.kill_grace_s)
            raise TerminalError(f"cannot record the terminal: {exc}") from exc
        # Announced before its output can be (the pump starts with _watch).
        self._emit("started", terminal.snapshot(shown_chars(max_output_chars)))
        tg.start_soon(self._watch, terminal)
        try:
            with anyio.move_on_after(normalize_yield_ms(yield_ms) / 1000):
                await terminal.done.wait()
        except anyio.get_cancelled_exc_class():
            # The call that started it was interrupted before it could say so: nobody
            # was told its session id, so it does not outlive the call.
            with anyio.CancelScope(shield=True):
                await terminal.kill(self.kill_grace_s)
            raise
        return terminal.snapshot(shown_chars(max_output_chars))

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
            return terminal.snapshot(shown_chars(max_output_chars))
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
            stored = await self._stored(session_id, max_output_chars, thread_id)  # not found?
            _refuse_elsewhere(stored, "write to", WRITE)
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
        return terminal.snapshot(shown_chars(max_output_chars))

    async def stop(self, session_id: str, *, thread_id: str | None = None) -> BackgroundTerminal:
        """Kill a running terminal and its process group (``killed``); an ended one as it is."""
        terminal = self._active.get(session_id)
        if terminal is None or thread_id not in (None, terminal.thread_id):
            stored = await self._stored(session_id, None, thread_id)
            _refuse_elsewhere(stored, "stop", "other")
            await self._kill_leftovers(session_id)
            return stored
        await terminal.kill(self.kill_grace_s)
        return terminal.snapshot(DEFAULT_MAX_OUTPUT_CHARS)

    async def clean(self, thread_id: str) -> list[BackgroundTerminal]:
        """Stop every running terminal of ``thread_id`` (``cleaned`` after each
        ``completed``); return all of the thread's terminals."""
        targets = [t for t in self._active.values() if t.thread_id == thread_id]
        for terminal in targets:
            await terminal.kill(self.kill_grace_s)
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
        return await self._with_output(stored, shown_chars(max_output_chars))

    async def _with_output(
        self, stored: BackgroundTerminal, max_output_chars: int | None
    ) -> BackgroundTerminal:
        runs = stored.session_id in self._active or (
            stored.status == "running" and await self.elsewhere(stored)
        )
        return await stored_snapshot(self.files, stored, max_output_chars, runs=runs)

    async def _kill_leftovers(self, session_id: str) -> None:
        """Kill what an ended terminal's command left running in its process
        group (``cmd &``); a process that left the group (``setsid``) escapes,
        as it would a terminal."""
        pgid = self._leftovers.pop(session_id, None)
        if pgid is not None and REAPER.lingers(pgid):  # not a group that emptied since
            await kill_process_group(pgid, self.kill_grace_s)
            REAPER.untrack(pgid)

    async def _watch(self, terminal: RunningTerminal) -> None:
        """Watch ``terminal`` to its end (its output goes out live), then store it."""
        assert self._tg is not None

        def output(delta: str) -> None:
            self._emit("outputDelta", terminal.snapshot(output=False), delta)

        async def end(leftovers: bool) -> None:
            if leftovers:
                # `dev-server &`: stop, clean and archive still end it.
                self._leftovers[terminal.session_id] = terminal.process.pid
            await self._finish(terminal)

        await terminal.watch(
            self._tg,
            drain_grace_s=self.drain_grace_s,
            kill_grace_s=self.kill_grace_s,
            on_output=output,
            on_end=end,
        )

    async def _finish(self, terminal: RunningTerminal) -> None:
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
