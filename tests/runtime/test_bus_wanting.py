"""The bus keeps who wants a broadcast per kind and topic until someone joins
or leaves."""

from __future__ import annotations

from typing import Any

from appserver.runtime.bus import EventBus


class Client:
    def __init__(self, name: str, hidden: frozenset[str] = frozenset()) -> None:
        self.name = name
        self.hidden = hidden
        self.asked = 0

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
        receivers, unwanting = bus.joined_receivers("thread/renamed", None, set())
        assert names(receivers) == ["a", "b"]
        assert unwanting == [bus.marks[quiet]]
    assert a.asked == 1  # the answer is kept
    assert names(bus.joined_receivers("thread/started", None, set())[0]) == ["a", "b", "quiet"]
    assert a.asked == 2  # another kind is asked apart

    late = client("late")
    bus.join(late)
    assert names(bus.joined_receivers("thread/renamed", None, set())[0]) == ["a", "b", "late"]
    bus.leave(b)
    assert names(bus.joined_receivers("thread/renamed", None, set())[0]) == ["a", "late"]


def test_those_skipped_are_left_out_and_the_kept_list_is_not_changed() -> None:
    bus = EventBus()
    a, b = client("a"), client("b")
    bus.join(a)
    bus.join(b)
    receivers, _ = bus.joined_receivers("thread/renamed", None, {a})
    assert names(receivers) == ["b"]
    receivers.append(a)  # the caller's own list
    assert names(bus.joined_receivers("thread/renamed", None, set())[0]) == ["a", "b"]
