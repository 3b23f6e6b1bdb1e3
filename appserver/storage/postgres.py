"""The PostgreSQL engine: an asyncpg pool behind :class:`~appserver.storage.db.Database`.

asyncpg rather than psycopg 3: one package with its pool built in, the binary
protocol, and ``LISTEN`` as a callback on a connection (which the cluster's
event feed needs), where psycopg needs its separate pool package and a task
per ``notifies()`` generator. See docs/scale-out.md.

Repositories write SQL for SQLite with ``?`` placeholders; :func:`translate`
rewrites the few spellings that differ, once per statement text.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import anyio
import asyncpg

from appserver.storage.db import (
    Database,
    Row,
    Transaction,
    load_migrations,
    migrations_dir,
    split_sql,
)

log = logging.getLogger("appserver.storage")

# Taken around migrations, so nodes starting together apply each one once.
_MIGRATION_LOCK = 0x61707073  # "apps"

_QUOTED_OR_MARK = re.compile(r"'(?:[^']|'')*'|\?")
_SCALAR_MAX = re.compile(r"\bMAX\((\w+), \?\)")
_IS_MARK = re.compile(r"\bIS \?")
_INSERT_OR_IGNORE = re.compile(r"^INSERT OR IGNORE INTO\b")
_LIKE = re.compile(r"\bLIKE\b")


@lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """SQLite's spelling of a statement in PostgreSQL's.

    - ``?`` placeholders become ``$1``, ``$2``, ... (not inside literals);
    - the two-argument scalar ``MAX(column, ?)`` becomes ``GREATEST``;
    - ``IS ?`` (null-safe equality) becomes ``IS NOT DISTINCT FROM``;
    - ``INSERT OR IGNORE`` becomes ``INSERT ... ON CONFLICT DO NOTHING``;
    - ``LIKE`` becomes ``ILIKE``: SQLite's LIKE ignores the case of ASCII letters.

    ``COLLATE NOCASE`` needs no rewrite: the schema defines an ICU collation
    of that name (migrations/postgresql/0006).
    """
    sql = _SCALAR_MAX.sub(r"GREATEST(\1, ?)", sql)
    sql = _IS_MARK.sub("IS NOT DISTINCT FROM ?", sql)
    sql = _LIKE.sub("ILIKE", sql)
    if _INSERT_OR_IGNORE.match(sql):
        sql = _INSERT_OR_IGNORE.sub("INSERT INTO", sql) + " ON CONFLICT DO NOTHING"
    counter = 0

    def number(match: re.Match[str]) -> str:
        nonlocal counter
        if match.group(0) != "?":
            return match.group(0)
        counter += 1
        return f"${counter}"

    return _QUOTED_OR_MARK.sub(number, sql)


def _rowcount(status: str) -> int:
    """Rows changed, from a command tag such as ``UPDATE 3`` or ``INSERT 0 1``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class IntegrityErrors:
    """Turns asyncpg's constraint errors into :data:`~appserver.storage.db.IntegrityError`,
    which callers catch whatever the engine."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
            raise sqlite3.IntegrityError(str(exc)) from exc


class _PostgresTransaction:
    """:class:`~appserver.storage.db.Transaction` on one pooled connection."""

    __slots__ = ("_conn",)

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        with IntegrityErrors():
            return _rowcount(await self._conn.execute(translate(sql), *args))

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with IntegrityErrors():
                await self._conn.executemany(translate(sql), rows)

    async def fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with IntegrityErrors():
            return list(await self._conn.fetch(translate(sql), *args))


async def _roll_back_if_open(conn: asyncpg.Connection) -> None:
    """Reset a connection going back to the pool: only a transaction left
    open is rolled back. asyncpg's default reset (unlock every advisory lock,
    close cursors, UNLISTEN, RESET ALL) costs a round trip at every release,
    a quarter of a cluster turn's queries; no pooled connection here takes
    session state (the advisory locks and LISTEN have connections of their own)."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class PostgresDatabase(Database):
    """A pool of connections to one PostgreSQL database, shared by every node."""

    dialect = "postgresql"
    caches_reads = False  # another node may have written since
    cluster = True  # shared by nodes by design

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        self.pool = pool
        self.url = url
        self.generation = 0

    @classmethod
    async def open(  # type: ignore[override]
        cls, url: str, *, min_size: int = 2, max_size: int = 16
    ) -> PostgresDatabase:
        """Connect to ``url`` and apply pending migrations."""
        pool = await asyncpg.create_pool(
            url, min_size=min_size, max_size=max_size, reset=_roll_back_if_open
        )
        db = cls(pool, url)
        try:
            await db.migrate()
        except BaseException:
            await pool.close()
            raise
        return db

    async def migrate(self) -> list[str]:
        done: list[str] = []
        # A connection of its own: the pool's connections are not reset of
        # session state (advisory locks) when released.
        conn = await asyncpg.connect(self.url)
        try:
            await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
                )
                applied = {
                    row[0] for row in await conn.fetch("SELECT version FROM schema_migrations")
                }
                for version, name, sql in load_migrations(migrations_dir("postgresql")):
                    if version in applied:
                        continue
                    async with conn.transaction():
                        for statement in split_sql(sql):
                            await conn.execute(statement)
                        await conn.execute(
                            "INSERT INTO schema_migrations (version, name, applied_at)"
                            " VALUES ($1, $2, $3)",
                            version,
                            name,
                            datetime.now(UTC).isoformat(),
                        )
                    log.debug("applied migration %s (postgresql)", name)
                    done.append(name)
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)
        finally:
            await conn.close()
        return done

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        return self._transaction()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Transaction]:
        async with self.pool.acquire() as conn, conn.transaction():
            yield _PostgresTransaction(conn)
        self.generation += 1

    async def write(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        # Shielded, as SQLite's grouped writes are: once asked for, a write is
        # carried out even if its caller is cancelled.
        with anyio.CancelScope(shield=True):
            async with self.pool.acquire() as conn:
                with IntegrityErrors():
                    async with conn.transaction():
                        for sql, args in statements:
                            await conn.execute(translate(sql), *args)
            self.generation += 1

    async def fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with IntegrityErrors():
            return list(await self.pool.fetch(translate(sql), *args))

    async def close(self) -> None:
        await self.pool.close()
