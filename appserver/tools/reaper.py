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

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import IO

log = logging.getLogger("appserver.tools")


class ProcessReaper:
    """The server's side: starts the watchdog lazily and keeps it informed."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._failed = False

    def track(self, pgid: int) -> None:
        """Record a running process group: it is killed if the server dies."""
        self._send(f"+{pgid}\n")

    def untrack(self, pgid: int) -> None:
        """The group was ended (or its command finished)."""
        self._send(f"-{pgid}\n")

    def _send(self, line: str) -> None:
        with self._lock:
            stdin = self._pipe()
            if stdin is None:
                return
            try:
                stdin.write(line.encode())
                stdin.flush()
            except OSError:
                log.warning("the process watchdog is gone; commands may outlive a crash")
                self._process, self._failed = None, True

    def _pipe(self) -> IO[bytes] | None:
        if self._process is None and not self._failed:
            try:
                self._process = subprocess.Popen(
                    # -I -S: isolated and without site, so it starts fast and
                    # runs this file with nothing of the server's environment.
                    [sys.executable, "-I", "-S", __file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    # Its own session: a terminal's Ctrl-C or hang-up that
                    # stops the server must not stop the watchdog first.
                    start_new_session=True,
                )
            except OSError as exc:
                log.warning(
                    "cannot start the process watchdog (%s); commands may outlive a crash", exc
                )
                self._failed = True
        return self._process.stdin if self._process is not None else None


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
