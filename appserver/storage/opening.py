"""Opening a workspace's SQLite database under its lock, possibly ahead of time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from appserver.storage.db import Database
from appserver.storage.lock import WorkspaceLock
from appserver.storage.preparation import Preparation

__all__ = ["Preparation", "locked_database"]


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
