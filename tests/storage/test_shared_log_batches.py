"""The shared log's commits on a real PostgreSQL (issue 32): an item's last
deltas go in one commit with the lifecycle event after them, and when that
event's rows are refused the deltas are stored and delivered all the same."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from appserver.runtime.events import Event, Participant
from appserver.runtime.shared_feed import Pending
from appserver.runtime.shared_log import SharedLog
from appserver.storage.cluster import ClusterStore
from appserver.storage.postgres import PostgresDatabase
from tests.support.cluster import seed_running_turn

NOW = "2026-01-01T00:00:00.000Z"


class CountingStore(ClusterStore):
    """A node's store that counts its appends (one per commit)."""

    appends = 0

    async def append(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.appends += 1
        return await super().append(*args, **kwargs)


@asynccontextmanager
async def shared_log(
    postgres_url: str,
) -> AsyncIterator[tuple[SharedLog, CountingStore, list[Event]]]:
    db = await PostgresDatabase.open(postgres_url)
    delivered: list[Event] = []

    def deliver(
        event: Event, _b: bool, _i: Iterable[Participant], _e: Iterable[Participant]
    ) -> None:
        delivered.append(event)

    locks: dict[str, anyio.Lock] = {}
    store = CountingStore(db, "node-a")
    log = SharedLog(
        store, deliver, lambda t: locks.setdefault(t, anyio.Lock()), lambda _t: frozenset()
    )
    try:
        await seed_running_turn(db, "node-a")
        async with anyio.create_task_group() as tg:
            await tg.start(log.run)
            yield log, store, delivered
            tg.cancel_scope.cancel()
    finally:
        await store.close()
        await db.close()


def delta(text: str) -> Event:
    return Event(
        "item/agentMessage/delta",
        None,
        thread_id="t1",
        stream="i1",
        params_json=f'{{"turnId": "turn_001", "delta": "{text}"}}',
    )


def completed() -> Event:
    return Event("item/completed", None, thread_id="t1", params_json='{"turnId": "turn_001"}')


async def append_completed(
    log: SharedLog, statements: Sequence[tuple[str, Sequence[Any]]] = ()
) -> int:
    """The turn's ``item/completed``, with ``statements`` as its rows; its seq."""
    event = completed()
    await log.append_all([Pending(event, False, (), (), statements, "turn_001", created_at=NOW)])
    assert event.seq is not None
    return event.seq


async def queue_deltas(log: SharedLog, count: int) -> None:
    for index in range(count):
        await log.append_delta(delta(str(index)), (), "turn_001")


async def test_the_last_deltas_and_the_item_completed_are_one_commit(postgres_url: str) -> None:
    async with shared_log(postgres_url) as (log, store, delivered):
        await queue_deltas(log, 3)  # queued in one tick: the flusher has not run yet
        seq = await append_completed(log)
        assert seq == 4
        assert store.appends == 1
        assert [event.seq for event in delivered] == [1, 2, 3, 4]
        assert [row.seq for row in await store.events_after("t1", 0)] == [1, 2, 3, 4]


async def test_refused_rows_of_the_event_leave_the_deltas_stored(postgres_url: str) -> None:
    async with shared_log(postgres_url) as (log, store, delivered):
        await queue_deltas(log, 3)
        duplicate = (
            "INSERT INTO turns (thread_id, id, seq, status, started_at)"
            " VALUES (?, ?, 1, 'running', ?)",
            ("t1", "turn_001", NOW),
        )
        with pytest.raises(sqlite3.IntegrityError):
            await append_completed(log, [duplicate])
        assert [event.seq for event in delivered] == [1, 2, 3]
        assert [row.seq for row in await store.events_after("t1", 0)] == [1, 2, 3]
        # The next event follows on: no seq was spent on the refused one.
        assert await append_completed(log) == 4


def lifecycle(kind: str) -> Pending:
    """A lifecycle event of the turn, for :meth:`SharedLog.append_all`."""
    event = Event(kind, None, thread_id="t1", params_json='{"turnId": "turn_001"}')
    return Pending(event, False, (), (), (), "turn_001", created_at=NOW)


async def test_events_emitted_together_are_one_commit_with_the_deltas_before_them(
    postgres_url: str,
) -> None:
    async with shared_log(postgres_url) as (log, store, delivered):
        await queue_deltas(log, 2)
        await log.append_all([lifecycle("item/started"), lifecycle("item/completed")])
        assert store.appends == 1
        assert [(event.kind, event.seq) for event in delivered] == [
            ("item/agentMessage/delta", 1),
            ("item/agentMessage/delta", 2),
            ("item/started", 3),
            ("item/completed", 4),
        ]
        assert [row.seq for row in await store.events_after("t1", 0)] == [1, 2, 3, 4]


async def test_events_emitted_together_are_stored_all_or_none(postgres_url: str) -> None:
    """The last one's rows are refused: the deltas queued before the group are
    stored and delivered, no event of the group is; alone, the group is tried once."""
    duplicate = (
        "INSERT INTO turns (thread_id, id, seq, status, started_at) VALUES (?, ?, 1, 'running', ?)",
        ("t1", "turn_001", NOW),
    )
    async with shared_log(postgres_url) as (log, store, delivered):
        await queue_deltas(log, 2)
        refused = lifecycle("item/completed")
        refused.statements = [duplicate]
        with pytest.raises(sqlite3.IntegrityError):
            await log.append_all([lifecycle("item/started"), refused])
        assert [event.seq for event in delivered] == [1, 2]
        assert [row.seq for row in await store.events_after("t1", 0)] == [1, 2]
        before = store.appends
        alone = lifecycle("item/completed")
        alone.statements = [duplicate]
        with pytest.raises(sqlite3.IntegrityError):
            await log.append_all([lifecycle("item/started"), alone])
        assert store.appends == before + 1
        assert await append_completed(log) == 3  # no seq was spent on either group
