"""Tool processes die with the server, even when the server is killed with -9.

Shell commands run in their own process groups (so a timeout or an
interrupt can kill everything they started). The flip side: when the server
dies without cleaning up, those groups would go on under PID 1 and could
still change the workspace after their turn was marked failed.

A parent-death signal would only reach a command's first process, not what
it started. Instead, the first command the server runs starts one small
watchdog process (this file, run as a script) in a session of its own. The
server tells it over a pipe which process groups are running (``+PGID`` /
``-PGID`` lines). The pipe's write end lives only in the server, so when the
server process exits for any reason the watchdog reads end-of-file and
SIGKILLs every group still on its list, then exits. After a clean stop the
list is empty: the server ended its commands itself. There is one watchdog
per process (:data:`REAPER`), shared by every server object in it.

The watchdog imports nothing but the standard library's ``os``, ``signal``
and ``sys`` and starts in a few milliseconds; it is never started by a
server that runs no commands.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

log = logging.getLogger("appserver.tools")

_EXIT_WAIT = 2.0  # seconds a normal exit waits for the watchdog to end (it needs milliseconds)
# How often groups a finished command left running are looked at: once such a group
# is empty its id is free, and a process of someone else's may take it (it must not
# be killed as ours).
PRUNE_INTERVAL = 0.5
_MAX_RESTARTS = 3  # watchdogs started again after one died (a command may kill it)


class ProcessReaper:
    """The server's side: starts the watchdog lazily and keeps it informed."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self._failed = False
        self._stalled = False
        self._restarts = 0
        self._tracked: set[int] = set()  # what the watchdog lists (sent again to a new one)
        # Groups whose command finished but left processes running ("cmd &"):
        # still tracked, dropped once they are gone (looked at by a thread while any).
        self._lingering: set[int] = set()
        self._pruner: threading.Thread | None = None

    def track(self, pgid: int) -> None:
        """Record a running process group: it is killed if the server dies."""
        with self._lock:
            self._tracked.add(pgid)
            self._send(f"+{pgid}\n")

    def untrack(self, pgid: int) -> None:
        """The group was ended: forget it."""
        with self._lock:
            self._lingering.discard(pgid)
            self._tracked.discard(pgid)
            self._send(f"-{pgid}\n")

    def finished(self, pgid: int) -> None:
        """The group's command exited: forget the group, unless processes it
        started in the background still run (they die with the server too)."""
        with self._lock:
            if not group_alive(pgid):
                self.untrack(pgid)
                return
            self._lingering.add(pgid)
            if self._pruner is None:
                self._pruner = threading.Thread(
                    target=self._prune_while_lingering, name="appserver-reaper", daemon=True
                )
                self._pruner.start()

    def lingers(self, pgid: int) -> bool:
        """Whether ``pgid`` is a group a finished command left running, still
        ours: never empty since (an empty group's id may be someone else's now)."""
        with self._lock:
            if pgid in self._lingering and not group_alive(pgid):
                self.untrack(pgid)
            return pgid in self._lingering

    def _prune_while_lingering(self) -> None:
        while True:
            time.sleep(PRUNE_INTERVAL)
            with self._lock:
                for pgid in [pgid for pgid in self._lingering if not group_alive(pgid)]:
                    self.untrack(pgid)
                if not self._lingering:
                    self._pruner = None
                    return

    def _send(self, line: str) -> None:
        with self._lock:
            fd = self._pipe()
            if fd is None:
                return
            try:
                # Non-blocking: a stopped watchdog must never stall the server.
                os.write(fd, line.encode())
            except BlockingIOError:
                if not self._stalled:
                    self._stalled = True
                    log.warning("the process watchdog is not reading; commands may outlive a crash")
            except OSError:
                self._watchdog_gone()

    def _watchdog_gone(self) -> None:
        """The watchdog died (a command can kill it): start another and list
        the running groups to it, a few times at most."""
        self._process = None
        if self._restarts >= _MAX_RESTARTS:
            log.warning("the process watchdog is gone; commands may outlive a crash")
            self._failed = True
            return
        self._restarts += 1
        log.warning("the process watchdog is gone; starting another")
        fd = self._pipe()
        if fd is None:
            return
        try:
            os.write(fd, "".join(f"+{pgid}\n" for pgid in self._tracked).encode())
        except OSError:
            self._watchdog_gone()

    def _pipe(self) -> int | None:
        if self._process is None and not self._failed:
            try:
                self._process = subprocess.Popen(
                    # -I -S: isolated and without site, so it starts fast and
                    # runs this file alone. An empty environment: it holds no
                    # secret a tool command could read from its /proc entry.
                    [sys.executable, "-I", "-S", __file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={},
                    # Its own session: a terminal's Ctrl-C or hang-up that
                    # stops the server must not stop the watchdog first.
                    start_new_session=True,
                )
                assert self._process.stdin is not None
                os.set_blocking(self._process.stdin.fileno(), False)
                if not self._restarts:  # the first watchdog; a later one ends the same way
                    atexit.register(self._end_with_process)
            except OSError as exc:
                log.warning(
                    "cannot start the process watchdog (%s); commands may outlive a crash", exc
                )
                self._failed = True
        if self._process is None or self._process.stdin is None:
            return None
        return self._process.stdin.fileno()

    def _end_with_process(self) -> None:
        """At a normal exit: close the pipe now (the watchdog ends what is still
        listed, as it would at the exit itself) and wait for the watchdog, so it
        is reaped rather than left running past the interpreter, which warns
        about every such child (``ResourceWarning``) as it shuts down."""
        process = self._process
        if process is None or process.stdin is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_EXIT_WAIT)


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # kill(0) also succeeds for zombies. Under an init that never reaps
    # orphans (common in containers) they would look alive forever, so ask
    # /proc whether a member is really still running.
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # The command name may contain spaces and ')'; fields follow the last ')'.
        fields = stat[stat.rindex(b")") + 2 :].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in (b"Z", b"X"):
            return True
    return False


REAPER = ProcessReaper()
"""The one watchdog of this server process (it watches the process, not a server object)."""


def _watch(lines: IO[bytes]) -> None:
    """The watchdog: follow ``+PGID``/``-PGID`` lines; at end-of-file kill what is left."""
    groups: set[int] = set()
    for raw in lines:
        line = raw.strip()
        try:
            pgid = int(line[1:])
        except ValueError:
            continue
        if line.startswith(b"+"):
            groups.add(pgid)
        elif line.startswith(b"-"):
            groups.discard(pgid)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _watch(sys.stdin.buffer)
