"""Thread, turn and item rows: the only place that knows their SQL."""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from appserver.storage.db import Database, Row

THREAD_CACHE_SIZE = 1024


class BadCursor(ValueError):
    """A paging cursor that this server did not issue."""


@dataclass
class ThreadRecord:
    id: str
    workspace_path: str
    user_id: str
    origin_channel: str
    status: str
    created_at: str
    last_active_at: str
    channel_context: str | None = None
    display_name: str | None = None
    history_mode: str = "server"
    source: dict[str, Any] | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    configuration: dict[str, Any] | None = None
    turn_count: int = 0
    turn_serial: int = 0
    item_serial: int = 0

    @property
    def source_kind(self) -> str:
        return str((self.source or {}).get("kind", "user"))


@dataclass
class TurnRecord:
    thread_id: str
    id: str
    seq: int
    status: str
    started_at: str
    completed_at: str | None = None
    token_usage: dict[str, Any] | None = None
    error: str | None = None
    origin_channel: str | None = None
    initiator: dict[str, Any] | None = None


@dataclass
class ItemRecord:
    thread_id: str
    turn_id: str
    id: str
    seq: int
    type: str
    status: str
    created_at: str
    completed_at: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class ThreadQuery:
    """``thread/list`` filters, already normalised by the service."""

    workspace_path: str
    user_id: str | None
    channel_context: str | None
    include_archived: bool = False
    include_sub_agents: bool = False
    cross_channel_origins: list[str] = field(default_factory=list)
    channel_name: str | None = None
    limit: int | None = None
    cursor: str | None = None
    search_term: str | None = None  # a substring of the name or id


def workspace_key(path: str) -> str:
    """Workspace paths match case-insensitively, as in DotCraft."""
    return path.lower()


def _encode_cursor(*parts: Any) -> str:
    raw = json.dumps(list(parts), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def list_cursor(last_active_at: str, thread_id: str) -> str:
    """The ``list_threads`` cursor of the page that follows this thread."""
    return _encode_cursor(last_active_at, thread_id)


def turns_cursor(seq: int) -> str:
    """The ``turns`` cursor of the page of turns older than the turn ``seq``."""
    return _encode_cursor(seq)


def _decode_cursor(cursor: str, arity: int) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise BadCursor(cursor) from exc
    if not isinstance(parts, list) or len(parts) != arity:
        raise BadCursor(cursor)
    # Only scalars we issued: anything else would reach SQLite as a bad binding.
    if not all(isinstance(part, str | int) and not isinstance(part, bool) for part in parts):
        raise BadCursor(cursor)
    return parts


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _thread(row: Row) -> ThreadRecord:
    return ThreadRecord(
        id=row["id"],
        workspace_path=row["workspace_path"],
        user_id=row["user_id"],
        origin_channel=row["origin_channel"],
        status=row["status"],
        created_at=row["created_at"],
        last_active_at=row["last_active_at"],
        channel_context=row["channel_context"],
        display_name=row["display_name"],
        history_mode=row["history_mode"],
        source=_loads(row["source_json"]),
        metadata=_loads(row["metadata_json"]) or {},
        configuration=_loads(row["configuration_json"]),
        turn_count=row["turn_count"],
        turn_serial=row["turn_serial"],
        item_serial=row["item_serial"],
    )


def _turn(row: Row) -> TurnRecord:
    return TurnRecord(
        thread_id=row["thread_id"],
        id=row["id"],
        seq=row["seq"],
        status=row["status"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        token_usage=_loads(row["token_usage_json"]),
        error=row["error"],
        origin_channel=row["origin_channel"],
        initiator=_loads(row["initiator_json"]),
    )


def _item(row: Row) -> ItemRecord:
    return ItemRecord(
        thread_id=row["thread_id"],
        turn_id=row["turn_id"],
        id=row["id"],
        seq=row["seq"],
        type=row["type"],
        status=row["status"],
        created_at=row["created_at"],
        completed_at=row["completed_at"],
        payload=json.loads(row["payload_json"]),
    )


_UPDATABLE = {
    "status": "status",
    "display_name": "display_name",
    "configuration": "configuration_json",
    "last_active_at": "last_active_at",
    "metadata": "metadata_json",
}


class ThreadRepository:
    """Threads and their turns and items.

    Every write goes through :meth:`Database.transaction`, so writes from
    concurrent tasks never interleave on the shared connection.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        # Recently read threads, each valid only while no write has happened
        # since (Database.generation), so no write path can leave it stale.
        self._cache: dict[str, tuple[int, ThreadRecord]] = {}
        self.node_id: str | None = None  # set when nodes share the database

    async def create(self, thread: ThreadRecord) -> None:
        """Insert a new thread. Raises ``sqlite3.IntegrityError`` on a duplicate id."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO threads (id, workspace_path, workspace_key, user_id, origin_channel,"
                " channel_context, display_name, status, history_mode, source_kind, source_json,"
                " metadata_json, configuration_json, created_at, last_active_at, turn_count)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
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
                    _dumps(thread.source),
                    _dumps(thread.metadata) or "{}",
                    _dumps(thread.configuration),
                    thread.created_at,
                    thread.last_active_at,
                    thread.turn_count,
                ),
            )

    async def get(self, thread_id: str) -> ThreadRecord | None:
        """The thread, or ``None``. Callers get their own copy to change."""
        cached = self._cache.get(thread_id) if self.db.caches_reads else None
        if cached is not None and cached[0] == self.db.generation:
            return copy.copy(cached[1])
        generation = self.db.generation  # taken before reading: see Database.generation
        rows = await self.db.lookup_or_fetch("SELECT * FROM threads WHERE id = ?", (thread_id,))
        if not rows:
            return None
        thread = _thread(rows[0])
        self._cache[thread_id] = (generation, thread)
        if len(self._cache) > THREAD_CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        return copy.copy(thread)

    async def update(self, thread_id: str, **changes: Any) -> None:
        """Set columns of one thread (``status``, ``display_name``, ...)."""
        columns, values = [], []
        for name, value in changes.items():
            column = _UPDATABLE[name]
            columns.append(f"{column} = ?")
            values.append(_dumps(value) if column.endswith("_json") else value)
        if not columns:
            return
        sql = f"UPDATE threads SET {', '.join(columns)} WHERE id = ?"
        async with self.db.transaction() as conn:
            await conn.execute(sql, (*values, thread_id))

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
        rows = await self.db.fetch(sql, (thread_id,))
        tools = json.loads(rows[0][0]) if rows else []
        return tools if isinstance(tools, list) else []

    async def list_threads(self, query: ThreadQuery) -> tuple[list[ThreadRecord], str | None]:
        """Matching threads, newest activity first, and the next page's cursor."""
        owner = ["channel_context IS ?"]
        args: list[Any] = [query.channel_context]
        if query.user_id:
            owner.insert(0, "user_id = ?")
            args.insert(0, query.user_id)
        owner_sql = " AND ".join(owner)
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
        if query.channel_name:
            where.append("origin_channel = ? COLLATE NOCASE")
            args.append(query.channel_name)
        if query.search_term:
            # LIKE ignores the case of ASCII letters; the term's own % and _ are literal.
            pattern = "%" + re.sub(r"([\\%_])", r"\\\1", query.search_term) + "%"
            where.append("(display_name LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\')")
            args.extend([pattern, pattern])
        if query.cursor:
            last_active_at, last_id = _decode_cursor(query.cursor, 2)
            where.append("(last_active_at < ? OR (last_active_at = ? AND id < ?))")
            args.extend([last_active_at, last_active_at, last_id])
        sql = (
            f"SELECT * FROM threads WHERE {' AND '.join(where)}"
            " ORDER BY last_active_at DESC, id DESC"
        )
        if query.limit is not None:
            sql += " LIMIT ?"
            args.append(query.limit + 1)
        threads = [_thread(row) for row in await self.db.fetch(sql, args)]
        next_cursor = None
        if query.limit is not None and len(threads) > query.limit:
            threads = threads[: query.limit]
            last = threads[-1]
            next_cursor = list_cursor(last.last_active_at, last.id)
        return threads, next_cursor

    # --- turns and items --------------------------------------------------

    async def add_turn(self, turn: TurnRecord, touched_at: str) -> None:
        """Append a turn and bump the thread's turn count and activity time."""
        await self.db.write(
            [
                _turn_upsert(turn),
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
            await self.db.write([_turn_upsert(turn)])
            return
        await self.db.write(
            [
                (
                    "UPDATE turns SET status = ?, completed_at = ?, token_usage_json = ?,"
                    " error = ? WHERE thread_id = ? AND id = ? AND node_id = ?",
                    (
                        turn.status,
                        turn.completed_at,
                        _dumps(turn.token_usage),
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
                _item_upsert(item),
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
            (before_seq,) = _decode_cursor(cursor, 1)
            where.append("seq < ?")
            args.append(before_seq)
        sql = f"SELECT * FROM turns WHERE {' AND '.join(where)} ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit + 1)
        turns = [_turn(row) for row in await self.db.fetch(sql, args)]
        next_cursor = None
        if limit is not None and len(turns) > limit:
            turns = turns[:limit]
            next_cursor = _encode_cursor(turns[-1].seq)
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
            result[row["turn_id"]].append(_item(row))
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


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    method: str
    topic: str | None
    params_json: str


class EventRepository:
    """The per-thread notification log, the input queue and approval grants."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def last_seq(self, thread_id: str) -> int:
        rows = await self.db.lookup_or_fetch(
            "SELECT last_seq FROM threads WHERE id = ?", (thread_id,)
        )
        return int(rows[0][0]) if rows else 0

    async def record(
        self,
        thread_id: str,
        seq: int,
        method: str,
        params_json: str | None,
        created_at: str,
        *,
        topic: str | None = None,
        turn: TurnRecord | None = None,
        new_turn: bool = False,
        item: ItemRecord | None = None,
    ) -> None:
        """One transaction: the event (if ``params_json``), the thread's
        ``last_seq``, and the turn/item rows the event announces."""
        statements: list[tuple[str, Sequence[Any]]] = []
        if params_json is not None:
            statements.append(
                (
                    "INSERT INTO thread_events (thread_id, seq, method, topic, params_json,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (thread_id, seq, method, topic, params_json, created_at),
                )
            )
        statements.append(
            ("UPDATE threads SET last_seq = MAX(last_seq, ?) WHERE id = ?", (seq, thread_id))
        )
        statements.extend(companion_statements(thread_id, turn=turn, new_turn=new_turn, item=item))
        await self.db.write(statements)

    async def set_last_seq(self, thread_id: str, seq: int) -> None:
        await self.db.write(
            [("UPDATE threads SET last_seq = MAX(last_seq, ?) WHERE id = ?", (seq, thread_id))]
        )

    async def events_after(self, thread_id: str, after_seq: int) -> list[StoredEvent]:
        sql = (
            "SELECT seq, method, topic, params_json FROM thread_events"
            " WHERE thread_id = ? AND seq > ? ORDER BY seq"
        )
        return [StoredEvent(*row) for row in await self.db.fetch(sql, (thread_id, after_seq))]

    # --- queue ---------------------------------------------------------------

    async def queue(self, thread_id: str) -> list[dict[str, Any]]:
        sql = "SELECT payload_json FROM queued_inputs WHERE thread_id = ? ORDER BY position"
        return [json.loads(row[0]) for row in await self.db.fetch(sql, (thread_id,))]

    async def save_queue(self, thread_id: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
        """Replace the thread's queue with ``(id, payload)`` entries, in order."""
        async with self.db.transaction() as conn:
            await conn.execute("DELETE FROM queued_inputs WHERE thread_id = ?", (thread_id,))
            await conn.executemany(
                "INSERT INTO queued_inputs (thread_id, id, position, payload_json)"
                " VALUES (?, ?, ?, ?)",
                [
                    (thread_id, entry_id, position, json.dumps(payload, separators=(",", ":")))
                    for position, (entry_id, payload) in enumerate(entries)
                ],
            )

    # --- approvals -------------------------------------------------------------

    async def grant(self, kind: str, operation: str, target: str, created_at: str) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT OR IGNORE INTO approval_grants (kind, operation, target, created_at)"
                " VALUES (?, ?, ?, ?)",
                (kind, operation, target, created_at),
            )

    async def is_granted(self, kind: str, operation: str, target: str) -> bool:
        sql = "SELECT 1 FROM approval_grants WHERE kind = ? AND operation = ? AND target = ?"
        return bool(await self.db.lookup_or_fetch(sql, (kind, operation, target)))

    # --- crash recovery --------------------------------------------------------

    async def unfinished_turns(self) -> list[TurnRecord]:
        """Turns a previous process left running (it crashed or was killed)."""
        sql = "SELECT * FROM turns WHERE status IN ('running', 'waitingApproval') ORDER BY seq"
        return [_turn(row) for row in await self.db.fetch(sql)]

    async def turn(self, thread_id: str, turn_id: str) -> TurnRecord | None:
        rows = await self.db.fetch(
            "SELECT * FROM turns WHERE thread_id = ? AND id = ?", (thread_id, turn_id)
        )
        return _turn(rows[0]) if rows else None

    async def unfinished_items(self, thread_id: str, turn_id: str) -> list[ItemRecord]:
        sql = (
            "SELECT * FROM items WHERE thread_id = ? AND turn_id = ? AND status != 'completed'"
            " ORDER BY seq"
        )
        return [_item(row) for row in await self.db.fetch(sql, (thread_id, turn_id))]


def companion_statements(
    thread_id: str,
    *,
    turn: TurnRecord | None = None,
    new_turn: bool = False,
    item: ItemRecord | None = None,
    node_id: str | None = None,
) -> list[tuple[str, Sequence[Any]]]:
    """The turn and item rows an event announces, written with it.
    ``node_id``: the node that runs a new turn (nodes sharing a database)."""
    statements: list[tuple[str, Sequence[Any]]] = []
    if turn is not None:
        # A new turn is inserted, never upserted: a turn another node started
        # first (the same id, or the thread's one running turn) is refused.
        statements.append(_turn_upsert(turn, insert_only=new_turn))
        if new_turn:
            statements.append(
                (
                    "UPDATE threads SET turn_count = turn_count + 1, last_active_at = ?,"
                    " turn_serial = MAX(turn_serial, ?) WHERE id = ?",
                    (turn.started_at, turn.seq, thread_id),
                )
            )
            if node_id is not None:
                statements.append(
                    (
                        "UPDATE turns SET node_id = ? WHERE thread_id = ? AND id = ?",
                        (node_id, thread_id, turn.id),
                    )
                )
    if item is not None:
        statements.append(_item_upsert(item))
        statements.append(
            (
                "UPDATE threads SET item_serial = MAX(item_serial, ?) WHERE id = ?",
                (item.seq, thread_id),
            )
        )
    return statements


def _turn_upsert(turn: TurnRecord, insert_only: bool = False) -> tuple[str, Sequence[Any]]:
    return (
        "INSERT INTO turns (thread_id, id, seq, status, started_at, completed_at,"
        " token_usage_json, error, origin_channel, initiator_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        + (
            ""
            if insert_only
            else " ON CONFLICT (thread_id, id) DO UPDATE SET status = excluded.status,"
            " completed_at = excluded.completed_at, token_usage_json = excluded.token_usage_json,"
            " error = excluded.error"
        ),
        (
            turn.thread_id,
            turn.id,
            turn.seq,
            turn.status,
            turn.started_at,
            turn.completed_at,
            _dumps(turn.token_usage),
            turn.error,
            turn.origin_channel,
            _dumps(turn.initiator),
        ),
    )


def _item_upsert(item: ItemRecord) -> tuple[str, Sequence[Any]]:
    return (
        "INSERT INTO items (thread_id, turn_id, id, seq, type, status, created_at,"
        " completed_at, payload_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (thread_id, id) DO UPDATE SET turn_id = excluded.turn_id,"
        " seq = excluded.seq, type = excluded.type, status = excluded.status,"
        " created_at = excluded.created_at, completed_at = excluded.completed_at,"
        " payload_json = excluded.payload_json",
        (
            item.thread_id,
            item.turn_id,
            item.id,
            item.seq,
            item.type,
            item.status,
            item.created_at,
            item.completed_at,
            json.dumps(item.payload, separators=(",", ":")),
        ),
    )
