"""A bounded per-connection queue of encoded frames, drained by one writer.

Producers (responses, the event bus) never wait on a slow peer: ``put`` is
synchronous and reports overflow instead of blocking.

Policy for a peer that reads slower than we write:

* below ``soft_bytes`` queued, every frame is queued as is;
* above it, a frame that carries a ``coalesce`` key (streaming deltas) is
  merged into the previous queued frame with the same key, so a lagging
  client gets fewer, larger deltas with the same text;
* above ``max_bytes``, ``put`` fails and the connection closes the peer,
  which reconnects and catches up (``thread/subscribe {afterSeq}``).

Nothing is ever dropped silently: responses, server requests, lifecycle
notifications (``item/completed``, terminal turn events) are queued or the
connection is closed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import anyio

Merge = Callable[[str, str], str]


class OutboxClosed(Exception):
    """The outbox was closed; no more frames will come out."""


class Outbox:
    """FIFO of text frames with a byte budget."""

    def __init__(self, max_bytes: int, soft_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.soft_bytes = min(max_bytes, soft_bytes if soft_bytes is not None else 256 * 1024)
        self._frames: deque[str] = deque()
        self._bytes = 0
        self._wakeup = anyio.Event()
        self._closed = False
        self._last_key: object = None  # coalesce key of the newest queued frame
        self.coalesced = 0  # frames merged away (for tests and stats)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def put(self, frame: str, coalesce: tuple[object, Merge] | None = None) -> bool:
        """Queue ``frame``; ``False`` when the budget would be exceeded or closed.

        ``coalesce`` is ``(key, merge)``: while the peer lags, the frame is
        merged into the newest queued frame if that one has the same key.
        """
        if self._closed:
            return False
        if (
            coalesce is not None
            and self._frames
            and self._bytes > self.soft_bytes
            and self._last_key == coalesce[0]
        ):
            previous = self._frames.pop()
            merged = coalesce[1](previous, frame)
            self._frames.append(merged)
            self._bytes += len(merged) - len(previous)
            self.coalesced += 1
            return True
        size = len(frame)
        if self._frames and self._bytes + size > self.max_bytes:
            return False
        self._frames.append(frame)
        self._bytes += size
        self._last_key = coalesce[0] if coalesce is not None else None
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
        self._last_key = None  # frames being written can no longer be merged
        return batch

    def close(self) -> None:
        """No more puts; the writer drains what is queued, then stops."""
        self._closed = True
        self._wakeup.set()
