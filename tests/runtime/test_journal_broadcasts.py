"""What a replay leaves out: broadcasts a participant got while not subscribed,
remembered once per event (runtime/journal.py), and how long that is kept.

The journal runs as in the server; only its event store is an in-memory list
(the journal asks it for the last seq, to record an event and for the events
after a seq), so each case says exactly who got which broadcast."""

from __future__ import annotations

from typing import Any

from appserver.protocol.base import WireModel
from appserver.runtime.bus import EventBus
from appserver.runtime.events import Event
from appserver.runtime.journal import ThreadJournal
from appserver.storage.events import StoredEvent

THREAD = "thread_1"


class Renamed(WireModel):
    display_name: str


class MemoryEvents:
    """The journal's event store, in a list."""

    def __init__(self) -> None:
        self.stored: list[StoredEvent] = []

    async def last_seq(self, thread_id: str) -> int:
        return self.stored[-1].seq if self.stored else 0

    async def record(
        self, thread_id: str, seq: int, method: str, params_json: str | None, *_: Any, **__: Any
    ) -> None:
        self.stored.append(StoredEvent(seq, method, None, params_json or "{}"))

    async def events_after(self, thread_id: str, after_seq: int) -> list[StoredEvent]:
        return [event for event in self.stored if event.seq > after_seq]


class Client:
    """A participant that wants everything but ``refuses`` and keeps what it gets."""

    def __init__(self, name: str, refuses: str = "") -> None:
        self.name = name
        self.refuses = refuses
        self.got: list[int] = []

    def wants(self, kind: str, topic: str | None) -> bool:
        return kind != self.refuses

    def deliver(self, event: Event) -> None:
        assert event.seq is not None
        self.got.append(event.seq)


def journal() -> ThreadJournal:
    return ThreadJournal(EventBus(), MemoryEvents())


async def rename(journal: ThreadJournal, name: str, **targets: Any) -> int:
    return await journal.emit(
        THREAD, "thread/renamed", Renamed(display_name=name), broadcast=True, **targets
    )


async def replay_to(journal: ThreadJournal, client: Client) -> list[int]:
    """What ``thread/subscribe {afterSeq: 0}`` sends ``client``."""
    before = len(client.got)
    await journal.subscribe(THREAD, client, 0)
    return client.got[before:]


async def test_a_broadcast_is_left_out_only_for_those_that_got_it_unsubscribed() -> None:
    log = journal()
    got, excluded, refused, subscribed, later = (
        Client("got"),
        Client("excluded"),
        Client("refused", refuses="thread/renamed"),
        Client("subscribed"),
        Client("later"),
    )
    for client in (got, excluded, refused, subscribed):
        log.bus.join(client)
    log.bus.subscribe(THREAD, subscribed)
    first = await rename(log, "one", exclude=[excluded])
    log.bus.join(later)
    second = await rename(log, "two")
    assert got.got == [first, second]
    assert excluded.got == [second]
    assert refused.got == []
    assert later.got == [second]
    assert await replay_to(log, got) == []
    assert await replay_to(log, excluded) == [first]  # it never got the first
    assert await replay_to(log, refused) == []  # what it refuses is never sent
    assert await replay_to(log, later) == [first]  # it joined after the first
    # Got while subscribed: a subscribe after an unsubscribe repeats it, as before.
    log.bus.unsubscribe(THREAD, subscribed)
    assert await replay_to(log, subscribed) == [first, second]


async def test_records_go_once_nobody_joined_then_is_left() -> None:
    log = journal()
    oldest, newer = Client("oldest"), Client("newer")
    log.bus.join(oldest)
    first = await rename(log, "one")
    log.bus.join(newer)
    second = await rename(log, "two")
    assert len(log._broadcasts[THREAD]) == 2
    log.bus.leave(oldest)
    # Only the second can matter to anyone still joined.
    assert [record[0] for record in log._broadcasts[THREAD]] == [second]
    assert await replay_to(log, newer) == [first]
    log.bus.leave(newer)
    assert THREAD not in log._broadcasts


async def test_a_participant_that_is_not_the_oldest_leaving_keeps_the_records() -> None:
    log = journal()
    oldest, newer = Client("oldest"), Client("newer")
    log.bus.join(oldest)
    log.bus.join(newer)
    first = await rename(log, "one")
    log.bus.leave(newer)
    assert [record[0] for record in log._broadcasts[THREAD]] == [first]
    assert await replay_to(log, oldest) == []


async def test_a_broadcast_with_nobody_joined_is_not_recorded() -> None:
    log = journal()
    subscriber = Client("subscriber")
    log.bus.subscribe(THREAD, subscriber)
    seq = await rename(log, "one")
    assert subscriber.got == [seq]
    assert THREAD not in log._broadcasts
