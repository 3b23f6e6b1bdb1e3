"""Fan-out of notifications to connections.

Each notification is encoded once and the same frame is handed to every
target connection's outbox (thread-scoped ones go through the journal).
Targets are computed as a set, so a connection that is both the caller and
a subscriber (or a broadcast target) receives one copy: that is how
DotCraft's de-duplication rules fall out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from appserver.rpc import framing


class Sink(Protocol):
    """A connection as the bus sees it."""

    def wants(self, method: str) -> bool: ...

    def deliver(
        self,
        method: str,
        frame: str,
        coalesce: tuple[object, Callable[[list[str]], str]] | None = None,
    ) -> None: ...


class EventBus:
    """Who is connected, who subscribes to which thread, and delivery."""

    def __init__(self) -> None:
        self._connections: set[Sink] = set()
        self._subscribers: dict[str, set[Sink]] = {}
        self._subscriptions: dict[Sink, set[str]] = {}

    @property
    def connections(self) -> frozenset[Sink]:
        return frozenset(self._connections)

    def add_connection(self, sink: Sink) -> None:
        self._connections.add(sink)

    def remove_connection(self, sink: Sink) -> None:
        """Forget a closed connection and cancel its subscriptions."""
        self._connections.discard(sink)
        for thread_id in self._subscriptions.pop(sink, set()):
            subscribers = self._subscribers.get(thread_id)
            if subscribers is not None:
                subscribers.discard(sink)
                if not subscribers:
                    del self._subscribers[thread_id]

    def subscribe(self, thread_id: str, sink: Sink) -> bool:
        """Subscribe ``sink`` to a thread; ``False`` if it already was."""
        subscribers = self._subscribers.setdefault(thread_id, set())
        if sink in subscribers:
            return False
        subscribers.add(sink)
        self._subscriptions.setdefault(sink, set()).add(thread_id)
        return True

    def unsubscribe(self, thread_id: str, sink: Sink) -> None:
        self._subscribers.get(thread_id, set()).discard(sink)
        self._subscriptions.get(sink, set()).discard(thread_id)

    def is_subscribed(self, thread_id: str, sink: Sink) -> bool:
        return sink in self._subscribers.get(thread_id, ())

    def subscribers(self, thread_id: str) -> frozenset[Sink]:
        return frozenset(self._subscribers.get(thread_id, ()))

    def forget_thread(self, thread_id: str) -> None:
        """Drop a deleted thread's subscriptions."""
        for sink in self._subscribers.pop(thread_id, set()):
            self._subscriptions.get(sink, set()).discard(thread_id)

    def targets(
        self,
        *,
        thread_id: str | None = None,
        broadcast: bool = False,
        include: Iterable[Sink] = (),
        exclude: Iterable[Sink] = (),
    ) -> set[Sink]:
        """Every connection if ``broadcast``, the thread's subscribers if
        ``thread_id``, plus ``include``, minus ``exclude`` — each once."""
        targets = set(self._connections) if broadcast else set()
        if thread_id is not None:
            targets |= self._subscribers.get(thread_id, set())
        targets.update(include)
        targets.difference_update(exclude)
        return targets

    def publish(
        self,
        method: str,
        params: Any,
        *,
        broadcast: bool = False,
        include: Iterable[Sink] = (),
        exclude: Iterable[Sink] = (),
    ) -> None:
        """Deliver one notification that is not about a thread (workspace-wide).

        Thread-scoped notifications go through the journal, which numbers
        and stores them.
        """
        wanted = [
            sink
            for sink in self.targets(broadcast=broadcast, include=include, exclude=exclude)
            if sink.wants(method)
        ]
        if wanted:
            frame = framing.notification_frame(method, params)
            for sink in wanted:
                sink.deliver(method, frame)
