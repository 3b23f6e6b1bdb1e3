"""What a replay leaves out: broadcasts a participant got while not subscribed,
remembered once per event (runtime/journal.py), and how long that is kept.

The journal runs as in the server; only its event store is an in-memory list
(the journal asks it for the last seq, to record an event and for the events
after a seq), so each case says exactly who got which broadcast."""

from __future__ import annotations

from typing import Any

from appserver.protocol.base import WireModel
from appserver.runtime import broadcast_records
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
        self.stored: dict[str, list[StoredEvent]] = {}

    async def last_seq(self, thread_id: str) -> int:
        stored = self.stored.get(thread_id)
        return stored[-1].seq if stored else 0

    async def record(
        self, thread_id: str, seq: int, method: str, params_json: str | None, *_: Any, **__: Any
    ) -> None:
        event = StoredEvent(seq, method, None, params_json or "{}")
        self.stored.setdefault(thread_id, []).append(event)

    async def events_after(self, thread_id: str, after_seq: int) -> list[StoredEvent]:
        return [event for event in self.stored.get(thread_id, []) if event.seq > after_seq]


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
    assert len(log._broadcasts.records(THREAD)) == 2
    log.bus.leave(oldest)
    # Only the second can matter to anyone still joined.
    assert [record[0] for record in log._broadcasts.records(THREAD)] == [second]
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
    assert [record[0] for record in log._broadcasts.records(THREAD)] == [first]
    assert await replay_to(log, oldest) == []


async def test_a_broadcast_with_nobody_joined_is_not_recorded() -> None:
    log = journal()
    subscriber = Client("subscriber")
    log.bus.subscribe(THREAD, subscriber)
    seq = await rename(log, "one")
    assert subscriber.got == [seq]
    assert THREAD not in log._broadcasts


async def test_records_are_bounded_by_thread_and_a_dropped_one_repeats_never_misses(
    monkeypatch: Any,
) -> None:
    """A server whose clients stay connected keeps the records of the most
    recently broadcast threads only: an older thread's replay then repeats the
    broadcasts the participant got (a duplicate, never a gap)."""
    monkeypatch.setattr(broadcast_records, "REMEMBERED_THREADS", 2)
    log = journal()
    client = Client("client")
    log.bus.join(client)
    first = await rename(log, "one")  # on THREAD
    for other in ("thread_2", "thread_3"):
        await log.emit(other, "thread/renamed", Renamed(display_name=other), broadcast=True)
    assert THREAD not in log._broadcasts and len(log._broadcasts) == 2
    assert await replay_to(log, client) == [first]  # got it live; repeated, not lost


async def test_records_of_a_thread_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(broadcast_records, "SEEN_BROADCASTS", 2)
    log = journal()
    client = Client("client")
    log.bus.join(client)
    seqs = [await rename(log, name) for name in ("one", "two", "three")]
    assert [record[0] for record in log._broadcasts.records(THREAD)] == seqs[1:]
    assert await replay_to(log, client) == seqs[:1]


async def test_a_busy_thread_is_the_last_dropped(monkeypatch: Any) -> None:
    monkeypatch.setattr(broadcast_records, "REMEMBERED_THREADS", 2)
    log = journal()
    log.bus.join(Client("client"))
    await rename(log, "one")
    await log.emit("thread_2", "thread/renamed", Renamed(display_name="x"), broadcast=True)
    await rename(log, "two")  # THREAD is the most recent again
    await log.emit("thread_3", "thread/renamed", Renamed(display_name="y"), broadcast=True)
    assert THREAD in log._broadcasts and "thread_2" not in log._broadcasts


async def test_what_a_participant_got_alone_is_bounded_by_thread(monkeypatch: Any) -> None:
    """Events sent to a participant alone (the caller of a request that is not
    subscribed) are remembered for its newest threads only; an older thread's
    replay then repeats what it got (a duplicate, never a gap)."""
    monkeypatch.setattr(broadcast_records, "REMEMBERED_THREADS", 2)
    log = journal()
    caller = Client("caller")
    sent = {}
    for thread_id in (THREAD, "thread_2", "thread_3"):
        params = Renamed(display_name=thread_id)
        sent[thread_id] = await log.emit(thread_id, "thread/renamed", params, include=[caller])
    assert list(log._seen[id(caller)]) == ["thread_2", "thread_3"]
    assert await replay_to(log, caller) == [sent[THREAD]]  # got it alone; repeated
    before = len(caller.got)
    await log.subscribe("thread_3", caller, 0)
    assert caller.got[before:] == []  # remembered: not sent twice
