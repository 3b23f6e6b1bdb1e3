"""Who receives which events: connected participants and thread subscriptions.

Targets are computed as a set, so a participant that is both the caller and
a subscriber (or a broadcast target) receives one copy: that is how
DotCraft's de-duplication rules fall out. Thread-scoped events go through
the journal, which numbers and stores them first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Set
from typing import TYPE_CHECKING, Any

from appserver.runtime.events import Event, Participant, deliver_to
from appserver.runtime.fanout import Fanout

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel

_NOBODY: frozenset[Participant] = frozenset()


class EventBus:
    """Who is connected, who subscribes to which thread, and delivery."""

    def __init__(self) -> None:
        # Who receives broadcasts, each with its join mark: a number never given
        # twice, from a counter that only grows. Whoever is in ``marks`` now with
        # a mark below the counter's value at some moment was joined then (a
        # participant that leaves and joins again gets a new mark), which lets
        # the journal remember who got a broadcast in one record per event.
        # (Only a participant object used once should join: one that joined
        # again would get its earlier broadcasts replayed a second time.)
        # Dict order is mark order: the first entry is the oldest joined.
        self.marks: dict[Participant, int] = {}
        self._next_mark = itertools.count()
        # Called with the oldest mark still joined (``None``: nobody) when the
        # oldest participant leaves: what is remembered for older ones can go.
        self.on_oldest_left: list[Callable[[int | None], None]] = []
        self._subscribers: dict[str, set[Participant]] = {}
        self._subscriptions: dict[Participant, set[str]] = {}
        # (kind, topic) -> the fan-out to the joined participants that want it, and
        # the marks of those that do not: until someone joins or leaves (see
        # ``joined_fanout``).
        self._wanting: dict[tuple[str, str | None], tuple[Fanout, list[int]]] = {}

    def join(self, participant: Participant) -> None:
        """``participant`` receives broadcasts from now on."""
        if participant not in self.marks:
            self.marks[participant] = next(self._next_mark)
            self._wanting.clear()

    def mark_now(self) -> int:
        """A mark above every participant joined so far (and below later ones)."""
        return next(self._next_mark)

    def leave(self, participant: Participant) -> None:
        """Forget a participant that left and cancel its subscriptions."""
        oldest = next(iter(self.marks), None) is participant
        if self.marks.pop(participant, None) is not None:
            self._wanting.clear()
        if oldest:
            now_oldest = next(iter(self.marks.values()), None)
            for forget in self.on_oldest_left:
                forget(now_oldest)
        for thread_id in self._subscriptions.pop(participant, set()):
            subscribers = self._subscribers.get(thread_id)
            if subscribers is not None:
                subscribers.discard(participant)
                if not subscribers:
                    del self._subscribers[thread_id]

    def subscribe(self, thread_id: str, participant: Participant) -> bool:
        """Subscribe to a thread; ``False`` if it already was."""
        subscribers = self._subscribers.setdefault(thread_id, set())
        if participant in subscribers:
            return False
        subscribers.add(participant)
        self._subscriptions.setdefault(participant, set()).add(thread_id)
        return True

    def unsubscribe(self, thread_id: str, participant: Participant) -> None:
        self._subscribers.get(thread_id, set()).discard(participant)
        self._subscriptions.get(participant, set()).discard(thread_id)

    def is_subscribed(self, thread_id: str, participant: object) -> bool:
        return participant in self._subscribers.get(thread_id, ())

    def subscribers(self, thread_id: str) -> frozenset[Participant]:
        return frozenset(self._subscribers.get(thread_id, ()))

    def subscribed(self, thread_id: str) -> Set[Participant]:
        """The thread's subscribers as they are now (not a copy: read, do not keep)."""
        return self._subscribers.get(thread_id, _NOBODY)

    def forget_thread(self, thread_id: str) -> None:
        """Drop a deleted thread's subscriptions."""
        for participant in self._subscribers.pop(thread_id, set()):
            self._subscriptions.get(participant, set()).discard(thread_id)

    def joined_fanout(self, kind: str, topic: str | None) -> tuple[Fanout, list[int]]:
        """The fan-out to the joined participants that want a broadcast of
        ``kind`` (and ``topic``), and the join marks of every joined participant
        that does not.

        Made once per kind and topic until someone joins or leaves, not once
        per event and participant: a broadcast to 200 connections reuses it.
        So a participant's ``wants`` must not change while it is joined (a
        connection's opt-outs are fixed at ``initialize``, before it joins; a
        face's hidden topics when it is made)."""
        found = self._wanting.get((kind, topic))
        if found is None:
            wanting: list[Participant] = []
            unwanting: list[int] = []
            for participant, mark in self.marks.items():
                if participant.wants(kind, topic):
                    wanting.append(participant)
                else:
                    unwanting.append(mark)
            found = self._wanting[(kind, topic)] = (Fanout(wanting), unwanting)
        return found[0], list(found[1])

    def targets(
        self,
        *,
        thread_id: str | None = None,
        broadcast: bool = False,
        include: Iterable[Participant] = (),
        exclude: Iterable[Participant] = (),
    ) -> set[Participant]:
        """Every participant if ``broadcast``, the thread's subscribers if
        ``thread_id``, plus ``include``, minus ``exclude`` — each once."""
        targets = set(self.marks) if broadcast else set()
        if thread_id is not None:
            targets |= self._subscribers.get(thread_id, set())
        targets.update(include)
        targets.difference_update(exclude)
        return targets

    def publish(
        self,
        kind: str,
        params: WireModel | dict[str, Any],
        *,
        broadcast: bool = False,
        include: Iterable[Participant] = (),
        exclude: Iterable[Participant] = (),
    ) -> None:
        """Deliver one event that is not about a thread (workspace-wide).

        Thread-scoped events go through the journal, which numbers and stores them.
        """
        targets = self.targets(broadcast=broadcast, include=include, exclude=exclude)
        receivers = [participant for participant in targets if participant.wants(kind, None)]
        if receivers:
            deliver_to(Event(kind, params), receivers)
