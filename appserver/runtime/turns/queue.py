"""Queued inputs of each thread (``turn/enqueue``), stored in SQLite.

Entries wait for the running turn to end (then start as the next turn) or
are steered into it as guidance at the next safe boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from appserver.protocol import turns as turn_wire
from appserver.runtime.events import Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.turns.model import QueuedInput


class InputQueues:
    """Per-thread queues, loaded lazily and saved on every change."""

    def __init__(self, journal: ThreadJournal) -> None:
        self.journal = journal
        self.queues: dict[str, list[QueuedInput]] = {}
        # Nodes sharing a database: another node may have changed the queue,
        # so every load reads it again, and changes hold the thread's lock
        # across nodes (set to ClusterStore.thread_lock).
        self.reload = False
        self.lock: Callable[[str], AbstractAsyncContextManager[None]] = _no_lock

    def loaded(self, thread_id: str) -> list[QueuedInput] | None:
        """The queue if it is in memory (``None``: not loaded yet)."""
        return self.queues.get(thread_id)

    async def load(self, thread_id: str) -> list[QueuedInput]:
        queue = None if self.reload else self.queues.get(thread_id)
        if queue is None:
            # Who queued an input is not stored: a reload keeps the origins of
            # the inputs this process queued, so their turns still reach them.
            origins = {e.wire.id: e.origin for e in self.queues.get(thread_id, ())}
            queue = []
            for row in await self.journal.events.queue(thread_id):
                wire = turn_wire.QueuedTurnInput.model_validate(row["wire"])
                queue.append(
                    QueuedInput(
                        wire=wire,
                        images=list(row.get("images") or []),
                        materialized=list(row.get("materialized") or []),
                        instructions=list(row.get("instructions") or []),
                        origin=origins.get(wire.id),
                    )
                )
            self.queues[thread_id] = queue
        return queue

    def find(self, thread_id: str, entry_id: str) -> QueuedInput | None:
        return next((e for e in self.queues.get(thread_id, []) if e.wire.id == entry_id), None)

    async def changed(self, thread_id: str, include: list[Participant] | None = None) -> None:
        """Save the queue and announce ``thread/queue/updated``."""
        entries = self.queues.get(thread_id, [])
        await self.journal.events.save_queue(
            thread_id,
            [
                (
                    entry.wire.id,
                    {
                        "wire": entry.wire.to_wire(),
                        "images": entry.images,
                        "materialized": entry.materialized,
                        "instructions": entry.instructions,
                    },
                )
                for entry in entries
            ],
        )
        await self.journal.emit(
            thread_id,
            "thread/queue/updated",
            turn_wire.QueueUpdatedNotification(
                thread_id=thread_id, queued_inputs=[entry.wire for entry in entries]
            ),
            include=include or [],
        )

    def forget(self, thread_id: str) -> None:
        self.queues.pop(thread_id, None)


@asynccontextmanager
async def _no_lock(thread_id: str) -> AsyncIterator[None]:
    """One node: the callers' own sequencing is enough."""
    yield
