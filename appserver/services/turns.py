"""The ``turn/*`` family: start, interrupt, enqueue, queue/remove, steer."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from appserver.protocol import errors as E
from appserver.protocol import turns as W
from appserver.protocol.base import Empty
from appserver.protocol.errors import RpcError
from appserver.rpc.connection import RequestContext
from appserver.runtime.history import messages_from_client
from appserver.runtime.ids import now_iso
from appserver.runtime.inputs import InputMaterializer, Materialized
from appserver.runtime.turns import ActiveTurn, QueuedInput, TurnEngine, UserInput
from appserver.services.router import Router
from appserver.services.threads import ThreadService
from appserver.storage.threads import ThreadRecord


def _user_input(materialized: Materialized, sender: W.SenderContext | None) -> UserInput:
    return UserInput(
        display_text=materialized.display_text,
        native_parts=materialized.native_parts,
        materialized_parts=materialized.materialized_parts,
        images=materialized.images,
        sender=sender,
        instructions=list(materialized.instructions),
    )


class TurnService:
    def __init__(
        self, threads: ThreadService, engine: TurnEngine, materializer: InputMaterializer
    ) -> None:
        self.threads = threads
        self.engine = engine
        self.materializer = materializer
        # Called right after `turn/start` reserved a turn and before its response
        # is built; may adjust the turn's attribution (record.origin_channel,
        # record.initiator) and `user.extra`, which the turn reads only once the
        # response is queued (channel adapters attribute turns to their channel).
        self.start_hooks: list[Callable[[RequestContext, ActiveTurn, UserInput], None]] = []

    def register(self, router: Router) -> None:
        handlers: dict[str, Any] = {
            "turn/start": self.start,
            "turn/interrupt": self.interrupt,
            "turn/enqueue": self.enqueue,
            "turn/queue/remove": self.remove_queued,
            "turn/steer": self.steer,
        }
        for method, handler in handlers.items():
            router.register(method, handler)
        router.enable_feature("approvalFlow")

    async def _active_thread(self, thread_id: str) -> ThreadRecord:
        thread = await self.threads.get(thread_id)
        if thread.status != "active":
            raise E.thread_not_active(thread.id)
        return thread

    async def start(self, ctx: RequestContext, params: W.TurnStartParams) -> BaseModel:
        thread = await self._active_thread(params.thread_id)
        self.materializer.reject_unsupported(params.input)
        if thread.history_mode == "client" and params.messages is None:
            raise E.invalid_params(
                f"Thread {thread.id} requires client-managed history, "
                "but no messages were provided."
            )
        if thread.history_mode != "client" and params.messages is not None:
            raise E.invalid_params(
                f"Thread {thread.id} uses server-managed history and does not accept "
                "client-supplied messages."
            )
        if thread.id in self.engine.active:
            raise E.turn_in_progress(thread.id)
        materialized = await self.materializer.materialize(params.input)
        if thread.id in self.engine.active:  # another start won while we read files
            raise E.turn_in_progress(thread.id)
        user = _user_input(materialized, params.sender)
        if params.messages is not None:
            user.client_history = messages_from_client(params.messages)
        active = self.engine.begin(thread, ctx.connection, user)
        for hook in self.start_hooks:
            hook(ctx, active, user)
        # Synchronous callback: runs right after the response is queued, even if
        # the connection is closing, so the turn can never be left waiting.
        ctx.after_response(active.released.set)
        return W.TurnResult(turn=self.engine.turn_wire(active, include_items=True))

    async def interrupt(self, ctx: RequestContext, params: W.TurnInterruptParams) -> BaseModel:
        thread = await self.threads.get(params.thread_id)
        active = self.engine.active.get(thread.id)
        if active is not None and active.record.id == params.turn_id:
            # Idempotent while the turn winds down: a repeated interrupt never hangs.
            self.engine.interrupt(thread.id)
            return Empty()
        if not await self.threads.repo.turn_exists(thread.id, params.turn_id):
            raise RpcError(E.TURN_NOT_FOUND, f"Turn not found: {params.turn_id}")
        raise RpcError(E.TURN_NOT_RUNNING, f"Turn is not running: {params.turn_id}")

    async def enqueue(self, ctx: RequestContext, params: W.TurnEnqueueParams) -> BaseModel:
        thread = await self._active_thread(params.thread_id)
        self.materializer.reject_unsupported(params.input)
        if thread.history_mode == "client":
            raise E.invalid_params(
                f"Thread {thread.id} uses client-managed history; send turn/start with messages."
            )
        materialized = await self.materializer.materialize(params.input)
        wire = W.QueuedTurnInput(
            id=f"queued_{int(time.time() * 1000)}_{secrets.token_hex(3)}",
            thread_id=thread.id,
            native_input_parts=materialized.native_parts,
            materialized_input_parts=materialized.materialized_parts,
            display_text=materialized.display_text,
            sender=params.sender,
            created_at=now_iso(),
            ready_after_turn_id=(
                self.engine.active[thread.id].record.id if thread.id in self.engine.active else None
            ),
        )
        entry = QueuedInput(
            wire=wire,
            images=materialized.images,
            materialized=materialized.materialized_parts,
            origin=ctx.connection,
            instructions=list(materialized.instructions),
        )
        queue = await self.engine.enqueue(thread, entry)
        return W.TurnEnqueueResult(queued_input=wire, queued_inputs=[e.wire for e in queue])

    async def remove_queued(
        self, ctx: RequestContext, params: W.TurnQueueRemoveParams
    ) -> BaseModel:
        thread = await self.threads.get(params.thread_id)
        queue = await self.engine.load_queue(thread.id)
        entry = next((e for e in queue if e.wire.id == params.queued_input_id), None)
        if entry is None:
            raise E.invalid_params(f"queued input not found: {params.queued_input_id}")
        queue.remove(entry)
        active = self.engine.active.get(thread.id)
        if active is not None and entry.wire.id in active.guidance:
            active.guidance.remove(entry.wire.id)
        await self.engine.queue_changed(thread.id, include=[ctx.connection])
        return W.QueuedInputsResult(queued_inputs=[e.wire for e in queue])

    async def steer(self, ctx: RequestContext, params: W.TurnSteerParams) -> BaseModel:
        thread = await self.threads.get(params.thread_id)
        active = self.engine.active.get(thread.id)
        if active is None or active.record.id != params.expected_turn_id:
            raise RpcError(E.TURN_NOT_RUNNING, f"Turn is not running: {params.expected_turn_id}")
        queue = await self.engine.load_queue(thread.id)
        entry = next((e for e in queue if e.wire.id == params.queued_input_id), None)
        if entry is None:
            raise E.invalid_params(f"queued input not found: {params.queued_input_id}")
        if entry.wire.status != "guidancePending":
            entry.wire.status = "guidancePending"
            active.guidance.append(entry.wire.id)
            await self.engine.queue_changed(thread.id, include=[ctx.connection])
        return W.TurnSteerResult(turn_id=active.record.id, queued_inputs=[e.wire for e in queue])
