"""Taking a workspace's lock and creating its SQLite database ahead of time, in a
thread, with the standard library only (a stdio door imports nothing heavy before
it answers its client's first request)."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

from appserver.storage.lock import WorkspaceLock
from appserver.storage.sqlite_setup import MIGRATIONS_TABLE, PRAGMAS

log = logging.getLogger("appserver.storage")


class Preparation:
    """The workspace locked and its database created ahead, in a thread, while
    the process does something else (a stdio server imports its modules).

    Creating a database is mostly waiting for the disk (the switch to WAL, the
    first write); done here, :meth:`Database.open` then finds a WAL database
    and only applies the migrations. The thread's connection stays open until
    that connection is made, so the WAL is not checkpointed and removed in
    between. A failure to take the lock is raised by :func:`locked_database`,
    where it would have happened; a database error is left for
    :meth:`Database.open` to meet and report as it would have.
    """

    def __init__(
        self, lock: WorkspaceLock, path: Path, info: dict[str, Any], shared: bool = True
    ) -> None:
        self.lock = lock
        self.shared = shared
        self.path = path
        self._error: BaseException | None = None
        self._conn: sqlite3.Connection | None = None
        self._created = False  # the database is there, in WAL mode (see succeeded)
        self._thread = threading.Thread(
            target=self._run, args=(info,), name="workspace-preparation", daemon=True
        )
        self._thread.start()

    def _run(self, info: dict[str, Any]) -> None:
        try:
            self.lock.acquire(info, 0.0, self.shared)
        except BaseException as exc:  # raised again by wait()
            self._error = exc
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn = conn
            for pragma in PRAGMAS:
                conn.execute(pragma)
            conn.execute(MIGRATIONS_TABLE)
            self._created = True
        except Exception:
            log.debug("could not prepare %s", self.path, exc_info=True)

    def succeeded(self) -> bool:
        """Block until the thread is done; whether it took the lock and created
        (or found) the database. When not, :meth:`wait` or :meth:`Database.open`
        meets the failure and the start reports it as it would have."""
        self._thread.join()
        return self._error is None and self._created

    def wait(self) -> None:
        """Block until the thread is done; raise what taking the lock raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
