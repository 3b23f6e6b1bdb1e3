"""A bounded per-connection queue of encoded frames, drained by one writer.

Producers (responses, the event bus) never wait on a slow peer: ``put`` is
synchronous and reports overflow instead of blocking, and the connection
closes the laggard. Nothing is dropped silently: a frame is either queued or
the connection is closed and the client recovers by re-reading state.
"""

from __future__ import annotations

from collections import deque

import anyio


class OutboxClosed(Exception):
    """The outbox was closed; no more frames will come out."""


class Outbox:
    """FIFO of text frames with a byte budget."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._frames: deque[str] = deque()
        self._bytes = 0
        self._wakeup = anyio.Event()
        self._closed = False

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def put(self, frame: str) -> bool:
        """Queue ``frame``; ``False`` when the budget would be exceeded or closed."""
        if self._closed:
            return False
        size = len(frame)
        if self._frames and self._bytes + size > self.max_bytes:
            return False
        self._frames.append(frame)
        self._bytes += size
        if not self._wakeup.is_set():
            self._wakeup.set()
        return True

    async def get_batch(self) -> list[str]:
        """Wait for frames and take every queued one (in order).

        Raises :class:`OutboxClosed` once closed and empty.
        """
        while not self._frames:
            if self._closed:
                raise OutboxClosed
            self._wakeup = anyio.Event()
            await self._wakeup.wait()
        batch = list(self._frames)
        self._frames.clear()
        self._bytes = 0
        return batch

    def close(self) -> None:
        """No more puts; the writer drains what is queued, then stops."""
        self._closed = True
        self._wakeup.set()
