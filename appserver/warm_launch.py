"""A warm start for any stdio door: this process hands its stdin, stdout and
stderr to a preloaded process of the same command, which forks the server onto
them (:mod:`appserver.warm_parent`).

Most of a stdio server's start is Python importing appserver and building its
wire models (~0.5 s of CPU); an editor or SDK pays it at every launch. With
``APPSERVER_KEEP_WARM=SECONDS`` in the environment, the first launch of a
command runs as usual and also starts a *warm parent*: the same command
(arguments, environment, working directory, program name, interpreter and
install), detached, with everything imported, waiting on a Unix socket until
it has been idle for SECONDS. A later launch of exactly the same command finds
that socket before importing anything but the standard library and passes its
three standard streams over it; the parent forks a child that runs the
command on them, so the client talks to the server directly, as if it were
the process it spawned. This process stays as the client's handle on it:

- a signal it gets (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) is passed
  on to the server;
- it ends with the server's exit status, or by the signal that ended it;
- if it is killed, the server is killed too (the parent sees its connection
  close).

Wire (one connection a launch; lines): the launcher sends
``{"v": 1, "started": T}`` (its own spawn on the ``time.monotonic()`` clock,
shared by all processes) with its descriptors 0, 1 and 2 attached. The parent
answers ``ready``; the launcher commits with ``go`` (from then on it never runs
the command itself, so a request is never served twice); the parent forks and
answers ``pid N``, and when the server ends, ``exit C`` or ``signal S``.
A connection closed before ``ready`` took nothing: the command runs here,
cold. ``{"v": 1, "stop": true}`` asks the parent to end (``served N``;
:func:`appserver.warm_common.stop`).

It imports only the standard library and :mod:`appserver.warm_common`.
"""

from __future__ import annotations

import _socket
import array
import contextlib
import os
import select
import signal
import sys
from collections.abc import Sequence

from appserver.warm_common import (
    connect,
    fingerprint,
    is_serving,
    log_path,
    read_line,
    runtime_dir,
    socket_path,
    start_detached,
)

# The environment variable that turns warm starts on: idle seconds a warm parent lives.
KEEP_WARM_VARIABLE = "APPSERVER_KEEP_WARM"
KIND = "fork"
WIRE_VERSION = 1
# Seconds a launch waits for the warm parent to be ready to take it.
TAKE_WAIT = 2.0
# Signals passed on to the server (what a client sends to stop or poke a server).
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
# Commands that serve nothing: never worth a warm parent.
_NOT_SERVING = {"-h", "--help", "--version", "schema"}


def keep_warm_seconds() -> float:
    """``APPSERVER_KEEP_WARM`` as seconds (0: warm starts are off)."""
    try:
        seconds = float(os.environ.get(KEEP_WARM_VARIABLE, "0"))
    except ValueError:
        return 0.0
    return seconds if 0 < seconds < float("inf") else 0.0


def command_print(entry: str, argv: Sequence[str]) -> str:
    """The fingerprint of this process's command as ``entry`` (``appserver`` or
    ``appserver-codex``) with ``argv``."""
    return fingerprint([sys.argv[0], entry, *argv], os.environ, os.getcwd())


def launch(entry: str, argv: Sequence[str]) -> int | None:
    """Run this command through a warm parent if one serves it (the exit status),
    else start one for next time when ``APPSERVER_KEEP_WARM`` asks for it and
    return ``None``: the caller then runs the command itself."""
    seconds = keep_warm_seconds()
    if not seconds or _NOT_SERVING.intersection(argv):
        return None
    directory = runtime_dir(create=True)
    if directory is None:
        return None
    path = socket_path(directory, KIND, command_print(entry, argv))
    connection = connect(path)
    if connection is not None:
        try:
            code = _hand_over(connection)
        finally:
            connection.close()
        if code is not None:
            return code
    if not is_serving(path):
        # -P: the working directory (often the workspace, which the agent
        # writes) is not put on the module path, so no file there can pose
        # as a module of ours or of the standard library.
        parent = [sys.executable, "-P", "-m", "appserver.warm_parent", path, str(seconds)]
        command = [*parent, sys.argv[0], entry, *argv]
        start_detached(command, os.environ, os.getcwd(), log_path(path))
    return None


def _hand_over(connection: _socket.socket) -> int | None:
    """The server's exit status once the warm parent has run it on this
    process's streams; ``None`` if it did not take them (run cold)."""
    from appserver.startup import process_started

    header = f'{{"v":{WIRE_VERSION},"started":{process_started()!r}}}\n'.encode()
    streams = array.array("i", (0, 1, 2))
    try:
        # A parent that is not ready at once (busy starting, stopping, swamped)
        # is passed over: nothing was taken yet, so running cold is safe.
        connection.settimeout(TAKE_WAIT)
        connection.sendmsg([header], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, streams)])
        ready = read_line(connection, bytearray())
        if ready is None or ready[0] != b"ready":
            return None
        connection.sendall(b"go\n")
    except OSError:  # a timeout too, or a closed standard stream
        return None
    connection.settimeout(None)
    return _follow(connection, ready[1])


def _follow(connection: _socket.socket, received: bytearray) -> int:
    """Pass signals on to the server and wait for its end: its exit status (a
    server ended by a signal ends this process by the same signal)."""
    pid = 0
    pending: list[int] = []

    def pass_on(signum: int, frame: object) -> None:
        if pid:
            os.kill(pid, signum)
        else:
            pending.append(signum)  # before the pid is known: sent once it is

    for forwarded in FORWARDED:
        signal.signal(forwarded, pass_on)
    while True:
        try:
            line = read_line(connection, received)
        except OSError:
            line = None
        if line is None:
            return _lost(pid)
        words, received = line[0].split(), line[1]
        if words[:1] == [b"pid"] and len(words) == 2:
            pid = int(words[1])
            for early in pending:
                os.kill(pid, early)
        elif words[:1] == [b"exit"] and len(words) == 2:
            return int(words[1])
        elif words[:1] == [b"signal"] and len(words) == 2:
            ended_by = int(words[1])
            # Its default action here too (Python ignores SIGPIPE, for one);
            # SIGKILL and SIGSTOP cannot be set.
            with contextlib.suppress(OSError, ValueError):
                signal.signal(ended_by, signal.SIG_DFL)
            os.kill(os.getpid(), ended_by)
            return 128 + ended_by  # a signal that does not end a process by default


def _lost(pid: int) -> int:
    """The warm parent went away before it told the server's end: wait for the
    server itself (it is not our child: no status to read)."""
    sys.stderr.write("appserver: the warm process ended; the server's exit status is unknown\n")
    if pid:
        try:
            handle = os.pidfd_open(pid)
        except OSError:  # gone already
            return 1
        select.select([handle], [], [])
        os.close(handle)
    return 1
