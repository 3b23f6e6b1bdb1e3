"""Thread plans: stored with the thread, announced as ``plan/updated``.

The plan tools (``tools/plans.py``) write through :class:`ThreadPlans`. Each
save stores the whole plan, then emits ``plan/updated`` through the thread's
journal (numbered, stored, replayed to a client that reconnects with
``afterSeq``) to every connection, as DotCraft broadcasts it, and to the
running turn's watchers (participants that started the turn without
joining broadcasts). Each participant's opt-outs apply (``wants``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appserver.runtime.journal import ThreadJournal
from appserver.runtime.turns import TurnEngine
from appserver.storage.plans import PlanRepository

if TYPE_CHECKING:
    from appserver.protocol.plans import Plan, PlanUpdatedNotification


class ThreadPlans:
    """The plan of each thread (a :class:`~appserver.tools.plans.PlanStore`)."""

    def __init__(self, repo: PlanRepository, journal: ThreadJournal, engine: TurnEngine) -> None:
        self.repo = repo
        self.journal = journal
        self.engine = engine

    async def load(self, thread_id: str) -> Plan | None:
        """The thread's plan, or ``None`` if the agent never wrote one."""
        return await self.repo.get(thread_id)

    async def save(self, thread_id: str, plan: Plan) -> None:
        """Store ``plan`` as the thread's plan, then send ``plan/updated``."""
        await self.repo.put(thread_id, plan)
        active = self.engine.active.get(thread_id)
        await self.journal.emit(
            thread_id,
            "plan/updated",
            _plan_updated(thread_id, plan),
            broadcast=True,
            include=active.watchers if active is not None else (),
        )


def _plan_updated(thread_id: str, plan: Plan) -> PlanUpdatedNotification:
    # Imported when a plan changes: a turn without one loads no plan models.
    from appserver.protocol.plans import PlanUpdatedNotification

    return PlanUpdatedNotification.of(thread_id, plan)
