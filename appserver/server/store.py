"""The database and lock a server opens: the workspace's SQLite file under the
workspace lock, or the PostgreSQL database several nodes share (``--store``) under
this node's own lock file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from appserver import __version__
from appserver.server.config import ServerConfig
from appserver.storage.craft_ignore import write_craft_gitignore
from appserver.storage.db import Database
from appserver.storage.lock import WorkspaceLock
from appserver.storage.opening import Preparation, locked_database
from appserver.storage.stores import shared_database


@asynccontextmanager
async def open_store(
    config: ServerConfig, lock_wait: float, prepared: Preparation | None
) -> AsyncIterator[tuple[Database, WorkspaceLock]]:
    """The open database and the held lock, both released on exit.

    ``lock_wait``: seconds to wait for another process to leave the workspace;
    ``prepared``: the workspace's lock and database, already being taken and
    created in a thread (never for a shared store)."""
    info = {"workspacePath": str(config.workspace), "version": __version__}
    write_craft_gitignore(config.craft_dir)  # its machine state stays out of the user's git
    shared = config.shared_store
    if shared is not None:
        if prepared is not None:
            raise ValueError("a shared store is not prepared ahead")
        node_lock = WorkspaceLock(config.craft_dir / "nodes" / f"{config.node_id}.lock")
        async with shared_database(shared, node_lock, info) as db:
            yield db, node_lock
        return
    lock = WorkspaceLock(config.craft_dir / "appserver.lock")
    if prepared is not None:
        if (prepared.lock.path, prepared.path) != (lock.path, config.database_path):
            raise ValueError("prepared for another workspace or database")
        lock = prepared.lock
    async with locked_database(lock, config.database_path, info, lock_wait, prepared) as db:
        yield db, lock
