"""The ``thread/*`` family: create, list, read, resume, subscribe, change
status, rename, configure, roll back and delete threads.

Notifications are published after the response is queued, so a caller
always sees its response first. Who receives what (and the de-duplication
DotCraft specifies) is decided by the event bus's target sets.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from appserver.protocol import errors as E
from appserver.protocol import threads as T
from appserver.protocol.base import Empty
from appserver.rpc import framing
from appserver.rpc.connection import Connection, RequestContext
from appserver.rpc.framing import RawJSON
from appserver.runtime.bus import EventBus
from appserver.runtime.ids import new_thread_id, now_iso
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.state import RuntimeStates
from appserver.runtime.turns import TurnEngine
from appserver.runtime.wire import turn_to_wire
from appserver.services.router import Router
from appserver.storage.threads import (
    BadCursor,
    ThreadQuery,
    ThreadRecord,
    ThreadRepository,
)

log = logging.getLogger("appserver.threads")

# `replayRecent: true` replays the notifications among the thread's last N seqs.
RECENT_EVENTS = 32
READ_CACHE_SIZE = 1024  # encoded thread/read answers kept (see ThreadService.read)


def hidden_item_types(viewer: Connection | None) -> frozenset[str]:
    """Item types a connection did not opt into (DotCraft filters them from reads too)."""
    if viewer is not None and not viewer.wants("item:commandExecution"):
        return frozenset({"commandExecution"})
    return frozenset()


class ThreadService:
    """Handlers of the thread family and the thread lookups other services use."""

    def __init__(
        self,
        repo: ThreadRepository,
        bus: EventBus,
        journal: ThreadJournal,
        runtimes: RuntimeStates,
        workspace: Path,
        engine: TurnEngine | None = None,
    ) -> None:
        self.repo = repo
        self.bus = bus
        self.journal = journal
        self.engine = engine
        self.runtimes = runtimes
        self.workspace = str(workspace)
        # Called (after the response) when a connection subscribes to a thread;
        # the turn engine re-sends pending approvals this way.
        self.subscribe_hooks: list[Callable[[str, Connection], Any]] = []
        self._read_cache: dict[str, tuple[tuple[Any, ...], RawJSON]] = {}

    def register(self, router: Router) -> None:
        handlers: dict[str, Any] = {
            "thread/start": self.start,
            "thread/resume": self.resume,
            "thread/list": self.list_threads,
            "thread/read": self.read,
            "thread/rollback": self.rollback,
            "thread/subscribe": self.subscribe,
            "thread/unsubscribe": self.unsubscribe,
            "thread/pause": self.pause,
            "thread/archive": self.archive,
            "thread/unarchive": self.unarchive,
            "thread/delete": self.delete,
            "thread/rename": self.rename,
            "thread/mode/set": self.set_mode,
            "thread/config/update": self.update_config,
        }
        for method, handler in handlers.items():
            router.register(method, handler)

    # --- helpers ----------------------------------------------------------

    def _running(self, thread_id: str) -> bool:
        return self.engine is not None and thread_id in self.engine.active

    def normalize_workspace(self, path: str | None) -> str:
        """Empty means the host workspace; otherwise a normalised path."""
        if not path or not path.strip():
            return self.workspace
        return os.path.normpath(path.strip())

    async def get(self, thread_id: str) -> ThreadRecord:
        """The stored thread or ``-32010``."""
        thread = await self.repo.get(thread_id)
        if thread is None:
            raise E.thread_not_found(thread_id)
        return thread

    async def to_wire(
        self,
        thread: ThreadRecord,
        include_turns: bool = False,
        turn_limit: int | None = None,
        turns_cursor: str | None = None,
        viewer: Connection | None = None,
    ) -> T.ThreadResult:
        """The wire ``Thread`` (with turns and items on request, as ``viewer``
        may see them)."""
        turns: list[T.Turn] = []
        next_cursor = None
        if include_turns:
            try:
                records, next_cursor = await self.repo.turns(thread.id, turn_limit, turns_cursor)
            except BadCursor:
                raise E.invalid_params("'turnsCursor' is not a cursor this server issued") from None
            items = await self.repo.items(thread.id, [turn.id for turn in records])
            hidden = hidden_item_types(viewer)
            turns = [
                turn_to_wire(turn, [i for i in items[turn.id] if i.type not in hidden])
                for turn in records
            ]
        wire = T.Thread(
            id=thread.id,
            workspace_path=thread.workspace_path,
            user_id=thread.user_id,
            origin_channel=thread.origin_channel,
            channel_context=thread.channel_context,
            display_name=thread.display_name,
            status=thread.status,
            created_at=thread.created_at,
            last_active_at=thread.last_active_at,
            history_mode=thread.history_mode,
            metadata=thread.metadata,
            configuration=(
                T.ThreadConfiguration.model_validate(thread.configuration)
                if thread.configuration is not None
                else None
            ),
            source=T.ThreadSource.model_validate(thread.source) if thread.source else None,
            runtime=self.runtimes.snapshot(thread.id),
            queued_inputs=await self._queued_inputs(thread.id),
            turns=turns,
        )
        return T.ThreadResult(thread=wire, next_turns_cursor=next_cursor)

    async def _queued_inputs(self, thread_id: str) -> list[dict[str, Any]]:
        if self.engine is None:
            return []
        return [entry.wire.to_wire() for entry in await self.engine.load_queue(thread_id)]

    def _summary(self, thread: ThreadRecord) -> T.ThreadSummary:
        return T.ThreadSummary(
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

    async def _set_status(self, ctx: RequestContext, thread: ThreadRecord, status: str) -> None:
        """Persist a status change and announce it to everyone after the response."""
        previous = thread.status
        await self.repo.update(thread.id, status=status)
        notification = T.ThreadStatusChangedNotification(
            thread_id=thread.id,
            previous_status=previous,
            new_status=status,
        )
        ctx.after_response(
            lambda: self.journal.emit(
                thread.id, "thread/statusChanged", notification, broadcast=True
            )
        )

    # --- handlers ---------------------------------------------------------

    async def start(self, ctx: RequestContext, params: T.ThreadStartParams) -> BaseModel:
        identity = params.identity
        now = now_iso()
        config = params.config.to_wire() if params.config is not None else None
        display_name = params.display_name.strip() if params.display_name else None
        for _ in range(5):
            thread = ThreadRecord(
                id=new_thread_id(),
                workspace_path=self.normalize_workspace(identity.workspace_path),
                user_id=identity.user_id,
                origin_channel=identity.channel_name,
                channel_context=identity.channel_context,
                display_name=display_name or None,
                status="active",
                created_at=now,
                last_active_at=now,
                history_mode=params.history_mode or "server",
                source={"kind": "user"},
                configuration=config,
            )
            try:
                await self.repo.create(thread)
                break
            except sqlite3.IntegrityError:
                continue  # id collision: draw again
        else:
            raise RuntimeError("could not allocate a unique thread id")
        result = await self.to_wire(thread)
        started = T.ThreadStartedNotification(thread=result.thread)
        ctx.after_response(
            lambda: self.journal.emit(thread.id, "thread/started", started, broadcast=True)
        )
        return result

    async def resume(self, ctx: RequestContext, params: T.ThreadResumeParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        if thread.status == "archived":
            raise E.thread_not_active(thread.id)
        now = now_iso()
        previous = thread.status
        await self.repo.update(thread.id, status="active", last_active_at=now)
        thread.status, thread.last_active_at = "active", now
        if previous != "active":
            changed = T.ThreadStatusChangedNotification(
                thread_id=thread.id,
                previous_status=previous,
                new_status="active",
            )
            ctx.after_response(
                lambda: self.journal.emit(
                    thread.id, "thread/statusChanged", changed, broadcast=True
                )
            )
        result = await self.to_wire(
            thread, True, params.turn_limit, params.turns_cursor, ctx.connection
        )
        resumed = T.ThreadResumedNotification(
            thread=result.thread, resumed_by=ctx.connection.client_name
        )
        ctx.after_response(
            lambda: self.journal.emit(
                thread.id, "thread/resumed", resumed, include=[ctx.connection]
            )
        )
        for hook in self.subscribe_hooks:
            ctx.after_response(functools.partial(hook, thread.id, ctx.connection))
        return result

    async def list_threads(self, ctx: RequestContext, params: T.ThreadListParams) -> BaseModel:
        identity = params.identity
        query = ThreadQuery(
            workspace_path=self.normalize_workspace(identity.workspace_path),
            user_id=identity.user_id or None,
            channel_context=identity.channel_context,
            include_archived=params.include_archived,
            include_sub_agents=params.include_sub_agents,
            cross_channel_origins=params.cross_channel_origins or [],
            channel_name=params.channel_name,
            limit=params.limit,
            cursor=params.cursor,
        )
        try:
            threads, next_cursor = await self.repo.list_threads(query)
        except BadCursor:
            raise E.invalid_params("'cursor' is not a cursor this server issued") from None
        return T.ThreadListResult(
            data=[self._summary(thread) for thread in threads], next_cursor=next_cursor
        )

    async def read(self, ctx: RequestContext, params: T.ThreadReadParams) -> BaseModel | RawJSON:
        if params.include_turns:
            thread = await self.get(params.thread_id)
            return await self.to_wire(
                thread, True, params.turn_limit, params.turns_cursor, ctx.connection
            )
        # Without turns the answer depends only on the stored record, the runtime
        # flags and the queue: while all three are unchanged, send the bytes of
        # the last answer (a hot read is then a dictionary lookup).
        key = self._read_key(params.thread_id)
        cached = self._read_cache.get(params.thread_id)
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        thread = await self.get(params.thread_id)
        encoded = RawJSON(framing.payload_json(await self.to_wire(thread)))
        if key is not None and key == self._read_key(params.thread_id):
            self._read_cache[params.thread_id] = (key, encoded)
            if len(self._read_cache) > READ_CACHE_SIZE:
                del self._read_cache[next(iter(self._read_cache))]
        return encoded

    def _read_key(self, thread_id: str) -> tuple[Any, ...] | None:
        queue = self.engine.queues.get(thread_id) if self.engine is not None else []
        if queue is None:
            return None  # not loaded yet: the first read loads it
        return (
            self.repo.db.generation,
            self.runtimes.key(thread_id),
            tuple((entry.wire.id, entry.wire.status) for entry in queue),
        )

    async def rollback(self, ctx: RequestContext, params: T.ThreadRollbackParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        if thread.status == "archived":
            raise E.thread_not_active(thread.id)
        if self._running(thread.id):
            raise E.turn_in_progress(thread.id)
        if params.num_turns > thread.turn_count:
            raise E.invalid_params(f"'numTurns': the thread has only {thread.turn_count} turn(s)")
        await self.repo.drop_last_turns(thread.id, params.num_turns)
        return await self.to_wire(
            await self.get(thread.id), include_turns=True, viewer=ctx.connection
        )

    async def subscribe(self, ctx: RequestContext, params: T.ThreadSubscribeParams) -> BaseModel:
        await self.get(params.thread_id)
        conn = ctx.connection
        if self.bus.is_subscribed(params.thread_id, conn):
            return Empty()  # idempotent: no second stream, no second replay
        after_seq = params.after_seq
        if after_seq is None and params.replay_recent:
            after_seq = max(0, await self.journal.current_seq(params.thread_id) - RECENT_EVENTS)
        if after_seq is None:
            self.bus.subscribe(params.thread_id, conn)
        else:
            # Replay after the response; the journal holds the thread's lock so
            # nothing published meanwhile is lost or sent twice.
            replay_from, skip_seen = after_seq, params.after_seq is not None
            ctx.after_response(
                lambda: self.journal.subscribe(
                    params.thread_id, conn, replay_from, skip_seen=skip_seen
                )
            )
        thread_id = params.thread_id
        for hook in self.subscribe_hooks:
            ctx.after_response(functools.partial(hook, thread_id, conn))
        return Empty()

    async def unsubscribe(self, ctx: RequestContext, params: T.ThreadIdParams) -> BaseModel:
        self.bus.unsubscribe(params.thread_id, ctx.connection)
        return Empty()

    async def pause(self, ctx: RequestContext, params: T.ThreadIdParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        if thread.status == "archived":
            raise E.thread_not_active(thread.id)
        if thread.status != "paused":
            await self._set_status(ctx, thread, "paused")
        return Empty()

    async def archive(self, ctx: RequestContext, params: T.ThreadIdParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        if self._running(thread.id):
            raise E.turn_in_progress(thread.id)
        if thread.status != "archived":
            await self._set_status(ctx, thread, "archived")
        return Empty()

    async def unarchive(self, ctx: RequestContext, params: T.ThreadIdParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        if thread.status == "archived":
            await self._set_status(ctx, thread, "active")
        return Empty()

    async def delete(self, ctx: RequestContext, params: T.ThreadIdParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        if self.engine is not None:
            # Deleting wins over a running turn: it is cancelled (its clients get
            # turn/cancelled, reason threadDeleted) before the data goes.
            await self.engine.cancel_and_wait(thread.id, "threadDeleted")
        await self.repo.delete(thread.id)
        deleted = T.ThreadDeletedNotification(thread_id=thread.id)

        def announce() -> None:
            self.bus.publish("thread/deleted", deleted, broadcast=True, exclude=[ctx.connection])
            self.bus.forget_thread(thread.id)
            self.journal.forget_thread(thread.id)
            self.runtimes.forget(thread.id)
            if self.engine is not None:
                self.engine.forget_thread(thread.id)

        ctx.after_response(announce)
        return Empty()

    async def rename(self, ctx: RequestContext, params: T.ThreadRenameParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        await self.repo.update(thread.id, display_name=params.display_name)
        renamed = T.ThreadRenamedNotification(thread_id=thread.id, display_name=params.display_name)
        ctx.after_response(
            lambda: self.journal.emit(thread.id, "thread/renamed", renamed, broadcast=True)
        )
        return Empty()

    async def set_mode(self, ctx: RequestContext, params: T.ThreadModeSetParams) -> BaseModel:
        thread = await self.get(params.thread_id)
        config = dict(thread.configuration or {})
        config["mode"] = params.mode
        await self.repo.update(thread.id, configuration=config)
        return Empty()

    async def update_config(
        self, ctx: RequestContext, params: T.ThreadConfigUpdateParams
    ) -> BaseModel:
        thread = await self.get(params.thread_id)
        config = params.config.to_wire()
        # The mode is owned by thread/mode/set: keep it unless the new config names one.
        if "mode" not in config and thread.configuration and "mode" in thread.configuration:
            config["mode"] = thread.configuration["mode"]
        await self.repo.update(thread.id, configuration=config)
        return Empty()
