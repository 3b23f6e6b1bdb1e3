"""Thread-scoped events: numbered, persisted, fanned out, replayable.

Every event about a thread gets the next per-thread ``seq``. Deltas are
numbered and delivered but not stored; every other ("lifecycle") event is
written to SQLite in the same transaction as the turn or item row it
announces, *before* anyone sees it: a client that has seen
``item/completed`` can read the item back from any front door.

``subscribe(thread, participant, after_seq)`` replays, under the thread's
lock (so no new event can slip between replay and live delivery), every
stored event after that point plus, for items still streaming, their missed
deltas merged into one delta per run: no gap, no duplicate.

Events are typed (:class:`~appserver.runtime.events.Event`); how they are
encoded is each front door's business.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Container, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from appserver.protocol.ids import now_iso
from appserver.runtime import broadcast_records
from appserver.runtime.bounded import make_room
from appserver.runtime.broadcast_records import BroadcastRecords
from appserver.runtime.bus import EventBus
from appserver.runtime.emissions import Emission, group_owner, group_statements
from appserver.runtime.events import Event, Participant, deliver_to, delta_event
from appserver.runtime.seq_ranges import SeqRanges
from appserver.runtime.shared_feed import Pending, stored_event
from appserver.storage.events import EventRepository
from appserver.storage.records import ItemRecord, TurnRecord

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel
    from appserver.protocol.turns import DeltaNotification
    from appserver.runtime.shared_log import SharedLog

_SMALL_SEEN = 8  # up to this many seen seqs per (connection, thread) are a plain tuple
_NO_FLOORS: dict[str, int] = {}  # a participant's subscribe floors when it has none (never changed)


class ThreadJournal:
    """The one way thread-scoped events leave the runtime."""

    def __init__(self, bus: EventBus, events: EventRepository) -> None:
        self.bus = bus
        self.events = events
        self._seq: dict[str, int] = {}
        self._locks: dict[str, anyio.Lock] = {}
        # Deltas of items still streaming, for exact replay: thread -> item -> deltas.
        self._streaming: dict[str, dict[str, list[Event]]] = {}
        # Seqs a participant received while not subscribed to the thread, sent
        # to it alone (the caller of a request that is not subscribed): a later
        # afterSeq replay skips them, as it skips the broadcasts it got (below),
        # so nothing arrives twice. Bounded per (participant, thread).
        # Keyed by id(participant) (a weak-keyed dictionary cost a weakref per
        # lookup, once per broadcast per connection); an entry goes when its
        # participant does.
        # A participant's threads are bounded too (REMEMBERED_THREADS; those it
        # heard of first go: a later replay of one of them may repeat, never miss).
        self._seen: dict[int, dict[str, tuple[int, ...] | SeqRanges]] = {}
        # Who got each broadcast (runtime/broadcast_records.py). When the oldest
        # participant leaves, records older than everyone still joined go
        # (nobody left can ask for them).
        self._broadcasts = BroadcastRecords()
        bus.on_oldest_left.append(self._broadcasts.forget_before)
        # Set when nodes share a PostgreSQL database: the log numbers, stores
        # and delivers instead (runtime/shared_log.py).
        self.shared: SharedLog | None = None
        # Internal helper threads this process runs (runtime/helper_threads.py):
        # their events go to their subscribers and watchers only, never to
        # everyone (DotCraft leaks their thread/runtimeChanged to every client).
        # Decided here, where the event is made, so other nodes never get it either.
        self.internal: set[str] = set()

    def lock(self, thread_id: str) -> anyio.Lock:
        lock = self._locks.get(thread_id)
        if lock is None:
            lock = self._locks[thread_id] = anyio.Lock(fast_acquire=True)
        return lock

    def forget_lock(self, thread_id: str) -> None:
        """Drop the thread's lock if nobody holds or awaits it (the next use
        makes a new one)."""
        lock = self._locks.get(thread_id)
        if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._locks[thread_id]

    async def _next_seq(self, thread_id: str) -> int:
        current = self._seq.get(thread_id)
        if current is None:
            current = await self.events.last_seq(thread_id)
        self._seq[thread_id] = current + 1
        return current + 1

    async def current_seq(self, thread_id: str) -> int:
        """The last seq handed out for the thread (0 if none)."""
        if self.shared is not None:
            return await self.shared.last_seq(thread_id)
        seq = self._seq.get(thread_id)
        return seq if seq is not None else await self.events.last_seq(thread_id)

    async def emit(
        self,
        thread_id: str,
        kind: str,
        params: WireModel | dict[str, Any],
        *,
        broadcast: bool = False,
        include: Iterable[Participant] = (),
        exclude: Iterable[Participant] = (),
        topic: str | None = None,
        turn: TurnRecord | None = None,
        new_turn: bool = False,
        item: ItemRecord | None = None,
        rows: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> int:
        """Persist (with ``turn``/``item`` rows, and ``rows``: other statements the
        event stands for) then deliver a lifecycle event. ``topic`` narrows delivery
        beyond the kind: a participant receives the event only if it wants both.
        """
        if self.shared is not None:
            emission = Emission(
                kind,
                params,
                broadcast=broadcast,
                include=tuple(include),
                topic=topic,
                turn=turn,
                new_turn=new_turn,
                item=item,
                rows=tuple(rows),
            )
            (stored,) = await self._append(self.shared, thread_id, [emission], tuple(exclude))
            assert stored.seq is not None
            return stored.seq
        event = Event(kind, params, thread_id=thread_id, topic=topic)
        if broadcast and thread_id in self.internal:
            broadcast = False
        body = event.params_json()
        async with self.lock(thread_id):
            seq = event.seq = await self._next_seq(thread_id)
            await self.events.record(
                thread_id,
                seq,
                kind,
                body,
                now_iso(),
                topic=topic,
                turn=turn,
                new_turn=new_turn,
                item=item,
                rows=rows,
            )
            if item is not None and item.status == "completed":
                self._streaming.get(thread_id, {}).pop(item.id, None)
            self._deliver(event, broadcast, include, exclude)
        return seq

    async def emit_all(self, thread_id: str, group: Sequence[Emission]) -> None:
        """:meth:`emit` of lifecycle events that nothing may come between, of one
        turn at most: with the shared log, one commit (all stored or none), then
        each delivered in order (:mod:`appserver.runtime.emissions`)."""
        shared = self._one_commit(group)
        if shared is None:
            for emission in group:
                await self.emit(
                    thread_id,
                    emission.kind,
                    emission.params,
                    broadcast=emission.broadcast,
                    include=emission.include,
                    topic=emission.topic,
                    turn=emission.turn,
                    new_turn=emission.new_turn,
                    item=emission.item,
                    rows=emission.rows,
                )
            return
        await self._append(shared, thread_id, group)

    def _one_commit(self, group: Sequence[Emission]) -> SharedLog | None:
        """The shared log when ``group`` can be one commit of it (the events of
        one turn at most); ``None``: emitted one by one."""
        shared = self.shared
        if shared is None or len({emission.owner() for emission in group} - {None}) > 1:
            return None
        return shared

    async def _append(
        self,
        shared: SharedLog,
        thread_id: str,
        group: Sequence[Emission],
        exclude: tuple[Participant, ...] = (),
        delta: tuple[Event, tuple[Participant, ...]] | None = None,
    ) -> list[Event]:
        """Store, number and deliver ``group`` through the shared log: one commit
        (with ``delta``, a delta event and who it goes to, after the group)."""
        owner = group_owner(group)
        created_at = now_iso()
        statements = group_statements(thread_id, group, shared.node_id)
        pending = [
            Pending(
                Event(emission.kind, emission.params, thread_id=thread_id, topic=emission.topic),
                emission.broadcast and thread_id not in self.internal,
                emission.include,
                exclude,
                rows,
                owner,
                created_at=created_at,
            )
            for emission, rows in zip(group, statements, strict=True)
        ]
        if delta is not None:
            pending.append(Pending(delta[0], False, delta[1], (), turn_id=owner))
        await shared.append_all(pending)
        for emission in group:
            if emission.turn is not None and emission.new_turn:
                # Started here: its watchers get its end even if another node writes it.
                shared.watch_turn(thread_id, emission.turn.id, emission.include)
        return [each.event for each in pending]

    async def emit_delta(
        self,
        thread_id: str,
        item_id: str,
        kind: str,
        params: DeltaNotification | dict[str, Any] | None,
        *,
        params_json: str | None = None,
        include: Iterable[Participant] = (),
        topic: str | None = None,
        turn_id: str | None = None,
        text: str | None = None,
    ) -> int:
        """Number and deliver a streaming delta (kept in memory until the item
        completes). ``params_json``: the params already encoded (then ``params``
        may be ``None``; they are parsed from it if a front door asks); ``text``:
        a text delta's text (:attr:`Event.text`, and ``turn_id`` becomes its
        :attr:`Event.turn_id`)."""
        event = delta_event(thread_id, item_id, kind, params, params_json, topic, turn_id, text)
        if self.shared is not None:
            await self.shared.append_delta(event, include, turn_id)
            return 0  # numbered when the flusher writes it
        lock = self.lock(thread_id)
        seq = self._seq.get(thread_id)
        if seq is None or lock.locked():
            async with lock:
                event.seq = await self._next_seq(thread_id)
                self._send_delta(event, include)
                return event.seq
        # Nothing holds the thread and numbering and delivering never await,
        # so nothing can come between them: the lock (whose acquire costs more
        # than the rest of a delta) is not needed.
        event.seq = self._seq[thread_id] = seq + 1
        self._send_delta(event, include)
        return event.seq

    async def emit_with_text(
        self,
        thread_id: str,
        group: Sequence[Emission],
        item_id: str,
        kind: str,
        params_json: str,
        text: str,
        turn_id: str,
        include: tuple[Participant, ...],
    ) -> None:
        """:meth:`emit_all` of ``group`` (an item's ``item/started``, and what the
        turn held), then its first text delta (:meth:`emit_delta`'s arguments),
        nothing between: with the shared log all in one commit, so a streamed
        item costs no commit of its own before its text (its first delta then
        waits for that commit, as its ``item/started`` did)."""
        shared = self._one_commit(group)
        if shared is None:
            await self.emit_all(thread_id, group)
            await self.emit_delta(
                thread_id,
                item_id,
                kind,
                None,
                params_json=params_json,
                include=include,
                turn_id=turn_id,
                text=text,
            )
            return
        delta = delta_event(thread_id, item_id, kind, None, params_json, None, turn_id, text)
        await self._append(shared, thread_id, group, delta=(delta, include))

    def _send_delta(self, event: Event, include: Iterable[Participant]) -> None:
        assert event.thread_id is not None and event.stream is not None
        streams = self._streaming.setdefault(event.thread_id, {})
        streams.setdefault(event.stream, []).append(event)
        self._deliver(event, False, include, ())

    async def flush_seq(self, thread_id: str) -> None:
        """Persist the seq counter (deltas advance it without a write)."""
        seq = self._seq.get(thread_id)
        if seq is not None and self.shared is None:
            await self.events.set_last_seq(thread_id, seq)

    def forget_thread(self, thread_id: str) -> None:
        self._seq.pop(thread_id, None)
        self._locks.pop(thread_id, None)
        self._streaming.pop(thread_id, None)
        self._broadcasts.forget_thread(thread_id)
        if self.shared is not None:
            self.shared.forget_thread(thread_id)

    def _deliver(
        self,
        event: Event,
        broadcast: bool,
        include: Iterable[Participant],
        exclude: Iterable[Participant],
    ) -> None:
        thread_id = event.thread_id
        seq = event.seq
        assert thread_id is not None and seq is not None
        bus = self.bus
        kind, topic = event.kind, event.topic
        marks = bus.marks
        subscribed = bus.subscribed(thread_id)
        missed: list[int] = []  # (see the record below)
        receivers: list[Participant] = []
        fanout = None
        if broadcast:
            exclude = tuple(exclude)
            # One by one below: the thread's subscribers (a subscribe replay may have
            # sent them this event: nodes sharing a database) and those named; every
            # other joined participant through the fan-out the bus keeps.
            targets = {*subscribed, *include}.difference(exclude)
            fanout, missed = bus.joined_fanout(kind, topic)
            missed += [marks[each] for each in exclude if each in marks]
        else:
            targets = bus.targets(thread_id=thread_id, include=include, exclude=exclude)
            if not targets:
                return
        floors = self.shared.floors if self.shared is not None else None
        for participant in targets:
            # Only a broadcast to a joined participant is remembered by its mark.
            mark = marks.get(participant) if broadcast else None
            if (floors and floors.get(id(participant), _NO_FLOORS).get(thread_id, 0) >= seq) or (
                not participant.wants(kind, topic)
            ):
                # Not sent (a subscribe replay already sent it: nodes sharing a
                # database; or not wanted).
                if mark is not None:
                    missed.append(mark)
                continue
            receivers.append(participant)
            if participant in subscribed:
                if mark is not None:
                    missed.append(mark)
            elif mark is None:
                self._remember(participant, thread_id, seq)
        if fanout is not None:
            fanout.deliver(event, targets.union(exclude))
        if receivers:
            deliver_to(event, receivers)
        # Joined participants that did not get this broadcast while unsubscribed
        # (excluded, not wanting it, or subscribed: a replay repeats what came
        # while subscribed, as it always did); every other participant joined
        # now got it. One record for the event, not one per connection (with
        # nobody joined there is nobody to remember it for).
        if broadcast and marks:
            self._broadcasts.note(thread_id, seq, bus.mark_now(), missed)

    def _remember(self, participant: Participant, thread_id: str, seq: int) -> None:
        threads = self._seen.get(id(participant))
        if threads is None:
            threads = self._seen[id(participant)] = {}
            weakref.finalize(participant, self._seen.pop, id(participant), None)
        seen = threads.get(thread_id)
        # Most (participant, thread) pairs get a handful of events this way: a
        # tuple holds those without a SeqRanges (and its two lists) per pair.
        if seen is None:
            make_room(threads, broadcast_records.REMEMBERED_THREADS)  # heard of first go
            threads[thread_id] = (seq,)
        elif isinstance(seen, tuple):
            if len(seen) < _SMALL_SEEN:
                threads[thread_id] = (*seen, seq)
            else:
                ranges = threads[thread_id] = SeqRanges()
                for earlier in (*seen, seq):
                    ranges.add(earlier)
        else:
            seen.add(seq)

    def _seen_by(self, participant: Participant, thread_id: str) -> Callable[[int], bool]:
        """Whether ``participant`` received a seq of the thread while not
        subscribed: a broadcast (while joined) or an event sent to it alone."""
        alone: Container[int] = self._seen.get(id(participant), {}).pop(thread_id, ())
        mark = self.bus.marks.get(participant)
        got = self._broadcasts.got(thread_id, mark) if mark is not None else set()
        return lambda seq: seq in got or seq in alone

    async def subscribe(
        self,
        thread_id: str,
        participant: Participant,
        after_seq: int | None,
        *,
        skip_seen: bool = True,
    ) -> None:
        """Subscribe ``participant``; with ``after_seq``, first replay what it missed.

        ``skip_seen`` leaves out what the participant already received as a
        broadcast (``afterSeq``: "send what I missed"); ``replayRecent`` asks for
        the recent events as such and gets them all.
        """
        async with self.lock(thread_id):
            seen = self._seen_by(participant, thread_id) if skip_seen else None
            if self.shared is not None:
                replayed = merge_runs(
                    await self.shared.replay_for(thread_id, participant, after_seq)
                )
            elif after_seq is not None:
                replayed = await self.replay(thread_id, after_seq)
            else:
                replayed = []
            missed = [
                event
                for event in replayed
                if (seen is None or not seen(event.seq or 0))
                and participant.wants(event.kind, event.topic)
            ]
            if missed:
                # A participant that can take a replay whole (a connection:
                # encoded at its writer's pace) gets it so.
                deliver_replay = getattr(participant, "deliver_replay", None)
                if deliver_replay is not None:
                    deliver_replay(missed)
                else:
                    for event in missed:
                        participant.deliver(event)
            self.bus.subscribe(thread_id, participant)

    async def replay(self, thread_id: str, after_seq: int) -> list[Event]:
        """Every event after ``after_seq``, in order; runs of one item's deltas merged.

        Call under :meth:`lock` to keep live delivery from interleaving.
        """
        entries: list[Event] = [
            stored_event(thread_id, stored)
            for stored in await self.events.events_after(thread_id, after_seq)
        ]
        for deltas in self._streaming.get(thread_id, {}).values():
            entries.extend(
                delta for delta in deltas if delta.seq is not None and delta.seq > after_seq
            )
        entries.sort(key=lambda event: event.seq or 0)
        return merge_runs(entries)


def merge_runs(entries: list[Event]) -> list[Event]:
    """``entries`` (in seq order) with each run of one item's deltas merged."""
    merged: list[Event] = []
    for event in entries:
        last = merged[-1] if merged else None
        if (
            event.stream is not None
            and last is not None
            and last.stream == event.stream
            and last.kind == event.kind
        ):
            merged[-1] = merge_deltas(last, event)
        else:
            merged.append(event)
    return merged


def merge_deltas(first: Event, second: Event) -> Event:
    """One delta event carrying both texts and the newer ``seq``."""
    merged = dict(first.data)
    merged["delta"] = f"{first.data.get('delta', '')}{second.data.get('delta', '')}"
    return Event(
        second.kind,
        merged,
        thread_id=second.thread_id,
        seq=second.seq,
        topic=second.topic,
        stream=second.stream,
    )
