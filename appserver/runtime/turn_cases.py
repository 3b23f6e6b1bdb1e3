"""Turn use cases: start, interrupt, enqueue, remove from the queue, steer,
answer an approval. Callable in-process by any front door: no connection,
no request context, no wire encoding; refusals are ``runtime.errors``."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appserver.protocol.ids import now_iso
from appserver.providers.base import Message
from appserver.runtime.errors import (
    InvalidInput,
    TurnInProgress,
    TurnNotFound,
    TurnNotRunning,
    reject_lone_surrogates,
)
from appserver.runtime.events import Participant
from appserver.runtime.inputs import InputMaterializer, Materialized
from appserver.runtime.threads import Threads
from appserver.runtime.turns.engine import TurnEngine, Work
from appserver.runtime.turns.model import ActiveTurn, QueuedInput, UserInput

if TYPE_CHECKING:
    from appserver.protocol import turns as turn_wire
    from appserver.runtime.cluster import ClusterNode

# Adjusts a just-reserved turn before it runs (attribution, userMessage extras).
Prepare = Callable[[ActiveTurn, UserInput], None]


def user_input(materialized: Materialized, sender: turn_wire.SenderContext | None) -> UserInput:
    return UserInput(
        display_text=materialized.display_text,
        native_parts=materialized.native_parts,
        materialized_parts=materialized.materialized_parts,
        images=materialized.images,
        sender=sender,
        instructions=list(materialized.instructions),
    )


class Turns:
    """The turn use cases over the engine."""

    def __init__(
        self, threads: Threads, engine: TurnEngine, materializer: InputMaterializer
    ) -> None:
        self.threads = threads
        self.engine = engine
        self.materializer = materializer
        # Set when nodes share a database: turns may run on another node.
        self.cluster: ClusterNode | None = None

    async def start(
        self,
        thread_id: str,
        parts: list[Any],
        origin: Participant | None = None,
        *,
        sender: turn_wire.SenderContext | None = None,
        messages: list[Message] | None = None,
        prepare: Prepare | None = None,
        work: Work | None = None,
    ) -> ActiveTurn:
        """Start a turn with the input ``parts`` (``protocol.turns`` input parts).

        ``messages`` is the history of a client-managed thread. ``prepare`` runs
        on the reserved turn before it is stored; ``work`` replaces the agent
        loop (``TurnEngine.start``). When this returns the turn
        is stored (safe to acknowledge); it runs on its own, wait on
        ``active.done`` for its end.
        """
        thread = await self.threads.get_active(thread_id)
        self.materializer.reject_unsupported(parts)
        reject_lone_surrogates(parts, sender, messages or [])
        if thread.history_mode == "client" and messages is None:
            raise InvalidInput(
                f"Thread {thread.id} requires client-managed history, "
                "but no messages were provided."
            )
        if thread.history_mode != "client" and messages is not None:
            raise InvalidInput(
                f"Thread {thread.id} uses server-managed history and does not accept "
                "client-supplied messages."
            )
        if await self.threads.running_anywhere(thread.id):
            raise TurnInProgress(thread.id)
        materialized = await self.materializer.materialize(parts)
        if thread.id in self.engine.active:  # another start won while we read files
            raise TurnInProgress(thread.id)
        user = user_input(materialized, sender)
        user.client_history = messages
        adjust = None if prepare is None else (lambda active: prepare(active, user))
        return await self.engine.start(thread, origin, user, adjust, work)

    async def compact(self, thread_id: str, origin: Participant | None = None) -> ActiveTurn:
        """Start a turn that compacts the thread's context: the model summarises
        the conversation so far, and later turns send the summary instead of
        what it covers (``turns/compaction.py``). Returns once the turn is stored;
        it ends with one terminal event like any turn."""
        thread = await self.threads.get_active(thread_id)
        if thread.history_mode == "client":
            raise InvalidInput(
                f"Thread {thread.id} uses client-managed history; the client compacts it."
            )
        if await self.threads.running_anywhere(thread.id):
            raise TurnInProgress(thread.id)
        return await self.engine.start_compaction(thread, origin)

    async def interrupt(self, thread_id: str, turn_id: str) -> ActiveTurn | None:
        """Cancel the running turn ``turn_id`` (idempotent while it winds down);
        ``None`` when another node runs it (that node is told to)."""
        thread = await self.threads.get(thread_id)
        active = self.engine.active.get(thread.id)
        if active is not None and active.record.id == turn_id:
            self.engine.interrupt(thread.id)
            return active
        if await self._forward(thread.id, turn_id, "interrupt", {}):
            return None
        if not await self.threads.repo.turn_exists(thread.id, turn_id):
            raise TurnNotFound(turn_id)
        raise TurnNotRunning(turn_id)

    async def enqueue(
        self,
        thread_id: str,
        parts: list[Any],
        origin: Participant | None = None,
        sender: turn_wire.SenderContext | None = None,
    ) -> tuple[turn_wire.QueuedTurnInput, list[turn_wire.QueuedTurnInput]]:
        """Queue an input (an idle thread starts it at once); returns the entry
        and the whole queue."""
        thread = await self.threads.get_active(thread_id)
        self.materializer.reject_unsupported(parts)
        reject_lone_surrogates(parts, sender)
        if thread.history_mode == "client":
            raise InvalidInput(
                f"Thread {thread.id} uses client-managed history; send turn/start with messages."
            )
        materialized = await self.materializer.materialize(parts)
        running = self.engine.active.get(thread.id)
        from appserver.protocol import turns as turn_wire  # a queue's entry

        wire = turn_wire.QueuedTurnInput(
            id=f"queued_{int(time.time() * 1000)}_{secrets.token_hex(3)}",
            thread_id=thread.id,
            native_input_parts=materialized.native_parts,
            materialized_input_parts=materialized.materialized_parts,
            display_text=materialized.display_text,
            sender=sender,
            created_at=now_iso(),
            ready_after_turn_id=running.record.id if running is not None else None,
        )
        entry = QueuedInput(
            wire=wire,
            images=materialized.images,
            materialized=materialized.materialized_parts,
            origin=origin,
            instructions=list(materialized.instructions),
        )
        queue = await self.engine.enqueue(thread, entry)
        return wire, [e.wire for e in queue]

    async def remove_queued(
        self, thread_id: str, entry_id: str, by: Participant | None = None
    ) -> list[turn_wire.QueuedTurnInput]:
        """Drop a queued input; returns the queue."""
        thread = await self.threads.get(thread_id)
        async with self.engine.inputs.lock(thread.id):
            queue = await self.engine.inputs.load(thread.id)
            entry = self.engine.inputs.find(thread.id, entry_id)
            if entry is None:
                raise InvalidInput(f"queued input not found: {entry_id}")
            queue.remove(entry)
            active = self.engine.active.get(thread.id)
            if active is not None and entry.wire.id in active.guidance:
                active.guidance.remove(entry.wire.id)
            await self.engine.inputs.changed(thread.id, include=[by] if by is not None else [])
        return [e.wire for e in queue]

    async def steer(
        self,
        thread_id: str,
        expected_turn_id: str,
        entry_id: str,
        by: Participant | None = None,
        keep: bool = False,
    ) -> tuple[str, list[turn_wire.QueuedTurnInput]]:
        """Inject a queued input into the running turn at its next safe boundary;
        returns the turn id and the queue. ``keep`` (Codex's turn/steer): the
        input belongs to that turn, which answers it before it ends and drops it
        if it does not complete, instead of giving it back to the queue."""
        thread = await self.threads.get(thread_id)
        active = self.engine.active.get(thread.id)
        elsewhere = False
        if keep and active is not None and active.closing:
            raise TurnNotRunning(expected_turn_id)  # no model call is left to take it
        if active is None or active.record.id != expected_turn_id:
            elsewhere = await self._running_elsewhere(thread.id, expected_turn_id) is not None
            if not elsewhere:
                raise TurnNotRunning(expected_turn_id)
        async with self.engine.inputs.lock(thread.id):
            queue = await self.engine.inputs.load(thread.id)
            entry = self.engine.inputs.find(thread.id, entry_id)
            if entry is None:
                raise InvalidInput(f"queued input not found: {entry_id}")
            if entry.wire.status != "guidancePending":
                entry.wire.status = "guidancePending"
                if active is not None and not elsewhere:
                    active.guidance.append(entry.wire.id)
                    if keep:
                        active.kept_guidance.add(entry.wire.id)
                await self.engine.inputs.changed(thread.id, include=[by] if by is not None else [])
                if elsewhere:
                    body = {"entryId": entry_id, "keep": keep}
                    await self._forward(thread.id, expected_turn_id, "steer", body)
        return expected_turn_id, [e.wire for e in queue]

    async def _running_elsewhere(self, thread_id: str, turn_id: str) -> str | None:
        """The node that runs ``turn_id`` when it is another one."""
        if self.cluster is None:
            return None
        found = await self.cluster.store.turn_node(thread_id, turn_id)
        if found is None or found[0] not in ("running", "waitingApproval"):
            return None
        node = found[1]
        return node if node and node != self.cluster.node_id else None

    async def _forward(self, thread_id: str, turn_id: str, kind: str, body: dict[str, Any]) -> bool:
        """Send ``kind`` to the node that runs the turn; ``False`` if none does."""
        node = await self._running_elsewhere(thread_id, turn_id)
        if node is None or self.cluster is None:
            return False
        await self.cluster.send(node, kind, {"threadId": thread_id, "turnId": turn_id, **body})
        return True

    async def on_steer(self, body: dict[str, Any]) -> None:
        """Another node steered a turn this node runs (cluster command)."""
        thread_id, turn_id, entry_id = body["threadId"], body["turnId"], body["entryId"]
        active = self.engine.active.get(thread_id)
        if active is None or active.record.id != turn_id:
            return
        # Not loaded here: the turn reads the queue again, under its lock, when it
        # takes its guidance (a load without the lock would replace the queue the
        # turn is changing and bring back what it took).
        if entry_id not in active.guidance:
            active.guidance.append(entry_id)
            if body.get("keep") is True:
                active.kept_guidance.add(entry_id)

    async def on_interrupt(self, body: dict[str, Any]) -> None:
        """Another node interrupted a turn this node runs (cluster command)."""
        active = self.engine.active.get(body["threadId"])
        if active is not None and active.record.id == body["turnId"]:
            active.cancel(str(body.get("reason") or "interrupted"))

    def answer_approval(
        self, thread_id: str, request_id: str, decision: str, by: Participant | None = None
    ) -> bool:
        """Answer a pending approval out of band; ``False`` if none matches."""
        return self.engine.approvals.answer(thread_id, request_id, decision, by)
