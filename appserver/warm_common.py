"""What both kinds of warm process share: where their sockets live, which
command a socket serves, and who may talk to it.

A warm process serves exactly one command (arguments, environment, working
directory, interpreter and appserver install: :func:`fingerprint`) on a Unix
socket in this user's private runtime directory (:func:`runtime_dir`). Two kinds
use this: the Zene one-shot's (:mod:`appserver.faces.zene.warm`, requests
answered in one open runtime) and any stdio door's (:mod:`appserver.warm_launch`
and :mod:`appserver.warm_parent`, a preloaded process that forks the server).

It imports only the standard library: it runs before the rest of appserver is
loaded, on the path of every warm start. It uses the C modules ``_socket`` and
``_sha256`` rather than ``socket`` and ``hashlib`` (which import ``enum`` and
OpenSSL).
"""

from __future__ import annotations

import _socket
import contextlib
import os
import struct
import sys
from collections.abc import Collection, Mapping, Sequence

try:
    # The C module hashlib wraps (no OpenSSL to load); it has no type stubs.
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:  # an interpreter without it
    from hashlib import sha256

# The most read from a warm socket at once.
CHUNK = 65536


def fingerprint(
    argv: Sequence[str], environ: Mapping[str, str], cwd: str, ignore: Collection[str] = ()
) -> str:
    """A hash of what a command's behaviour depends on: its arguments, its whole
    environment (less the variables in ``ignore``), its directory, the
    interpreter and the appserver install it runs, and the attributes a process
    inherits that the command's own children (the agent's tools) would too
    (:func:`process_identity`)."""
    import appserver

    # Neither arguments nor the environment can hold a NUL: "\0" and "\1"
    # separate the parts unambiguously.
    parts = [
        sys.executable,
        os.path.dirname(os.path.abspath(appserver.__file__)),
        appserver.__version__,
        cwd,
        "\1".join(argv),
        "\1".join(f"{k}={v}" for k, v in sorted(environ.items()) if k not in ignore),
        process_identity(),
    ]
    digest: str = sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
    return digest[:32]


# The lines of /proc/self/status that say what a process may do: its umask,
# capabilities, seccomp and no_new_privs (a sandbox a client started it in).
_STATUS_LINES = (b"Umask:", b"Uid:", b"Gid:", b"Groups:", b"Cap", b"NoNewPrivs:", b"Seccomp")
_NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid_for_children", "time", "user", "uts")


def process_identity() -> str:
    """What this process passes on to every process it starts that a warm
    process started earlier might not share: umask, user and groups,
    capabilities, seccomp mode, resource limits, control group, security label,
    personality, root and namespaces (Linux; elsewhere, empty).
    A warm process serves only commands whose identity is its own, so a server
    it forks, and the tools that server runs, are as confined as a cold one."""
    parts: list[bytes] = []
    for name in ("status", "limits", "cgroup", "attr/current", "personality"):
        try:
            with open(f"/proc/self/{name}", "rb") as handle:
                text = handle.read()
        except OSError:  # attr/current without a security module, say
            continue
        if name == "status":
            text = b"\n".join(line for line in text.splitlines() if line.startswith(_STATUS_LINES))
        parts.append(text)
    for link in (*(f"ns/{namespace}" for namespace in _NAMESPACES), "root"):
        with contextlib.suppress(OSError):
            parts.append(os.fsencode(os.readlink(f"/proc/self/{link}")))
    return "\0".join(part.decode("latin-1") for part in parts)


def runtime_dir(create: bool) -> str | None:
    """This user's directory for warm sockets, or ``None`` if it is missing (and
    not to be created) or not safe: not a real directory, not ours, open to others."""
    uid = os.getuid()
    path = f"/tmp/appserver-{uid}"
    base = os.environ.get("XDG_RUNTIME_DIR")
    # A socket's path has at most 107 bytes (the longest here is the one a warm
    # process binds before renaming it: ``<kind>-<fingerprint>.sock.<pid>``); a
    # longer runtime directory is passed over.
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


def socket_path(directory: str, kind: str, print_: str) -> str:
    """Where the warm process of ``kind`` (four letters) for the command with
    this fingerprint listens."""
    return os.path.join(directory, f"{kind}-{print_}.sock")


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


def connect(path: str, timeout: float | None = None) -> _socket.socket | None:
    """A connection to the warm process listening at ``path``, or ``None`` (none
    there, not ours, or its queue of connections full: a Unix socket then
    refuses at once rather than make the caller wait)."""
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    connection.settimeout(timeout)
    try:
        connection.connect(path)
        if peer_is_us(connection):
            return connection
    except OSError:
        pass
    connection.close()
    return None


def read_line(connection: _socket.socket, received: bytearray) -> tuple[bytes, bytearray] | None:
    """The next line from the other end (and what came after it), or ``None``
    if it closed the connection first."""
    while b"\n" not in received:
        data = connection.recv(CHUNK)
        if not data:
            return None
        received += data
    line, _, rest = received.partition(b"\n")
    return bytes(line), bytearray(rest)


def descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors a ``recvmsg`` received (``SCM_RIGHTS``), in order."""
    import array

    received = array.array("i")
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
    return list(received)


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
    """Ask the warm process at ``path`` (either kind: they share this line) to
    end; how many requests or launches it served."""
    connection = connect(path)
    if connection is None:
        return None
    try:
        connection.sendall(b'{"v":1,"stop":true}\n')
        answer = read_line(connection, bytearray())
    except OSError:  # it was ending already
        answer = None
    finally:
        connection.close()
    if answer is None or not answer[0].startswith(b"served "):
        return None
    return int(answer[0].split()[1])


def hold_lock(path: str) -> int | None:
    """This process's exclusive hold on ``path``'s lock (its pid written there),
    or ``None`` if another warm process holds it."""
    import fcntl

    holder = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(holder)
        return None
    os.ftruncate(holder, 0)
    os.write(holder, f"{os.getpid()}\n".encode())
    return holder


def python_flags() -> list[str]:
    """The interpreter options of a warm process: ``-P`` (the working directory,
    often the workspace, which the agent writes, is not put on the module path,
    so no file there can pose as a module of ours or of the standard library)
    and this process's ``-B`` (no bytecode written), which the environment
    alone would not pass on."""
    return ["-P", *(["-B"] if sys.dont_write_bytecode else [])]


def start_detached(
    command: Sequence[str],
    environ: Mapping[str, str],
    cwd: str,
    log: str,
    given: bytes | None = None,
    kept: Sequence[int] = (),
) -> None:
    """Start ``command`` as a warm process: in its own session (a signal to the
    caller's process group does not reach it) and holding none of the caller's
    pipes (a client reading this process's stdout or stderr to the end must not
    wait for the warm one); its stderr appended to ``log``, ``given`` (if any)
    on its stdin, the descriptors ``kept`` left open in it (same numbers)."""
    import subprocess

    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(environ),
            stdin=subprocess.DEVNULL if given is None else subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            start_new_session=True,
            pass_fds=tuple(kept),
        )
    if process.stdin is not None:
        try:
            process.stdin.write(given or b"")
            process.stdin.close()
        except OSError:  # it failed at start (its log says why)
            pass
    # It is this process's child: when it ends (idle) before this process
    # does, something must reap it, or it stays a zombie for as long as this
    # server runs. A thread waits for exactly that pid (an asyncio child
    # watcher waits for its own pids only, so neither takes the other's).
    import threading

    threading.Thread(target=process.wait, name="warm-reaper", daemon=True).start()


def take_slot(directory: str, kind: str, most: int) -> int | None:
    """One of ``most`` slots for a warm process of ``kind`` (a descriptor holding
    ``<kind>-slot-N.lock`` locked; the warm process keeps it for its life), or
    ``None`` if all are taken. Taken before the process starts, so launches at
    the same moment cannot start more than ``most``."""
    import fcntl

    for number in range(most):
        holder = os.open(
            os.path.join(directory, f"{kind}-slot-{number}.lock"), os.O_RDWR | os.O_CREAT, 0o600
        )
        try:
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(holder)
            continue
        return holder
    return None
