"""``<workspace>/.craft/appserver.lock``: one server per workspace.

The lock is an ``flock`` on the file, so it is released by the kernel when
the holder dies: a lock left by a dead process is recovered automatically.
The file's JSON content (pid, version, endpoints) is for humans and tools.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


class WorkspaceLocked(Exception):
    """Another live server holds the workspace."""


class WorkspaceLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, info: dict[str, Any], wait: float = 0.0) -> None:
        """Take the lock or raise :class:`WorkspaceLocked` naming the holder.

        With ``wait``, keep trying for that many seconds first (processes that
        take turns on a workspace, such as one-shot faces, queue up instead of
        failing).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + wait
        delay = 0.005
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                if time.monotonic() < deadline:
                    # No flock with a timeout exists; poll, backing off a little.
                    time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                    delay = min(delay * 2, 0.05)
                    continue
                raise WorkspaceLocked(
                    f"workspace is in use by another appserver (pid {holder.get('pid', '?')}); "
                    f"lock file {self.path}"
                ) from None
            # A releasing holder unlinks the file: if we locked an unlinked
            # inode, someone may already hold a fresh file. Try again.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        self.update(info)

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
            self.path.unlink(missing_ok=True)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 65536, 0)
        value = json.loads(data or b"{}")
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}
