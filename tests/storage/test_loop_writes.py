"""Small SQLite writes are committed on the event loop (appserver/storage/sqlite_writes.py),
larger ones and those the file is not free for on the database thread, as before."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from appserver.storage.db import SqliteDatabase
from appserver.storage.sqlite_writes import INLINE_MAX_ROWS, THREAD_EVERY

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
        assert loop_writer is not None
        assert loop_writer._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
    finally:
        other.close()
        await db.close()


async def test_one_batch_in_so_many_goes_to_the_thread(tmp_path: Path) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        count = THREAD_EVERY * 2
        threads = [await db.run_transaction(note, index, rows=1) for index in range(count)]
        assert len(threads) - threads.count(LOOP) == 2
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


@pytest.mark.parametrize("failing", [0, 1])
async def test_a_failing_write_on_the_loop_undoes_only_itself(tmp_path: Path, failing: int) -> None:
    db = await open_with_notes(tmp_path / "app.db")
    try:
        errors: list[BaseException] = []

        async def insert(note_id: int, body: str | None) -> None:
            try:
                await db.write(
                    [
                        ("INSERT INTO notes (id, body) VALUES (?, 'first')", (note_id * 10,)),
                        ("INSERT INTO notes (id, body) VALUES (?, ?)", (note_id * 10 + 1, body)),
                    ]
                )
            except sqlite3.IntegrityError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for note_id in range(2):
                tg.start_soon(insert, note_id, None if note_id == failing else "second")
        assert len(errors) == 1
        kept = 1 - failing
        assert await ids(db) == [kept * 10, kept * 10 + 1]
    finally:
        await db.close()
