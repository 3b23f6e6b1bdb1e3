"""What nodes sharing one PostgreSQL database say to each other, in SQL.

PostgreSQL only (the cluster's tables are in migrations/postgresql/0011).
Everything here uses the database's own clock and locks: no node trusts
another's clock, and no coordination service sits beside the database.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import asyncpg

from appserver.storage.cluster_common import (
    FeedHandler,
    LogEntry,
    SharedEvent,
    TurnTakenOver,
    WorkspaceMismatch,
    iso_time,
)
from appserver.storage.postgres import IntegrityErrors, PostgresDatabase, translate

log = logging.getLogger("appserver.cluster")

__all__ = ["ClusterStore", "LogEntry", "SharedEvent", "TurnTakenOver", "WorkspaceMismatch"]

#: ``LISTEN`` channels: a thread's new events, and requests for one node.
EVENTS_CHANNEL = "appserver_events"
LOCK_CONNECTIONS = 4  # queue changes of this many threads at once per node
COMMANDS_CHANNEL = "appserver_commands"
RECONNECT_DELAY = 0.5

# One append in one statement (ClusterStore.append): the turn's owner checked
# (and its row locked against a takeover), the thread's seqs taken (its row
# locked until commit, so a thread's seqs commit in order), the events stored
# and announced. Nothing is written when another node owns the turn ($2) or
# the thread is gone. Params: thread, turn, node, how many events, then one
# array per stored event's column, each one's place among the events, and
# whether any is a broadcast.
APPEND_SQL = f"""
WITH owner AS (
    SELECT node_id FROM turns WHERE thread_id = $1 AND id = $2 FOR UPDATE
), allowed AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM owner WHERE node_id IS NOT NULL AND node_id <> $3
    ) AS ok
), bumped AS (
    UPDATE threads SET last_seq = last_seq + $4 FROM allowed
    WHERE id = $1 AND allowed.ok RETURNING last_seq
), stored AS (
    INSERT INTO thread_events
        (thread_id, seq, method, topic, params_json, created_at, stream, node_id, broadcast)
    SELECT $1, bumped.last_seq - $4 + entry.place, entry.method, entry.topic,
        entry.params_json, entry.created_at, entry.stream, $3, entry.broadcast
    FROM bumped, unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
        $10::boolean[], $11::int[]) AS entry
        (method, topic, params_json, created_at, stream, broadcast, place)
), announced AS (
    SELECT pg_notify('{EVENTS_CHANNEL}',
        json_build_array($1::text, bumped.last_seq - $4 + 1, bumped.last_seq, $3::text,
            $12::boolean)::text)
    FROM bumped
)
SELECT allowed.ok, bumped.last_seq, (SELECT count(*) FROM announced)
FROM allowed LEFT JOIN bumped ON true
"""


class ClusterStore:
    """The shared event log, node heartbeats, turn leases and commands
    (:class:`~appserver.storage.cluster_common.NodeStore` on PostgreSQL)."""

    remote = True  # the database is a server: nodes check they share the workspace

    def __init__(self, db: PostgresDatabase, node_id: str) -> None:
        self.db = db
        self.pool: asyncpg.Pool = db.pool
        self.node_id = node_id
        self.workspace_path = ""
        self._lock_pool: asyncpg.Pool | None = None
        self._beat_conn: asyncpg.Connection | None = None

    async def close(self) -> None:
        """Close what this store opened beside the database's own pool."""
        if self._lock_pool is not None:
            await self._lock_pool.close()
            self._lock_pool = None
        if self._beat_conn is not None:
            await self._beat_conn.close(timeout=1)
            self._beat_conn = None

    # --- the shared event log -------------------------------------------------------

    async def append(
        self,
        thread_id: str,
        entries: Sequence[LogEntry],
        statements: Sequence[tuple[str, Sequence[Any]]] = (),
        turn_id: str | None = None,
    ) -> int | None:
        """Number ``entries`` after the thread's last seq, store them with
        ``statements`` (turn and item rows, SQLite-spelled), and announce them,
        all in one transaction; returns the last seq (``None``: no such thread).

        The ``UPDATE`` of the thread's row takes its lock until commit, so the
        seqs of a thread commit in order on every node: a reader that has seen
        seq N has seen everything before it.
        """
        with IntegrityErrors():
            return await self._append(thread_id, entries, statements, turn_id)

    async def _append(
        self,
        thread_id: str,
        entries: Sequence[LogEntry],
        statements: Sequence[tuple[str, Sequence[Any]]],
        turn_id: str | None,
    ) -> int | None:
        stored = [entry for entry in entries if entry.stored]
        args = (
            thread_id,
            turn_id,
            self.node_id,
            len(entries),
            [entry.method for entry in stored],
            [entry.topic for entry in stored],
            [entry.params_json for entry in stored],
            [entry.created_at for entry in stored],
            [entry.stream for entry in stored],
            [entry.broadcast for entry in stored],
            [index + 1 for index, entry in enumerate(entries) if entry.stored],
            any(entry.broadcast for entry in entries),
        )
        async with self.pool.acquire() as conn:
            if not statements:
                # One statement is its own transaction: a delta batch costs one round trip.
                row = await conn.fetchrow(APPEND_SQL, *args)
            else:
                async with conn.transaction():
                    row = await conn.fetchrow(APPEND_SQL, *args)
                    if row is not None and row[0] and row[1] is not None:
                        for sql, statement_args in statements:
                            await conn.execute(translate(sql), *statement_args)
        if row is None or not row[0]:
            raise TurnTakenOver(f"turn {turn_id} of {thread_id} is run by another node")
        return None if row[1] is None else int(row[1])

    async def events_after(
        self, thread_id: str, after_seq: int, limit: int = 1000
    ) -> list[SharedEvent]:
        """Events after ``after_seq`` in order, up to ``limit`` of them."""
        rows = await self.pool.fetch(
            "SELECT seq, method, topic, params_json, stream, node_id, broadcast"
            " FROM thread_events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            thread_id,
            after_seq,
            limit,
        )
        return [SharedEvent(*row) for row in rows]

    async def replay(self, thread_id: str, after_seq: int) -> tuple[list[SharedEvent], int]:
        """What ``thread/subscribe {afterSeq}`` replays, and the thread's last
        seq in the same snapshot: every lifecycle event after ``after_seq``,
        and the deltas of items still streaming (a completed item's event
        carries its whole text, as on one node)."""
        async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            last = await conn.fetchval("SELECT last_seq FROM threads WHERE id = $1", thread_id)
            rows = await conn.fetch(
                "SELECT e.seq, e.method, e.topic, e.params_json, e.stream, e.node_id, e.broadcast"
                " FROM thread_events e WHERE e.thread_id = $1 AND e.seq > $2"
                " AND (e.stream IS NULL OR NOT EXISTS (SELECT 1 FROM items i"
                " WHERE i.thread_id = e.thread_id AND i.id = e.stream"
                " AND i.status = 'completed')) ORDER BY e.seq",
                thread_id,
                after_seq,
            )
        return [SharedEvent(*row) for row in rows], int(last or 0)

    async def broadcasts_since(self, since: float) -> list[tuple[str, SharedEvent]]:
        """Other nodes' broadcasts stored at or after ``since`` (Unix seconds, by
        the writers' clocks), each with its thread, in thread and seq order."""
        rows = await self.pool.fetch(
            "SELECT thread_id, seq, method, topic, params_json, stream, node_id, broadcast"
            " FROM thread_events WHERE broadcast AND node_id <> $1 AND created_at >= $2"
            " ORDER BY thread_id, seq LIMIT 10000",
            self.node_id,
            iso_time(since),
        )
        return [(row[0], SharedEvent(*row[1:])) for row in rows]

    async def last_seq(self, thread_id: str) -> int:
        """The thread's last seq (0: none or no such thread)."""
        value = await self.pool.fetchval("SELECT last_seq FROM threads WHERE id = $1", thread_id)
        return int(value or 0)

    async def prune_deltas(self, older_than_seconds: float) -> int:
        """Drop stored deltas of items completed long ago (their completion
        event carries the whole text); returns how many."""
        status = await self.pool.execute(
            "DELETE FROM thread_events e WHERE e.stream IS NOT NULL"
            " AND e.created_at < to_char((now() - make_interval(secs => $1)) AT TIME ZONE 'UTC',"
            ' \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')'
            " AND EXISTS (SELECT 1 FROM items i WHERE i.thread_id = e.thread_id"
            " AND i.id = e.stream AND i.status = 'completed')",
            older_than_seconds,
        )
        return int(status.rsplit(" ", 1)[-1])

    # --- nodes and leases --------------------------------------------------------------

    async def join(self, workspace_path: str) -> None:
        """Say this node is alive (its first heartbeat)."""
        self.workspace_path = workspace_path
        if self._lock_pool is None:
            self._lock_pool = await asyncpg.create_pool(
                self.db.url, min_size=0, max_size=LOCK_CONNECTIONS
            )
        await self.pool.execute(
            "INSERT INTO cluster_nodes (node_id, workspace_path) VALUES ($1, $2)"
            " ON CONFLICT (node_id) DO UPDATE SET heartbeat_at = now()",
            self.node_id,
            workspace_path,
        )

    async def heartbeat(self) -> bool:
        """Say this node is still alive; ``False`` if the others had already
        taken it for dead (its row was gone), in which case it is back now."""
        # A connection of its own: a node busy enough to have taken every
        # pooled connection is alive all the same.
        if self._beat_conn is None or self._beat_conn.is_closed():
            self._beat_conn = await asyncpg.connect(self.db.url)
        try:
            status = await self._beat_conn.execute(
                "UPDATE cluster_nodes SET heartbeat_at = now() WHERE node_id = $1", self.node_id
            )
        except BaseException:
            self._beat_conn.terminate()
            self._beat_conn = None
            raise
        if status.endswith(" 0"):
            await self.join(self.workspace_path)
            return False
        return True

    async def leave(self) -> None:
        """This node stops: its row goes (its turns ended before)."""
        await self.pool.execute("DELETE FROM cluster_nodes WHERE node_id = $1", self.node_id)

    async def claim_orphaned_turns(self, lease_seconds: float) -> list[tuple[str, str]]:
        """Take the running turns of nodes that stopped heartbeating (or are
        gone) for this node to fail; returns ``(thread_id, turn_id)`` pairs.

        The claim moves each turn's lease to this node in one statement, so of
        several nodes sweeping at once exactly one gets each turn.
        """
        # SKIP LOCKED: a turn another sweeper is claiming is its, not ours. A
        # turn another sweeper claimed and committed after this statement began
        # is still locked here, as its newest version (the other sweeper's), and
        # the re-check of that version does not re-run the NOT EXISTS (an
        # anti-join): the UPDATE takes the turn only if its owner is still the
        # one this statement's snapshot saw (and that one is not alive).
        rows = await self.pool.fetch(
            "WITH orphaned AS (SELECT t.thread_id, t.id, t.node_id FROM turns t"
            " WHERE t.status IN ('running', 'waitingApproval')"
            " AND t.node_id IS DISTINCT FROM $1 AND NOT EXISTS (SELECT 1 FROM cluster_nodes n"
            " WHERE n.node_id = t.node_id"
            " AND n.heartbeat_at > now() - make_interval(secs => $2))"
            " FOR UPDATE OF t SKIP LOCKED)"
            " UPDATE turns t SET node_id = $1 FROM orphaned o"
            " WHERE t.thread_id = o.thread_id AND t.id = o.id"
            " AND t.node_id IS NOT DISTINCT FROM o.node_id"
            " AND o.node_id IS DISTINCT FROM $1 AND NOT EXISTS (SELECT 1 FROM cluster_nodes n"
            " WHERE n.node_id = o.node_id"
            " AND n.heartbeat_at > now() - make_interval(secs => $2))"
            " RETURNING t.thread_id, t.id",
            self.node_id,
            lease_seconds,
        )
        if rows:
            # Dead nodes' rows go too, so the next sweep does not look at them,
            # and what was sent to them: nobody takes it any more.
            await self.pool.execute(
                "DELETE FROM cluster_nodes WHERE heartbeat_at < now() - make_interval(secs => $1)",
                lease_seconds,
            )
            await self.pool.execute(
                "DELETE FROM cluster_commands"
                " WHERE node_id NOT IN (SELECT node_id FROM cluster_nodes)"
            )
        return [(row[0], row[1]) for row in rows]

    async def own_running_turns(self) -> list[tuple[str, str]]:
        """``(thread_id, turn_id)`` of the turns the database says this node runs."""
        rows = await self.pool.fetch(
            "SELECT thread_id, id FROM turns WHERE node_id = $1"
            " AND status IN ('running', 'waitingApproval')",
            self.node_id,
        )
        return [(row[0], row[1]) for row in rows]

    async def live_peers(self, lease_seconds: float) -> list[str]:
        """The other nodes whose heartbeat is within the lease."""
        rows = await self.pool.fetch(
            "SELECT node_id FROM cluster_nodes WHERE node_id <> $1"
            " AND heartbeat_at > now() - make_interval(secs => $2)",
            self.node_id,
            lease_seconds,
        )
        return [row[0] for row in rows]

    async def lease_turn(self, thread_id: str, turn_id: str) -> None:
        """Record that this node runs the turn."""
        await self.pool.execute(
            "UPDATE turns SET node_id = $3 WHERE thread_id = $1 AND id = $2",
            thread_id,
            turn_id,
            self.node_id,
        )

    async def turn_node(self, thread_id: str, turn_id: str) -> tuple[str, str | None] | None:
        """``(status, node_id)`` of a turn, or ``None``."""
        row = await self.pool.fetchrow(
            "SELECT status, node_id FROM turns WHERE thread_id = $1 AND id = $2",
            thread_id,
            turn_id,
        )
        return None if row is None else (row[0], row[1])

    async def running_turn(self, thread_id: str) -> tuple[str, str | None] | None:
        """``(turn_id, node_id)`` of the thread's running turn on any node."""
        row = await self.pool.fetchrow(
            "SELECT id, node_id FROM turns WHERE thread_id = $1"
            " AND status IN ('running', 'waitingApproval')",
            thread_id,
        )
        return None if row is None else (row[0], row[1])

    def forget_thread_lock(self, thread_id: str) -> None:
        """Nothing to remove: advisory locks leave no trace."""

    @asynccontextmanager
    async def thread_lock(self, thread_id: str) -> AsyncIterator[None]:
        """Hold the thread's advisory lock: one node at a time changes its queue.

        The lock's connection comes from a small pool of its own: a holder's
        work takes connections from the main pool, so lockers waiting for a
        connection can never starve the holders they wait for."""
        assert self._lock_pool is not None, "join() first"
        async with self._lock_pool.acquire() as conn:
            await conn.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", thread_id)
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.execute(
                        "SELECT pg_advisory_unlock(hashtextextended($1, 0))", thread_id
                    )

    # --- commands between nodes --------------------------------------------------------

    async def send(self, node_id: str, kind: str, body: dict[str, Any]) -> None:
        """Queue a command for ``node_id`` and wake it."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO cluster_commands (node_id, kind, body_json) VALUES ($1, $2, $3)",
                node_id,
                kind,
                json.dumps(body),
            )
            await conn.execute("SELECT pg_notify($1, $2)", COMMANDS_CHANNEL, node_id)

    async def take_commands(self) -> list[tuple[str, dict[str, Any]]]:
        """This node's queued commands, oldest first; each is taken once."""
        rows = await self.pool.fetch(
            "DELETE FROM cluster_commands WHERE node_id = $1 RETURNING id, kind, body_json",
            self.node_id,
        )
        return [(row[1], json.loads(row[2])) for row in sorted(rows, key=lambda row: row[0])]

    # --- the shared workspace ----------------------------------------------------------

    async def workspace_token(self) -> str:
        """The token every node's workspace must hold (made by the first node)."""
        await self.pool.execute(
            "INSERT INTO cluster_workspace (id, token) VALUES (1, $1) ON CONFLICT DO NOTHING",
            secrets.token_hex(16),
        )
        return str(await self.pool.fetchval("SELECT token FROM cluster_workspace WHERE id = 1"))

    # --- the LISTEN connection ---------------------------------------------------------

    async def follow(self, handler: FeedHandler, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Wake ``handler`` for other nodes' events and this node's commands,
        on a ``LISTEN`` connection (reconnected if lost); until cancelled."""
        started = False

        def on_events(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            try:
                thread_id, first, last, node, broadcast = json.loads(payload)
                handler.on_events(str(thread_id), int(first), int(last), str(node), bool(broadcast))
            except (ValueError, TypeError):
                log.warning("event feed: bad notification %r", payload[:200])

        def on_command(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            if payload == self.node_id:
                handler.on_commands()

        while True:
            lost = anyio.Event()
            try:
                conn = await asyncpg.connect(self.db.url)
            except (OSError, asyncpg.PostgresError) as exc:
                if not started:
                    raise
                log.warning("event feed: cannot reconnect: %s", exc)
                await anyio.sleep(RECONNECT_DELAY)
                continue
            try:
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await conn.add_listener(EVENTS_CHANNEL, on_events)
                await conn.add_listener(COMMANDS_CHANNEL, on_command)
                if started:
                    handler.on_reconnect()  # whatever was announced while the feed was down
                else:
                    started = True
                    task_status.started()
                handler.on_commands()
                await lost.wait()
                handler.on_lost()  # notifications sent from now on never arrive
                log.warning("event feed: connection lost; reconnecting")
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.close(timeout=1)
