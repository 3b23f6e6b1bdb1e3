"""Opening the PostgreSQL store that several nodes share (``--store postgresql://``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from appserver.storage.db import Database
from appserver.storage.lock import WorkspaceLock


@asynccontextmanager
async def shared_database(
    url: str, lock: WorkspaceLock, info: dict[str, Any]
) -> AsyncIterator[Database]:
    """Open the PostgreSQL database at ``url`` that several nodes share.

    ``lock`` is this node's own file (``.craft/nodes/<node>.lock``), held for
    the endpoints it records, not to keep other nodes out: they share the
    workspace by design."""
    from appserver.storage.postgres import PostgresDatabase  # asyncpg only when asked

    await anyio.to_thread.run_sync(lock.acquire, info, 0.0)
    try:
        db = await PostgresDatabase.open(url)
        try:
            yield db
        finally:
            with anyio.CancelScope(shield=True):
                await db.close()
    finally:
        lock.release()
