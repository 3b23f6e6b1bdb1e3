"""Thread-scoped notifications: numbered, persisted, fanned out, replayable.

Every notification about a thread gets the next per-thread ``seq``. Deltas
are numbered and delivered but not stored; every other ("lifecycle")
notification is written to SQLite in the same transaction as the turn or
item row it announces, *before* anyone sees it: a client that has seen
``item/completed`` can ``thread/read`` it from any connection.

``thread/subscribe {afterSeq}`` replays, under the thread's lock (so no new
event can slip between replay and live delivery), every stored event after
that point plus, for items still streaming, their missed deltas coalesced
into one delta per run: no gap, no duplicate.
"""

from __future__ import annotations

import bisect
import json
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from appserver.protocol.base import WireModel
from appserver.rpc import framing
from appserver.runtime.bus import EventBus, Sink
from appserver.runtime.ids import now_iso
from appserver.storage.threads import EventRepository, ItemRecord, StoredEvent, TurnRecord

SEEN_RANGES = 256  # separate runs of seqs remembered per (connection, thread)


class SeqRanges:
    """A set of seqs stored as sorted, merged ``[first, last]`` runs.

    A connection that watches a turn receives long unbroken runs of seqs, so
    this stays tiny however long the turn; only the oldest runs are dropped
    past :data:`SEEN_RANGES`.
    """

    __slots__ = ("_firsts", "_lasts")

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []

    def add(self, seq: int) -> None:
        if self._lasts and seq == self._lasts[-1] + 1:
            self._lasts[-1] = seq  # the common case: the next seq of a run
            return
        if self._lasts and seq > self._lasts[-1]:
            self._firsts.append(seq)
            self._lasts.append(seq)
        elif seq not in self:
            index = bisect.bisect_left(self._firsts, seq)
            self._firsts.insert(index, seq)
            self._lasts.insert(index, seq)
        else:
            return
        if len(self._firsts) > SEEN_RANGES:
            del self._firsts[0], self._lasts[0]

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        index = bisect.bisect_right(self._firsts, seq) - 1
        return index >= 0 and seq <= self._lasts[index]


@dataclass
class _Delta:
    seq: int
    method: str
    topic: str | None
    params: dict[str, Any]


def _wants(sink: Sink, method: str, topic: str | None) -> bool:
    return sink.wants(method) and (topic is None or sink.wants(topic))


class ThreadJournal:
    """The one way thread-scoped notifications leave the runtime."""

    def __init__(self, bus: EventBus, events: EventRepository) -> None:
        self.bus = bus
        self.events = events
        self._seq: dict[str, int] = {}
        self._locks: dict[str, anyio.Lock] = {}
        # Deltas of items still streaming, for exact replay: thread -> item -> deltas.
        self._streaming: dict[str, dict[str, list[_Delta]]] = {}
        # Seqs a connection received as a broadcast while not subscribed to the
        # thread (thread/renamed, runtimeChanged, ...): a later afterSeq replay
        # skips them, so nothing arrives twice. Bounded per (connection, thread).
        self._seen: weakref.WeakKeyDictionary[Sink, dict[str, SeqRanges]] = (
            weakref.WeakKeyDictionary()
        )

    def lock(self, thread_id: str) -> anyio.Lock:
        lock = self._locks.get(thread_id)
        if lock is None:
            lock = self._locks[thread_id] = anyio.Lock(fast_acquire=True)
        return lock

    async def _next_seq(self, thread_id: str) -> int:
        current = self._seq.get(thread_id)
        if current is None:
            current = await self.events.last_seq(thread_id)
        self._seq[thread_id] = current + 1
        return current + 1

    async def current_seq(self, thread_id: str) -> int:
        """The last seq handed out for the thread (0 if none)."""
        seq = self._seq.get(thread_id)
        return seq if seq is not None else await self.events.last_seq(thread_id)

    async def emit(
        self,
        thread_id: str,
        method: str,
        params: WireModel,
        *,
        broadcast: bool = False,
        include: Iterable[Sink] = (),
        exclude: Iterable[Sink] = (),
        topic: str | None = None,
        turn: TurnRecord | None = None,
        new_turn: bool = False,
        item: ItemRecord | None = None,
    ) -> int:
        """Persist (with ``turn``/``item`` rows) then deliver a lifecycle notification.

        ``topic`` narrows delivery beyond the method: a connection receives the
        notification only if it wants both (see ``Connection.wants``).
        """
        body = framing.payload_json(params)
        async with self.lock(thread_id):
            seq = await self._next_seq(thread_id)
            await self.events.record(
                thread_id,
                seq,
                method,
                body,
                now_iso(),
                topic=topic,
                turn=turn,
                new_turn=new_turn,
                item=item,
            )
            if item is not None and item.status == "completed":
                self._streaming.get(thread_id, {}).pop(item.id, None)
            self._deliver(thread_id, method, topic, body, seq, broadcast, include, exclude)
        return seq

    async def emit_delta(
        self,
        thread_id: str,
        item_id: str,
        method: str,
        params: WireModel,
        *,
        include: Iterable[Sink] = (),
        topic: str | None = None,
    ) -> int:
        """Number and deliver a streaming delta (kept in memory until the item completes)."""
        wire = params.to_wire()
        async with self.lock(thread_id):
            seq = self._seq.get(thread_id)
            if seq is None:
                seq = await self.events.last_seq(thread_id)
            seq += 1
            self._seq[thread_id] = seq
            self._streaming.setdefault(thread_id, {}).setdefault(item_id, []).append(
                _Delta(seq, method, topic, wire)
            )
            self._deliver(
                thread_id,
                method,
                topic,
                framing.dumps(wire),
                seq,
                False,
                include,
                (),
                coalesce=((thread_id, item_id, method), merge_delta_frames),
            )
        return seq

    def forget_item(self, thread_id: str, item_id: str) -> None:
        """Drop an item's in-memory deltas (it completed or was abandoned)."""
        self._streaming.get(thread_id, {}).pop(item_id, None)

    async def flush_seq(self, thread_id: str) -> None:
        """Persist the seq counter (deltas advance it without a write)."""
        seq = self._seq.get(thread_id)
        if seq is not None:
            await self.events.set_last_seq(thread_id, seq)

    def forget_thread(self, thread_id: str) -> None:
        self._seq.pop(thread_id, None)
        self._locks.pop(thread_id, None)
        self._streaming.pop(thread_id, None)

    def _deliver(
        self,
        thread_id: str,
        method: str,
        topic: str | None,
        body: str,
        seq: int,
        broadcast: bool,
        include: Iterable[Sink],
        exclude: Iterable[Sink],
        coalesce: tuple[object, Callable[[list[str]], str]] | None = None,
    ) -> None:
        targets = self.bus.targets(
            thread_id=thread_id, broadcast=broadcast, include=include, exclude=exclude
        )
        wanted = [sink for sink in targets if _wants(sink, method, topic)]
        if wanted:
            frame = framing.notification_frame_json(method, body, seq)
            subscribers = self.bus.subscribers(thread_id)
            for sink in wanted:
                sink.deliver(method, frame, coalesce)
                if sink not in subscribers:
                    self._remember(sink, thread_id, seq)

    def _remember(self, sink: Sink, thread_id: str, seq: int) -> None:
        self._seen.setdefault(sink, {}).setdefault(thread_id, SeqRanges()).add(seq)

    async def subscribe(
        self, thread_id: str, sink: Sink, after_seq: int | None, *, skip_seen: bool = True
    ) -> None:
        """Subscribe ``sink``; with ``after_seq``, first replay what it missed.

        ``skip_seen`` leaves out what the connection already received as a
        broadcast (``afterSeq``: "send what I missed"); ``replayRecent`` asks for
        the recent events as such and gets them all.
        """
        async with self.lock(thread_id):
            seen = self._seen.get(sink, {}).pop(thread_id, None) if skip_seen else None
            if after_seq is not None:
                for seq, method, topic, frame in await self._replay(thread_id, after_seq):
                    if (seen is None or seq not in seen) and _wants(sink, method, topic):
                        sink.deliver(method, frame)
            self.bus.subscribe(thread_id, sink)

    async def _replay(
        self, thread_id: str, after_seq: int
    ) -> list[tuple[int, str, str | None, str]]:
        """``(seq, method, topic, frame)`` for everything after ``after_seq``, in order."""
        stored = await self.events.events_after(thread_id, after_seq)
        entries: list[tuple[int, str | None, _Delta | StoredEvent]] = [
            (event.seq, None, event) for event in stored
        ]
        for streaming_id, deltas in self._streaming.get(thread_id, {}).items():
            entries.extend(
                (delta.seq, streaming_id, delta) for delta in deltas if delta.seq > after_seq
            )
        entries.sort(key=lambda entry: entry[0])
        frames: list[tuple[int, str, str | None, str]] = []
        run: _Delta | None = None  # consecutive deltas of one item, coalesced
        run_item: str | None = None
        for _, item_id, entry in entries:
            if isinstance(entry, _Delta):
                if run is not None and item_id == run_item and entry.method == run.method:
                    merged = dict(run.params)
                    merged["delta"] = f"{merged.get('delta', '')}{entry.params.get('delta', '')}"
                    run = _Delta(entry.seq, entry.method, entry.topic, merged)
                    continue
                if run is not None:
                    frames.append(_delta_frame(run))
                run, run_item = entry, item_id
                continue
            if run is not None:
                frames.append(_delta_frame(run))
                run = None
            frame = framing.notification_frame_json(entry.method, entry.params_json, entry.seq)
            frames.append((entry.seq, entry.method, entry.topic, frame))
        if run is not None:
            frames.append(_delta_frame(run))
        return frames


def merge_delta_frames(frames: list[str]) -> str:
    """One delta frame carrying all texts and the newest ``seq`` (lagging peers)."""
    parsed = [json.loads(frame) for frame in frames]
    merged = parsed[-1]
    merged["params"]["delta"] = "".join(str(p["params"].get("delta", "")) for p in parsed)
    return framing.dumps(merged)


def _delta_frame(delta: _Delta) -> tuple[int, str, str | None, str]:
    frame = framing.notification_frame_json(delta.method, framing.dumps(delta.params), delta.seq)
    return delta.seq, delta.method, delta.topic, frame
