"""Thread plans (``thread_plans``): the only place that knows that SQL.

A plan is stored as its wire object (``Plan``, camelCase JSON); deleting the
thread deletes its plan (``ON DELETE CASCADE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.protocol.ids import now_iso
from appserver.storage.db import Database

if TYPE_CHECKING:
    from appserver.protocol.plans import Plan


class PlanRepository:
    """One plan per thread."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, thread_id: str) -> Plan | None:
        """The thread's plan, or ``None`` if the agent never wrote one."""
        rows = await self.db.lookup_or_fetch(
            "SELECT plan_json FROM thread_plans WHERE thread_id = ?", (thread_id,)
        )
        if not rows:
            return None
        from appserver.protocol.plans import Plan  # a thread with a plan: its model

        return Plan.model_validate_json(rows[0][0])

    async def put(self, thread_id: str, plan: Plan) -> None:
        """Store ``plan`` as the thread's plan, replacing the previous one."""
        await self.db.write(
            [
                (
                    "INSERT INTO thread_plans (thread_id, plan_json, updated_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (thread_id) DO UPDATE SET"
                    " plan_json = excluded.plan_json, updated_at = excluded.updated_at",
                    (thread_id, plan.model_dump_json(by_alias=True), now_iso()),
                )
            ]
        )
