"""What processes sharing the workspace's SQLite file say to each other.

The SQLite counterpart of storage/cluster.py (the tables are in
migrations/0013): the same shared event log, heartbeats, turn leases and
commands. Where PostgreSQL has ``NOTIFY``, a batch's announcement is a row of
``cluster_announcements`` written in the batch's transaction, and each process
polls (:meth:`SqliteClusterStore.follow`): every ``POLL_INTERVAL`` it asks
``PRAGMA data_version``, which changes only when another connection committed,
and reads announcements and commands only then. Where PostgreSQL has advisory
locks, a thread's lock is an ``flock`` on a file under ``.craft/locks/``,
which the kernel releases when its holder dies. Each process also holds its
own ``.craft/nodes/<node>.lock``: a sweeper that can take another's lock knows
that process is dead at once (``kill -9``), without waiting out the lease
heartbeats give (they still count, for a process that hangs). Every write is one
``BEGIN IMMEDIATE`` transaction: SQLite serialises them across processes, so
of several sweepers exactly one claims each orphaned turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from appserver.storage.cluster_common import (
    FeedHandler,
    LogEntry,
    SharedEvent,
    TurnTakenOver,
    iso_time,
)
from appserver.storage.db import SqliteDatabase
from appserver.storage.lock import UnsafeLockFile, WorkspaceLock, open_lock_file
from appserver.storage.sqlite_writes import text_size

POLL_INTERVAL = 0.05  # seconds between checks for other processes' commits
ANNOUNCEMENT_RETENTION = 60.0  # seconds an announcement is kept for slow pollers
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # Unix seconds, SQLite's clock
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # storage/nodes.py's ids
_EVENT_COLUMNS = "seq, method, topic, params_json, stream, node_id, broadcast"


class SqliteClusterStore:
    """:class:`~appserver.storage.cluster_common.NodeStore` on the workspace's file."""

    remote = False  # the file is in the workspace: every process sees the same one

    def __init__(self, db: SqliteDatabase, node_id: str, craft_dir: Path) -> None:
        self.db = db
        self.node_id = node_id
        self.locks_dir = craft_dir / "locks"
        self.nodes_dir = craft_dir / "nodes"
        self.workspace_path = ""
        self._node_lock: WorkspaceLock | None = None

    async def close(self) -> None:
        """Release this process's node lock."""
        if self._node_lock is not None:
            self._node_lock.release()
            self._node_lock = None

    # --- the shared event log -------------------------------------------------------

    async def append(
        self,
        thread_id: str,
        entries: Sequence[LogEntry],
        statements: Sequence[tuple[str, Sequence[Any]]] = (),
        turn_id: str | None = None,
    ) -> int | None:
        """Number ``entries`` after the thread's last seq, store them with
        ``statements`` and announce them, in one transaction; returns the last
        seq (``None``: no such thread). Refused (:class:`TurnTakenOver`) when
        ``turn_id`` is another node's now."""
        return await self.db.run_transaction(
            _append,
            self.node_id,
            thread_id,
            entries,
            statements,
            turn_id,
            rows=len(entries) + len(statements) + 3,  # and the thread, turn, announcement
            text=sum(len(entry.params_json) for entry in entries) + text_size(statements),
        )

    async def events_after(
        self, thread_id: str, after_seq: int, limit: int = 1000
    ) -> list[SharedEvent]:
        """Events after ``after_seq`` in order, up to ``limit`` of them."""
        rows = await self.db.fetch(
            f"SELECT {_EVENT_COLUMNS} FROM thread_events WHERE thread_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (thread_id, after_seq, limit),
        )
        return [_shared(row) for row in rows]

    async def replay(self, thread_id: str, after_seq: int) -> tuple[list[SharedEvent], int]:
        """Lifecycle events after ``after_seq`` and the deltas of items still
        streaming, with the thread's last seq from the same snapshot."""
        return await self.db.run_transaction(_replay, thread_id, after_seq)

    async def broadcasts_since(self, since: float) -> list[tuple[str, SharedEvent]]:
        """Other processes' broadcasts stored at or after ``since`` (Unix seconds),
        each with its thread, in thread and seq order."""
        rows = await self.db.fetch(
            f"SELECT thread_id, {_EVENT_COLUMNS} FROM thread_events WHERE broadcast = 1"
            " AND node_id <> ? AND created_at >= ? ORDER BY thread_id, seq LIMIT 10000",
            (self.node_id, iso_time(since)),
        )
        return [(row[0], _shared(tuple(row)[1:])) for row in rows]

    async def last_seq(self, thread_id: str) -> int:
        """The thread's last seq (0: none or no such thread)."""
        rows = await self.db.lookup_or_fetch(
            "SELECT last_seq FROM threads WHERE id = ?", (thread_id,)
        )
        return int(rows[0][0]) if rows else 0

    async def prune_deltas(self, older_than_seconds: float) -> int:
        """Drop stored deltas of items completed long ago, and old announcements."""
        return await self.db.run_transaction(_prune, older_than_seconds)

    # --- nodes and leases --------------------------------------------------------------

    async def join(self, workspace_path: str) -> None:
        """Say this process is alive (its first heartbeat), holding its node lock
        (taken after the row: a process with no lock yet runs no turn to sweep)."""
        self.workspace_path = workspace_path
        for directory in (self.locks_dir, self.nodes_dir):
            if directory.is_symlink():  # as for the workspace lock: never write elsewhere
                raise UnsafeLockFile(
                    f"refusing to use {directory}: it is a symbolic link; the workspace's "
                    ".craft/ holds the server's own files (remove it and start again)"
                )
        await self.db.run_transaction(_join, self.node_id, workspace_path)
        if self._node_lock is None:
            lock = WorkspaceLock(self.nodes_dir / f"{self.node_id}.lock")
            await anyio.to_thread.run_sync(lock.acquire, {"workspacePath": workspace_path})
            self._node_lock = lock

    async def heartbeat(self) -> bool:
        """Say this process is still alive; ``False`` if the others had taken
        it for dead (its row was gone), in which case it is back now."""
        changed = await self.db.run_transaction(
            _changes,
            f"UPDATE cluster_nodes SET heartbeat_at = {_NOW} WHERE node_id = ?",
            (self.node_id,),
        )
        if not changed:
            await self.join(self.workspace_path)
            return False
        return True

    async def leave(self) -> None:
        """This process stops: its row goes (its turns ended before)."""
        await self.db.write([("DELETE FROM cluster_nodes WHERE node_id = ?", (self.node_id,))])

    async def claim_orphaned_turns(self, lease_seconds: float) -> list[tuple[str, str]]:
        """Take the running turns of processes that stopped heartbeating (or
        are gone) for this one to fail; returns ``(thread_id, turn_id)`` pairs."""
        rows = await self.db.lookup_or_fetch(
            "SELECT DISTINCT node_id FROM turns WHERE status IN ('running', 'waitingApproval')"
            " AND node_id IS NOT NULL AND node_id <> ?",
            (self.node_id,),
        )
        dead = [row[0] for row in rows if self._has_exited(str(row[0]))]
        return await self.db.run_transaction(_claim_orphans, self.node_id, lease_seconds, dead)

    async def own_running_turns(self) -> list[tuple[str, str]]:
        """``(thread_id, turn_id)`` of the turns the file says this process runs."""
        rows = await self.db.lookup_or_fetch(
            "SELECT thread_id, id FROM turns WHERE node_id = ?"
            " AND status IN ('running', 'waitingApproval')",
            (self.node_id,),
        )
        return [(row[0], row[1]) for row in rows]

    def _has_exited(self, node_id: str) -> bool:
        """Whether ``node_id``'s process is gone: its node lock is free (or was
        removed by its clean exit). Unknown names count as alive (the lease decides)."""
        if not _NODE_NAME.fullmatch(node_id) or self.nodes_dir.is_symlink():
            return False
        try:
            fd = os.open(
                self.nodes_dir / f"{node_id}.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except FileNotFoundError:
            return True
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # held: the process lives
        finally:
            os.close(fd)
        return True

    async def live_peers(self, lease_seconds: float) -> list[str]:
        """The other processes whose heartbeat is within the lease, less those
        whose node lock is free (they exited, whatever their last heartbeat)."""
        rows = await self.db.lookup_or_fetch(
            f"SELECT node_id FROM cluster_nodes WHERE node_id <> ? AND heartbeat_at > {_NOW} - ?",
            (self.node_id, lease_seconds),
        )
        return [row[0] for row in rows if not self._has_exited(str(row[0]))]

    async def lease_turn(self, thread_id: str, turn_id: str) -> None:
        """Record that this process runs the turn."""
        await self.db.write(
            [
                (
                    "UPDATE turns SET node_id = ? WHERE thread_id = ? AND id = ?",
                    (self.node_id, thread_id, turn_id),
                )
            ]
        )

    async def turn_node(self, thread_id: str, turn_id: str) -> tuple[str, str | None] | None:
        """``(status, node_id)`` of a turn, or ``None``."""
        rows = await self.db.lookup_or_fetch(
            "SELECT status, node_id FROM turns WHERE thread_id = ? AND id = ?",
            (thread_id, turn_id),
        )
        return None if not rows else (rows[0][0], rows[0][1])

    async def running_turn(self, thread_id: str) -> tuple[str, str | None] | None:
        """``(turn_id, node_id)`` of the thread's running turn in any process."""
        rows = await self.db.lookup_or_fetch(
            "SELECT id, node_id FROM turns WHERE thread_id = ?"
            " AND status IN ('running', 'waitingApproval')",
            (thread_id,),
        )
        return None if not rows else (rows[0][0], rows[0][1])

    @asynccontextmanager
    async def thread_lock(self, thread_id: str) -> AsyncIterator[None]:
        """Hold the thread's lock file: one process (and one task) at a time
        changes its queue. Waiting polls, backing off to 20 ms."""
        fd = self._lock_file(thread_id)
        try:
            delay = 0.002
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 0.02)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _lock_file(self, thread_id: str) -> int:
        """The thread's lock file (a plain file of its own, never through a link)."""
        return open_lock_file(self.locks_dir, _lock_name(thread_id))

    def forget_thread_lock(self, thread_id: str) -> None:
        """Remove a deleted thread's lock file, if it has one (a process still
        holding it keeps an unlinked file: nothing is left to guard)."""
        with contextlib.suppress(OSError):
            (self.locks_dir / _lock_name(thread_id)).unlink()

    # --- commands between processes ----------------------------------------------------

    async def send(self, node_id: str, kind: str, body: dict[str, Any]) -> None:
        """Queue a command for ``node_id`` (its poll finds it)."""
        await self.db.write(
            [
                (
                    "INSERT INTO cluster_commands (node_id, kind, body_json, created_at)"
                    f" VALUES (?, ?, ?, {_NOW})",
                    (node_id, kind, json.dumps(body)),
                )
            ]
        )

    async def take_commands(self) -> list[tuple[str, dict[str, Any]]]:
        """This process's queued commands, oldest first; each is taken once."""
        return await self.db.run_transaction(_take_commands, self.node_id)

    async def workspace_token(self) -> str:
        """Unused on SQLite (the file is in the workspace); a fresh token."""
        return secrets.token_hex(16)

    # --- the polling feed --------------------------------------------------------------

    async def follow(self, handler: FeedHandler, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Wake ``handler`` for other processes' events and this one's commands,
        polling every ``POLL_INTERVAL``; until cancelled."""
        rows = await self.db.lookup_or_fetch("SELECT max(id) FROM cluster_announcements")
        cursor = int(rows[0][0] or 0)
        version = await self._data_version()
        task_status.started()
        handler.on_commands()
        while True:
            await anyio.sleep(POLL_INTERVAL)
            now = await self._data_version()
            if now == version:
                continue  # nobody else committed: nothing to read
            version = now
            rows = await self.db.lookup_or_fetch(
                "SELECT id, thread_id, first_seq, last_seq, node_id, broadcast"
                " FROM cluster_announcements WHERE id > ? ORDER BY id",
                (cursor,),
            )
            for row in rows:
                cursor = int(row[0])
                if row[4] != self.node_id:
                    handler.on_events(row[1], int(row[2]), int(row[3]), row[4], bool(row[5]))
            waiting = await self.db.lookup_or_fetch(
                "SELECT 1 FROM cluster_commands WHERE node_id = ? LIMIT 1", (self.node_id,)
            )
            if waiting:
                handler.on_commands()

    async def _data_version(self) -> int:
        rows = await self.db.lookup_or_fetch("PRAGMA data_version")
        return int(rows[0][0])


def _shared(row: Any) -> SharedEvent:
    return SharedEvent(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]))


# Columns migrations/0013 adds to older tables: a hand-made file whose first
# migrations ran again (tables dropped) lacks them; they are added back.
_CLUSTER_COLUMNS = {
    "turns": (("node_id", "TEXT"),),
    "thread_events": (
        ("stream", "TEXT"),
        ("node_id", "TEXT"),
        ("broadcast", "INTEGER NOT NULL DEFAULT 0"),
    ),
}


def _join(conn: sqlite3.Connection, node_id: str, workspace_path: str) -> None:
    for table, columns in _CLUSTER_COLUMNS.items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns:
            if name not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
    conn.execute(
        "INSERT INTO cluster_nodes (node_id, workspace_path, started_at, heartbeat_at)"
        f" VALUES (?, ?, {_NOW}, {_NOW}) ON CONFLICT (node_id) DO UPDATE SET heartbeat_at = {_NOW}",
        (node_id, workspace_path),
    )


def _changes(conn: sqlite3.Connection, sql: str, args: Sequence[Any]) -> int:
    return conn.execute(sql, args).rowcount


def _append(
    conn: sqlite3.Connection,
    node_id: str,
    thread_id: str,
    entries: Sequence[LogEntry],
    statements: Sequence[tuple[str, Sequence[Any]]],
    turn_id: str | None,
) -> int | None:
    if turn_id is not None:
        owner = conn.execute(
            "SELECT node_id FROM turns WHERE thread_id = ? AND id = ?", (thread_id, turn_id)
        ).fetchone()
        if owner is not None and owner[0] not in (None, node_id):
            raise TurnTakenOver(f"turn {turn_id} of {thread_id} is run by {owner[0]}")
    found = conn.execute(
        "UPDATE threads SET last_seq = last_seq + ? WHERE id = ? RETURNING last_seq",
        (len(entries), thread_id),
    ).fetchone()
    if found is None:
        return None
    last = int(found[0])
    first = last - len(entries) + 1
    conn.executemany(
        "INSERT INTO thread_events (thread_id, seq, method, topic, params_json, created_at,"
        " stream, node_id, broadcast) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                thread_id,
                first + index,
                entry.method,
                entry.topic,
                entry.params_json,
                entry.created_at,
                entry.stream,
                node_id,
                int(entry.broadcast),
            )
            for index, entry in enumerate(entries)
            if entry.stored
        ],
    )
    for sql, args in statements:
        conn.execute(sql, args)
    conn.execute(
        "INSERT INTO cluster_announcements (thread_id, first_seq, last_seq, node_id, broadcast,"
        f" created_at) VALUES (?, ?, ?, ?, ?, {_NOW})",
        (thread_id, first, last, node_id, int(any(entry.broadcast for entry in entries))),
    )
    return last


def _replay(
    conn: sqlite3.Connection, thread_id: str, after_seq: int
) -> tuple[list[SharedEvent], int]:
    found = conn.execute("SELECT last_seq FROM threads WHERE id = ?", (thread_id,)).fetchone()
    rows = conn.execute(
        "SELECT e.seq, e.method, e.topic, e.params_json, e.stream, e.node_id, e.broadcast"
        " FROM thread_events e WHERE e.thread_id = ? AND e.seq > ?"
        " AND (e.stream IS NULL OR NOT EXISTS (SELECT 1 FROM items i"
        " WHERE i.thread_id = e.thread_id AND i.id = e.stream"
        " AND i.status = 'completed')) ORDER BY e.seq",
        (thread_id, after_seq),
    ).fetchall()
    return [_shared(row) for row in rows], int(found[0] if found else 0)


def _prune(conn: sqlite3.Connection, older_than_seconds: float) -> int:
    cursor = conn.execute(
        "DELETE FROM thread_events WHERE stream IS NOT NULL"
        " AND created_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)"
        " AND EXISTS (SELECT 1 FROM items i WHERE i.thread_id = thread_events.thread_id"
        " AND i.id = thread_events.stream AND i.status = 'completed')",
        (f"-{older_than_seconds:g} seconds",),
    )
    conn.execute(
        f"DELETE FROM cluster_announcements WHERE created_at < {_NOW} - ?",
        (ANNOUNCEMENT_RETENTION,),
    )
    return cursor.rowcount


_DROP_ORPHAN_COMMANDS = (
    "DELETE FROM cluster_commands WHERE node_id NOT IN (SELECT node_id FROM cluster_nodes)"
)


def _claim_orphans(
    conn: sqlite3.Connection, node_id: str, lease_seconds: float, dead: list[str]
) -> list[tuple[str, str]]:
    # Processes whose node lock is free are gone, whatever their last heartbeat.
    conn.executemany("DELETE FROM cluster_nodes WHERE node_id = ?", [(node,) for node in dead])
    rows = conn.execute(
        "UPDATE turns SET node_id = ? WHERE status IN ('running', 'waitingApproval')"
        " AND node_id IS NOT ? AND NOT EXISTS (SELECT 1 FROM cluster_nodes n"
        f" WHERE n.node_id = turns.node_id AND n.heartbeat_at > {_NOW} - ?)"
        " RETURNING thread_id, id",
        (node_id, node_id, lease_seconds),
    ).fetchall()
    if rows:
        # Dead processes' rows go too, so the next sweep does not look at them.
        conn.execute(f"DELETE FROM cluster_nodes WHERE heartbeat_at < {_NOW} - ?", (lease_seconds,))
    if rows or dead:
        # ... and what was sent to them: nobody takes it any more.
        conn.execute(_DROP_ORPHAN_COMMANDS)
    return [(row[0], row[1]) for row in rows]


def _take_commands(conn: sqlite3.Connection, node_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = conn.execute(
        "DELETE FROM cluster_commands WHERE node_id = ? RETURNING id, kind, body_json",
        (node_id,),
    ).fetchall()
    return [(row[1], json.loads(row[2])) for row in sorted(rows, key=lambda row: row[0])]


def _lock_name(thread_id: str) -> str:
    return hashlib.sha256(thread_id.encode()).hexdigest()[:32] + ".lock"
