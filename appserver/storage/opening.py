"""Opening a workspace's SQLite database under its lock, possibly ahead of time."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from appserver.storage.db import MIGRATIONS_TABLE, PRAGMAS, Database
from appserver.storage.lock import WorkspaceLock

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
        except Exception:
            log.debug("could not prepare %s", self.path, exc_info=True)

    def wait(self) -> None:
        """Block until the thread is done; raise what taking the lock raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@asynccontextmanager
async def locked_database(
    lock: WorkspaceLock,
    path: Path,
    info: dict[str, Any],
    lock_wait: float = 0.0,
    prepared: Preparation | None = None,
    shared: bool = True,
) -> AsyncIterator[Database]:
    """Take the workspace ``lock`` (waiting up to ``lock_wait`` seconds, off the
    event loop), open the database at ``path``; close and release on exit.
    With ``prepared`` (for this ``lock`` and ``path``), its thread took the
    lock and created the database. ``shared`` (the default): the lock is held
    alongside the workspace's other processes, and the database is marked as
    theirs too (``Database.cluster``: the runtime joins them as a node)."""
    if prepared is None:
        await anyio.to_thread.run_sync(lock.acquire, info, lock_wait, shared)
    else:
        assert prepared.lock is lock and prepared.path == path
        prepared.wait()
    try:
        try:
            db = await Database.open(path)
            # Other processes write the file too: nothing read stays current.
            db.cluster = shared
            db.caches_reads = not shared
        finally:
            if prepared is not None:
                prepared.close()
        try:
            yield db
        finally:
            with anyio.CancelScope(shield=True):
                await db.close()
    finally:
        lock.release()
