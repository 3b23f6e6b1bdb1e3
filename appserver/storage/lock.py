"""``<workspace>/.craft/appserver.lock``: the processes serving a workspace.

The lock is an ``flock`` on the file, so it is released by the kernel when
the holder dies: a lock left by a dead process is recovered automatically.
Every process serving the workspace holds it *shared* (they cooperate on the
one SQLite file: docs/architecture.md, "Several processes on one workspace");
an exclusive holder keeps them all out. The file's JSON content (pid,
version, endpoints; the last process to write it) is for humans and tools.

``.craft/`` can arrive with a checkout, so the lock file is opened without
following a symbolic link and must be a plain file of its own: a lock that
points elsewhere (``appserver.lock -> ~/notes.txt``) is refused
(:class:`UnsafeLockFile`) before anything is written, never truncated.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def open_lock_file(directory: Path, name: str) -> int:
    """``directory/name`` opened for an ``flock`` (created if absent, 0600),
    never through a symbolic link: ``.craft/`` can arrive with a checkout, so
    only a plain file of its own, in a directory that is no link, is used
    (else :class:`OSError`). The descriptor blocks; closing it releases a lock."""
    if directory.is_symlink() or directory.parent.is_symlink():
        raise OSError(errno.ELOOP, "the lock directory is a symbolic link", str(directory))
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / name, _OPEN_FLAGS, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise OSError(errno.EPERM, "not a plain file of its own", str(directory / name))
    os.set_blocking(fd, True)
    return fd


class WorkspaceLocked(Exception):
    """Another live server holds the workspace (or, :class:`UnsafeLockFile`,
    the lock cannot be taken safely)."""


class UnsafeLockFile(WorkspaceLocked):
    """The lock file is a symbolic link, or not a plain file of its own: taking
    it would write through to something outside the state directory."""


# Files the server opens by name beside the lock: none may lead elsewhere.
_STATE_FILES = (
    "appserver.db",
    "appserver.db-wal",
    "appserver.db-shm",
    "appserver.db-journal",
    "cluster-workspace",
)
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class WorkspaceLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._shared = False

    def acquire(self, info: dict[str, Any], wait: float = 0.0, shared: bool = False) -> None:
        """Take the lock or raise :class:`WorkspaceLocked` naming the holder.

        With ``wait``, keep trying for that many seconds first (processes that
        take turns on a workspace queue up instead of failing). ``shared``:
        alongside other shared holders (only an exclusive one refuses).
        """
        self._shared = shared
        if self.path.parent.is_symlink():
            raise self._unsafe("its directory is a symbolic link")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + wait
        delay = 0.005
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                if time.monotonic() < deadline:
                    # No flock with a timeout exists; poll, backing off a little.
                    time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                    delay = min(delay * 2, 0.05)
                    continue
                raise WorkspaceLocked(in_use_message(holder, self.path)) from None
            # A releasing holder unlinks the file: if we locked an unlinked
            # inode, someone may already hold a fresh file. Try again.
            try:
                same = os.fstat(fd).st_ino == os.lstat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        linked = [name for name in _STATE_FILES if (self.path.parent / name).is_symlink()]
        if linked:
            os.close(fd)
            raise self._unsafe(f"{', '.join(linked)} beside it is a symbolic link")
        self._fd = fd
        self.update(info)

    def _open(self) -> int:
        """The lock file, opened (created if absent) without following a link;
        raises :class:`UnsafeLockFile` for anything but a plain file with no
        other name (0 names: a releasing holder just unlinked it; acquire retries)."""
        try:
            fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._unsafe("it is a symbolic link") from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            os.close(fd)
            what = "not a plain file" if not stat.S_ISREG(info.st_mode) else "a hard link"
            raise self._unsafe(f"it is {what}")
        # O_NONBLOCK was only for opening (a FIFO must not hang the start).
        os.set_blocking(fd, True)
        return fd

    def _unsafe(self, reason: str) -> UnsafeLockFile:
        return UnsafeLockFile(
            f"refusing to use the lock file {self.path}: {reason}; the workspace's .craft/ "
            "holds the server's own files (remove it and start again)"
        )

    def update(self, info: dict[str, Any]) -> None:
        """Rewrite the lock file's content (e.g. once endpoints are bound)."""
        if self._fd is None:
            return
        body = {"pid": os.getpid(), "startedAt": datetime.now(UTC).isoformat(), **info}
        data = json.dumps(body, indent=2).encode() + b"\n"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if self._shared:
                # The file goes with its last holder only: others still hold it
                # (a failed upgrade may drop our shared lock: we leave anyway).
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return
            self.path.unlink(missing_ok=True)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def in_use_message(holder: dict[str, Any], path: Path) -> str:
    """What a second server is told: who holds the workspace and, when the holder
    listens on WebSocket (its lock file names the endpoint), where to connect."""
    pid = holder.get("pid", "?")
    message = f"workspace is in use by another appserver (pid {pid}); lock file {path}"
    endpoints = holder.get("endpoints")
    url = endpoints.get("appServerWebSocket") if isinstance(endpoints, dict) else None
    if isinstance(url, str) and url.startswith("ws://"):
        page = "http://" + url.removeprefix("ws://").removesuffix("ws")
        return (
            f"{message}: connect with `--url {url}` (or the web page at {page}), or stop pid {pid}"
        )
    return f"{message}: stop pid {pid} first"


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 65536, 0)
        value = json.loads(data or b"{}")
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}
