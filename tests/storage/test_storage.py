"""SQLite storage: migrations, pragmas, the workspace lock, cascades."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import anyio
import pytest

from appserver.protocol.ids import now_iso
from appserver.storage.db import Database, load_migrations, migrations_dir
from appserver.storage.lock import WorkspaceLock, WorkspaceLocked
from appserver.storage.records import ItemRecord, TurnRecord
from appserver.storage.threads import ThreadRepository
from tests.support.records import thread_record


async def scalar(db: Database, sql: str) -> object:
    async with db.conn.execute(sql) as cursor:
        row = await cursor.fetchone()
    assert row is not None
    return row[0]


async def test_migrations_are_applied_in_order_and_recorded(tmp_path: Path) -> None:
    expected = load_migrations()
    assert [version for version, _, _ in expected] == list(range(1, len(expected) + 1))
    assert expected[0][1] == "0001_threads.sql"

    path = tmp_path / "state" / "app.db"
    db = await Database.open(path)
    try:
        async with db.conn.execute(
            "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
        ) as cursor:
            rows = [tuple(row) for row in await cursor.fetchall()]
        assert [(v, n) for v, n, _ in rows] == [(v, n) for v, n, _ in expected]
        applied_at = [row[2] for row in rows]
        assert applied_at == sorted(applied_at)
        assert await db.migrate() == []  # nothing pending
    finally:
        await db.close()

    db = await Database.open(path)  # re-open: a no-op
    try:
        async with db.conn.execute(
            "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
        ) as cursor:
            assert [tuple(row) for row in await cursor.fetchall()] == rows
    finally:
        await db.close()


async def test_pending_migrations_apply_on_an_older_database(tmp_path: Path) -> None:
    """A database from an older release (only 0001) is brought up to date, in order."""
    migrations = load_migrations()
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(migrations[0][2])
        conn.execute(
            "CREATE TABLE schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        conn.execute(
            "INSERT INTO schema_migrations VALUES (1, ?, '2020-01-01T00:00:00+00:00')",
            (migrations[0][1],),
        )
    conn.close()
    db = await Database.open(path)
    try:
        async with db.conn.execute(
            "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
        ) as cursor:
            rows = [tuple(row) for row in await cursor.fetchall()]
        assert [(v, n) for v, n, _ in rows] == [(v, n) for v, n, _ in migrations]
        assert rows[0][2] == "2020-01-01T00:00:00+00:00"  # 0001 was not re-run
    finally:
        await db.close()


async def test_a_failing_migration_keeps_those_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each migration is its own transaction: those before a failing one stay
    applied, recorded, logged and counted (the database's ``generation``); the
    failing one leaves nothing behind."""
    db = await Database.open(tmp_path / "app.db")
    try:
        known = load_migrations()
        later = [
            (len(known) + 1, "9001_good.sql", "CREATE TABLE later_good (x INTEGER)"),
            (len(known) + 2, "9002_bad.sql", "CREATE TABLE later_bad (x INTEGER);\nNOT SQL"),
        ]
        monkeypatch.setattr("appserver.storage.db.load_migrations", lambda: known + later)
        generation = db.generation
        with caplog.at_level("DEBUG", logger="appserver.storage"), pytest.raises(sqlite3.Error):
            await db.migrate()
        assert db.generation > generation
        assert "applied migration 9001_good.sql" in caplog.text
        assert await scalar(db, "SELECT max(version) FROM schema_migrations") == len(known) + 1
        assert await scalar(db, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'later_%'") == 1
        assert not db.conn._conn.in_transaction  # rolled back, not left open
    finally:
        await db.close()


def test_migration_numbering_must_have_no_gaps(tmp_path: Path) -> None:
    (tmp_path / "0001_first.sql").write_text("CREATE TABLE a (x INTEGER);")
    (tmp_path / "0003_third.sql").write_text("CREATE TABLE c (x INTEGER);")
    (tmp_path / "README.md").write_text("not a migration")
    with pytest.raises(RuntimeError, match="without gaps"):
        load_migrations(tmp_path)
    (tmp_path / "0002_second.sql").write_text("CREATE TABLE b (x INTEGER);")
    assert [name for _, name, _ in load_migrations(tmp_path)] == [
        "0001_first.sql",
        "0002_second.sql",
        "0003_third.sql",
    ]
    assert migrations_dir().is_dir()


async def test_wal_and_foreign_keys(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "app.db")
    try:
        assert await scalar(db, "PRAGMA journal_mode") == "wal"
        assert await scalar(db, "PRAGMA foreign_keys") == 1
        assert await scalar(db, "PRAGMA busy_timeout") == 5000
    finally:
        await db.close()


async def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "app.db")
    repo = ThreadRepository(db)
    try:
        with pytest.raises(RuntimeError):
            async with db.transaction() as conn:
                await conn.execute(
                    "UPDATE schema_migrations SET name = 'changed' WHERE version = 1"
                )
                raise RuntimeError("abort")
        assert await scalar(db, "SELECT name FROM schema_migrations WHERE version = 1") == (
            "0001_threads.sql"
        )
        # The connection is usable afterwards.
        await repo.create(thread_record("thread_20240101_rollbk"))
        assert await repo.get("thread_20240101_rollbk") is not None
    finally:
        await db.close()


async def test_concurrent_writes_share_a_commit_and_fail_alone(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "app.db")
    try:
        await db.write([("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)", ())])
        generation = db.generation
        failures: list[BaseException] = []

        async def write(index: int) -> None:
            body = None if index == 3 else f"note {index}"  # NOT NULL fails for #3
            try:
                await db.write(
                    [
                        ("INSERT INTO notes (id, body) VALUES (?, ?)", (index * 10, "first")),
                        ("INSERT INTO notes (id, body) VALUES (?, ?)", (index * 10 + 1, body)),
                    ]
                )
            except sqlite3.IntegrityError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for index in range(8):
                tg.start_soon(write, index)
        # Writers of one turn of the loop share one commit.
        assert db.generation - generation == 1
        assert len(failures) == 1
        ids = [row[0] for row in await db.fetch("SELECT id FROM notes ORDER BY id")]
        # The failing write left nothing behind, not even its first statement;
        # the others are whole.
        assert ids == [i * 10 + k for i in range(8) if i != 3 for k in (0, 1)]
    finally:
        await db.close()


async def test_transactions_share_the_writes_commit_and_fail_alone(tmp_path: Path) -> None:
    """run_transaction (the shared event log's append) joins the grouped commit:
    each work returns its own result, and one that raises undoes only itself."""
    db = await Database.open(tmp_path / "app.db")
    try:
        await db.write([("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)", ())])
        generation = db.generation
        results: dict[int, object] = {}

        def work(conn: sqlite3.Connection, index: int) -> int:
            conn.execute("INSERT INTO notes (id, body) VALUES (?, 'first')", (index * 10,))
            if index == 3:
                raise LookupError("refused")
            return int(conn.execute("SELECT count(*) FROM notes").fetchone()[0])

        async def run(index: int) -> None:
            try:
                results[index] = await db.run_transaction(work, index)
            except LookupError as exc:
                results[index] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(db.write, [("INSERT INTO notes (id, body) VALUES (1, 'w')", ())])
            for index in range(6):
                tg.start_soon(run, index)
        assert db.generation - generation == 1  # all seven, begun in one turn of the loop
        assert isinstance(results.pop(3), LookupError)
        assert sorted(results) == [0, 1, 2, 4, 5]
        ids = [row[0] for row in await db.fetch("SELECT id FROM notes ORDER BY id")]
        assert ids == [0, 1, 10, 20, 40, 50]
    finally:
        await db.close()


async def test_a_write_is_committed_even_if_its_caller_is_cancelled(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "app.db")
    try:
        await db.write([("CREATE TABLE notes (id INTEGER PRIMARY KEY)", ())])
        with anyio.CancelScope() as scope:
            scope.cancel()
            await db.write([("INSERT INTO notes (id) VALUES (1)", ())])
        assert [row[0] for row in await db.fetch("SELECT id FROM notes")] == [1]
    finally:
        await db.close()


async def test_delete_cascades_to_turns_and_items(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "app.db")
    repo = ThreadRepository(db)
    try:
        for thread_id in ("thread_20240101_gone00", "thread_20240101_kept00"):
            await repo.create(thread_record(thread_id))
            for n in (1, 2):
                stamp = now_iso()
                await repo.add_turn(
                    TurnRecord(thread_id, f"turn_{n}", n, "completed", stamp, stamp), stamp
                )
                await repo.save_item(
                    ItemRecord(
                        thread_id,
                        f"turn_{n}",
                        f"item_{n}",
                        n,
                        "agentMessage",
                        "completed",
                        stamp,
                        stamp,
                        {"text": "hi"},
                    )
                )
        gone = await repo.get("thread_20240101_gone00")
        assert gone is not None and gone.turn_count == 2

        assert await repo.delete("thread_20240101_gone00") is True
        assert await repo.delete("thread_20240101_gone00") is False
        assert await repo.get("thread_20240101_gone00") is None
        for table in ("turns", "items"):
            count = await scalar(
                db, f"SELECT COUNT(*) FROM {table} WHERE thread_id = 'thread_20240101_gone00'"
            )
            assert count == 0, table
            kept = await scalar(
                db, f"SELECT COUNT(*) FROM {table} WHERE thread_id = 'thread_20240101_kept00'"
            )
            assert kept == 2, table

        # Dropping turns takes their items with them.
        assert await repo.drop_last_turns("thread_20240101_kept00", 1) == 1
        turns, _ = await repo.turns("thread_20240101_kept00")
        assert [turn.id for turn in turns] == ["turn_1"]
        items = await repo.items("thread_20240101_kept00", ["turn_1", "turn_2"])
        assert [item.id for item in items["turn_1"]] == ["item_1"]
        assert items["turn_2"] == []
        kept_thread = await repo.get("thread_20240101_kept00")
        assert kept_thread is not None and kept_thread.turn_count == 1
    finally:
        await db.close()


def test_workspace_lock(tmp_path: Path) -> None:
    path = tmp_path / ".craft" / "appserver.lock"
    first = WorkspaceLock(path)
    first.acquire({"workspacePath": str(tmp_path), "version": "x"})
    try:
        content = json.loads(path.read_text())
        assert content["pid"] == os.getpid()
        assert content["workspacePath"] == str(tmp_path)
        assert "startedAt" in content

        second = WorkspaceLock(path)
        with pytest.raises(WorkspaceLocked) as info:
            second.acquire({})
        assert f"pid {os.getpid()}" in str(info.value)
        assert str(path) in str(info.value)

        first.update({"endpoints": {"appServerWebSocket": "ws://127.0.0.1:1/ws"}})
        content = json.loads(path.read_text())
        assert content["endpoints"] == {"appServerWebSocket": "ws://127.0.0.1:1/ws"}
    finally:
        first.release()
    assert not path.exists()
    first.release()  # releasing twice is harmless

    second = WorkspaceLock(path)
    second.acquire({})
    try:
        with pytest.raises(WorkspaceLocked):
            WorkspaceLock(path).acquire({})
    finally:
        second.release()


def test_stale_lock_file_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "appserver.lock"
    # A lock file left by a dead process: content but no flock.
    path.write_text(json.dumps({"pid": 999999, "version": "old"}))
    lock = WorkspaceLock(path)
    lock.acquire({"version": "new"})
    try:
        content = json.loads(path.read_text())
        assert content["pid"] == os.getpid() and content["version"] == "new"
    finally:
        lock.release()


async def test_a_waiting_lock_is_taken_once_the_holder_leaves(tmp_path: Path) -> None:
    """One-shot faces queue up on a workspace instead of failing."""
    path = tmp_path / ".craft" / "appserver.lock"
    holder = WorkspaceLock(path)
    holder.acquire({})
    waiter = WorkspaceLock(path)
    with pytest.raises(WorkspaceLocked):
        waiter.acquire({}, wait=0.05)  # still held: gives up after the wait
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, waiter.acquire, {}, 10.0)
        await anyio.sleep(0.05)  # let the waiter start polling (not a synchronisation)
        holder.release()
    waiter.release()


async def test_face_sessions_and_replies(tmp_path: Path) -> None:
    from appserver.storage.faces import FaceRepository

    db = await Database.open(tmp_path / "faces.db")
    try:
        faces = FaceRepository(db)
        assert await faces.thread_of("zene", "s1") is None
        when = "2026-01-01T00:00:00Z"
        assert await faces.claim("zene", "s1", "thread_a", when, replacing=None) == "thread_a"
        assert await faces.claim("codeswarm", "s1", "thread_b", when, replacing=None) == "thread_b"
        assert await faces.thread_of("zene", "s1") == "thread_a"
        assert await faces.thread_of("codeswarm", "s1") == "thread_b"
        # Taken meanwhile (not what this process saw there): the other's thread stays.
        assert await faces.claim("zene", "s1", "thread_c", when, replacing=None) == "thread_a"
        assert await faces.claim("zene", "s1", "thread_c", when, replacing="thread_x") == "thread_a"
        # Replacing what it saw: the new thread is bound.
        assert await faces.claim("zene", "s1", "thread_c", when, replacing="thread_a") == "thread_c"
        await faces.store_reply("zene", "k", '{"ok":true}', "2026-01-01T00:00:00Z")
        assert await faces.reply("zene", "k") == ('{"ok":true}', "2026-01-01T00:00:00Z")
        await faces.forget_replies_before("zene", "2026-01-02T00:00:00Z")
        assert await faces.reply("zene", "k") is None
    finally:
        await db.close()
