"""The ``turn/*`` family: JSON-RPC handlers over the turn use cases
(:class:`appserver.runtime.turn_cases.Turns`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from appserver.protocol import threads as thread_wire
from appserver.protocol import turns as turn_wire
from appserver.protocol.base import Empty
from appserver.protocol.encoding import dumps
from appserver.rpc.connection import RequestContext
from appserver.rpc.framing import RawJSON
from appserver.runtime.history import messages_from_client
from appserver.runtime.turn_cases import Turns
from appserver.runtime.turns import ActiveTurn, UserInput
from appserver.runtime.wire import turn_data
from appserver.services.peer import peer_of
from appserver.services.router import Router


class TurnService:
    """Handlers of the turn family."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        # Called right after `turn/start` reserved a turn and before it runs; may
        # adjust the turn's attribution (record.origin_channel, record.initiator)
        # and `user.extra` (channel adapters attribute turns to their channel).
        self.start_hooks: list[Callable[[RequestContext, ActiveTurn, UserInput], None]] = []

    def register(self, router: Router) -> None:
        handlers: dict[str, Any] = {
            "turn/start": self.start,
            "turn/interrupt": self.interrupt,
            "turn/enqueue": self.enqueue,
            "turn/queue/remove": self.remove_queued,
            "turn/steer": self.steer,
            "thread/compact": self.compact,
        }
        for method, handler in handlers.items():
            router.register(method, handler)
        router.enable_feature("approvalFlow")

    async def start(
        self, ctx: RequestContext, params: turn_wire.TurnStartParams
    ) -> BaseModel | RawJSON:
        def prepare(active: ActiveTurn, user: UserInput) -> None:
            for hook in self.start_hooks:
                hook(ctx, active, user)

        active = await self.turns.start(
            params.thread_id,
            params.input,
            peer_of(ctx),
            sender=params.sender,
            messages=messages_from_client(params.messages) if params.messages is not None else None,
            prepare=prepare,
        )
        # DotCraft answers with `items: []`; the userMessage item (already
        # stored) follows as item/started and item/completed. A TurnResult, as data.
        return RawJSON(dumps({"turn": turn_data(active.record, [])}))

    async def compact(self, ctx: RequestContext, params: thread_wire.ThreadIdParams) -> BaseModel:
        active = await self.turns.compact(params.thread_id, peer_of(ctx))
        return turn_wire.TurnResult(turn=self.turns.engine.turn_wire(active, include_items=False))

    async def interrupt(
        self, ctx: RequestContext, params: turn_wire.TurnInterruptParams
    ) -> BaseModel:
        await self.turns.interrupt(params.thread_id, params.turn_id)
        return Empty()

    async def enqueue(self, ctx: RequestContext, params: turn_wire.TurnEnqueueParams) -> BaseModel:
        entry, queue = await self.turns.enqueue(
            params.thread_id, params.input, peer_of(ctx), params.sender
        )
        return turn_wire.TurnEnqueueResult(queued_input=entry, queued_inputs=queue)

    async def remove_queued(
        self, ctx: RequestContext, params: turn_wire.TurnQueueRemoveParams
    ) -> BaseModel:
        queue = await self.turns.remove_queued(
            params.thread_id, params.queued_input_id, peer_of(ctx)
        )
        return turn_wire.QueuedInputsResult(queued_inputs=queue)

    async def steer(self, ctx: RequestContext, params: turn_wire.TurnSteerParams) -> BaseModel:
        turn_id, queue = await self.turns.steer(
            params.thread_id, params.expected_turn_id, params.queued_input_id, peer_of(ctx)
        )
        return turn_wire.TurnSteerResult(turn_id=turn_id, queued_inputs=queue)
