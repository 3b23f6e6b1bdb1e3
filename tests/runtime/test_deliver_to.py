"""``deliver_to``: every receiver gets the event once, through its class's
``deliver_many`` when it has one and its own ``deliver`` otherwise."""

from __future__ import annotations

from appserver.protocol.base import Empty
from appserver.runtime.events import Event, deliver_to


class OneByOne:
    """A participant that only delivers one at a time (a face's seat)."""

    def __init__(self) -> None:
        self.got: list[Event] = []

    def deliver(self, event: Event) -> None:
        self.got.append(event)


class InBulk(OneByOne):
    """A participant whose class hands an event to many at once (the DotCraft peer)."""

    calls: list[int] = []

    @staticmethod
    def deliver_many(event: Event, participants: list[InBulk]) -> None:
        InBulk.calls.append(len(participants))
        for participant in participants:
            participant.got.append(event)


def test_each_receiver_gets_the_event_once_in_bulk_where_its_class_can() -> None:
    InBulk.calls.clear()
    bulk = [InBulk() for _ in range(3)]
    single = [OneByOne(), OneByOne()]
    first, second = Event("thread/started", Empty()), Event("thread/renamed", Empty())
    mixed = [bulk[0], single[0], bulk[1], single[1], bulk[2]]
    deliver_to(first, mixed)  # type: ignore[arg-type]
    deliver_to(second, mixed)  # type: ignore[arg-type]
    assert InBulk.calls == [3, 3]  # one call per class and event
    for participant in [*bulk, *single]:
        assert participant.got == [first, second]  # once each, in order


def test_a_lone_receiver_gets_it_through_deliver() -> None:
    InBulk.calls.clear()
    alone = InBulk()
    event = Event("thread/started", Empty())
    deliver_to(event, [alone])  # type: ignore[list-item]
    assert alone.got == [event] and InBulk.calls == []
