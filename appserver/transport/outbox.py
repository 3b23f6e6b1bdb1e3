"""A bounded per-peer queue of encoded frames, drained by one writer.

Every door uses it: the JSON-RPC connection (:mod:`appserver.rpc.connection`)
and, through :class:`~appserver.transport.peer_writer.PeerWriter`, each face.
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

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

# Turns a run of frames with the same coalesce key into one frame. Called once
# per run when the writer takes the batch, so merging stays linear in size.
Merge = Callable[[list[str]], str]


class _Run:
    """Frames waiting to be merged into one."""

    __slots__ = ("frames", "merge")

    def __init__(self, first: str, merge: Merge) -> None:
        self.frames = [first]
        self.merge = merge

    def render(self) -> str:
        return self.frames[0] if len(self.frames) == 1 else self.merge(self.frames)


class OutboxClosed(Exception):
    """The outbox was closed; no more frames will come out."""


class Outbox:
    """FIFO of text frames with a byte budget."""

    def __init__(self, max_bytes: int, soft_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.soft_bytes = min(max_bytes, soft_bytes if soft_bytes is not None else 256 * 1024)
        self._frames: deque[str | _Run] = deque()
        self._bytes = 0
        self._wakeup = asyncio.Event()
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
        size = len(frame)
        if self._frames and self._bytes + size > self.max_bytes:
            return False
        if (
            coalesce is not None
            and self._frames
            and self._bytes > self.soft_bytes
            and self._last_key == coalesce[0]
        ):
            last = self._frames[-1]
            if isinstance(last, str):
                last = self._frames[-1] = _Run(last, coalesce[1])
            last.frames.append(frame)
            self._bytes += size
            self.coalesced += 1
            return True
        self._frames.append(frame)
        self._bytes += size
        self._last_key = coalesce[0] if coalesce is not None else None
        self._wakeup.set()
        return True

    async def get_batch(self) -> list[str]:
        """Wait for frames and take every queued one (in order).

        Raises :class:`OutboxClosed` once closed and empty.
        """
        while not self._frames:
            if self._closed:
                raise OutboxClosed
            self._wakeup.clear()
            await self._wakeup.wait()
        batch = [entry if isinstance(entry, str) else entry.render() for entry in self._frames]
        self._frames.clear()
        self._bytes = 0
        self._last_key = None  # frames being written can no longer be merged
        return batch

    def close(self) -> None:
        """No more puts; the writer drains what is queued, then stops."""
        self._closed = True
        self._wakeup.set()

    def discard(self) -> int:
        """Close and drop everything queued (the peer is being aborted);
        returns the bytes dropped. The writer stops at once."""
        dropped = self._bytes
        self._frames.clear()
        self._bytes = 0
        self._last_key = None
        self.close()
        return dropped


def text_merger(*path: str) -> Callable[[list[str]], str]:
    """A merge for the outbox's coalescing (see :mod:`appserver.transport.outbox`):
    frames of one streamed text become the last of them carrying all their
    texts, joined, at ``path`` (keys from the frame's top)."""

    def merge(frames: list[str]) -> str:
        import json

        from appserver.protocol.encoding import dumps

        def holder(frame: Any) -> Any:
            for key in path[:-1]:
                frame = frame[key]
            return frame

        parsed = [json.loads(frame) for frame in frames]
        merged = parsed[-1]
        holder(merged)[path[-1]] = "".join(str(holder(p).get(path[-1], "")) for p in parsed)
        return dumps(merged)

    return merge
