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

A replay (``thread/subscribe {afterSeq}``) can be larger than the whole
budget: its frames go in as one source (:meth:`Outbox.put_source`), made as
the writer takes them, about :data:`SOURCE_BATCH_BYTES` at a time, so a long
history streams at the peer's pace; what is queued after it waits behind it
and counts against the budget as usual.

Nothing is ever dropped silently: responses, server requests, lifecycle
notifications (``item/completed``, terminal turn events) are queued or the
connection is closed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
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


# How much of a source one batch takes (the rest waits for the next batch).
SOURCE_BATCH_BYTES = 1024 * 1024


class _Source:
    """Frames made as the writer takes them (a replay)."""

    __slots__ = ("frames",)

    def __init__(self, frames: Iterator[str]) -> None:
        self.frames = frames


class OutboxClosed(Exception):
    """The outbox was closed; no more frames will come out."""


class Outbox:
    """FIFO of text frames with a byte budget."""

    def __init__(self, max_bytes: int, soft_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.soft_bytes = min(max_bytes, soft_bytes if soft_bytes is not None else 256 * 1024)
        self._frames: deque[str | _Run | _Source] = deque()
        self._bytes = 0
        self._wakeup = asyncio.Event()
        self._closed = False
        self._last_key: object = None  # coalesce key of the newest queued frame
        self._sources = 0  # sources queued (see put_source)
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
        # (A frame alone may be larger than the budget; a source does not count.)
        if self._bytes and self._bytes + size > self.max_bytes:
            return False
        if (
            coalesce is not None
            and self._frames
            and self._bytes > self.soft_bytes
            and self._last_key == coalesce[0]
        ):
            last = self._frames[-1]
            assert not isinstance(last, _Source)  # a source clears the key
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

    def put_source(self, frames: Iterator[str]) -> bool:
        """Queue ``frames``, made only as the writer takes them (not counted
        against the budget); ``False`` when closed."""
        if self._closed:
            return False
        self._frames.append(_Source(frames))
        self._sources += 1
        self._last_key = None  # nothing merges into a source
        self._wakeup.set()
        return True

    async def get_batch(self) -> list[str]:
        """Wait for frames and take every queued one (in order), but at most
        about :data:`SOURCE_BATCH_BYTES` of a source: what follows waits.

        Raises :class:`OutboxClosed` once closed and empty.
        """
        while True:
            while not self._frames:
                if self._closed:
                    raise OutboxClosed
                self._wakeup.clear()
                await self._wakeup.wait()
            if not self._sources:
                batch = [_text(entry) for entry in self._frames]
                self._frames.clear()
                self._bytes = 0
                self._last_key = None  # frames being written can no longer be merged
                return batch
            batch = self._take_to_source()
            if batch:
                return batch

    def _take_to_source(self) -> list[str]:
        """The frames before the first source and up to a batch of it (all of
        it, and on, when it ends)."""
        batch: list[str] = []
        taken = 0
        while self._frames:
            entry = self._frames[0]
            if isinstance(entry, _Source):
                for frame in entry.frames:
                    batch.append(frame)
                    taken += len(frame)
                    if taken >= SOURCE_BATCH_BYTES:
                        return batch  # the source goes on in the next batch
                self._frames.popleft()
                self._sources -= 1
                continue
            self._frames.popleft()
            self._bytes -= len(entry) if isinstance(entry, str) else sum(map(len, entry.frames))
            batch.append(_text(entry))
        self._last_key = None
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
        self._sources = 0
        self._bytes = 0
        self._last_key = None
        self.close()
        return dropped


def _text(entry: str | _Run | _Source) -> str:
    """A queued frame's text (a source is never rendered whole)."""
    if isinstance(entry, str):
        return entry
    assert isinstance(entry, _Run)
    return entry.render()


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
