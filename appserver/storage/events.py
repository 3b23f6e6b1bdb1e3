"""The per-thread notification log, the input queue, approval grants, and the
turn and item rows an event is written with."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appserver.storage.db import Database
from appserver.storage.records import (
    ItemRecord,
    TurnRecord,
    item_from_row,
    item_upsert,
    turn_from_row,
    turn_upsert,
)


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
        rows: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> None:
        """One transaction: the event (if ``params_json``), the thread's
        ``last_seq``, the turn/item rows the event announces and ``rows``."""
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
        statements.extend(rows)
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
        # An indexed read of a handful of rows (asked at every turn's start).
        return [json.loads(row[0]) for row in await self.db.lookup_or_fetch(sql, (thread_id,))]

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

    async def grants(self) -> list[tuple[str, str, str, str]]:
        """Every remembered grant, ``(kind, operation, target, created_at)``, oldest first."""
        sql = (
            "SELECT kind, operation, target, created_at FROM approval_grants"
            " ORDER BY created_at, kind, operation, target"
        )
        return [
            (str(row[0]), str(row[1]), str(row[2]), str(row[3])) for row in await self.db.fetch(sql)
        ]

    async def revoke_grant(self, kind: str, operation: str, target: str) -> bool:
        """Forget one remembered grant; whether there was one."""
        async with self.db.transaction() as conn:
            changed = await conn.execute(
                "DELETE FROM approval_grants WHERE kind = ? AND operation = ? AND target = ?",
                (kind, operation, target),
            )
        return changed > 0

    # --- crash recovery --------------------------------------------------------

    async def unfinished_turns(self) -> list[TurnRecord]:
        """Turns a previous process left running (it crashed or was killed)."""
        sql = "SELECT * FROM turns WHERE status IN ('running', 'waitingApproval') ORDER BY seq"
        return [turn_from_row(row) for row in await self.db.fetch(sql)]

    async def turn(self, thread_id: str, turn_id: str) -> TurnRecord | None:
        rows = await self.db.fetch(
            "SELECT * FROM turns WHERE thread_id = ? AND id = ?", (thread_id, turn_id)
        )
        return turn_from_row(rows[0]) if rows else None

    async def unfinished_items(self, thread_id: str, turn_id: str) -> list[ItemRecord]:
        sql = (
            "SELECT * FROM items WHERE thread_id = ? AND turn_id = ? AND status != 'completed'"
            " ORDER BY seq"
        )
        return [item_from_row(row) for row in await self.db.fetch(sql, (thread_id, turn_id))]

    async def stored_deltas(self, thread_id: str, item_id: str) -> list[tuple[str, str]]:
        """``(method, params_json)`` of an item's stored deltas, in seq order
        (processes sharing the database store them; one process alone does not)."""
        rows = await self.db.fetch(
            "SELECT method, params_json FROM thread_events WHERE thread_id = ? AND stream = ?"
            " ORDER BY seq",
            (thread_id, item_id),
        )
        return [(row[0], row[1]) for row in rows]


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
        statements.append(turn_upsert(turn, insert_only=new_turn))
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
        statements.append(item_upsert(item))
        statements.append(
            (
                "UPDATE threads SET item_serial = MAX(item_serial, ?) WHERE id = ?",
                (item.seq, thread_id),
            )
        )
    return statements
