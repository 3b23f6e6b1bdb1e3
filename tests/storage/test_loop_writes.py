"""Small SQLite writes are committed on the event loop (appserver/storage/sqlite_writes.py),
larger ones and those the file is not free for on the database thread, as before."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from appserver.storage.db import SqliteDatabase
from appserver.storage.sqlite_writes import (
    INLINE_MAX_BYTES,
    INLINE_MAX_ROWS,
    THREAD_EVERY,
    LoopWriter,
    Write,
    commit_writes,
    text_size,
)

LOOP = threading.get_ident()


def note(conn: sqlite3.Connection, note_id: int) -> int:
    """Insert one note; the thread it ran on."""
    conn.execute("INSERT INTO notes (id, body) VALUES (?, 'n')", (note_id,))
    return threading.get_ident()


async def open_with_notes(path: Path) -> SqliteDatabase:
    db = await SqliteDatabase.open(path)
    await db.write([("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)", ())])
    return db


async def ids(db: SqliteDatabase) -> list[int]:
    return [row[0] for row in await db.fetch("SELECT id FROM notes ORDER BY id")]


async def test_a_small_write_runs_on_the_loop_and_an_unsized_one_on_the_thread(
    tmp_path: Path,
) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        assert await db.run_transaction(note, 1, rows=1) == LOOP
        assert await db.run_transaction(note, 2) != LOOP  # work of unknown size
        assert await db.run_transaction(note, 3, rows=INLINE_MAX_ROWS + 1) != LOOP
        await db.write([("INSERT INTO notes (id, body) VALUES (4, 'w')", ())])
        assert await ids(db) == [1, 2, 3, 4]
    finally:
        await db.close()


async def test_a_batch_too_large_for_the_loop_goes_to_the_thread_whole(tmp_path: Path) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        ran_on: list[int] = []
        half = INLINE_MAX_ROWS // 2 + 1  # two of these are over the limit together

        async def run(note_id: int) -> None:
            ran_on.append(await db.run_transaction(note, note_id, rows=half))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, 1)
            tg.start_soon(run, 2)
        assert len(ran_on) == 2 and LOOP not in ran_on
        assert await ids(db) == [1, 2]
    finally:
        await db.close()


async def test_a_write_another_process_holds_the_file_for_waits_on_the_thread(
    tmp_path: Path,
) -> None:
    """The loop never waits for a lock: the write goes to the thread, which waits
    (busy_timeout) until the other connection commits, then writes."""
    db = await open_with_notes(tmp_path / "app.db")
    other = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO notes (id, body) VALUES (1, 'other')")
        ran_on: list[int] = []

        async def run() -> None:
            ran_on.append(await db.run_transaction(note, 2, rows=1))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.wait_all_tasks_blocked()  # refused on the loop, waiting on the thread
            assert ran_on == []
            other.execute("COMMIT")
        assert ran_on != [LOOP] and len(ran_on) == 1
        assert await ids(db) == [1, 2]
        # The loop's own connection is never the one that waits.
        loop_writer = db._loop_writer
        assert loop_writer is not None and loop_writer._conn is not None
        assert loop_writer._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
    finally:
        other.close()
        await db.close()


async def test_two_batches_in_so_many_go_to_the_thread(tmp_path: Path) -> None:
    """One that may checkpoint the log and the one after it, which restarts it."""
    db = await open_with_notes(tmp_path / "app.db")
    try:
        count = THREAD_EVERY * 4
        threads = [await db.run_transaction(note, index, rows=1) for index in range(count)]
        on_thread = [index for index, ident in enumerate(threads) if ident != LOOP]
        pairs = list(zip(on_thread[0::2], on_thread[1::2], strict=True))
        assert len(pairs) == count // THREAD_EVERY
        assert all(second == first + 1 for first, second in pairs)
    finally:
        await db.close()


async def test_a_batch_carrying_much_text_goes_to_the_thread(tmp_path: Path) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        assert await db.run_transaction(note, 1, rows=1, text=INLINE_MAX_BYTES + 1) != LOOP
        assert await db.run_transaction(note, 2, rows=1, text=100) == LOOP
        big = [("INSERT INTO notes (id, body) VALUES (?, ?)", (3, "x" * (INLINE_MAX_BYTES + 1)))]
        assert text_size(big) == INLINE_MAX_BYTES + 1
        writer = LoopWriter(tmp_path / "app.db")
        try:
            assert writer.try_batch([Write(big, rows=1, text=text_size(big))]) is None
        finally:
            writer.close()
    finally:
        await db.close()


async def test_a_transaction_that_cannot_begin_on_the_loop_goes_to_the_thread(
    tmp_path: Path,
) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        loop_writer = db._loop_writer
        assert loop_writer is not None
        connection = loop_writer._conn
        assert connection is not None
        # Its BEGIN IMMEDIATE now fails, not as BUSY, and takes the file's lock:
        # the connection is given up (its transaction rolled back, the lock freed).
        connection.execute("BEGIN")
        assert await db.run_transaction(note, 1, rows=1) != LOOP
        assert loop_writer._conn is None
        assert await db.run_transaction(note, 2, rows=1) != LOOP
        assert await ids(db) == [1, 2]
    finally:
        await db.close()


class Stop(BaseException):
    """Not an Exception: what a KeyboardInterrupt in a write looks like."""


async def test_a_base_exception_on_the_loop_reaches_every_writer_of_its_batch(
    tmp_path: Path,
) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        outcomes: list[str] = []

        def stop(conn: sqlite3.Connection) -> None:
            raise Stop

        async def run(work_index: int) -> None:
            try:
                if work_index == 0:
                    await db.run_transaction(stop, rows=1)
                else:
                    await db.run_transaction(note, work_index, rows=1)
                outcomes.append("done")
            except Stop:
                outcomes.append("stopped")

        with anyio.fail_after(10):  # a writer left waiting would hang here
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, 0)
                tg.start_soon(run, 1)
        assert outcomes == ["stopped", "stopped"]  # rolled back together, as on the thread
        assert await db.run_transaction(note, 2, rows=1) == LOOP  # the connection is fine
        assert await ids(db) == [2]
    finally:
        await db.close()


async def test_work_on_the_loop_reads_rows_as_on_the_thread(tmp_path: Path) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:

        def row_type(conn: sqlite3.Connection) -> type:
            return type(conn.execute("SELECT 1 AS one").fetchone())

        assert await db.run_transaction(row_type, rows=1) is sqlite3.Row
        assert await db.run_transaction(row_type) is sqlite3.Row
    finally:
        await db.close()


async def test_the_write_ahead_log_stays_bounded(tmp_path: Path) -> None:
    """The loop's connection never checkpoints (fsyncs); the thread's does, so
    the write-ahead log is reused instead of growing with every write."""
    db = await open_with_notes(tmp_path / "app.db")
    try:
        body = "x" * 4000  # about a page a write
        for index in range(3000):
            await db.write([("INSERT INTO notes (id, body) VALUES (?, ?)", (10_000 + index, body))])
        wal = tmp_path / "app.db-wal"
        # ~12 MB written; the log is checkpointed past 1,000 pages (~4 MB) and reused.
        assert wal.stat().st_size < 8 * 1024 * 1024
    finally:
        await db.close()


def two_notes(conn: sqlite3.Connection, note_id: int, body: str | None) -> int:
    conn.execute("INSERT INTO notes (id, body) VALUES (?, 'first')", (note_id * 10,))
    conn.execute("INSERT INTO notes (id, body) VALUES (?, ?)", (note_id * 10 + 1, body))
    return threading.get_ident()


@pytest.mark.parametrize("failing", [0, 1])
async def test_a_failing_write_on_the_loop_undoes_only_itself(tmp_path: Path, failing: int) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        outcomes: list[object] = []

        async def insert(note_id: int, body: str | None) -> None:
            try:
                outcomes.append(await db.run_transaction(two_notes, note_id, body, rows=2))
            except sqlite3.IntegrityError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for note_id in range(2):
                tg.start_soon(insert, note_id, None if note_id == failing else "second")
        assert sorted(map(type, outcomes), key=str) == sorted(
            [int, sqlite3.IntegrityError], key=str
        )
        assert LOOP in outcomes  # the one that succeeded ran on the loop
        kept = 1 - failing
        assert await ids(db) == [kept * 10, kept * 10 + 1]
    finally:
        await db.close()


def test_a_rollback_that_fails_too_does_not_hide_the_cause() -> None:
    """A full disk fails the COMMIT and then the ROLLBACK: the COMMIT's error is
    what the writers hear (the connection left in its transaction is closed by
    the loop writer, see above)."""

    class FullDisk:
        in_transaction = True

        def execute(self, sql: str, args: object = ()) -> None:
            if sql == "COMMIT":
                raise sqlite3.OperationalError("database or disk is full")
            if sql == "ROLLBACK":
                raise sqlite3.OperationalError("cannot rollback")

    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        commit_writes(FullDisk(), [Write([("INSERT INTO notes (id) VALUES (1)", ())], rows=1)])  # type: ignore[arg-type]
