"""One scheduled run = one turn in a thread, with no client behind it.

Shared by cron jobs and the heartbeat. The run's thread is either a given
one or a dedicated thread made (and announced with ``thread/started``) on
demand. If the thread is busy with another turn (on this node or, nodes
sharing a database, on another), the run waits for that turn to end rather
than skipping: a scheduled message is never dropped, it
is only late. A paused or archived thread fails the run instead (its owner
said "not now").

Approvals: the turn has no originating connection, so an approval request
goes to the thread's subscribers; with none, the thread's approval policy
decides (``default`` -> decline, ``autoApprove`` -> accept,
``interrupt`` -> cancel), exactly as for any turn whose client is gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from appserver.protocol.cron import JobTokenUsage
from appserver.runtime.errors import TurnInProgress
from appserver.runtime.threads import NewThread, Threads
from appserver.runtime.turns import ActiveTurn, TurnEngine, UserInput
from appserver.storage.records import ThreadRecord


@dataclass(frozen=True)
class ThreadSpec:
    """How to make a dedicated thread (identity, title, configuration)."""

    channel_name: str
    user_id: str
    display_name: str
    source: dict[str, Any]
    configuration: dict[str, Any] | None = None


@dataclass
class Trigger:
    """What starts the turn: the prompt and the userMessage's trigger fields."""

    text: str
    kind: str  # triggerKind: cron | heartbeat | automation
    label: str  # triggerLabel: the job's name
    ref_id: str | None = None  # triggerRefId: the job's id

    def user_input(self) -> UserInput:
        parts = [{"type": "text", "text": self.text}]
        extra = {"triggerKind": self.kind, "triggerLabel": self.label}
        if self.ref_id is not None:
            extra["triggerRefId"] = self.ref_id
        return UserInput(
            display_text=self.text,
            native_parts=parts,
            materialized_parts=[dict(part) for part in parts],
            images=[],
            extra=extra,
        )


@dataclass
class RunOutcome:
    """How a run ended. ``created_thread``: a dedicated thread was made for it."""

    thread_id: str | None
    result: str | None = None
    error: str | None = None
    token_usage: JobTokenUsage | None = None
    created_thread: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class ShuttingDown(Exception):
    """The server is stopping: the run did not start and must not be recorded."""


class JobRunner:
    """Runs triggers as turns through the turn engine.

    ``accepting()`` says whether new turns may start; it turns false when the
    server begins to drain, so a run due during shutdown is left for the next
    start instead of starting a turn that would be cancelled at once.
    """

    def __init__(
        self,
        engine: TurnEngine,
        threads: Threads,
        accepting: Callable[[], bool] = lambda: True,
    ) -> None:
        self.engine = engine
        self.threads = threads
        self.accepting = accepting

    async def create_thread(self, spec: ThreadSpec) -> ThreadRecord:
        """Make a dedicated thread in the host workspace and announce it to everyone."""
        return await self.threads.create(
            NewThread(
                user_id=spec.user_id,
                channel_name=spec.channel_name,
                display_name=spec.display_name,
                source=dict(spec.source),
                configuration=spec.configuration,
            )
        )

    async def run(
        self,
        thread_id: str | None,
        dedicated: ThreadSpec | None,
        trigger: Trigger,
        prepare: Callable[[ActiveTurn], None] | None = None,
        made: Callable[[str], Awaitable[None]] | None = None,
    ) -> RunOutcome:
        """Run ``trigger`` in ``thread_id``; with ``dedicated``, a missing thread
        is made from it (and told to ``made`` at once). ``prepare`` adjusts the
        reserved turn before it is stored (automations give it their tool). A
        failed run is an outcome, not an exception; only :class:`ShuttingDown`
        is raised (before anything happened)."""
        if not self.accepting():
            raise ShuttingDown
        created = False
        thread = await self.threads.repo.get(thread_id) if thread_id else None
        if thread is None:
            if dedicated is None:
                return RunOutcome(thread_id, error=f"Thread not found: {thread_id}")
            thread = await self.create_thread(dedicated)
            created = True
            if made is not None:
                await made(thread.id)
        while True:
            if thread.status != "active":
                return RunOutcome(
                    thread.id, error=f"Thread is not active: {thread.id}", created_thread=created
                )
            busy = self.engine.active.get(thread.id)
            if busy is not None:
                await busy.done.wait()
            elif (
                not await self.threads.running_anywhere(thread.id)
                and thread.id not in self.engine.active  # none started here meanwhile
            ):
                try:
                    active = await self.engine.run_turn(thread, trigger.user_input(), prepare)
                    break
                except TurnInProgress:
                    pass  # another node started a turn there first: wait for it too
            cluster = self.threads.cluster
            if cluster is not None:
                await cluster.wait_idle(thread.id)  # a turn another node runs there
            if not self.accepting():
                raise ShuttingDown
            # Re-read: the thread's turn counter moved, and it may be gone or paused.
            fresh = await self.threads.repo.get(thread.id)
            if fresh is None:
                return RunOutcome(thread.id, error=f"Thread not found: {thread.id}")
            thread = fresh
        record = active.record
        usage = record.token_usage or {}
        outcome = RunOutcome(
            thread.id,
            token_usage=JobTokenUsage(
                input_tokens=int(usage.get("inputTokens", 0)),
                output_tokens=int(usage.get("outputTokens", 0)),
            ),
            created_thread=created,
        )
        if record.status == "completed":
            outcome.result = active.final_text()
        elif record.status == "failed":
            outcome.error = record.error or "the turn failed"
        else:
            outcome.error = f"the turn was cancelled ({active.cancel_reason or 'interrupted'})"
        return outcome
