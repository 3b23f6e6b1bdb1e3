"""A warm Zene process: one-shot requests handed to a process that is already open.

clawbridge starts ``appserver host ... --single-request`` once per chat message,
and most of such a process's life is Python importing the runtime. With
``--keep-warm SECONDS`` the first one-shot answers as usual and then starts a
*warm process*: the same command (same arguments, environment, working
directory, interpreter and appserver install), detached, serving one-shot
requests over a Unix socket until it has been idle for SECONDS. A later
one-shot of exactly the same command finds its socket before importing
anything but the standard library, copies its stdin there and the answer to
its stdout, and exits with the status the warm process tells it.

This module is that client and what both sides share; it imports only the
standard library (it runs before the rest of appserver is loaded).

- **Where**: ``$XDG_RUNTIME_DIR/appserver`` (if short enough for a socket's
  path) or ``/tmp/appserver-<uid>``, a
  directory of this user's, mode 0700 (anything else there is refused: no warm
  process is used or started). The socket's name is a hash of everything the
  command's behaviour depends on (:func:`fingerprint`), so a one-shot reaches
  only a warm process started with exactly its own command, environment and
  directory. Both ends check that the other runs as the same user.
- **Wire**: the client sends one header line ``{"v": 1, "started": T}`` (``T``
  its own spawn on the ``time.monotonic()`` clock, which all processes share:
  ``timeout_ms`` counts from there, as in a cold one-shot). The warm process
  answers ``ok`` (a line) once it takes the request; then the client copies its
  stdin, the warm process reads the request line as a cold one-shot reads stdin,
  answers, and ends with ``EXIT OUT ERR`` (a line of three numbers: the exit
  status and the byte lengths of what follows, the stdout and the stderr of
  the one-shot). ``{"v": 1, "stop": true}`` asks it to end instead (it
  answers ``served N``). A connection closed before ``ok`` took nothing: the
  client runs the command itself.
- **Light**: the client is on every warm one-shot's path, so it uses the C
  modules ``_socket`` and ``_sha256`` rather than ``socket`` and ``hashlib``
  (which import ``enum`` and OpenSSL) and no JSON: together a few
  milliseconds of a ~40 ms request.
"""

from __future__ import annotations

import _socket
import os
import select
import sys
from collections.abc import Mapping, Sequence

from appserver.warm_common import (
    CHUNK,
    connect,
    fingerprint,
    is_serving,
    lock_path,
    log_path,
    peer_is_us,
    python_flags,
    read_line,
    runtime_dir,
    start_detached,
    stop,
)
from appserver.warm_common import socket_path as kind_socket_path

__all__ = [
    "SOCKET_VARIABLE",
    "answer_frame",
    "connect",
    "forward",
    "is_serving",
    "lock_path",
    "log_path",
    "peer_is_us",
    "remember_launch",
    "runtime_dir",
    "socket_path",
    "start",
    "stop",
]

# The socket a spawned warm process is to serve on (set only in its environment).
SOCKET_VARIABLE = "APPSERVER_WARM_SOCKET"
WIRE_VERSION = 1
# Seconds a one-shot waits for the warm process to take its request.
TAKE_WAIT = 2.0

# How this process was launched (argv after the program, environment, working
# directory), taken by the entry point before anything changes them; a warm
# process is started only from a process that has it.
_launch: tuple[list[str], dict[str, str], str] | None = None


def remember_launch(argv: Sequence[str]) -> None:
    """Record this process's command line, environment and directory as launched."""
    global _launch
    _launch = (list(argv), dict(os.environ), os.getcwd())


def socket_path(directory: str, print_: str) -> str:
    """Where the warm process of the command with this fingerprint listens."""
    return kind_socket_path(directory, "zene", print_)


def _fingerprint(argv: Sequence[str], environ: Mapping[str, str], cwd: str) -> str:
    return fingerprint(argv, environ, cwd, ignore=(SOCKET_VARIABLE,))


def forward(argv: Sequence[str]) -> int | None:
    """Hand this one-shot to a warm process of the same command, if one listens:
    the exit status to end with, or ``None`` to run the command here."""
    if os.environ.get(SOCKET_VARIABLE):
        return None  # this process is the warm one being started
    directory = runtime_dir(create=False)
    if directory is None:
        return None
    path = socket_path(directory, _fingerprint(argv, os.environ, os.getcwd()))
    connection = connect(path)
    if connection is None:
        return None
    try:
        reply = _hand_over(connection)
    finally:
        connection.close()
    if isinstance(reply, str):
        return None  # it is ending and took nothing: run the command here
    if reply is None:
        # The warm process went away mid-request (it was stopped or killed):
        # the request may have been read, so it is not run a second time here.
        sys.stderr.write("appserver: the warm process ended before answering\n")
        return 4
    code, out, err = reply
    for stream, data in ((sys.stdout.buffer, out), (sys.stderr.buffer, err)):
        if data:
            stream.write(data)
            stream.flush()
    return code


def _hand_over(connection: _socket.socket) -> tuple[int, bytes, bytes] | str | None:
    """The one-shot's (exit status, stdout, stderr) from the warm process;
    ``"not taken"`` if it did not take the request; ``None`` if it ended
    after taking it."""
    from appserver.startup import process_started

    header = f'{{"v":{WIRE_VERSION},"started":{process_started()!r}}}\n'
    try:
        # A warm process that does not take the request at once (stopped,
        # or swamped) is passed over: nothing was taken yet, so running cold is safe.
        connection.settimeout(TAKE_WAIT)
        connection.sendall(header.encode())
        taken = read_line(connection, bytearray())
        connection.settimeout(None)
    except OSError:  # a timeout too
        taken = None
    if taken is None or taken[0] != b"ok":
        return "not taken"
    try:
        return _relay(connection, taken[1])
    except (OSError, ValueError):
        return None


def _relay(connection: _socket.socket, received: bytearray) -> tuple[int, bytes, bytes] | None:
    """Copy stdin to the warm process until it answers; (exit status, stdout,
    stderr) of the one-shot."""
    stdin = sys.stdin.fileno()
    reading = True
    pending = b""
    while b"\n" not in received:
        want_read = [connection] + ([stdin] if reading and not pending else [])
        want_write = [connection] if pending else []
        readable, writable, _ = select.select(want_read, want_write, [])
        if connection in readable:
            data = connection.recv(CHUNK)
            if not data:
                return None
            received += data
            continue
        if stdin in readable:
            # All of it, as a cold one-shot would have it (blank lines before
            # the request are skipped there): what the warm process does not
            # read waits here while the answer comes.
            pending = os.read(stdin, CHUNK)
            if not pending:
                reading = False
                connection.shutdown(_socket.SHUT_WR)
        if connection in writable:
            try:
                sent = connection.send(pending)
            except OSError:  # it stopped reading (the request was refused)
                pending, reading = b"", False
                continue
            pending = pending[sent:]
    head, _, body = received.partition(b"\n")
    code, out_size, err_size = (int(number) for number in head.split())
    while len(body) < out_size + err_size:
        data = connection.recv(CHUNK)
        if not data:
            return None
        body += data
    return code, bytes(body[:out_size]), bytes(body[out_size : out_size + err_size])


def answer_frame(code: int, out: bytes, err: bytes) -> bytes:
    """The warm process's last words on a connection (read by :func:`_relay`)."""
    return b"%d %d %d\n" % (code, len(out), len(err)) + out + err


def start() -> bool:
    """Start a warm process of this process's own command (as launched; it
    ends after its ``--keep-warm`` idle seconds); ``False`` if it cannot be (no
    launch recorded, no safe directory)."""
    if _launch is None:
        return False
    argv, environ, cwd = _launch
    directory = runtime_dir(create=True)
    if directory is None:
        return False
    path = socket_path(directory, _fingerprint(argv, environ, cwd))
    if is_serving(path):
        return True
    child_env = dict(environ)
    child_env[SOCKET_VARIABLE] = path
    command = [sys.executable, *python_flags(), "-m", "appserver", *argv]
    start_detached(command, child_env, cwd, log_path(path))
    return True
