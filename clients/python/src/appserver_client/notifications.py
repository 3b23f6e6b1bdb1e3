"""Server notifications and the iterators that deliver them."""

from __future__ import annotations

import asyncio
import fnmatch
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from appserver_client.errors import NotificationOverflow

TERMINAL_TURN_METHODS = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})
DEFAULT_BUFFER = 10_000


@dataclass(frozen=True)
class Notification:
    """One server->client notification: ``method`` and its ``params`` object.

    ``params`` is the wire object (camelCase keys); the generated module names
    its TypedDict for each method (``NOTIFICATIONS``).
    """

    method: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def thread_id(self) -> str | None:
        """The thread it is about (``threadId``, ``thread.id`` or ``turn.threadId``)."""
        params = self.params
        value = params.get("threadId")
        if isinstance(value, str):
            return value
        thread = params.get("thread")
        if isinstance(thread, dict) and isinstance(thread.get("id"), str):
            return str(thread["id"])
        turn = params.get("turn")
        if isinstance(turn, dict) and isinstance(turn.get("threadId"), str):
            return str(turn["threadId"])
        return None

    @property
    def turn_id(self) -> str | None:
        """The turn it is about (``turnId`` or ``turn.id``), if any."""
        value = self.params.get("turnId")
        if isinstance(value, str):
            return value
        turn = self.params.get("turn")
        if isinstance(turn, dict) and isinstance(turn.get("id"), str):
            return str(turn["id"])
        return None

    @property
    def seq(self) -> int | None:
        """The thread's event sequence number (thread-scoped notifications)."""
        value = self.params.get("seq")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def is_terminal(self) -> bool:
        """``turn/completed``, ``turn/failed`` or ``turn/cancelled``."""
        return self.method in TERMINAL_TURN_METHODS


class NotificationStream:
    """An async iterator over the notifications matching a filter.

    Created by :meth:`AppServerClient.notifications`; it starts collecting at
    once (so create it *before* the request whose events you want). Several
    streams may be open; each gets its own copy of every matching
    notification, in the order the server sent them.

    The client's read loop never waits for a stream. Each stream buffers up to
    ``buffer`` notifications (``None``: unbounded). A stream that falls that
    far behind *overflows*: it stops accepting notifications and detaches
    from the client; iterating yields what was buffered and then raises
    :class:`~appserver_client.errors.NotificationOverflow`. So a slow consumer
    never sees a silent gap, and an abandoned stream never grows without bound.

    Iteration ends (``StopAsyncIteration``) when the stream or the client is
    closed, and raises :class:`~appserver_client.errors.ConnectionLost` when
    the connection is gone for good. Use it as ``async with`` (or call
    :meth:`aclose`) to detach it when done.
    """

    def __init__(
        self,
        detach: Callable[[NotificationStream], None],
        *,
        thread_id: str | None = None,
        turn_id: str | None = None,
        methods: Iterable[str] | None = None,
        buffer: int | None = DEFAULT_BUFFER,
    ) -> None:
        if buffer is not None and buffer < 1:
            raise ValueError("buffer must be at least 1 (or None for unbounded)")
        self.thread_id = thread_id
        self.turn_id = turn_id
        self.methods = frozenset(methods) if methods is not None else None
        self._patterns = [m for m in self.methods or () if any(c in m for c in "*?[")]
        self.buffer = buffer
        self.dropped = 0
        self._detach = detach
        self._queue: deque[Notification] = deque()
        self._wakeup = asyncio.Event()
        self._ended = False
        self._error: BaseException | None = None

    def matches(self, notification: Notification) -> bool:
        """Whether ``notification`` passes this stream's filter.

        ``methods`` entries are exact names or glob patterns (``"item/*"``).
        """
        if self.thread_id is not None and notification.thread_id != self.thread_id:
            return False
        if self.turn_id is not None and notification.turn_id != self.turn_id:
            return False
        if self.methods is not None and notification.method not in self.methods:
            return any(fnmatch.fnmatchcase(notification.method, p) for p in self._patterns)
        return True

    def _offer(self, notification: Notification) -> None:
        """Called by the read loop; never blocks."""
        if self._ended or not self.matches(notification):
            return
        if self.buffer is not None and len(self._queue) >= self.buffer:
            self.dropped += 1
            self._end(NotificationOverflow(self.dropped, self.buffer))
            return
        self._queue.append(notification)
        self._wakeup.set()

    def _end(self, error: BaseException | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._wakeup.set()
        self._detach(self)

    @property
    def pending(self) -> int:
        """How many notifications are buffered, not yet taken."""
        return len(self._queue)

    def get_nowait(self) -> Notification | None:
        """The next buffered notification, or ``None`` if there is none yet."""
        return self._queue.popleft() if self._queue else None

    def __aiter__(self) -> NotificationStream:
        return self

    async def __anext__(self) -> Notification:
        while not self._queue:
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._queue.popleft()

    async def next(self, timeout: float | None = None) -> Notification:
        """The next notification, waiting at most ``timeout`` seconds
        (``TimeoutError``); raises ``StopAsyncIteration`` at the end."""
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    async def aclose(self) -> None:
        """Detach from the client; iteration ends after what is buffered."""
        self._end(None)

    async def __aenter__(self) -> NotificationStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
