"""The bus keeps who wants a broadcast per kind and topic, ready to fan out,
until someone joins or leaves (runtime/fanout.py)."""

from __future__ import annotations

from typing import Any

from appserver.runtime.bus import EventBus
from appserver.runtime.events import Event


class Client:
    def __init__(self, name: str, hidden: frozenset[str] = frozenset()) -> None:
        self.name = name
        self.hidden = hidden
        self.asked = 0
        self.got: list[str] = []

    def deliver(self, event: Event) -> None:
        self.got.append(event.kind)

    def wants(self, kind: str, topic: str | None) -> bool:
        self.asked += 1
        return kind not in self.hidden

    def __repr__(self) -> str:
        return self.name


def client(name: str, hidden: frozenset[str] = frozenset()) -> Any:
    """A participant of the bus (its protocol has more than the bus asks for)."""
    return Client(name, hidden)


def names(participants: Any) -> list[str]:
    return sorted(p.name for p in participants)


def test_asked_once_per_kind_until_someone_joins_or_leaves() -> None:
    bus = EventBus()
    a, b, quiet = client("a"), client("b"), client("quiet", frozenset({"thread/renamed"}))
    for each in (a, b, quiet):
        bus.join(each)
    for _ in range(3):
        fanout, unwanting = bus.joined_fanout("thread/renamed", None)
        assert names(fanout.participants) == ["a", "b"]
        assert unwanting == [bus.marks[quiet]]
    assert a.asked == 1  # the answer is kept
    assert names(bus.joined_fanout("thread/started", None)[0].participants) == ["a", "b", "quiet"]
    assert a.asked == 2  # another kind is asked apart

    late = client("late")
    bus.join(late)
    assert names(bus.joined_fanout("thread/renamed", None)[0].participants) == ["a", "b", "late"]
    bus.leave(b)
    assert names(bus.joined_fanout("thread/renamed", None)[0].participants) == ["a", "late"]


def test_those_skipped_are_left_out_and_the_kept_fanout_is_not_changed() -> None:
    bus = EventBus()
    a, b, c = client("a"), client("b"), client("c")
    for each in (a, b, c):
        bus.join(each)
    fanout, unwanting = bus.joined_fanout("thread/renamed", None)
    fanout.deliver(Event("thread/renamed", None), {a, c})
    assert (a.got, b.got, c.got) == ([], ["thread/renamed"], [])
    unwanting.append(99)  # the caller's own list
    fanout.deliver(Event("thread/renamed", None), set())
    assert (a.got, b.got, c.got) == (["thread/renamed"], ["thread/renamed"] * 2, ["thread/renamed"])
    assert bus.joined_fanout("thread/renamed", None) == (fanout, [])


class Door(Client):
    """A front door's participant that prepares its fan-out (as services.peer.Peer)."""

    sent: list[tuple[str, list[str]]] = []

    @staticmethod
    def fanout_targets(doors: list[Door]) -> list[str]:
        return [door.name.upper() for door in doors]

    @staticmethod
    def deliver_prepared(event: Event, targets: list[str]) -> None:
        Door.sent.append((event.kind, targets))


def test_a_class_that_prepares_its_fanout_gets_its_targets_less_those_skipped() -> None:
    bus = EventBus()
    one, two, three, other = Door("one"), Door("two"), Door("three"), client("other")
    for each in (one, two, other, three):
        bus.join(each)
    Door.sent.clear()
    fanout, _ = bus.joined_fanout("thread/renamed", None)
    fanout.deliver(Event("thread/renamed", None), {two, other})
    fanout.deliver(Event("thread/started", None), {one, two, three})  # the whole group: no call
    fanout.deliver(Event("thread/deleted", None), set())
    assert Door.sent == [
        ("thread/renamed", ["ONE", "THREE"]),
        ("thread/deleted", ["ONE", "TWO", "THREE"]),
    ]
    assert other.got == ["thread/started", "thread/deleted"]
