"""Fan-out of notifications to connections.

Each notification is encoded once and the same frame is handed to every
target connection's outbox. Targets are computed as a set, so a connection
that is both the caller and a subscriber (or a broadcast target) receives
one copy: that is how DotCraft's de-duplication rules fall out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

from appserver.rpc import framing

RECENT_EVENTS = 32


class Sink(Protocol):
    """A connection as the bus sees it."""

    def wants(self, method: str) -> bool: ...

    def deliver(self, method: str, frame: str) -> None: ...


class EventBus:
    """Who is connected, who subscribes to which thread, and delivery."""

    def __init__(self) -> None:
        self._connections: set[Sink] = set()
        self._subscribers: dict[str, set[Sink]] = {}
        self._subscriptions: dict[Sink, set[str]] = {}
        self._recent: dict[str, deque[tuple[str, str]]] = {}

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
        """Drop a deleted thread's subscriptions and recent events."""
        for sink in self._subscribers.pop(thread_id, set()):
            self._subscriptions.get(sink, set()).discard(thread_id)
        self._recent.pop(thread_id, None)

    def publish(
        self,
        method: str,
        params: Any,
        *,
        thread_id: str | None = None,
        broadcast: bool = False,
        include: Iterable[Sink] = (),
        exclude: Iterable[Sink] = (),
    ) -> None:
        """Deliver one notification.

        Targets: every connection if ``broadcast``, the thread's subscribers
        if ``thread_id`` is given, plus ``include``, minus ``exclude``. Each
        target gets the frame at most once; nobody wanting it costs nothing
        but the recent-events record.
        """
        targets = set(self._connections) if broadcast else set()
        if thread_id is not None:
            targets |= self._subscribers.get(thread_id, set())
        targets.update(include)
        targets.difference_update(exclude)
        wanted = [sink for sink in targets if sink.wants(method)]
        frame = framing.notification_frame(method, params) if wanted or thread_id else ""
        if thread_id is not None:
            self._recent.setdefault(thread_id, deque(maxlen=RECENT_EVENTS)).append((method, frame))
        for sink in wanted:
            sink.deliver(method, frame)

    def replay_recent(self, thread_id: str, sink: Sink) -> None:
        """Send ``sink`` the thread's last few events (``replayRecent``)."""
        for method, frame in list(self._recent.get(thread_id, ())):
            sink.deliver(method, frame)
