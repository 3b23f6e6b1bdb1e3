"""Workspace MCP server configurations: the only place that knows that SQL.

A configuration is stored as its wire object (``McpServerConfig``, camelCase)
so a field added to the protocol later round-trips without a migration.
"""

from __future__ import annotations

import json
from typing import Any

from appserver.protocol.ids import now_iso
from appserver.storage.db import Database


def server_key(name: str) -> str:
    """MCP server names match case-insensitively, as in DotCraft."""
    return name.lower()


class McpServerRepository:
    """Workspace-origin MCP servers by name."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def list(self) -> list[dict[str, Any]]:
        """Every stored configuration, ordered by name (case-insensitively)."""
        rows = await self.db.fetch("SELECT config_json FROM mcp_servers ORDER BY name_key")
        return [json.loads(row[0]) for row in rows]

    async def upsert(self, name: str, config: dict[str, Any]) -> None:
        """Store ``config`` under ``name``, replacing any case-insensitive match."""
        now = now_iso()
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO mcp_servers (name_key, name, config_json, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (name_key) DO UPDATE SET"
                " name = excluded.name, config_json = excluded.config_json,"
                " updated_at = excluded.updated_at",
                (server_key(name), name, json.dumps(config, separators=(",", ":")), now, now),
            )

    async def delete(self, name: str) -> bool:
        """Remove the server called ``name``; ``False`` if there was none."""
        async with self.db.transaction() as conn:
            return (
                await conn.execute(
                    "DELETE FROM mcp_servers WHERE name_key = ?", (server_key(name),)
                )
                > 0
            )
