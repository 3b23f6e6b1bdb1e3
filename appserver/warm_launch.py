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
- if it is killed, the server is killed too (the server sees this process's
  connection close, even when the parent is gone).

Wire (one connection a launch; lines): the launcher sends ``launch 2 T N``
(T: its own spawn on the ``time.monotonic()`` clock, shared by all processes)
and then its environment, N bytes of ``NAME=value\\0``. The parent answers
``ready``; the launcher commits with ``go``, its descriptors 0, 1, 2 and its
working directory attached (from then on it never runs the command itself, so
a request is never served twice). The parent forks and answers ``pid N`` with
the server's pidfd attached (or ``refused WHY``: nothing ran, the command runs
here after all), and when the server ends, ``exit C`` or ``signal S``.
A connection closed before ``ready`` took nothing: the command runs here,
cold. ``{"v": 1, "stop": true}`` asks the parent to end (``served N``;
:func:`appserver.warm_common.stop`).

The parent is started with its command and environment on its stdin, not on
its command line or in its environment (``/proc`` shows those to every
process of the user, the agent's tools too), and without secret-looking
variables in its own environment; this process blanks the secrets in its
own once its server runs (:mod:`appserver.process_secrets`).

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
from collections.abc import Callable, Mapping, Sequence

from appserver.warm_common import (
    CHUNK,
    connect,
    descriptors,
    fingerprint,
    is_serving,
    log_path,
    python_flags,
    read_line,
    runtime_dir,
    socket_path,
    start_detached,
    take_slot,
)

# The environment variable that turns warm starts on: idle seconds a warm parent lives.
KEEP_WARM_VARIABLE = "APPSERVER_KEEP_WARM"
KIND = "fork"
WIRE_VERSION = 2
# Seconds a launch waits for the warm parent to be ready to take it.
TAKE_WAIT = 2.0
# The longest idle limit (a year): more means the same.
MOST_IDLE = 365 * 86400.0
# Warm parents of one user at most (each ~50 MB): a command that would need
# another runs cold until one ends.
MOST_PARENTS = 8
# Variables a shell sets per command that say nothing about what the command
# does: a launch differing only in them is served by the same parent (its
# server gets the launcher's whole environment, these included).
VOLATILE = frozenset({"_", "OLDPWD", "SHLVL"})
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
    # Past a year the idle limit is no limit (and select's timeout overflows).
    return min(seconds, MOST_IDLE) if 0 < seconds < float("inf") else 0.0


def command_print(command: Sequence[str], environ: Mapping[str, str], cwd: str) -> str:
    """The fingerprint of ``command`` (``[argv0, entry, *argv]``, ``entry`` being
    ``appserver`` or ``appserver-codex``) run in ``environ`` and ``cwd``."""
    return fingerprint(command, environ, cwd, ignore=VOLATILE)


def launch(entry: str, argv: Sequence[str]) -> int | None:
    """Run this command through a warm parent if one serves it (the exit status),
    else start one for next time when ``APPSERVER_KEEP_WARM`` asks for it and
    return ``None``: the caller then runs the command itself (also when anything
    here fails before the streams were handed over: a directory it cannot open,
    say)."""
    try:
        return _launch(entry, argv)
    except OSError:
        return None


def _launch(entry: str, argv: Sequence[str]) -> int | None:
    seconds = keep_warm_seconds()
    if not seconds or _NOT_SERVING.intersection(argv):
        return None
    directory = runtime_dir(create=True)
    if directory is None:
        return None
    command = [sys.argv[0], entry, *argv]
    cwd = os.getcwd()
    path = socket_path(directory, KIND, command_print(command, os.environ, cwd))
    connection = connect(path, TAKE_WAIT)
    if connection is not None:
        try:
            code = _hand_over(connection, argv)
        finally:
            connection.close()
        if code is not None:
            return code
    if not is_serving(path):
        slot = take_slot(directory, KIND, MOST_PARENTS)
        if slot is not None:
            try:
                _start_parent(path, seconds, command, cwd, slot)
            finally:
                os.close(slot)  # the parent holds it now
    return None


def _start_parent(path: str, seconds: float, command: list[str], cwd: str, slot: int) -> None:
    """Start the warm parent of ``command`` (detached; it ends on its own)."""
    import json

    from appserver.tools.environment import is_secret

    parent = [sys.executable, *python_flags(), "-m", "appserver.warm_parent", path]
    parent += [str(seconds), str(slot)]
    given = json.dumps({"command": command, "environment": dict(os.environ)})
    plain = {name: value for name, value in os.environ.items() if not is_secret(name)}
    start_detached(parent, plain, cwd, log_path(path), given.encode(), kept=[slot])


def environment_block() -> bytes:
    """This process's environment as the launch header carries it."""
    return b"".join(b"%s=%s\0" % item for item in os.environb.items())


def _hand_over(connection: _socket.socket, argv: Sequence[str]) -> int | None:
    """The server's exit status once the warm parent has run it on this
    process's streams; ``None`` if it did not take them (run cold)."""
    from appserver.startup import process_started

    environment = environment_block()
    header = b"launch %d %r %d\n" % (WIRE_VERSION, process_started(), len(environment))
    # O_PATH: a directory this process may enter but not list is still handed over.
    directory = os.open(".", os.O_PATH | os.O_DIRECTORY)
    try:
        # A parent that is not ready at once (busy starting, stopping, swamped)
        # is passed over: nothing was taken yet, so running cold is safe.
        connection.sendall(header + environment)
        ready = read_line(connection, bytearray())
        if ready is None or ready[0] != b"ready":
            return None
        handed = array.array("i", (0, 1, 2, directory))
        # From "go" the server may answer on our streams before we know its pid:
        # a signal meanwhile (a supervisor's stop once it saw an answer) is held
        # and passed on then, not our default death.
        _hold_signals()
        connection.sendmsg([b"go\n"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, handed)])
    except OSError:  # a timeout too, or a closed standard stream
        _release_signals_to(None)
        return None
    finally:
        os.close(directory)
    # Committed: the parent has the streams, whatever it answers or how late.
    connection.settimeout(None)
    try:
        answer = _receive(connection, ready[1])
    except OSError:
        answer = None
    if answer is None:
        _release_signals_to(None)
        return _lost(None)
    words, received, server = answer
    if words[:1] != [b"pid"] or len(words) != 2:
        if server is not None:
            os.close(server)
        _release_signals_to(None)
        return None  # refused: nothing ran
    _hide_secrets(argv)
    return _follow(connection, received, int(words[1]), server)


def _receive(
    connection: _socket.socket, received: bytearray
) -> tuple[list[bytes], bytearray, int | None] | None:
    """The parent's answer to ``go`` (its words, what came after it, the
    descriptor attached), or ``None`` if it closed the connection first."""
    server: int | None = None
    space = _socket.CMSG_SPACE(array.array("i").itemsize)
    while b"\n" not in received:
        data, ancillary, _flags, _address = connection.recvmsg(CHUNK, space)
        for descriptor in descriptors(ancillary):
            server = descriptor
        if not data:
            return None
        received += data
    line, _, rest = received.partition(b"\n")
    return bytes(line).split(), bytearray(rest), server


def _hide_secrets(argv: Sequence[str]) -> None:
    """Blank the secrets on this process's command line and in its original
    environment (its server has its own copies): this process lives as long as
    the server, and ``/proc`` shows both to the agent's tools."""
    from appserver.process_secrets import flag_secrets, hide_secrets

    hide_secrets(*flag_secrets(argv))


def _follow(connection: _socket.socket, received: bytearray, pid: int, server: int | None) -> int:
    """Pass signals on to the server and wait for its end: its exit status (a
    server ended by a signal ends this process by the same signal)."""

    def pass_on(signum: int, frame: object) -> None:
        # The server may have ended (and been reaped) already: its pidfd then
        # refuses; never a signal to a process that took over its pid.
        with contextlib.suppress(OSError):
            if server is not None:
                signal.pidfd_send_signal(server, signum)
            else:  # a kernel without pidfds
                os.kill(pid, signum)

    for forwarded in FORWARDED:
        signal.signal(forwarded, pass_on)
    _release_signals_to(pass_on)
    while True:
        try:
            line = read_line(connection, received)
        except OSError:
            line = None
        if line is None:
            return _lost(server)
        words, received = line[0].split(), line[1]
        if words[:1] == [b"exit"] and len(words) == 2:
            return int(words[1])
        if words[:1] == [b"signal"] and len(words) == 2:
            ended_by = int(words[1])
            # Its default action here too (Python ignores SIGPIPE, for one);
            # SIGKILL and SIGSTOP cannot be set.
            with contextlib.suppress(OSError, ValueError):
                signal.signal(ended_by, signal.SIG_DFL)
            os.kill(os.getpid(), ended_by)
            return 128 + ended_by  # a signal that does not end a process by default


_held: list[int] = []
_before: dict[int, object] = {}  # the handlers the hold replaced


def _hold_signals() -> None:
    """Record the forwarded signals instead of acting on them."""
    for forwarded in FORWARDED:
        _before[forwarded] = signal.signal(forwarded, lambda signum, frame: _held.append(signum))


def _release_signals_to(handler: Callable[[int, object], None] | None) -> None:
    """Hand what was held to ``handler`` (``None``: the handlers before the
    hold, back in place; the process then acts on them as it would have)."""
    held, _held[:] = list(dict.fromkeys(_held)), []
    if handler is None:
        for forwarded, before in _before.items():
            signal.signal(forwarded, before)  # type: ignore[arg-type]
        for signum in held:
            signal.raise_signal(signum)
        return
    for signum in held:
        handler(signum, None)


def _lost(server: int | None) -> int:
    """The warm parent went away before it told the server's end: wait for the
    server itself (it is not our child: no status to read). The server ends
    with this process in any case: it watches this connection too."""
    sys.stderr.write("appserver: the warm process ended; the server's exit status is unknown\n")
    if server is not None:
        select.select([server], [], [])
    return 1
