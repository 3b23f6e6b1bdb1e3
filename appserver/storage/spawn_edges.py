"""Thread spawn edges (``thread_spawn_edges``): the only place that knows that SQL.

An edge parent -> child is keyed by the pair; a spawn upserts it, close and
resume set its status. Deleting either thread deletes the edge (``ON DELETE
CASCADE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appserver.protocol.ids import now_iso
from appserver.storage.db import Database

if TYPE_CHECKING:
    from appserver.protocol.spawn_edges import ThreadSpawnEdge

_COLUMNS = (
    "parent_thread_id, child_thread_id, parent_turn_id, depth, agent_nickname, agent_role,"
    " profile_name, runtime_type, supports_send_input, supports_resume, supports_close,"
    " status, created_at, updated_at"
)


def _edge(row: Any) -> ThreadSpawnEdge:
    from appserver.protocol.spawn_edges import ThreadSpawnEdge  # a thread with children

    return ThreadSpawnEdge(
        parent_thread_id=row[0],
        child_thread_id=row[1],
        parent_turn_id=row[2],
        depth=int(row[3]),
        agent_nickname=row[4],
        agent_role=row[5],
        profile_name=row[6],
        runtime_type=row[7],
        supports_send_input=bool(row[8]),
        supports_resume=bool(row[9]),
        supports_close=bool(row[10]),
        status=row[11],
        created_at=row[12],
        updated_at=row[13],
    )


class SpawnEdgeRepository:
    """Edges parent -> child, the same over SQLite and PostgreSQL."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def upsert(self, edge: ThreadSpawnEdge) -> None:
        """Store ``edge``, replacing the pair's row but keeping its ``createdAt``."""
        await self.db.write(
            [
                (
                    f"INSERT INTO thread_spawn_edges ({_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (parent_thread_id, child_thread_id) DO UPDATE SET"
                    " parent_turn_id = excluded.parent_turn_id, depth = excluded.depth,"
                    " agent_nickname = excluded.agent_nickname,"
                    " agent_role = excluded.agent_role, profile_name = excluded.profile_name,"
                    " runtime_type = excluded.runtime_type,"
                    " supports_send_input = excluded.supports_send_input,"
                    " supports_resume = excluded.supports_resume,"
                    " supports_close = excluded.supports_close, status = excluded.status,"
                    " updated_at = excluded.updated_at",
                    (
                        edge.parent_thread_id,
                        edge.child_thread_id,
                        edge.parent_turn_id,
                        edge.depth,
                        edge.agent_nickname,
                        edge.agent_role,
                        edge.profile_name,
                        edge.runtime_type,
                        int(edge.supports_send_input),
                        int(edge.supports_resume),
                        int(edge.supports_close),
                        edge.status,
                        edge.created_at,
                        edge.updated_at,
                    ),
                )
            ]
        )

    async def set_status(self, parent_id: str, child_id: str, status: str) -> bool:
        """Set the pair's status (and ``updatedAt``); false when there is no such edge."""
        if await self.get(parent_id, child_id) is None:
            return False
        await self.db.write(
            [
                (
                    "UPDATE thread_spawn_edges SET status = ?, updated_at = ?"
                    " WHERE parent_thread_id = ? AND child_thread_id = ?",
                    (status, now_iso(), parent_id, child_id),
                )
            ]
        )
        return True

    async def get(self, parent_id: str, child_id: str) -> ThreadSpawnEdge | None:
        """The edge parent -> child, or ``None``."""
        rows = await self.db.fetch(
            f"SELECT {_COLUMNS} FROM thread_spawn_edges"
            " WHERE parent_thread_id = ? AND child_thread_id = ?",
            (parent_id, child_id),
        )
        return _edge(rows[0]) if rows else None

    async def parent_of(self, child_id: str) -> ThreadSpawnEdge | None:
        """The edge that leads to ``child_id`` (a child has one parent), or ``None``."""
        rows = await self.db.fetch(
            f"SELECT {_COLUMNS} FROM thread_spawn_edges WHERE child_thread_id = ?"
            " ORDER BY created_at LIMIT 1",
            (child_id,),
        )
        return _edge(rows[0]) if rows else None

    async def children(self, parent_id: str, *, include_closed: bool) -> list[ThreadSpawnEdge]:
        """The parent's edges, ``updatedAt`` newest first, then child id descending."""
        closed = "" if include_closed else " AND status = 'open'"
        # An indexed read of a thread's few children (asked at every turn).
        rows = await self.db.lookup_or_fetch(
            f"SELECT {_COLUMNS} FROM thread_spawn_edges WHERE parent_thread_id = ?{closed}"
            " ORDER BY updated_at DESC, child_thread_id DESC",
            (parent_id,),
        )
        return [_edge(row) for row in rows]

    async def descendants(self, parent_id: str) -> list[str]:
        """Every thread below ``parent_id`` (closed edges too), parents before their children."""
        found: list[str] = []
        frontier = [parent_id]
        while frontier:
            current = frontier.pop(0)
            for edge in await self.children(current, include_closed=True):
                if edge.child_thread_id not in found and edge.child_thread_id != parent_id:
                    found.append(edge.child_thread_id)
                    frontier.append(edge.child_thread_id)
        return found
