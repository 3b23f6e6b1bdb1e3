"""Opening the database and applying the numbered migrations."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar, cast

import aiosqlite
import anyio

from appserver.storage.sqlite_setup import MIGRATIONS_TABLE, PRAGMAS
from appserver.storage.sqlite_writes import LoopWriter, Write, run_writes, text_size

log = logging.getLogger("appserver.storage")

#: A write that broke a uniqueness or foreign-key rule, whichever the engine.
IntegrityError = sqlite3.IntegrityError

_T = TypeVar("_T")
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def migrations_dir(dialect: str = "sqlite") -> Path:
    """Top-level ``migrations/`` in a checkout (``migrations/postgresql/`` for
    PostgreSQL); the bundled copy in an installed wheel."""
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if not checkout.is_dir():
        from importlib import resources  # only an installed wheel needs it (~4 ms to import)

        checkout = Path(str(resources.files("appserver") / "migrations"))
    return checkout / "postgresql" if dialect == "postgresql" else checkout


def load_migrations(directory: Path | None = None) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for each ``NNNN_name.sql``, in order."""
    found = []
    for path in sorted((directory or migrations_dir()).iterdir()):
        match = _MIGRATION_NAME.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path.name, path.read_text("utf-8")))
    versions = [version for version, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"migrations must be numbered 0001.. without gaps: {versions}")
    return found


#: A result row, by column name or position: ``sqlite3.Row`` or ``asyncpg.Record``.
Row: TypeAlias = Any


class Transaction(Protocol):
    """Statements inside one open transaction (see :meth:`Database.transaction`)."""

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; returns how many rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of arguments."""
        ...

    async def fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """Rows of a read inside the transaction."""
        ...


class Database(ABC):
    """The storage engine under every repository: SQLite or PostgreSQL.

    Repositories write SQL with ``?`` placeholders in the subset both engines
    share; the PostgreSQL engine rewrites what differs (see
    ``appserver.storage.postgres``). Open one with :func:`open_store`.
    """

    #: ``"sqlite"`` or ``"postgresql"``.
    dialect: str = "sqlite"
    #: Whether rows read here stay current until :attr:`generation` changes:
    #: true for one process owning its SQLite file, false when other nodes
    #: write the same database.
    caches_reads: bool = True
    #: Bumped by every write transaction: a value read while the generation
    #: was G is current exactly as long as the generation is still G.
    generation: int = 0
    #: Whether this process created the database (its first migration ran at
    #: open): nothing in it came with the workspace's files.
    created: bool = False
    #: Whether other processes may share it: the runtime then joins them as a
    #: node (runtime/cluster.py). True for PostgreSQL and for a workspace's file.
    cluster: bool = False

    @staticmethod
    async def open(path: Path | str) -> SqliteDatabase:
        """An SQLite database at ``path`` (created and migrated)."""
        return await SqliteDatabase.open(path)

    @abstractmethod
    async def migrate(self) -> list[str]:
        """Apply pending migrations in order; returns the names applied."""

    @abstractmethod
    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """One transaction: committed on exit, rolled back on error."""

    @abstractmethod
    async def write(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run ``statements`` as one transaction; returns once it is committed."""

    @abstractmethod
    async def fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """All rows of a read."""

    async def lookup_or_fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """Rows of a small indexed read (primary-key lookups), by the fastest path."""
        return await self.fetch(sql, args)

    @abstractmethod
    async def close(self) -> None:
        """Release the connections."""


def parse_store(url: str | None, workspace: Path) -> tuple[str, str]:
    """``("sqlite", path)`` or ``("postgresql", url)`` for a ``--store`` value.

    ``None`` or ``""``: the embedded default, ``<workspace>/.craft/appserver.db``.
    ``sqlite:///rel/path`` (relative to the workspace) and ``sqlite:////abs/path``;
    ``postgresql://...`` and ``postgres://...`` as libpq accepts them.
    """
    if not url:
        return "sqlite", str(workspace / ".craft" / "appserver.db")
    scheme, sep, rest = url.partition(":")
    scheme = scheme.lower()
    if sep and scheme in ("postgresql", "postgres"):
        return "postgresql", url
    if sep and scheme == "sqlite":
        # As SQLAlchemy spells them: sqlite:///rel.db, sqlite:////abs/path.db.
        path = rest.removeprefix("//").removeprefix("/") if rest.startswith("//") else rest
        if not path:
            raise ValueError(f"store URL names no file: {url!r}")
        return "sqlite", str(workspace / path)  # an absolute path stays as it is
    raise ValueError(
        f"unknown store {url!r}: use sqlite:///path/to/file.db or postgresql://user@host/db"
    )


def check_store(url: str | None, workspace: Path) -> tuple[str, str]:
    """:func:`parse_store`, refusing (``ValueError``, one line naming the path) a
    SQLite file the user named whose directory does not exist: a mistyped path
    would otherwise become new directories in the workspace (the default
    ``.craft/`` is the server's own and is still made)."""
    kind, location = parse_store(url, workspace)
    if url and kind == "sqlite":
        directory = Path(location).parent
        if not directory.is_dir():
            raise ValueError(
                f"--store {url}: no directory {directory} for the database file "
                "(create it first; the server makes no directories for a store you name)"
            )
    return kind, location


class SqliteDatabase(Database):
    """One aiosqlite connection (WAL, foreign keys on) shared by repositories,
    and, for a file, two used on the event loop: one reads small indexed
    lookups, the other commits small grouped writes.

    Statements run in autocommit mode; multi-statement writes go through
    :meth:`write` (commits grouped, on the loop when small, else in one trip
    to the database thread) or :meth:`transaction`, which serialise writers
    so their statements never interleave on the shared connection.
    """

    def __init__(self, conn: aiosqlite.Connection, reader: sqlite3.Connection | None = None):
        self.conn = conn
        self._reader = reader
        self._loop_writer: LoopWriter | None = None  # small writes, on the loop (a file only)
        # Taken without a turn of the loop when free: _commit_queued takes its own.
        self._write_lock = anyio.Lock(fast_acquire=True)
        self.generation = 0
        self._writes: list[Write] = []  # queued for the next grouped commit
        self._committing = False

    @classmethod
    async def open(cls, path: Path | str) -> SqliteDatabase:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path), isolation_level=None)
        conn.row_factory = aiosqlite.Row
        db: SqliteDatabase | None = None
        try:
            for pragma in PRAGMAS:
                await conn.execute(pragma)
            db = cls(conn)
            db.created = await db._holds_nothing()
            await db.migrate()
            if str(path) != ":memory:":
                db._open_loop_connections(path)
        except BaseException:
            # A full disk fails here: close, or aiosqlite's thread keeps the process alive.
            with anyio.CancelScope(shield=True):
                try:
                    if db is not None:
                        await db.close()
                    else:
                        await conn.close()
                except Exception:
                    log.debug("closing the database after a failed open failed", exc_info=True)
            raise
        assert db is not None
        return db

    def _open_loop_connections(self, path: Path | str) -> None:
        # A second, read-only connection used on the event loop itself for
        # indexed point lookups: WAL lets it read committed data while the
        # writer works, and ~20 us on the loop beats a round trip to
        # aiosqlite's thread. Anything that scans stays on the thread.
        reader = sqlite3.connect(
            f"file:{Path(path).resolve()}?mode=ro", uri=True, check_same_thread=False
        )
        self._reader = reader
        reader.row_factory = sqlite3.Row
        reader.execute("PRAGMA query_only = ON")
        self._loop_writer = LoopWriter(path)  # small writes (storage/sqlite_writes.py)

    async def _holds_nothing(self) -> bool:
        """Whether the file holds no schema and no applied migration: this
        process is creating it (a hand-made file that drops tables to have its
        migrations run again is not new)."""
        async with self.conn.execute(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "AND name != 'schema_migrations'"
        ) as cursor:
            if await cursor.fetchone() is not None:
                return False
        async with self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ) as cursor:
            if await cursor.fetchone() is None:
                return True
        async with self.conn.execute("SELECT 1 FROM schema_migrations LIMIT 1") as cursor:
            return await cursor.fetchone() is None

    async def migrate(self) -> list[str]:
        """Apply pending migrations in order; returns the names applied.

        All of them in one trip to the database thread (a new database's ~180
        statements were as many trips: ~14 ms of a start); each migration is
        still its own transaction."""
        migrations = load_migrations()
        done: list[str] = []  # filled as each commits: those before a failure count too
        try:
            async with self._write_lock:
                with anyio.CancelScope(shield=True):  # a transaction is never left open
                    await self.conn._execute(  # type: ignore[no-untyped-call]
                        _apply_migrations, self.conn._conn, migrations, done
                    )
        finally:
            if done:
                self.generation += 1
            for name in done:
                log.debug("applied migration %s", name)
        return done

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error)."""
        return self._transaction()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Transaction]:
        async with self._write_lock:
            # Shielded: a cancellation landing while BEGIN runs would otherwise
            # leave the transaction open, and every later write would fail.
            with anyio.CancelScope(shield=True):
                await self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTransaction(self.conn)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.conn.execute("ROLLBACK")
                    self.generation += 1
                raise
            else:
                with anyio.CancelScope(shield=True):
                    await self.conn.execute("COMMIT")
                    self.generation += 1

    async def write(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run ``statements`` as one transaction; returns once it is committed.

        The writes begun in one turn of the event loop, and those that arrive
        while a commit is under way, are grouped: a single commit for all of
        them, each in its own savepoint, so one failing write (raised to its
        caller) never undoes another. A small batch commits on the loop, a
        larger one in one trip to the database thread (:mod:`~appserver.storage.
        sqlite_writes`), so each statement must touch the rows of one key (an
        insert, an update by key), not scan. Once queued, a write is carried
        out even if its caller is cancelled, like a shielded transaction.
        """
        await self._grouped(Write(statements, rows=len(statements), text=text_size(statements)))

    async def run_transaction(
        self, work: Callable[..., _T], *args: Any, rows: int | None = None, text: int = 0
    ) -> _T:
        """``work(connection, *args)`` in a transaction, grouped with concurrent
        writes as :meth:`write` is (its own savepoint: what it raises undoes only
        its own statements); on the database thread. With ``rows`` (at most how
        many rows it touches) and ``text`` (the characters and bytes it writes)
        it may run on the event loop instead, when small: it must then be quick,
        and may run twice (a commit another process refused is done again on
        the thread), so it must change nothing but the database."""
        write = Write((), work, args, rows, text)
        await self._grouped(write)
        return cast(_T, write.result)

    async def _grouped(self, write: Write) -> None:
        self._writes.append(write)
        if self._committing:
            await write.done.wait()
        else:
            self._committing = True
            try:
                with anyio.CancelScope(shield=True):
                    while self._writes:
                        await self._commit_queued()
            finally:
                self._committing = False
        if write.error is not None:
            raise write.error

    async def _commit_queued(self) -> None:
        """Commit the writes queued so far, after one turn of the loop (the
        writers it runs join the batch): on the loop when they are small
        (:class:`~appserver.storage.sqlite_writes.LoopWriter`), else in one
        trip to the database thread."""
        async with self._write_lock:
            # One turn of the loop (its writers join the batch); _grouped's scope
            # already shields it, so a bare yield (no scope of its own) will do.
            await asyncio.sleep(0)
            batch, self._writes = self._writes, []
            try:
                errors = None if self._loop_writer is None else self._loop_writer.try_batch(batch)
                if errors is None:
                    # aiosqlite runs the function on its connection's own thread
                    # (its public methods run one statement per trip).
                    errors = await self.conn._execute(  # type: ignore[no-untyped-call]
                        run_writes, self.conn._conn, batch
                    )
            except BaseException as exc:  # every writer of the batch hears of it
                errors = [exc] * len(batch)
            self.generation += 1
        for write, error in zip(batch, errors, strict=True):
            write.error = error
            write.done.set()

    async def fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """All rows of a read, in one trip to the database thread."""
        return list(await self.conn.execute_fetchall(sql, args))

    def lookup(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of a small indexed read (primary-key lookups), run right here.

        Only for queries that touch a handful of rows through an index; the
        statement cache makes these a few tens of microseconds.
        """
        if self._reader is None:
            raise RuntimeError("no read connection (in-memory database)")
        return self._reader.execute(sql, args).fetchall()

    async def lookup_or_fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        if self._reader is not None:
            return self.lookup(sql, args)
        return await self.fetch(sql, args)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._loop_writer is not None:
            self._loop_writer.close()
        await self.conn.close()


class _SqliteTransaction:
    """:class:`Transaction` on the shared aiosqlite connection."""

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        cursor = await self._conn.execute(sql, args)
        return cursor.rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._conn.executemany(sql, rows)

    async def fetch(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return list(await self._conn.execute_fetchall(sql, args))


def _apply_migrations(
    conn: sqlite3.Connection, migrations: list[tuple[int, str, str]], done: list[str]
) -> None:
    """The pending ``migrations``, each in its own ``BEGIN IMMEDIATE``
    transaction (on the database thread); each one's name is added to ``done``
    once it is committed."""
    conn.execute(MIGRATIONS_TABLE)
    applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    for version, name, sql in migrations:
        if version in applied:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process opening the file at once may have applied it.
            taken = "SELECT 1 FROM schema_migrations WHERE version = ?"
            if conn.execute(taken, (version,)).fetchone() is None:
                # executescript would COMMIT our transaction; run statements one by one.
                for statement in split_sql(sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, datetime.now(UTC).isoformat()),
                )
                applying: str | None = name
            else:
                applying = None
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with suppress(sqlite3.Error):  # a full disk may fail this too: the cause counts
                    conn.execute("ROLLBACK")
            raise
        if applying is not None:
            done.append(applying)


def split_sql(script: str) -> list[str]:
    """Split a migration into statements (no semicolons inside literals there)."""
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]
