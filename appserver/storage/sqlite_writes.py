"""Grouped SQLite writes, and the small ones run on the event loop itself.

A write transaction handed to aiosqlite's thread costs ~90 µs of CPU for the
trip alone (a queue, a wake-up of the loop through its self-pipe, the
interpreter lock passed twice); the commit of a few rows costs ~20 µs (WAL,
``synchronous = NORMAL``: no fsync at commit). A turn makes one write per
lifecycle event, so the trips were most of a short turn's storage cost.

:class:`LoopWriter` runs a small write (up to :data:`INLINE_MAX_ROWS`
statements or rows) on a connection of its own, right on the loop, when no
other write of this process is under way. It never waits there:

* its ``busy_timeout`` is 0, so a lock held by another process (another node
  on the workspace) sends the write to the database thread, which waits for
  it as before;
* SQLite's automatic checkpoint (the fsyncs) is off on it; one write in
  :data:`THREAD_EVERY` goes to the thread anyway, whose connection runs the
  checkpoint when the log has grown past its threshold, off the loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from appserver.storage.sqlite_setup import PRAGMAS

INLINE_MAX_ROWS = 256  # a larger batch goes to the thread, which runs it beside the loop
THREAD_EVERY = 64  # one batch in this many goes to the thread (and its checkpoint)


class Write:
    """Statements of one :meth:`Database.write` (or the work of one
    :meth:`SqliteDatabase.run_transaction`), and how it ended. ``rows``: how
    many rows it touches at most, if that is known and small (``None``: run it
    on the database thread)."""

    __slots__ = ("args", "done", "error", "result", "rows", "statements", "work")

    def __init__(
        self,
        statements: Sequence[tuple[str, Sequence[Any]]],
        work: Callable[..., Any] | None = None,
        args: Sequence[Any] = (),
        rows: int | None = None,
    ) -> None:
        self.statements = statements
        self.work = work
        self.args = args
        self.rows = rows
        self.done = anyio.Event()
        self.error: BaseException | None = None
        self.result: Any = None


def run_writes(conn: sqlite3.Connection, batch: list[Write]) -> list[BaseException | None]:
    """One transaction for ``batch``, a savepoint per write."""
    errors: list[BaseException | None] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for write in batch:
            conn.execute("SAVEPOINT write")
            try:
                for sql, args in write.statements:
                    conn.execute(sql, args)
                if write.work is not None:
                    write.result = write.work(conn, *write.args)
            except Exception as exc:
                conn.execute("ROLLBACK TO write")
                errors.append(exc)
            else:
                errors.append(None)
            conn.execute("RELEASE write")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return errors


class LoopWriter:
    """A write connection used on the event loop for small writes."""

    def __init__(self, path: Path | str) -> None:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            for pragma in PRAGMAS:
                conn.execute(pragma)
            conn.execute("PRAGMA busy_timeout = 0")  # never wait on the loop
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # the thread's connection does it
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._since_thread = 0

    def try_batch(self, batch: list[Write]) -> list[BaseException | None] | None:
        """Commit ``batch`` here if it is small and the file is free: each
        write's error (``None``: done), as the thread's commit would give;
        ``None``: not done, send it to the database thread."""
        rows = 0
        for write in batch:
            if write.rows is None:
                return None
            rows += write.rows
        if rows > INLINE_MAX_ROWS:
            return None
        self._since_thread += 1
        if self._since_thread >= THREAD_EVERY:
            self._since_thread = 0
            return None
        try:
            return run_writes(self._conn, batch)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                return None  # another process writes (rolled back): the thread waits for it
            return [exc] * len(batch)
        except Exception as exc:
            return [exc] * len(batch)

    def close(self) -> None:
        self._conn.close()
