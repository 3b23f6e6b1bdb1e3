"""Threads and their turns and items: :class:`ThreadRepository`, the only place that
knows their SQL (the records are in :mod:`appserver.storage.records`)."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

from appserver.storage.cursors import decode_cursor, list_cursor, turns_cursor
from appserver.storage.db import Database
from appserver.storage.records import (
    INTERNAL_CHANNELS,
    INTERNAL_SOURCE_KIND,
    ItemRecord,
    ThreadRecord,
    TurnRecord,
    dumps_json,
    item_from_row,
    item_upsert,
    thread_from_row,
    turn_from_row,
    turn_upsert,
    workspace_key,
)

THREAD_CACHE_SIZE = 1024


# Longer than any thread's name or id; its LIKE pattern (escapes doubling it at
# most) stays within SQLite's 50,000-byte limit.
MAX_SEARCH_CHARS = 10_000


@dataclass
class ThreadQuery:
    """``thread/list`` filters, already normalised by the service."""

    workspace_path: str
    user_id: str | None
    channel_context: str | None
    include_archived: bool = False
    include_sub_agents: bool = False
    include_internal: bool = False  # the server's helper threads (records.INTERNAL_*)
    cross_channel_origins: list[str] = field(default_factory=list)
    channel_name: str | None = None
    limit: int | None = None
    cursor: str | None = None
    search_term: str | None = None  # a substring of the name or id


_NOT_INTERNAL = (
    f"source_kind != '{INTERNAL_SOURCE_KIND}' AND origin_channel NOT IN "
    f"({', '.join(repr(channel) for channel in INTERNAL_CHANNELS)})"
)

_UPDATABLE = {
    "status": "status",
    "display_name": "display_name",
    "configuration": "configuration_json",
    "last_active_at": "last_active_at",
    "metadata": "metadata_json",
}


INSERT_THREAD = (
    "INSERT INTO threads (id, workspace_path, workspace_key, user_id, origin_channel,"
    " channel_context, display_name, status, history_mode, source_kind, source_json,"
    " metadata_json, configuration_json, created_at, last_active_at, turn_count)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def thread_row(thread: ThreadRecord) -> tuple[Any, ...]:
    """The values :data:`INSERT_THREAD` writes for ``thread``."""
    return (
        thread.id,
        thread.workspace_path,
        workspace_key(thread.workspace_path),
        thread.user_id,
        thread.origin_channel,
        thread.channel_context,
        thread.display_name,
        thread.status,
        thread.history_mode,
        thread.source_kind,
        dumps_json(thread.source),
        dumps_json(thread.metadata) or "{}",
        dumps_json(thread.configuration),
        thread.created_at,
        thread.last_active_at,
        thread.turn_count,
    )


def update_statement(thread_id: str, **changes: Any) -> tuple[str, tuple[Any, ...]]:
    """The ``UPDATE`` that :meth:`ThreadRepository.update` runs (at least one
    change), for an event that writes it with itself (``thread/renamed``)."""
    if not changes:
        raise ValueError("no column to set")
    columns, values = [], []
    for name, value in changes.items():
        column = _UPDATABLE[name]
        columns.append(f"{column} = ?")
        values.append(dumps_json(value) if column.endswith("_json") else value)
    return f"UPDATE threads SET {', '.join(columns)} WHERE id = ?", (*values, thread_id)


class ThreadRepository:
    """Threads and their turns and items.

    Every write goes through :meth:`Database.transaction` or
    :meth:`Database.write` (one statement or a fixed few: grouped with
    concurrent writes), so writes from concurrent tasks never interleave on
    the shared connection.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        # Recently read threads, each valid only while no write has happened
        # since (Database.generation), so no write path can leave it stale.
        self._cache: dict[str, tuple[int, ThreadRecord]] = {}
        self.node_id: str | None = None  # set when nodes share the database

    async def create(self, thread: ThreadRecord) -> None:
        """Insert a new thread. Raises ``sqlite3.IntegrityError`` on a duplicate id."""
        # One grouped write (sharing a commit with concurrent writes), not a
        # BEGIN / INSERT / COMMIT of trips to the database thread.
        await self.db.write([(INSERT_THREAD, thread_row(thread))])

    async def get(self, thread_id: str) -> ThreadRecord | None:
        """The thread, or ``None``. Callers get their own copy to change."""
        cached = self._cache.get(thread_id) if self.db.caches_reads else None
        if cached is not None and cached[0] == self.db.generation:
            return copy.copy(cached[1])
        generation = self.db.generation  # taken before reading: see Database.generation
        rows = await self.db.lookup_or_fetch("SELECT * FROM threads WHERE id = ?", (thread_id,))
        if not rows:
            return None
        thread = thread_from_row(rows[0])
        self._cache[thread_id] = (generation, thread)
        if len(self._cache) > THREAD_CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        return copy.copy(thread)

    async def update(self, thread_id: str, **changes: Any) -> None:
        """Set columns of one thread (``status``, ``display_name``, ...)."""
        if changes:
            await self.db.write([update_statement(thread_id, **changes)])  # grouped, as create

    async def delete(self, thread_id: str) -> bool:
        """Delete a thread with its turns and items; ``False`` if it did not exist."""
        async with self.db.transaction() as conn:
            return await conn.execute("DELETE FROM threads WHERE id = ?", (thread_id,)) > 0

    async def save_dynamic_tools(self, thread_id: str, tools: list[dict[str, Any]]) -> None:
        """Keep the tools the thread's client declared (``DynamicToolSpec`` wire objects)."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO thread_dynamic_tools (thread_id, tools_json) VALUES (?, ?)"
                " ON CONFLICT (thread_id) DO UPDATE SET tools_json = excluded.tools_json",
                (thread_id, json.dumps(tools, ensure_ascii=False, separators=(",", ":"))),
            )

    async def dynamic_tools(self, thread_id: str) -> list[dict[str, Any]]:
        """The tools the thread's client declared (``[]`` if none)."""
        sql = "SELECT tools_json FROM thread_dynamic_tools WHERE thread_id = ?"
        rows = await self.db.lookup_or_fetch(sql, (thread_id,))  # a primary-key read
        tools = json.loads(rows[0][0]) if rows else []
        return tools if isinstance(tools, list) else []

    async def list_threads(self, query: ThreadQuery) -> tuple[list[ThreadRecord], str | None]:
        """Matching threads, newest activity first, and the next page's cursor.
        A search term longer than :data:`MAX_SEARCH_CHARS` matches nothing."""
        if query.search_term and len(query.search_term) > MAX_SEARCH_CHARS:
            return [], None  # no name or id is that long (and SQLite's LIKE refuses it)
        owner = ["channel_context IS ?"]
        args: list[Any] = [query.channel_context]
        if query.user_id:
            owner.insert(0, "user_id = ?")
            args.insert(0, query.user_id)
        owner_sql = " AND ".join(owner)
        if query.include_sub_agents:
            # Children match on the workspace and the user only: their channel
            # context is their parent's id, which the listing client never names.
            children = "source_kind = 'subagent'" + (" AND user_id = ?" if query.user_id else "")
            owner_sql = f"({owner_sql}) OR ({children})"
            if query.user_id:
                args.append(query.user_id)
        if query.cross_channel_origins:
            marks = ", ".join("?" for _ in query.cross_channel_origins)
            owner_sql = f"({owner_sql}) OR origin_channel IN ({marks})"
            args.extend(query.cross_channel_origins)
        where = ["workspace_key = ?", f"({owner_sql})"]
        args.insert(0, workspace_key(query.workspace_path))
        if not query.include_archived:
            where.append("status != 'archived'")
        if not query.include_sub_agents:
            where.append("source_kind != 'subagent'")
        if not query.include_internal:
            where.append(_NOT_INTERNAL)
        if query.channel_name:
            where.append("origin_channel = ? COLLATE NOCASE")
            args.append(query.channel_name)
        if query.search_term:
            # LIKE ignores the case of ASCII letters; the term's own % and _ are literal.
            pattern = "%" + re.sub(r"([\\%_])", r"\\\1", query.search_term) + "%"
            where.append("(display_name LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\')")
            args.extend([pattern, pattern])
        if query.cursor:
            last_active_at, last_id = decode_cursor(query.cursor, 2)
            where.append("(last_active_at < ? OR (last_active_at = ? AND id < ?))")
            args.extend([last_active_at, last_active_at, last_id])
        sql = (
            f"SELECT * FROM threads WHERE {' AND '.join(where)}"
            " ORDER BY last_active_at DESC, id DESC"
        )
        if query.limit is not None:
            sql += " LIMIT ?"
            args.append(query.limit + 1)
        threads = [thread_from_row(row) for row in await self.db.fetch(sql, args)]
        next_cursor = None
        if query.limit is not None and len(threads) > query.limit:
            threads = threads[: query.limit]
            last = threads[-1]
            next_cursor = list_cursor(last.last_active_at, last.id)
        return threads, next_cursor

    async def recent_threads(self, workspace_path: str, limit: int) -> list[ThreadRecord]:
        """The workspace's ``limit`` most recently active threads of every owner that
        are neither archived, internal nor SubAgent children, newest first (what
        the welcome suggestions are made from)."""
        sql = (
            "SELECT * FROM threads WHERE workspace_key = ? AND status != 'archived'"
            f" AND source_kind != 'subagent' AND {_NOT_INTERNAL}"
            " ORDER BY last_active_at DESC, id DESC LIMIT ?"
        )
        rows = await self.db.fetch(sql, (workspace_key(workspace_path), limit))
        return [thread_from_row(row) for row in rows]

    async def stale_internal_threads(self, active_before: str) -> list[str]:
        """Ids of internal (helper) threads last active before ``active_before``:
        what a process that died mid-helper-turn left behind."""
        rows = await self.db.fetch(
            f"SELECT id FROM threads WHERE source_kind = '{INTERNAL_SOURCE_KIND}'"
            " AND last_active_at < ? ORDER BY id",
            (active_before,),
        )
        return [str(row[0]) for row in rows]

    # --- turns and items --------------------------------------------------

    async def add_turn(self, turn: TurnRecord, touched_at: str) -> None:
        """Append a turn and bump the thread's turn count and activity time."""
        await self.db.write(
            [
                turn_upsert(turn),
                (
                    "UPDATE threads SET turn_count = turn_count + 1, last_active_at = ?"
                    " WHERE id = ?",
                    (touched_at, turn.thread_id),
                ),
            ]
        )

    async def save_turn(self, turn: TurnRecord) -> None:
        """Update a turn's status, completion, usage and error. With nodes
        sharing the database, only while this node still runs the turn (another
        node fails the turns of a node it took for dead)."""
        if self.node_id is None:
            await self.db.write([turn_upsert(turn)])
            return
        await self.db.write(
            [
                (
                    "UPDATE turns SET status = ?, completed_at = ?, token_usage_json = ?,"
                    " error = ? WHERE thread_id = ? AND id = ? AND node_id = ?",
                    (
                        turn.status,
                        turn.completed_at,
                        dumps_json(turn.token_usage),
                        turn.error,
                        turn.thread_id,
                        turn.id,
                        self.node_id,
                    ),
                )
            ]
        )

    async def save_item(self, item: ItemRecord) -> None:
        """Insert or replace one item (streaming snapshots and completed items)."""
        await self.db.write(
            [
                item_upsert(item),
                (
                    "UPDATE threads SET item_serial = MAX(item_serial, ?) WHERE id = ?",
                    (item.seq, item.thread_id),
                ),
            ]
        )

    async def turn_exists(self, thread_id: str, turn_id: str) -> bool:
        sql = "SELECT 1 FROM turns WHERE thread_id = ? AND id = ?"
        return bool(await self.db.lookup_or_fetch(sql, (thread_id, turn_id)))

    async def turns(
        self, thread_id: str, limit: int | None = None, cursor: str | None = None
    ) -> tuple[list[TurnRecord], str | None]:
        """Turns oldest first. With ``limit``: the newest page before ``cursor``."""
        where: list[str] = ["thread_id = ?"]
        args: list[Any] = [thread_id]
        if cursor:
            (before_seq,) = decode_cursor(cursor, 1)
            where.append("seq < ?")
            args.append(before_seq)
        sql = f"SELECT * FROM turns WHERE {' AND '.join(where)} ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit + 1)
        turns = [turn_from_row(row) for row in await self.db.fetch(sql, args)]
        next_cursor = None
        if limit is not None and len(turns) > limit:
            turns = turns[:limit]
            next_cursor = turns_cursor(turns[-1].seq)
        turns.reverse()
        return turns, next_cursor

    async def items(self, thread_id: str, turn_ids: list[str]) -> dict[str, list[ItemRecord]]:
        """Items of the given turns, in order, keyed by turn id."""
        result: dict[str, list[ItemRecord]] = {turn_id: [] for turn_id in turn_ids}
        if not turn_ids:
            return result
        marks = ", ".join("?" for _ in turn_ids)
        sql = f"SELECT * FROM items WHERE thread_id = ? AND turn_id IN ({marks}) ORDER BY seq"
        for row in await self.db.fetch(sql, (thread_id, *turn_ids)):
            result[row["turn_id"]].append(item_from_row(row))
        return result

    async def drop_last_turns(self, thread_id: str, count: int) -> int:
        """Delete the newest ``count`` turns (and their items); returns how many."""
        async with self.db.transaction() as conn:
            dropped = await conn.execute(
                "DELETE FROM turns WHERE thread_id = ? AND seq IN"
                " (SELECT seq FROM turns WHERE thread_id = ? ORDER BY seq DESC LIMIT ?)",
                (thread_id, thread_id, count),
            )
            await conn.execute(
                "UPDATE threads SET turn_count = (SELECT COUNT(*) FROM turns WHERE thread_id = ?)"
                " WHERE id = ?",
                (thread_id, thread_id),
            )
            return dropped

    async def copy_history(self, source_id: str, target_id: str, last_seq: int) -> None:
        """Copy the turns of ``source_id`` numbered up to ``last_seq`` (and their
        items, ids and numbers kept: both are per thread) into ``target_id``,
        whose counters then continue after them."""
        turn_columns = (
            "seq, status, started_at, completed_at, token_usage_json, error,"
            " origin_channel, initiator_json"
        )
        item_columns = "turn_id, id, seq, type, status, created_at, completed_at, payload_json"
        async with self.db.transaction() as conn:
            await conn.execute(
                f"INSERT INTO turns (thread_id, id, {turn_columns})"
                f" SELECT ?, id, {turn_columns} FROM turns WHERE thread_id = ? AND seq <= ?",
                (target_id, source_id, last_seq),
            )
            await conn.execute(
                f"INSERT INTO items (thread_id, {item_columns})"
                f" SELECT ?, {item_columns} FROM items WHERE thread_id = ? AND turn_id IN"
                " (SELECT id FROM turns WHERE thread_id = ? AND seq <= ?)",
                (target_id, source_id, source_id, last_seq),
            )
            await conn.execute(
                "UPDATE threads SET"
                " turn_count = (SELECT COUNT(*) FROM turns WHERE thread_id = ?),"
                " turn_serial = (SELECT COALESCE(MAX(seq), 0) FROM turns WHERE thread_id = ?),"
                " item_serial = (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ?)"
                " WHERE id = ?",
                (target_id, target_id, target_id, target_id),
            )
