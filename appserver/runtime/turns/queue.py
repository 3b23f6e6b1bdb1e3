"""Queued inputs of each thread (``turn/enqueue``), stored in SQLite.

Entries wait for the running turn to end (then start as the next turn) or
are steered into it as guidance at the next safe boundary. Only a completed
turn hands the thread to the queue (DotCraft's rule): after an interrupted or
failed turn the queue waits for the user, and ``thread/queue/updated`` says
so (``paused``) instead of leaving the entries "queued" with no word.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

from appserver.runtime.events import Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.turns.model import ActiveTurn, QueuedInput

if TYPE_CHECKING:
    pass

# Ends after which nobody is left to tell: the thread is gone, or the server stops
# (its next start finds the queue waiting, as thread/read shows: idle with inputs).
_SILENT_ENDS = {"threadDeleted", "serverShutdown"}


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
        # And what a deleted thread's lock leaves behind (a lock file) is removed.
        self.forget_lock: Callable[[str], None] = _nothing_left

    def loaded(self, thread_id: str) -> list[QueuedInput] | None:
        """The queue if it is in memory (``None``: not loaded yet)."""
        return self.queues.get(thread_id)

    async def load(self, thread_id: str) -> list[QueuedInput]:
        """The queue to change (under :attr:`lock`): what :meth:`changed` saves."""
        queue = None if self.reload else self.queues.get(thread_id)
        if queue is None:
            queue = self.queues[thread_id] = await self._read(thread_id)
        return queue

    async def look(self, thread_id: str) -> list[QueuedInput]:
        """The queue to read without the lock (not to change). Nodes sharing a
        database read it again and keep nothing: replacing the kept queue would
        undo what a holder of the lock removed from it and has not saved yet
        (an input started as a turn, saved back as still queued, ran twice)."""
        if self.reload:
            return await self._read(thread_id)
        return await self.load(thread_id)

    async def _read(self, thread_id: str) -> list[QueuedInput]:
        # Who queued an input is not stored: a reload keeps the origins of
        # the inputs this process queued, so their turns still reach them.
        origins = {e.wire.id: e.origin for e in self.queues.get(thread_id, ())}
        queue = []
        for row in await self.journal.events.queue(thread_id):
            from appserver.protocol import turns as turn_wire  # a queue's models, when one exists

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
        return queue

    def find(self, thread_id: str, entry_id: str) -> QueuedInput | None:
        return next((e for e in self.queues.get(thread_id, []) if e.wire.id == entry_id), None)

    async def after_turn(self, active: ActiveTurn) -> None:
        """A turn ended: steered inputs it never reached go back to the queue,
        and a turn that did not complete leaves the queue paused, announced."""
        pause = pause_after(active)
        if not active.guidance and pause is None:
            return
        async with self.lock(active.thread_id):
            queue = await self.load(active.thread_id)
            # Inputs that belonged to the turn (kept) go with it; the others come back.
            steered = bool(active.guidance)
            queue[:] = [entry for entry in queue if entry.wire.id not in active.kept_guidance]
            for entry in queue:
                if entry.wire.id in active.guidance:
                    entry.wire.status = "queued"
            active.guidance.clear()
            waiting = any(entry.wire.status == "queued" for entry in queue)
            if steered or waiting:
                await self.changed(
                    active.thread_id,
                    include=active.watchers,
                    paused=pause if waiting else None,
                )

    async def return_guidance(self, thread_id: str, turn_id: str) -> None:
        """A turn that ended without its runner (a crash, a node lost: it was
        failed by recovery) gives the inputs steered into it back to the queue,
        as :meth:`after_turn` does for a turn that ends here; the queue waits,
        paused after that failure."""
        async with self.lock(thread_id):
            queue = await self.load(thread_id)
            steered = [entry for entry in queue if entry.wire.status == "guidancePending"]
            for entry in steered:
                entry.wire.status = "queued"
            if steered:
                await self.changed(thread_id, paused=(turn_id, "failed"))

    async def changed(
        self,
        thread_id: str,
        include: list[Participant] | None = None,
        paused: tuple[str, str] | None = None,
    ) -> None:
        """Save the queue and announce ``thread/queue/updated`` (``paused``: the
        turn and the reason it waits after)."""
        from appserver.protocol import turns as turn_wire

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
                thread_id=thread_id,
                queued_inputs=[entry.wire for entry in entries],
                paused=(
                    turn_wire.QueuePause(turn_id=paused[0], reason=paused[1]) if paused else None
                ),
            ),
            include=include or [],
        )

    def forget(self, thread_id: str) -> None:
        """A deleted thread: its queue, and its lock's file if it has one."""
        self.queues.pop(thread_id, None)
        self.forget_lock(thread_id)


def pause_after(active: ActiveTurn) -> tuple[str, str] | None:
    """The turn and the reason the queue waits after ``active`` ended (``None``:
    it does not, or nobody is left to tell). No model: an interrupted one-shot's
    end imports none (the import stalled its loop past its deadline)."""
    record = active.record
    if record.status == "completed":
        return None
    if record.status == "failed":
        return record.id, "failed"
    reason = active.cancel_reason or "interrupted"
    return None if reason in _SILENT_ENDS else (record.id, reason)


@asynccontextmanager
async def _no_lock(thread_id: str) -> AsyncIterator[None]:
    """One node: the callers' own sequencing is enough."""
    yield


def _nothing_left(thread_id: str) -> None:
    """One node: its lock leaves nothing behind."""
