"""External channel configurations: the only place that knows their SQL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from appserver.protocol.ids import now_iso
from appserver.storage.db import Database

_COLUMNS = "name, enabled, transport, command, args_json, working_directory, env_json"


@dataclass
class ExternalChannelRecord:
    """One configured external channel (validated by the service before it gets here)."""

    name: str
    enabled: bool
    transport: str  # "subprocess" | "websocket"
    command: str | None = None
    args: list[str] | None = None
    working_directory: str | None = None
    env: dict[str, str] | None = None


def _record(row: Any) -> ExternalChannelRecord:
    return ExternalChannelRecord(
        name=row["name"],
        enabled=bool(row["enabled"]),
        transport=row["transport"],
        command=row["command"],
        args=json.loads(row["args_json"]) if row["args_json"] is not None else None,
        working_directory=row["working_directory"],
        env=json.loads(row["env_json"]) if row["env_json"] is not None else None,
    )


class ExternalChannelRepository:
    """CRUD over ``external_channels``; names compare case-insensitively."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def list(self) -> list[ExternalChannelRecord]:
        """Every channel, ordered by name (case-insensitive)."""
        rows = await self.db.fetch(
            f"SELECT {_COLUMNS} FROM external_channels ORDER BY name COLLATE NOCASE"
        )
        return [_record(row) for row in rows]

    async def get(self, name: str) -> ExternalChannelRecord | None:
        rows = await self.db.lookup_or_fetch(
            f"SELECT {_COLUMNS} FROM external_channels WHERE name = ?", (name,)
        )
        return _record(rows[0]) if rows else None

    async def upsert(self, record: ExternalChannelRecord) -> bool:
        """Insert or fully replace (the stored name takes the new spelling).
        Returns ``True`` when the channel is new."""
        now = now_iso()
        values = (
            record.name,
            int(record.enabled),
            record.transport,
            record.command,
            json.dumps(record.args) if record.args is not None else None,
            record.working_directory,
            json.dumps(record.env, sort_keys=True) if record.env is not None else None,
        )
        async with self.db.transaction() as conn:
            created = not await conn.fetch(
                "SELECT 1 FROM external_channels WHERE name = ?", (record.name,)
            )
            await conn.execute(
                f"INSERT INTO external_channels ({_COLUMNS}, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET name = excluded.name,"
                " enabled = excluded.enabled, transport = excluded.transport,"
                " command = excluded.command, args_json = excluded.args_json,"
                " working_directory = excluded.working_directory,"
                " env_json = excluded.env_json, updated_at = excluded.updated_at",
                (*values, now, now),
            )
        return created

    async def remove(self, name: str) -> bool:
        """Delete; ``False`` when there was no such channel."""
        async with self.db.transaction() as conn:
            return await conn.execute("DELETE FROM external_channels WHERE name = ?", (name,)) > 0
