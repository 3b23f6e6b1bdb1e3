"""What a turn holds for its next commit (a model call's usage, the items its
last response closes) is never lost to an interrupt while it is written."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from appserver.providers.base import Usage
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn
from appserver.storage.records import ThreadRecord, TurnRecord

pytestmark = pytest.mark.anyio


class SlowJournal:
    """Commits each group once ``release`` is set."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.writing = anyio.Event()
        self.committed: list[list[str]] = []

    async def emit_all(self, thread_id: str, group: Any) -> None:
        self.writing.set()
        await self.release.wait()
        self.committed.append([emission.kind for emission in group])


def turn() -> ActiveTurn:
    now = "2026-11-29T00:00:00Z"
    thread = ThreadRecord("t", "/w", "u", "cli", "active", now, now)
    return ActiveTurn(thread, TurnRecord("t", "turn_001", 1, "running", now), origin=None)


async def test_an_interrupt_while_the_held_events_are_written_loses_none() -> None:
    journal = SlowJournal()
    items = ItemLog(journal, repo=None, checkpoint_interval=1.0)  # type: ignore[arg-type]
    active = turn()
    text = items.new(active, "agentMessage", {"text": "hello"})
    active.open_items[text.id] = text
    items.usage(active, Usage(3, 1))
    active.held.append(items.completion(active, text))
    assert text.id not in active.open_items  # only the held completion closes it now

    interrupt = anyio.CancelScope()

    async def flush() -> None:
        with interrupt:
            await items.flush(active)

    async with anyio.create_task_group() as group:
        group.start_soon(flush)
        await journal.writing.wait()
        interrupt.cancel()  # turn/interrupt while the commit is under way
        await anyio.wait_all_tasks_blocked()
        journal.release.set()
    assert journal.committed == [["item/usage/delta", "item/completed"]]
    assert active.held == []
