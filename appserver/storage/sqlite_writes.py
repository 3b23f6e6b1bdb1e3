"""Grouped SQLite writes, and the small ones run on the event loop itself.

A write transaction handed to aiosqlite's thread costs ~90 µs of CPU for the
trip alone (a queue, a wake-up of the loop through its self-pipe, the
interpreter lock passed twice); the commit of a few rows costs ~20 µs (WAL,
``synchronous = NORMAL``: no fsync at commit). A turn makes one write per
lifecycle event, so the trips were most of a short turn's storage cost.

:class:`LoopWriter` commits a small batch (its writes' sizes known, at most
:data:`INLINE_MAX_ROWS` statements or rows and :data:`INLINE_MAX_BYTES` of
text) on a connection of its own, right on the loop, when no other write of
this process is under way. It does not wait there:

* its ``busy_timeout`` is 0, so a lock held by another process (another node
  on the workspace), or any other failure to begin, sends the batch to the
  database thread, which waits for the lock as before;
* SQLite's automatic checkpoint (its fsyncs) is off on it. One batch in
  :data:`THREAD_EVERY` goes to the thread anyway, whose connection checkpoints
  once the log has grown past its threshold, and so does the batch after it,
  which restarts the log from its beginning (and syncs its header);
* a transaction it cannot end (a failed ``ROLLBACK``) closes it for good:
  every later batch goes to the thread, and the file's lock is never kept.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from appserver.storage.sqlite_setup import PRAGMAS

log = logging.getLogger("appserver.storage")

# A larger batch goes to the thread, which runs it beside the loop. Not fewer:
# short rows are mostly Python (~9 µs each here, ~37 ms for the largest), and on
# the thread that Python holds the interpreter lock the loop needs all the same,
# plus the trip and more checkpoints. A burst of 200 turns (batches of up to
# ~1,400 rows) used ~11 % less CPU a turn than with 256, ~3 % less than with 1,024.
INLINE_MAX_ROWS = 4096
INLINE_MAX_BYTES = 64 * 1024  # so does one carrying more text (an image, a long output)
THREAD_EVERY = 64  # two batches in this many go to the thread (and its checkpoint)

Statements = Sequence[tuple[str, Sequence[Any]]]


def text_size(statements: Statements) -> int:
    """The characters or bytes of the text and blob arguments of ``statements``."""
    return sum(
        len(value) for _, args in statements for value in args if isinstance(value, str | bytes)
    )


class Write:
    """Statements of one :meth:`Database.write` (or the work of one
    :meth:`SqliteDatabase.run_transaction`), and how it ended. ``rows``: how
    many rows it touches at most, when that is known (``None``: run it on the
    database thread); ``text``: the characters and bytes it writes."""

    __slots__ = ("args", "done", "error", "result", "rows", "statements", "text", "work")

    def __init__(
        self,
        statements: Statements,
        work: Callable[..., Any] | None = None,
        args: Sequence[Any] = (),
        rows: int | None = None,
        text: int = 0,
    ) -> None:
        self.statements = statements
        self.work = work
        self.args = args
        self.rows = rows
        self.text = text
        # asyncio's: one a write, and anyio's costs several calls more to make.
        self.done = asyncio.Event()
        self.error: BaseException | None = None
        self.result: Any = None


def run_writes(conn: sqlite3.Connection, batch: list[Write]) -> list[BaseException | None]:
    """One transaction for ``batch``, a savepoint per write (of several)."""
    conn.execute("BEGIN IMMEDIATE")
    return commit_writes(conn, batch)


def commit_writes(conn: sqlite3.Connection, batch: list[Write]) -> list[BaseException | None]:
    """``batch``'s writes, a savepoint each when there are several, and the
    ``COMMIT`` of the transaction begun for them (rolled back when that fails)."""
    errors: list[BaseException | None] = []
    # A write alone needs no savepoint: its failure rolls the whole transaction
    # back (two statements fewer for most commits: a write per loop iteration).
    alone = len(batch) == 1
    try:
        for write in batch:
            if not alone:
                conn.execute("SAVEPOINT write")
            try:
                for sql, args in write.statements:
                    conn.execute(sql, args)
                if write.work is not None:
                    write.result = write.work(conn, *write.args)
            except Exception as exc:
                if alone:
                    conn.execute("ROLLBACK")
                    return [exc]
                conn.execute("ROLLBACK TO write")
                errors.append(exc)
            else:
                errors.append(None)
            if not alone:
                conn.execute("RELEASE write")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            # A full disk may fail this too: the cause counts (and a connection
            # left in its transaction is dealt with by its caller).
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return errors


class LoopWriter:
    """A write connection used on the event loop for small batches."""

    def __init__(self, path: Path | str) -> None:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row  # as aiosqlite's: work sees the same rows
            for pragma in PRAGMAS:
                conn.execute(pragma)
            conn.execute("PRAGMA busy_timeout = 0")  # never wait on the loop
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # the thread's connection does it
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        self._batches = 0  # small batches seen

    def try_batch(self, batch: list[Write]) -> list[BaseException | None] | None:
        """Commit ``batch`` here if it is small and the file is free: each
        write's error (``None``: done), as the thread's commit would give;
        ``None``: not done (nothing of it stays), send it to the database thread."""
        conn = self._conn
        if conn is None or not _small(batch):
            return None
        self._batches += 1
        if self._batches % THREAD_EVERY in (0, 1):
            # Two batches in a row go to the thread: the first may checkpoint the
            # log, the second then restarts it, both with their fsyncs.
            return None
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                return None  # nothing ran: the thread waits for the lock, or meets the error
            return commit_writes(conn, batch)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                return None  # rolled back: the thread carries it out (work runs again there)
            return [exc] * len(batch)
        except Exception as exc:
            return [exc] * len(batch)
        finally:
            # A ROLLBACK that failed, or a BEGIN refused inside a transaction
            # (which SQLite leaves holding the file's write lock): never keep it.
            if conn.in_transaction:
                log.warning("the loop's write connection is closed: a transaction stayed open")
                self.close()

    def close(self) -> None:
        """Close the connection (an open transaction is rolled back); later
        batches go to the thread."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _small(batch: list[Write]) -> bool:
    rows = text = 0
    for write in batch:
        if write.rows is None:
            return False
        rows += write.rows
        text += write.text
    return rows <= INLINE_MAX_ROWS and text <= INLINE_MAX_BYTES
