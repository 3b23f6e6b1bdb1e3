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
import struct
import sys
from collections.abc import Mapping, Sequence

try:
    # The C module hashlib wraps (no OpenSSL to load); it has no type stubs.
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:  # an interpreter without it
    from hashlib import sha256

# The socket a spawned warm process is to serve on (set only in its environment).
SOCKET_VARIABLE = "APPSERVER_WARM_SOCKET"
WIRE_VERSION = 1
_CHUNK = 65536
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


def fingerprint(argv: Sequence[str], environ: Mapping[str, str], cwd: str) -> str:
    """A hash of what a one-shot's behaviour depends on: its arguments, its whole
    environment (less this module's own variable), its directory, the
    interpreter and the appserver install it runs."""
    import appserver

    # Neither arguments nor the environment can hold a NUL: "\0" and "\1"
    # separate the parts unambiguously.
    parts = [
        sys.executable,
        os.path.dirname(os.path.abspath(appserver.__file__)),
        appserver.__version__,
        cwd,
        "\1".join(argv),
        "\1".join(f"{k}={v}" for k, v in sorted(environ.items()) if k != SOCKET_VARIABLE),
    ]
    digest: str = sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
    return digest[:32]


def runtime_dir(create: bool) -> str | None:
    """This user's directory for warm sockets, or ``None`` if it is missing (and
    not to be created) or not safe: not a real directory, not ours, open to others."""
    uid = os.getuid()
    path = f"/tmp/appserver-{uid}"
    base = os.environ.get("XDG_RUNTIME_DIR")
    # A socket's path has at most 107 bytes (the longest here is the one a warm
    # process binds before renaming it: ``.sock.<pid>``); a longer runtime
    # directory is passed over.
    longest = os.path.join(base or "", "appserver", "zene-" + "0" * 32 + ".sock.4194304")
    if base and len(longest) < 108:
        path = os.path.join(base, "appserver")
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not _is_private_dir(info, uid):
        return None
    return path


def _is_private_dir(info: os.stat_result, uid: int) -> bool:
    import stat

    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and info.st_mode & 0o077 == 0


def socket_path(directory: str, print_: str) -> str:
    """Where the warm process of the command with this fingerprint listens."""
    return os.path.join(directory, f"zene-{print_}.sock")


def lock_path(path: str) -> str:
    """The file a warm process holds locked for as long as it lives (its pid inside)."""
    return path + ".lock"


def log_path(path: str) -> str:
    """Where the warm process listening at ``path`` writes its log (its stderr)."""
    return path.removesuffix(".sock") + ".log"


def peer_is_us(connection: _socket.socket) -> bool:
    """Whether the other end of a Unix socket runs as this user."""
    credentials = connection.getsockopt(
        _socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i")
    )
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return bool(uid == os.getuid())


def connect(path: str) -> _socket.socket | None:
    """A connection to the warm process listening at ``path``, or ``None``."""
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        connection.connect(path)
        if peer_is_us(connection):
            return connection
    except OSError:
        pass
    connection.close()
    return None


def forward(argv: Sequence[str]) -> int | None:
    """Hand this one-shot to a warm process of the same command, if one listens:
    the exit status to end with, or ``None`` to run the command here."""
    if os.environ.get(SOCKET_VARIABLE):
        return None  # this process is the warm one being started
    directory = runtime_dir(create=False)
    if directory is None:
        return None
    path = socket_path(directory, fingerprint(argv, os.environ, os.getcwd()))
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
        taken = _read_line(connection, bytearray())
        connection.settimeout(None)
    except OSError:  # a timeout too
        taken = None
    if taken is None or taken[0] != b"ok":
        return "not taken"
    try:
        return _relay(connection, taken[1])
    except (OSError, ValueError):
        return None


def _read_line(connection: _socket.socket, received: bytearray) -> tuple[bytes, bytearray] | None:
    """The next line from the warm process (and what came after it), or
    ``None`` if it closed the connection first."""
    while b"\n" not in received:
        data = connection.recv(_CHUNK)
        if not data:
            return None
        received += data
    line, _, rest = received.partition(b"\n")
    return bytes(line), bytearray(rest)


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
            data = connection.recv(_CHUNK)
            if not data:
                return None
            received += data
            continue
        if stdin in readable:
            # All of it, as a cold one-shot would have it (blank lines before
            # the request are skipped there): what the warm process does not
            # read waits here while the answer comes.
            pending = os.read(stdin, _CHUNK)
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
        data = connection.recv(_CHUNK)
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
    path = socket_path(directory, fingerprint(argv, environ, cwd))
    if is_serving(path):
        return True
    child_env = dict(environ)
    child_env[SOCKET_VARIABLE] = path
    import subprocess

    # Its own session (a signal to the caller's process group does not reach
    # it) and none of the caller's pipes: a client reading this process's
    # stdout or stderr to the end must not wait for the warm one.
    with open(log_path(path), "ab") as log_file:
        subprocess.Popen(
            # -P: the working directory (often the workspace, which the agent
            # writes) is not put on the module path, so no file there can pose
            # as a module of ours or of the standard library.
            [sys.executable, "-P", "-m", "appserver", *argv],
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            start_new_session=True,
        )
    return True


def is_serving(path: str) -> bool:
    """Whether a warm process listens at ``path`` (or is starting to)."""
    import fcntl

    try:
        holder = os.open(lock_path(path), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(holder, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True  # its owner holds it exclusively for as long as it lives
    finally:
        os.close(holder)
    return False


def stop(path: str) -> int | None:
    """Ask the warm process at ``path`` to end; how many requests it served."""
    connection = connect(path)
    if connection is None:
        return None
    try:
        connection.sendall(b'{"v":%d,"stop":true}\n' % WIRE_VERSION)
        answer = _read_line(connection, bytearray())
    except OSError:  # it was ending already
        answer = None
    finally:
        connection.close()
    if answer is None or not answer[0].startswith(b"served "):
        return None
    return int(answer[0].split()[1])
