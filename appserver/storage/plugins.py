"""Which plugins the workspace switched on or off: the only place that knows that SQL."""

from __future__ import annotations

from appserver.protocol.ids import now_iso
from appserver.storage.db import Database


def plugin_key(plugin_id: str) -> str:
    """Plugin ids match case-insensitively, as in DotCraft."""
    return plugin_id.lower()


class PluginStateRepository:
    """Explicit plugin switches; a plugin without one is enabled."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def switches(self) -> dict[str, bool]:
        """Lower-cased plugin id -> enabled, for every plugin with an explicit switch."""
        rows = await self.db.fetch("SELECT id_key, enabled FROM plugin_settings")
        return {row[0]: bool(row[1]) for row in rows}

    async def set_enabled(self, plugin_id: str, enabled: bool) -> None:
        """Record that ``plugin_id`` is switched on or off."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO plugin_settings (id_key, plugin_id, enabled, updated_at)"
                " VALUES (?, ?, ?, ?)"
                " ON CONFLICT (id_key) DO UPDATE SET"
                " plugin_id = excluded.plugin_id, enabled = excluded.enabled,"
                " updated_at = excluded.updated_at",
                (plugin_key(plugin_id), plugin_id, int(enabled), now_iso()),
            )

    async def forget(self, plugin_id: str) -> None:
        """Drop the switch (the plugin was removed; a reinstall starts enabled)."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM plugin_settings WHERE id_key = ?", (plugin_key(plugin_id),)
            )
