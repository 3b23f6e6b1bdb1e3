"""Which skills are switched off: the only place that knows that SQL."""

from __future__ import annotations

from appserver.protocol.ids import now_iso
from appserver.storage.db import Database


def skill_key(name: str) -> str:
    """Skill names match case-insensitively, as in DotCraft."""
    return name.lower()


class SkillStateRepository:
    """The workspace's disabled-skill list (names, matched case-insensitively)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def disabled_keys(self) -> set[str]:
        """Lower-cased names of every disabled skill."""
        return {row[0] for row in await self.db.fetch("SELECT name_key FROM disabled_skills")}

    async def set_enabled(self, name: str, enabled: bool) -> bool:
        """Switch ``name`` on or off; ``True`` if that changed anything."""
        async with self.db.transaction() as conn:
            if enabled:
                changed = await conn.execute(
                    "DELETE FROM disabled_skills WHERE name_key = ?", (skill_key(name),)
                )
            else:
                changed = await conn.execute(
                    "INSERT OR IGNORE INTO disabled_skills (name_key, name, disabled_at)"
                    " VALUES (?, ?, ?)",
                    (skill_key(name), name, now_iso()),
                )
            return changed > 0

    async def forget(self, name: str) -> None:
        """Drop any switch for ``name`` (its skill was uninstalled)."""
        await self.set_enabled(name, True)
