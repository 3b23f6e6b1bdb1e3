"""Helper turns: one turn of an internal thread whose model hands an answer to a tool.

The welcome suggestions and the commit-message suggestion (services/suggestions/)
need the model's answer in a shape the server can read, not a chat reply. A
:class:`HelperRequest` becomes one *internal* thread (user ``internal``, channel
= the profile, ``source.kind`` ``internal``, ``metadata["dotcraft.internal"]`` =
the profile, as DotCraft marks them), configured with the profile's tools only
(``toolProfile`` + ``useToolProfileOnly``: tools/suggestion_tools.py) and the
request's instructions, and one turn with the request's prompt (and, for a
client-history thread, the given history). Once the turn has ended, the
arguments of the profile tool's successful calls are the answer.

Chosen: every request makes its own thread and **deletes it afterwards**, on every
way out (success, failure, the caller's timeout or cancellation; shielded, within
:data:`CLEANUP_SECONDS`), as DotCraft does. A reused thread would keep every prompt
(diffs of up to 100,000 characters) in the store forever and serialise requests on
its one-turn-at-a-time rule. Nothing about a helper thread reaches a client: it is
created unannounced (no ``thread/started``), its events are never broadcast
(``ThreadJournal.internal``: no ``thread/runtimeChanged``), its deletion is
unannounced (no ``thread/deleted``), its turn has no originator and nobody
subscribes, and ``thread/list`` hides it unless ``includeInternal``.

The turn runs on the workspace's provider and default model, like any turn of
this server; helper turns count against nothing else (the engine has no limit on
concurrent turns).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import anyio

from appserver.protocol import turns as turn_wire
from appserver.protocol.ids import iso_ago
from appserver.providers.base import Message
from appserver.runtime.errors import ThreadNotFound
from appserver.runtime.threads import NewThread, Threads
from appserver.runtime.turn_cases import Turns
from appserver.runtime.turns.model import ActiveTurn
from appserver.storage.records import INTERNAL_METADATA_KEY, INTERNAL_SOURCE_KIND

log = logging.getLogger("appserver.helpers")

CLEANUP_SECONDS = 30.0
# A helper thread idle this long was left by a process that died mid-turn (a
# helper turn is bounded far below it); the first helper turn of a process
# deletes such threads.
STALE_SECONDS = 3600.0
INTERNAL_USER = "internal"


@dataclass
class HelperRequest:
    """One helper turn: who it is for, what the model is told, which tool answers."""

    profile: str  # the tool profile, also the thread's channel (welcome-suggest, ...)
    channel_context: str
    display_name: str
    instructions: str  # the thread's agentInstructions
    prompt: str  # the turn's user message
    tool: str  # the tool whose calls are the answer
    history: list[Message] | None = None  # earlier messages (a client-history thread)


@dataclass
class HelperOutcome:
    """How the helper turn ended and what its model handed over."""

    status: str  # completed, failed or cancelled
    error: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)  # arguments, in call order


def answered_calls(active: ActiveTurn, tool: str) -> list[dict[str, Any]]:
    """The arguments of the turn's calls of ``tool`` that succeeded, in order."""
    succeeded = {
        str(item.payload.get("callId"))
        for item in active.items
        if item.type == "toolResult" and item.payload.get("success") is True
    }
    return [
        dict(item.payload.get("arguments") or {})
        for item in active.items
        if item.type == "toolCall"
        and item.payload.get("toolName") == tool
        and str(item.payload.get("callId")) in succeeded
    ]


class HelperThreads:
    """Runs helper turns on this workspace's runtime."""

    def __init__(self, threads: Threads, turns: Turns) -> None:
        self.threads = threads
        self.turns = turns
        self._swept = False

    async def sweep(self) -> None:
        """Delete the helper threads a dead process left behind (idle past
        :data:`STALE_SECONDS` and running nowhere)."""
        self._swept = True
        before = iso_ago(STALE_SECONDS)
        for thread_id in await self.threads.repo.stale_internal_threads(before):
            if not await self.threads.running_anywhere(thread_id):
                await self._delete(thread_id)

    async def run(self, request: HelperRequest) -> HelperOutcome:
        """Run ``request``'s turn to its end and return what it handed over.

        The caller bounds the time (a cancel scope): a cancellation cancels the
        turn and still deletes the thread before it propagates.
        """
        if not self._swept:
            await self.sweep()
        thread = await self.threads.create(
            NewThread(
                user_id=INTERNAL_USER,
                channel_name=request.profile,
                channel_context=request.channel_context,
                display_name=request.display_name,
                history_mode="client" if request.history is not None else "server",
                source={"kind": INTERNAL_SOURCE_KIND, "profile": request.profile},
                metadata={INTERNAL_METADATA_KEY: request.profile},
                configuration={
                    "mode": "agent",
                    "toolProfile": request.profile,
                    "useToolProfileOnly": True,
                    "agentInstructions": request.instructions,
                },
            ),
            announce=False,
        )
        journal = self.threads.journal
        journal.internal.add(thread.id)
        try:
            active = await self.turns.start(
                thread.id,
                [turn_wire.TextPart(type="text", text=request.prompt)],
                None,
                messages=request.history,
            )
            await active.done.wait()
            return HelperOutcome(
                status=active.record.status,
                error=active.record.error,
                calls=answered_calls(active, request.tool),
            )
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_SECONDS):
                await self._delete(thread.id)
            journal.internal.discard(thread.id)

    async def _delete(self, thread_id: str) -> None:
        try:
            await self.threads.delete(thread_id)
        except ThreadNotFound:
            return
        except Exception:
            log.exception("could not delete the helper thread %s", thread_id)
