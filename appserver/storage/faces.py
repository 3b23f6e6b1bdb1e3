"""Faces' names for threads, and their stored replies: the only SQL of ``faces``."""

from __future__ import annotations

from appserver.storage.db import Database


class FaceRepository:
    """``(face, key) -> thread id`` and ``(face, key) -> reply JSON``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def thread_of(self, face: str, key: str) -> str | None:
        """The thread a face's conversation ``key`` maps to, if any."""
        rows = await self.db.fetch(
            "SELECT thread_id FROM face_sessions WHERE face = ? AND key = ?", (face, key)
        )
        return str(rows[0]["thread_id"]) if rows else None

    async def claim(
        self, face: str, key: str, thread_id: str, created_at: str, replacing: str | None
    ) -> str:
        """Map ``key`` to ``thread_id`` unless another process mapped it meanwhile
        (to anything but ``replacing``, the thread this one saw there); the thread
        ``key`` maps to afterwards. One statement decides, so two processes
        opening one conversation at once end on the same thread."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO face_sessions (face, key, thread_id, created_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (face, key) DO UPDATE SET"
                " thread_id = excluded.thread_id, created_at = excluded.created_at"
                " WHERE face_sessions.thread_id = ?",
                (face, key, thread_id, created_at, replacing or ""),
            )
            rows = await conn.fetch(
                "SELECT thread_id FROM face_sessions WHERE face = ? AND key = ?", (face, key)
            )
        return str(rows[0]["thread_id"]) if rows else thread_id

    async def reply(self, face: str, key: str) -> tuple[str, str] | None:
        """``(reply_json, created_at)`` stored under ``key``, if any."""
        rows = await self.db.fetch(
            "SELECT reply_json, created_at FROM face_replies WHERE face = ? AND key = ?",
            (face, key),
        )
        return (str(rows[0]["reply_json"]), str(rows[0]["created_at"])) if rows else None

    async def store_reply(self, face: str, key: str, reply_json: str, created_at: str) -> None:
        """Keep a reply for repeats of ``key``."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO face_replies (face, key, reply_json, created_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (face, key) DO UPDATE SET"
                " reply_json = excluded.reply_json, created_at = excluded.created_at",
                (face, key, reply_json, created_at),
            )

    async def forget_replies_before(self, face: str, created_before: str) -> None:
        """Drop replies older than ``created_before`` (ISO-8601, compared as text)."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM face_replies WHERE face = ? AND created_at < ?",
                (face, created_before),
            )
