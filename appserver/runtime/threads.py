"""Thread use cases: create, look up, view, list, resume, subscribe, change
status, rename, configure, roll back and delete threads.

Callable in-process by any front door (and by cron): no connection, no request
context, no wire encoding. Refusals are :mod:`runtime.errors` exceptions; events go
out through the journal and the bus. The participant a call is made "by" only
addresses events (who gets ``thread/resumed``, who does not get ``thread/deleted``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from appserver.protocol.ids import new_thread_id, now_iso
from appserver.protocol.limits import LIST_PAGE_BYTES
from appserver.runtime.approvals import ApprovalBroker
from appserver.runtime.bus import EventBus
from appserver.runtime.errors import (
    InvalidInput,
    ThreadNotActive,
    ThreadNotFound,
    TurnInProgress,
    reject_lone_surrogates,
)
from appserver.runtime.events import Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.plans import ThreadPlans
from appserver.runtime.state import RuntimeStates
from appserver.runtime.titles import name_untitled, renamed
from appserver.runtime.turns import TurnEngine
from appserver.runtime.wire import newest_within, thread_data, turn_data
from appserver.storage.cursors import BadCursor, list_cursor
from appserver.storage.cursors import turns_cursor as thread_turns_cursor
from appserver.storage.plans import PlanRepository
from appserver.storage.records import ThreadRecord
from appserver.storage.spawn_edges import SpawnEdgeRepository
from appserver.storage.threads import ThreadQuery, ThreadRepository
from appserver.tools.plans import attach_plan_store

# `replayRecent` replays the events among the thread's last N seqs.
RECENT_EVENTS = 32

if TYPE_CHECKING:
    from appserver.protocol import threads as thread_wire
    from appserver.runtime.cluster import ClusterNode


@dataclass
class NewThread:
    """What a new thread is made of (identity, title, configuration)."""

    user_id: str = ""
    channel_name: str = ""
    workspace_path: str | None = None  # None or blank: the host workspace
    channel_context: str | None = None
    display_name: str | None = None
    history_mode: str = "server"
    source: dict[str, Any] = field(default_factory=lambda: {"kind": "user"})
    configuration: dict[str, Any] | None = None
    metadata: dict[str, str] = field(default_factory=dict)


class Threads:
    """The thread use cases over one workspace's store and runtime."""

    def __init__(
        self,
        repo: ThreadRepository,
        bus: EventBus,
        journal: ThreadJournal,
        runtimes: RuntimeStates,
        engine: TurnEngine,
        approvals: ApprovalBroker,
        workspace: Path,
    ) -> None:
        self.repo = repo
        self.bus = bus
        self.journal = journal
        self.runtimes = runtimes
        self.engine = engine
        self.approvals = approvals
        self.workspace = str(workspace)
        # Set when nodes share a database: turns may run on another node.
        self.cluster: ClusterNode | None = None
        engine.start_listeners.append(partial(name_untitled, repo))
        # The plan tools (CreatePlan, UpdateTodos) write through this.
        self.plans = ThreadPlans(PlanRepository(repo.db), journal, engine)
        self.edges = SpawnEdgeRepository(repo.db)  # the SubAgent tree
        attach_plan_store(engine.tools, self.plans)
        # Called with (thread id, deleted) when a thread is archived or deleted,
        # before it changes (background terminals stop theirs, as DotCraft does).
        self.closing_listeners: list[Callable[[str, bool], Awaitable[None]]] = []

    # --- lookups -----------------------------------------------------------------

    def normalize_workspace(self, path: str | None) -> str:
        """Empty means the host workspace; otherwise a normalised path."""
        if not path or not path.strip():
            return self.workspace
        return os.path.normpath(path.strip())

    async def get(self, thread_id: str) -> ThreadRecord:
        """The stored thread, or :class:`ThreadNotFound`."""
        thread = await self.repo.get(thread_id)
        if thread is None:
            raise ThreadNotFound(thread_id)
        return thread

    async def get_active(self, thread_id: str) -> ThreadRecord:
        """The thread if its status is ``active``, else :class:`ThreadNotActive`."""
        thread = await self.get(thread_id)
        if thread.status != "active":
            raise ThreadNotActive(thread.id)
        return thread

    def running(self, thread_id: str) -> bool:
        return thread_id in self.engine.active

    async def running_anywhere(self, thread_id: str) -> bool:
        """Whether a turn runs on the thread, here or on another node."""
        if thread_id in self.engine.active:
            return True
        return (
            self.cluster is not None
            and await self.cluster.store.running_turn(thread_id) is not None
        )

    async def view(
        self,
        thread: ThreadRecord,
        include_turns: bool = False,
        turn_limit: int | None = None,
        turns_cursor: str | None = None,
        hidden_item_types: Collection[str] = (),
        byte_budget: int | None = None,
    ) -> thread_wire.ThreadResult:
        """The thread as a typed ``Thread`` (with turns and items on request,
        leaving out ``hidden_item_types``).

        With ``byte_budget``, the page of turns ends early (newest turns kept,
        at least one, ``next_turns_cursor`` set) once its encoded turns would
        pass that many bytes, so a long thread pages instead of making an
        answer larger than a frame.
        """
        from appserver.protocol import threads as thread_wire

        turns: list[dict[str, Any]] = []
        next_cursor = None
        if include_turns:
            try:
                records, next_cursor = await self.repo.turns(thread.id, turn_limit, turns_cursor)
            except BadCursor:
                raise InvalidInput("'turnsCursor' is not a cursor this server issued") from None
            items = await self.repo.items(thread.id, [turn.id for turn in records])
            turns = [
                turn_data(turn, [i for i in items[turn.id] if i.type not in hidden_item_types])
                for turn in records
            ]
            if byte_budget is not None:
                kept = newest_within(turns, byte_budget)
                if kept < len(turns):
                    turns = turns[len(turns) - kept :]
                    next_cursor = thread_turns_cursor(records[len(records) - kept].seq)
        queue = await self.engine.inputs.look(thread.id)
        queued = [entry.wire.to_wire() for entry in queue]
        data = thread_data(thread, self.runtimes.snapshot(thread.id), queued, turns)
        wire = thread_wire.Thread.model_validate(data)  # the one mapping: runtime/wire.py
        plan = await self.plans.load(thread.id)
        return thread_wire.ThreadResult(
            thread=wire,
            next_turns_cursor=next_cursor,
            plan=plan,
            sub_agents=await self._sub_agents(thread.id),
        )

    async def _sub_agents(self, thread_id: str) -> list[thread_wire.SubAgentChildSummary] | None:
        """The thread's SubAgent children, oldest first (``None``: it spawned none)."""
        from appserver.protocol import threads as thread_wire

        edges = await self.edges.children(thread_id, include_closed=True)
        found = []
        for edge in sorted(edges, key=lambda edge: (edge.created_at, edge.child_thread_id)):
            child = await self.repo.get(edge.child_thread_id)
            if child is not None:
                found.append(
                    thread_wire.SubAgentChildSummary(edge=edge, thread=self.summary(child))
                )
        return found or None

    def version(self, thread_id: str) -> tuple[Any, ...] | None:
        """A cheap value that changes whenever the thread's turn-less view does
        (``None``: unknown yet). Front doors may cache an encoded view by it."""
        if not self.repo.db.caches_reads:
            return None  # other nodes write the same database: never cache
        queue = self.engine.inputs.loaded(thread_id)
        if queue is None:
            return None  # not loaded yet: the first view loads it
        return (
            self.repo.db.generation,
            self.runtimes.key(thread_id),
            tuple((entry.wire.id, entry.wire.status) for entry in queue),
        )

    def summary(self, thread: ThreadRecord) -> thread_wire.ThreadSummary:
        from appserver.protocol import threads as thread_wire

        return thread_wire.ThreadSummary(
            id=thread.id,
            display_name=thread.display_name,
            status=thread.status,
            origin_channel=thread.origin_channel,
            user_id=thread.user_id,
            channel_context=thread.channel_context,
            created_at=thread.created_at,
            last_active_at=thread.last_active_at,
            turn_count=thread.turn_count,
            runtime=self.runtimes.snapshot(thread.id),
        )

    async def list(self, query: ThreadQuery) -> tuple[list[thread_wire.ThreadSummary], str | None]:
        """One page of summaries and the cursor of the next page."""
        try:
            threads, next_cursor = await self.repo.list_threads(query)
        except BadCursor:
            raise InvalidInput("'cursor' is not a cursor this server issued") from None
        return [self.summary(thread) for thread in threads], next_cursor

    def list_cursor_after(self, summary: thread_wire.ThreadSummary) -> str:
        """The cursor of the page that continues after ``summary`` (for a front
        door that ends a page of :meth:`list` early, e.g. to bound its size)."""
        return list_cursor(summary.last_active_at, summary.id)

    # --- changes -----------------------------------------------------------------

    async def create(self, spec: NewThread, *, announce: bool = True) -> ThreadRecord:
        """Make a thread and announce ``thread/started`` to everyone (unless
        ``announce`` is false: then call :meth:`announce_started`)."""
        return (await self._create(spec, announce))[0]

    async def create_viewed(self, spec: NewThread) -> tuple[ThreadRecord, dict[str, Any]]:
        """:meth:`create`, announced, and the ``Thread`` it announced, as data
        (``thread/start`` answers with it: a new thread is not viewed twice)."""
        thread, data = await self._create(spec, True)
        assert data is not None
        return thread, data

    async def _create(
        self, spec: NewThread, announce: bool
    ) -> tuple[ThreadRecord, dict[str, Any] | None]:
        """Store a new thread; announced, with the ``Thread`` data it was announced with."""
        # Announced once stored, even if the caller is cancelled meanwhile (its client
        # left during thread/start), so other clients hear of what they can list. The
        # data is built from the record (no models: a face's one-shot loads none).
        with anyio.CancelScope(shield=True):
            thread = await self._store_new(spec)
            if not announce:
                return thread, None
            data = thread_data(thread, self.runtimes.snapshot(thread.id))
            started = {"threadId": thread.id, "thread": data}
            await self.journal.emit(thread.id, "thread/started", started, broadcast=True)
        return thread, data

    async def _store_new(self, spec: NewThread) -> ThreadRecord:
        reject_lone_surrogates(
            spec.user_id,
            spec.channel_name,
            spec.workspace_path,
            spec.channel_context,
            spec.display_name,
            spec.configuration,
            what="the thread's identity or configuration",
        )
        now = now_iso()
        for _ in range(5):
            thread = ThreadRecord(
                id=new_thread_id(),
                workspace_path=self.normalize_workspace(spec.workspace_path),
                user_id=spec.user_id,
                origin_channel=spec.channel_name,
                channel_context=spec.channel_context,
                display_name=spec.display_name or None,
                status="active",
                created_at=now,
                last_active_at=now,
                history_mode=spec.history_mode,
                source=dict(spec.source),
                metadata=dict(spec.metadata),
                configuration=spec.configuration,
            )
            try:
                await self.repo.create(thread)
                break
            except sqlite3.IntegrityError:
                continue  # id collision: draw again
        else:
            raise RuntimeError("could not allocate a unique thread id")
        return thread

    async def announce_started(self, thread: ThreadRecord) -> thread_wire.ThreadResult:
        """Broadcast ``thread/started`` of a thread made without announcing it;
        returns the view it carried."""
        from appserver.protocol import threads as thread_wire

        view = await self.view(thread)
        started = thread_wire.ThreadStartedNotification(thread_id=thread.id, thread=view.thread)
        await self.journal.emit(thread.id, "thread/started", started, broadcast=True)
        return view

    async def resume(
        self,
        thread_id: str,
        by: Participant,
        turn_limit: int | None = None,
        turns_cursor: str | None = None,
        hidden_item_types: Collection[str] = (),
    ) -> thread_wire.ThreadResult:
        """Reactivate a paused thread; ``by`` gets ``thread/resumed``.

        A pending approval is offered to ``by`` only if it subscribes to the
        thread: a participant that does not would never see the request
        resolved or the turn end. Subscribing offers it (see ``subscribe``).
        """
        from appserver.protocol import threads as thread_wire

        thread = await self.get(thread_id)
        if thread.status == "archived":
            raise ThreadNotActive(thread.id)
        now = now_iso()
        previous = thread.status
        await self.repo.update(thread.id, status="active", last_active_at=now)
        thread.status, thread.last_active_at = "active", now
        result = await self.view(
            thread, True, turn_limit, turns_cursor, hidden_item_types, LIST_PAGE_BYTES
        )
        if previous != "active":
            changed = {"threadId": thread.id, "previousStatus": previous, "newStatus": "active"}
            await self.journal.emit(thread.id, "thread/statusChanged", changed, broadcast=True)
        resumed = thread_wire.ThreadResumedNotification(
            thread_id=result.thread.id, thread=result.thread, resumed_by=by.name
        )
        await self.journal.emit(thread.id, "thread/resumed", resumed, include=[by])
        if self.bus.is_subscribed(thread.id, by):
            self.approvals.offer(thread.id, by)
        return result

    async def subscribe(
        self,
        thread_id: str,
        participant: Participant,
        after_seq: int | None = None,
        replay_recent: bool = False,
    ) -> None:
        """Stream the thread's events to ``participant`` (idempotent).

        With ``after_seq``, first replay what it missed (leaving out what it
        already got as broadcasts); ``replay_recent`` replays the recent events.
        """
        await self.get(thread_id)
        if self.bus.is_subscribed(thread_id, participant):
            return  # idempotent: no second stream, no second replay
        replay_from = after_seq
        if replay_from is None and replay_recent:
            replay_from = max(0, await self.journal.current_seq(thread_id) - RECENT_EVENTS)
        await self.journal.subscribe(
            thread_id, participant, replay_from, skip_seen=after_seq is not None
        )
        self.approvals.offer(thread_id, participant)

    def unsubscribe(self, thread_id: str, participant: Participant) -> None:
        self.bus.unsubscribe(thread_id, participant)
        if self.journal.shared is not None:
            self.journal.shared.floors.get(id(participant), {}).pop(thread_id, None)

    async def _set_status(self, thread: ThreadRecord, status: str) -> None:
        previous = thread.status
        await self.repo.update(thread.id, status=status)
        changed = {"threadId": thread.id, "previousStatus": previous, "newStatus": status}
        await self.journal.emit(thread.id, "thread/statusChanged", changed, broadcast=True)

    async def pause(self, thread_id: str) -> None:
        thread = await self.get(thread_id)
        if thread.status == "archived":
            raise ThreadNotActive(thread.id)
        if thread.status != "paused":
            await self._set_status(thread, "paused")

    async def archive(self, thread_id: str) -> None:
        thread = await self.get(thread_id)
        if await self.running_anywhere(thread.id):
            raise TurnInProgress(thread.id)
        if thread.status != "archived":
            for listener in self.closing_listeners:
                await listener(thread.id, False)
            await self._set_status(thread, "archived")

    async def unarchive(self, thread_id: str) -> None:
        thread = await self.get(thread_id)
        if thread.status == "archived":
            await self._set_status(thread, "active")

    async def rename(self, thread_id: str, display_name: str) -> None:
        thread = await self.get(thread_id)
        await self._announce_name(thread.id, display_name)

    async def _announce_name(self, thread_id: str, name: str) -> None:
        """Store the name with its ``thread/renamed``: one commit."""
        await self.journal.emit_all(thread_id, [renamed(thread_id, name)])

    async def set_mode(self, thread_id: str, mode: str) -> None:
        thread = await self.get(thread_id)
        config = dict(thread.configuration or {})
        config["mode"] = mode
        await self.repo.update(thread.id, configuration=config)

    async def configure(self, thread_id: str, config: dict[str, Any]) -> None:
        """Replace the thread's configuration (its mode is kept unless named)."""
        thread = await self.get(thread_id)
        config = dict(config)
        # The mode is owned by set_mode: keep it unless the new config names one.
        if "mode" not in config and thread.configuration and "mode" in thread.configuration:
            config["mode"] = thread.configuration["mode"]
        await self.repo.update(thread.id, configuration=config)

    async def rollback(self, thread_id: str, num_turns: int) -> ThreadRecord:
        """Drop the last ``num_turns`` turns; returns the thread as it is now."""
        thread = await self.get(thread_id)
        if thread.status == "archived":
            raise ThreadNotActive(thread.id)
        if await self.running_anywhere(thread.id):
            raise TurnInProgress(thread.id)
        if num_turns > thread.turn_count:
            raise InvalidInput(f"'numTurns': the thread has only {thread.turn_count} turn(s)")
        await self.repo.drop_last_turns(thread.id, num_turns)
        return await self.get(thread.id)

    async def delete(self, thread_id: str, by: Participant | None = None) -> None:
        """Delete the thread (a running turn is cancelled first, reason
        ``threadDeleted``); everyone but ``by`` gets ``thread/deleted``, and
        nobody for an internal helper thread (nobody was told it started)."""
        thread = await self.get(thread_id)
        await self.engine.cancel_and_wait(thread.id, "threadDeleted")
        if self.cluster is not None:
            await self.cluster.cancel_and_wait(thread.id, "threadDeleted")
        for listener in self.closing_listeners:
            await listener(thread.id, True)
        await self.repo.delete(thread.id)
        announce = not thread.is_internal
        self.deleted(thread.id, exclude=[by] if by is not None else [], announce=announce)
        if self.cluster is not None and announce:
            await self.cluster.broadcast("thread/deleted", {"threadId": thread.id})

    def deleted(
        self, thread_id: str, exclude: Sequence[Participant] = (), *, announce: bool = True
    ) -> None:
        """Announce a deleted thread (``thread/deleted``, unless not ``announce``)
        and forget it here."""
        if announce:
            self.bus.publish(
                "thread/deleted",
                {"threadId": thread_id},
                broadcast=True,
                exclude=exclude,
            )
        self.bus.forget_thread(thread_id)
        self.journal.forget_thread(thread_id)
        self.runtimes.forget(thread_id)
        self.engine.forget_thread(thread_id)
