"""Thread, turn and item records and how they map to rows: reading a row into a
record, and the upserts that write turns and items (SQL both engines run: see
:mod:`appserver.storage.postgres`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from appserver.storage.db import Row

# The server's own helper threads (welcome and commit-message suggestions): hidden
# from thread/list unless asked for, announced to nobody. DotCraft marks them with
# this metadata key or knows them by their channel (its ThreadVisibility); ours also
# carry source.kind "internal", the column thread/list filters on.
INTERNAL_METADATA_KEY = "dotcraft.internal"
INTERNAL_SOURCE_KIND = "internal"
INTERNAL_CHANNELS = ("welcome-suggest", "commit-suggest")


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

    @property
    def is_internal(self) -> bool:
        """Whether this is one of the server's helper threads (see ``INTERNAL_*``)."""
        return (
            bool(self.metadata.get(INTERNAL_METADATA_KEY))
            or self.source_kind == INTERNAL_SOURCE_KIND
            or self.origin_channel in INTERNAL_CHANNELS
        )


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


def workspace_key(path: str) -> str:
    """Workspace paths match case-insensitively, as in DotCraft."""
    return path.lower()


def loads_json(text: str | None) -> Any:
    """A JSON column's value (``None`` for NULL or empty)."""
    return json.loads(text) if text else None


def dumps_json(value: Any) -> str | None:
    """The compact JSON text of a column (``None`` stays NULL)."""
    return None if value is None else json.dumps(value, separators=(",", ":"))


def thread_from_row(row: Row) -> ThreadRecord:
    """A ``threads`` row as a record."""
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
        source=loads_json(row["source_json"]),
        metadata=loads_json(row["metadata_json"]) or {},
        configuration=loads_json(row["configuration_json"]),
        turn_count=row["turn_count"],
        turn_serial=row["turn_serial"],
        item_serial=row["item_serial"],
    )


def turn_from_row(row: Row) -> TurnRecord:
    """A ``turns`` row as a record."""
    return TurnRecord(
        thread_id=row["thread_id"],
        id=row["id"],
        seq=row["seq"],
        status=row["status"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        token_usage=loads_json(row["token_usage_json"]),
        error=row["error"],
        origin_channel=row["origin_channel"],
        initiator=loads_json(row["initiator_json"]),
    )


def item_from_row(row: Row) -> ItemRecord:
    """An ``items`` row as a record."""
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


def turn_upsert(turn: TurnRecord, insert_only: bool = False) -> tuple[str, Sequence[Any]]:
    """The statement that writes a turn (``insert_only``: refused if it exists)."""
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
            dumps_json(turn.token_usage),
            turn.error,
            turn.origin_channel,
            dumps_json(turn.initiator),
        ),
    )


def item_upsert(item: ItemRecord) -> tuple[str, Sequence[Any]]:
    """The statement that inserts or replaces an item."""
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
