"""Opening the database and applying the numbered migrations."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import aiosqlite
import anyio

log = logging.getLogger("appserver.storage")

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def migrations_dir() -> Path:
    """Top-level ``migrations/`` in a checkout; bundled copy in an installed wheel."""
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files("appserver") / "migrations"))


def load_migrations(directory: Path | None = None) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for each ``NNNN_name.sql``, in order."""
    found = []
    for path in sorted((directory or migrations_dir()).iterdir()):
        match = _MIGRATION_NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path.name, path.read_text("utf-8")))
    versions = [version for version, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"migrations must be numbered 0001.. without gaps: {versions}")
    return found


class Database:
    """One aiosqlite connection (WAL, foreign keys on) shared by repositories.

    Statements run in autocommit mode; multi-statement writes go through
    :meth:`transaction`, which serialises writers so their statements never
    interleave on the shared connection.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self._write_lock = anyio.Lock()

    @classmethod
    async def open(cls, path: Path | str) -> Database:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path), isolation_level=None)
        conn.row_factory = aiosqlite.Row
        await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute("PRAGMA synchronous = NORMAL")
        await conn.execute("PRAGMA busy_timeout = 5000")
        db = cls(conn)
        await db.migrate()
        return db

    async def migrate(self) -> list[str]:
        """Apply pending migrations in order; returns the names applied."""
        await self.conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        async with self.conn.execute("SELECT version FROM schema_migrations") as cursor:
            applied = {row[0] async for row in cursor}
        done = []
        for version, name, sql in load_migrations():
            if version in applied:
                continue
            async with self.transaction():
                # executescript would COMMIT our transaction; run statements one by one.
                for statement in _split_sql(sql):
                    await self.conn.execute(statement)
                await self.conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, datetime.now(UTC).isoformat()),
                )
            log.info("applied migration %s", name)
            done.append(name)
        return done

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error)."""
        async with self._write_lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.conn.execute("ROLLBACK")
                raise
            else:
                with anyio.CancelScope(shield=True):
                    await self.conn.execute("COMMIT")

    async def close(self) -> None:
        await self.conn.close()


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (no semicolons inside literals there)."""
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]
