"""Thread events when several nodes (processes) share one database.

On one node the journal numbers events in memory. Nodes sharing a database
number them in it instead: each batch of a thread's events takes its seqs,
is stored (deltas too) and is announced with ``NOTIFY`` in one transaction
(:meth:`ClusterStore.append`), so every node sees a thread's events commit in
seq order. Every node then delivers a thread's events to its own clients
through one cursor per thread: the next seq is delivered from memory when
this node wrote it, else read back from the log. A notification carries
only ``(thread, first, last, node, broadcast)``; the log holds the payloads,
so nothing depends on NOTIFY's size limit or on a listener being up.

Deltas are queued and written by one flusher task per thread, many to a
transaction, with the lifecycle event queued after them if any; a lifecycle
event waits for its own commit (it is durable before anyone sees it, as on
one node), and writes it itself when no flusher runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Callable, Iterable

import anyio
import anyio.abc

from appserver.protocol.ids import now_iso
from appserver.runtime.events import Event, Participant
from appserver.runtime.recent_broadcasts import RecentBroadcasts
from appserver.runtime.shared_feed import (
    Pending,
    ThreadFeed,
    next_batch,
    stored_event,
    turn_id_of,
)
from appserver.storage.cluster_common import LogEntry, NodeStore, SharedEvent

log = logging.getLogger("appserver.cluster")

MAX_QUEUED_DELTAS = 4096  # a producer that runs this far ahead waits for the flusher
FETCH_PAGE = 1000
TERMINAL = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})

Deliver = Callable[[Event, bool, Iterable[Participant], Iterable[Participant]], None]


class SharedLog:
    """The journal's numbering, storage and delivery on a shared database."""

    def __init__(
        self,
        store: NodeStore,
        deliver: Deliver,
        lock: Callable[[str], anyio.Lock],
        subscribers: Callable[[str], frozenset[Participant]],
        forget_lock: Callable[[str], None] = lambda _thread_id: None,
    ) -> None:
        self.store = store
        self.node_id = store.node_id
        self._deliver = deliver
        self._lock = lock  # the journal's per-thread lock: held while delivering
        self._forget_lock = forget_lock  # drops that lock while nobody holds it
        self._subscribers = subscribers
        self._feeds: dict[str, ThreadFeed] = {}
        # Per participant (by id) and thread: the last seq a subscribe replay
        # covered; live delivery skips what it already sent. A participant's
        # entry goes with it (one finalizer each, not one per thread).
        self.floors: dict[int, dict[str, int]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        # Sees each event another node wrote before it is delivered here.
        self.on_remote: Callable[[Event], None] | None = None
        # thread -> turn -> its watchers (who get its events without
        # subscribing), for each turn started here until its end is delivered
        # here: another node that takes the turn over writes that end.
        self._turn_watchers: dict[str, dict[str, tuple[Participant, ...]]] = {}
        self.recent = RecentBroadcasts()  # other nodes' broadcasts delivered lately

    def _feed(self, thread_id: str) -> ThreadFeed:
        feed = self._feeds.get(thread_id)
        if feed is None:
            feed = self._feeds[thread_id] = ThreadFeed()
            feed.drained.set()
        return feed

    async def run(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Own the flusher tasks; returns when cancelled."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._closed = True

    # --- writing -------------------------------------------------------------------

    async def append_all(self, group: list[Pending]) -> None:
        """Store, announce and deliver lifecycle events emitted together (one, or
        several of one turn): one commit, all stored or none, then delivered in
        order; each gets its seq. Their ``turn_id``: the turn whose rows they
        write; refused (:class:`TurnTakenOver`) once another node has taken it over
        (this node was taken for dead)."""
        thread_id = group[0].event.thread_id
        assert thread_id is not None
        # One turn's (one owner check a commit): else next_batch would split it.
        assert len({pending.turn_id for pending in group}) == 1
        last = group[-1]
        last.done = asyncio.Event()  # the group's end: the others ride with it
        feed: ThreadFeed | None = None
        for pending in group:
            pending.together = len(group) > 1
            feed = self._enqueue(thread_id, pending, spawn=False)
        with anyio.CancelScope(shield=True):  # once queued it is written; wait for it
            if feed is not None and not feed.flushing:
                # Nothing flushes the thread: this caller does, up to its own event
                # (a flusher task for each lifecycle event was ~11 spawns a turn).
                self._start_flush(feed)
                await self._flush(thread_id, feed, until=last, shielded=True)
            await last.done.wait()
        if last.error is not None:
            raise last.error

    async def append_delta(
        self,
        event: Event,
        include: Iterable[Participant],
        turn_id: str | None = None,
    ) -> None:
        """Queue a delta; it is numbered, stored and delivered by the flusher
        (stamped with the time of the commit that stores it: one clock read a
        commit, not one a delta)."""
        assert event.thread_id is not None
        feed = self._feed(event.thread_id)
        if len(feed.queue) >= MAX_QUEUED_DELTAS:
            await feed.drained.wait()
        self._enqueue(
            event.thread_id,
            Pending(event, False, tuple(include), (), turn_id=turn_id),
        )

    def _enqueue(self, thread_id: str, pending: Pending, spawn: bool = True) -> ThreadFeed | None:
        """Queue ``pending`` and, with ``spawn``, start a flusher task unless one
        runs; the thread's feed (``None``: the log stopped, ``pending`` failed)."""
        if self._closed:
            self._fail([pending], RuntimeError("the shared log stopped"))
            return None
        feed = self._feed(thread_id)
        feed.queue.append(pending)
        if spawn and not feed.flushing:
            assert self._tg is not None, "the shared log is not running"
            self._start_flush(feed)
            self._tg.start_soon(self._flush, thread_id, feed)
        return feed

    @staticmethod
    def _start_flush(feed: ThreadFeed) -> None:
        feed.flushing = True
        feed.drained = asyncio.Event()

    async def _flush(
        self, thread_id: str, feed: ThreadFeed, until: Pending | None = None, shielded: bool = False
    ) -> None:
        """Write the feed's queue; with ``until`` (a caller's lifecycle event),
        only until that is written: a task goes on with the rest. ``shielded``:
        the caller is already shielded from cancellation (no scope per batch)."""
        handed_over = False
        try:
            while feed.queue:
                if until is not None and until.done is not None and until.done.is_set():
                    assert self._tg is not None, "the shared log is not running"
                    self._tg.start_soon(self._flush, thread_id, feed)
                    handed_over = True
                    return
                batch = next_batch(feed.queue)
                # Shielded: a caller waits for each lifecycle event, so a batch
                # once taken is written even while the server shuts down.
                if shielded:
                    await self._write(thread_id, feed, batch)
                else:
                    with anyio.CancelScope(shield=True):
                        await self._write(thread_id, feed, batch)
        finally:
            if not handed_over:
                feed.flushing = False
                if feed.queue:  # cancelled between batches: nothing will write these
                    self._fail(feed.queue, RuntimeError("the shared log stopped"))
                    feed.queue.clear()
                feed.drained.set()

    async def _write(self, thread_id: str, feed: ThreadFeed, batch: list[Pending]) -> None:
        # Deltas queued before a lifecycle event (and those emitted with it).
        split = len(batch) > 1 and batch[-1].done is not None and not batch[0].together
        if await self._commit(thread_id, feed, batch, refusable=split) or not split:
            return
        # Refused: the deltas queued before the lifecycle event alone, then the
        # event (with those emitted together with it) alone, for its answer.
        start = next((i for i, p in enumerate(batch) if p.together), len(batch) - 1)
        if start:
            await self._commit(thread_id, feed, batch[:start])
        await self._commit(thread_id, feed, batch[start:])

    def _fail(self, batch: list[Pending], error: BaseException) -> None:
        for pending in batch:
            pending.error = error
            if pending.done is not None:
                pending.done.set()

    async def _commit(
        self, thread_id: str, feed: ThreadFeed, batch: list[Pending], refusable: bool = False
    ) -> bool:
        """Store, announce and deliver ``batch``; ``False`` if refused (and, when
        ``refusable``, left unfailed for the caller to split)."""
        now = now_iso()
        entries = [
            LogEntry(
                method=p.event.kind,
                topic=p.event.topic,
                params_json=p.event.params_json(),
                created_at=p.created_at or now,
                stream=p.event.stream,
                broadcast=p.broadcast,
            )
            for p in batch
        ]
        statements = [s for p in batch for s in p.statements]
        owned = next((p.turn_id for p in batch if p.turn_id is not None), None)
        try:
            # Held from commit until the batch is registered: a remote
            # notification must not read our rows back before we know them.
            async with self._lock(thread_id):
                last = await self.store.append(thread_id, entries, statements, owned)
                if last is None:
                    raise LookupError(f"thread {thread_id} is gone")
                for index, pending in enumerate(batch):
                    pending.event.seq = last - len(batch) + 1 + index
                    feed.local[pending.event.seq] = pending
                if feed.delivered is None:
                    feed.delivered = last - len(batch)
                    feed.followed_from = feed.delivered + 1
        except Exception as exc:
            if refusable:
                return False
            self._fail(batch, exc)
            if not any(p.done is not None for p in batch):
                log.warning("lost %d delta(s) of %s: %s", len(batch), thread_id, exc)
            return False
        try:
            await self.pump(thread_id)
        except Exception:
            # Stored and announced already: a later pump delivers what this one could not.
            log.exception("could not deliver events of %s", thread_id)
        finally:
            for pending in batch:
                if pending.done is not None:
                    pending.done.set()
        return True

    # --- delivering ---------------------------------------------------------------------

    def announced(self, thread_id: str, first: int, last: int, broadcast: bool) -> bool:
        """Note another node's events; ``True`` if this node should fetch them."""
        feed = self._feeds.get(thread_id)
        wanted = broadcast or bool(self._subscribers(thread_id)) or thread_id in self._turn_watchers
        if not wanted and (feed is None or not feed.subscribing):
            if feed is not None:
                # Announced before and not delivered yet: a pump is on its way
                # to it (a broadcast), which skipping ahead would lose.
                pending = feed.delivered is not None and feed.announced > feed.delivered
                feed.announced = max(feed.announced, last)
                if feed.delivered is not None and not feed.local and not feed.queue and not pending:
                    # Nobody here follows it: skip ahead, never back.
                    feed.delivered = max(feed.delivered, last)
                self.drop_idle([thread_id])  # its last awaited notification, maybe
            return False
        feed = self._feed(thread_id)
        feed.announced = max(feed.announced, last)
        if feed.delivered is None:
            feed.delivered = first - 1
        elif broadcast and first < feed.followed_from and self._tg is not None:
            end = min(last, feed.followed_from - 1)
            self._tg.start_soon(self._deliver_late, thread_id, first, end)
        return True

    async def _deliver_late(self, thread_id: str, first: int, last: int) -> None:
        """Deliver other nodes' broadcasts among ``first..last``: seqs before the
        one this node began following the thread at, announced after it did
        (a replay's floor keeps its subscriber from getting them twice)."""
        try:
            async with self._lock(thread_id):
                for row in await self.store.events_after(thread_id, first - 1, last - first + 1):
                    if row.broadcast and row.node_id != self.node_id:
                        # Not shown to on_remote: flags it carries are older than
                        # what this node has written since.
                        self.recent.note(thread_id, row.seq)
                        self._deliver(stored_event(thread_id, row), True, (), ())
        except Exception as exc:
            log.warning("event feed: cannot read %s: %s", thread_id, exc)

    async def deliver_missed(self, thread_id: str, rows: list[SharedEvent]) -> None:
        """Deliver other nodes' broadcasts of a thread this node does not follow
        that a feed outage hid (``rows``, in seq order), but none delivered here
        already; flags only from those newer than any delivered since."""
        async with self._lock(thread_id):
            feed = self._feeds.get(thread_id)
            if feed is not None and feed.delivered is not None:
                return  # followed: its pump reads the log itself
            for row in rows:
                if self.recent.seen(thread_id, row.seq):
                    continue
                event = stored_event(thread_id, row)
                if self.on_remote is not None and row.seq > self.recent.latest(thread_id):
                    self.on_remote(event)
                self.recent.note(thread_id, row.seq)
                self._deliver(event, True, (), ())

    def kept(self) -> list[str]:
        """Threads this node keeps delivery state of."""
        return list(self._feeds)

    def reconnected(self) -> list[str]:
        """The feed was down; returns the threads to read again. Notifications
        of what committed meanwhile never come: what was read ahead of them
        counts as announced."""
        for feed in self._feeds.values():
            feed.announced = max(feed.announced, feed.remote_seen)
        return self.followed()

    def followed(self) -> list[str]:
        """Threads this node delivers events of."""
        return [thread_id for thread_id, feed in self._feeds.items() if feed.delivered is not None]

    async def pump(self, thread_id: str, *, force: bool = False) -> None:
        """Deliver the thread's events up to the newest known, in seq order;
        ``force``: read the log once even if nothing newer was announced."""
        async with self._lock(thread_id):
            feed = self._feed(thread_id)
            while feed.delivered is not None:
                following = feed.delivered + 1
                pending = feed.local.pop(following, None)
                if pending is not None:
                    self._deliver_local(pending)
                    feed.delivered = following
                    continue
                target = max(max(feed.local, default=0), feed.announced)
                if feed.delivered >= target and not force:
                    break
                force = False
                rows = await self.store.events_after(thread_id, feed.delivered, FETCH_PAGE)
                if not rows:
                    break
                for row in rows:
                    if row.seq > target and row.seq not in feed.local:
                        target = row.seq  # newer than announced: deliver it all the same
                    local = feed.local.pop(row.seq, None)
                    if local is not None:
                        self._deliver_local(local)
                    else:
                        if row.node_id != self.node_id:
                            feed.remote_seen = max(feed.remote_seen, row.seq)
                            if row.broadcast:
                                self.recent.note(thread_id, row.seq)
                        event = stored_event(thread_id, row)
                        if self.on_remote is not None and row.node_id != self.node_id:
                            self.on_remote(event)
                        self._deliver(event, row.broadcast, self._watchers_of(row, event), ())
                    feed.delivered = row.seq
        self.drop_idle([thread_id])

    def drop_idle(self, thread_ids: Iterable[str] | None = None) -> int:
        """Forget the delivery state of threads nobody here follows any more
        (of ``thread_ids``, or of every thread); returns how many. What a node
        keeps then grows with the threads its clients follow, not with every
        thread it has seen: a later event starts following afresh (a broadcast
        from its own seq, a subscriber from its replay)."""
        dropped = 0
        for thread_id in list(self._feeds if thread_ids is None else thread_ids):
            feed = self._feeds.get(thread_id)
            if (
                feed is None
                or feed.queue
                or feed.local
                or feed.flushing
                or feed.subscribing
                # announced and not delivered yet: a pump is on its way to it
                or (feed.delivered is not None and feed.announced > feed.delivered)
                # read ahead of its notification: keep the feed until that comes,
                # so it is not taken for one that came late (below followed_from)
                or feed.remote_seen > feed.announced
                or thread_id in self._turn_watchers
                or self._subscribers(thread_id)
            ):
                continue
            del self._feeds[thread_id]
            self._forget_lock(thread_id)
            dropped += 1
        return dropped

    def watch_turn(self, thread_id: str, turn_id: str, watchers: Iterable[Participant]) -> None:
        """``watchers`` get the turn's events without subscribing: its end too,
        should another node write it (it took the turn over from this one)."""
        chosen = tuple(watchers)
        if chosen:
            self._turn_watchers.setdefault(thread_id, {})[turn_id] = chosen

    def _deliver_local(self, pending: Pending) -> None:
        event = pending.event
        self._deliver(event, pending.broadcast, pending.include, pending.exclude)
        if event.kind in TERMINAL:
            assert event.thread_id is not None
            self._turn_ended(event.thread_id, turn_id_of(json.loads(event.params_json())))

    def _watchers_of(self, row: SharedEvent, event: Event) -> tuple[Participant, ...]:
        """The watchers of a turn started here that another node's ``row`` is about."""
        assert event.thread_id is not None
        turns = self._turn_watchers.get(event.thread_id)
        if turns is None or row.broadcast or row.stream is not None:
            return ()
        turn_id = turn_id_of(json.loads(row.params_json))
        watchers = turns.get(turn_id or "", ())
        if row.method in TERMINAL:
            self._turn_ended(event.thread_id, turn_id)
        return watchers

    def _turn_ended(self, thread_id: str, turn_id: str | None) -> None:
        turns = self._turn_watchers.get(thread_id)
        if turns is not None and turn_id is not None:
            turns.pop(turn_id, None)
            if not turns:
                del self._turn_watchers[thread_id]

    # --- subscribing --------------------------------------------------------------------

    async def replay_for(
        self, thread_id: str, participant: Participant, after_seq: int | None
    ) -> list[Event]:
        """Events a subscriber missed (``after_seq``; none when ``None``), and
        from now on skip in live delivery what this replay covered (nothing
        without one). Call under the journal's thread lock."""
        feed = self._feed(thread_id)
        # What other nodes announce from now on is fetched for this subscriber,
        # even before the bus knows it subscribed.
        feed.subscribing += 1
        try:
            if after_seq is None:
                stored: list[SharedEvent] = []
                last = await self.last_seq(thread_id)
            else:
                stored, last = await self.store.replay(thread_id, after_seq)
        finally:
            feed.subscribing -= 1
        if after_seq is not None:
            # What the replay covered is not sent again live. Without a replay
            # there is nothing to skip: an event this node has yet to deliver
            # (another node's broadcast, say) still reaches the new subscriber.
            floors = self.floors.get(id(participant))
            if floors is None:
                floors = self.floors[id(participant)] = {}
                weakref.finalize(participant, self.floors.pop, id(participant), None)
            floors[thread_id] = last
        if feed.delivered is None and not feed.local and not feed.queue:
            feed.delivered = last
            feed.followed_from = last + 1
        return [stored_event(thread_id, row) for row in stored]

    async def last_seq(self, thread_id: str) -> int:
        return await self.store.last_seq(thread_id)

    def forget_thread(self, thread_id: str) -> None:
        self._turn_watchers.pop(thread_id, None)
        feed = self._feeds.get(thread_id)
        if feed is not None and not feed.queue and not feed.local:
            del self._feeds[thread_id]
