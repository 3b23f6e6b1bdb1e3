"""A look at a thread's queue without its lock never undoes a change the
lock's holder has made and not saved yet (nodes sharing a database read the
queue again at every load)."""

from __future__ import annotations

from typing import Any

import pytest

from appserver.protocol import turns as turn_wire
from appserver.runtime.turns.model import QueuedInput
from appserver.runtime.turns.queue import InputQueues

pytestmark = pytest.mark.anyio


class StoredQueues:
    """The queue table, as the journal's event store keeps it."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}

    async def queue(self, thread_id: str) -> list[dict[str, Any]]:
        return [dict(row) for row in self.rows.get(thread_id, [])]

    async def save_queue(self, thread_id: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
        self.rows[thread_id] = [body for _, body in entries]


class Journal:
    def __init__(self) -> None:
        self.events = StoredQueues()

    async def emit(self, *args: Any, **kwargs: Any) -> None:
        return None


def entry(entry_id: str) -> QueuedInput:
    wire = turn_wire.QueuedTurnInput.model_validate(
        {
            "id": entry_id,
            "threadId": "t",
            "nativeInputParts": [{"type": "text", "text": entry_id}],
            "displayText": entry_id,
            "createdAt": "2026-11-29T00:00:00Z",
        }
    )
    return QueuedInput(wire=wire, images=[], materialized=[], instructions=[])


@pytest.mark.parametrize("shared", [True, False], ids=["nodes sharing a database", "one node"])
async def test_a_look_meanwhile_does_not_bring_back_a_taken_input(shared: bool) -> None:
    queues = InputQueues(Journal())  # type: ignore[arg-type]
    queues.reload = shared
    queue = await queues.load("t")
    queue.extend([entry("a"), entry("b")])
    await queues.changed("t")

    # The lock's holder takes the first input (it becomes a turn) ...
    taken = await queues.load("t")
    taken.pop(0)
    # ... while someone reads the thread without the lock (thread/read) ...
    seen = await queues.look("t")
    assert [e.wire.id for e in seen] == (["a", "b"] if shared else ["b"])
    # ... and then saves what it changed.
    await queues.changed("t")

    assert [e.wire.id for e in await queues.look("t")] == ["b"]
