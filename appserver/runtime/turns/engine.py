"""The turn engine: one user input becomes a turn; the agent calls the model,
streams its answer, calls tools (pausing on approvals) and ends the turn.

This module launches turns (reserve the thread, store the turn, schedule its
task), interrupts them and starts a thread's queued inputs; ``reservations``
numbers turns and keeps one per thread, and ``ending`` runs a launched turn
to its one terminal event (``turn/completed``, ``turn/failed`` or
``turn/cancelled``, on every path).

A turn belongs to the runtime, not to the client that started it: it runs
in the engine's task group, every participant subscribed to the thread (plus
the one that started it) sees its events, and a vanished client changes
nothing but who can answer approvals.

A turn that :meth:`TurnEngine.start` returned is durable: its row (status
``running``), its ``turn/started`` event, the thread's turn counter and the
``userMessage`` item are committed before ``start`` returns, so a front door
that acknowledges the turn after ``start`` never acknowledges one a crash can
lose (recovery marks it failed at the next start), an id once handed out is
never handed out again, and a read after the acknowledgement sees the turn.
That a client sees the answer to its request before the turn's first event
is its front door's guarantee, not the engine's.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from appserver.providers.base import Provider
from appserver.runtime.approvals import ApprovalBroker
from appserver.runtime.emissions import Emission
from appserver.runtime.errors import TurnInProgress
from appserver.runtime.events import Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.state import RuntimeStates
from appserver.runtime.turns.agent import AgentLoop
from appserver.runtime.turns.approval_conversation import ApprovalConversation
from appserver.runtime.turns.ending import TurnEnding
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import (
    ActiveTurn,
    EngineConfig,
    QueuedInput,
    UserInput,
)
from appserver.runtime.turns.queue import InputQueues
from appserver.runtime.turns.recovery import recover
from appserver.runtime.turns.reservations import TurnReservations
from appserver.runtime.turns.tooling import ToolRunner
from appserver.runtime.wire import turn_data, turn_to_wire
from appserver.storage.db import IntegrityError
from appserver.storage.records import ThreadRecord
from appserver.storage.threads import ThreadRepository
from appserver.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from appserver.protocol import threads as thread_wire
    from appserver.protocol import turns as turn_wire

log = logging.getLogger("appserver.turns")

#: What a turn does between its userMessage and its end (the agent loop by default).
Work = Callable[[ActiveTurn, UserInput], Awaitable[None]]


class TurnEngine:
    """Runs turns; one active turn per thread."""

    def __init__(
        self,
        repo: ThreadRepository,
        journal: ThreadJournal,
        runtimes: RuntimeStates,
        approvals: ApprovalBroker,
        tools: ToolRegistry,
        provider: Provider,
        workspace: Path,
        config: EngineConfig | None = None,
        default_approval_policy: Callable[[], str] = lambda: "default",
        workspace_trusted: Callable[[], bool] = lambda: True,
    ) -> None:
        self.repo = repo
        self.journal = journal
        self.runtimes = runtimes
        self.approvals = approvals
        self.tools = tools
        self.provider = provider  # replaceable: the workspace may switch providers
        self.workspace = workspace
        self.config = config or EngineConfig()
        self.reservations = TurnReservations()
        self.active = self.reservations.active  # the running turn of each busy thread
        # Set when nodes share a database: whether another node runs a turn there.
        self.busy_elsewhere: Callable[[str], Awaitable[bool]] | None = None
        self.inputs = InputQueues(journal)
        self.items = ItemLog(journal, repo, self.config.checkpoint_interval)
        asking = ApprovalConversation(
            self.items,
            approvals,
            journal.bus,
            runtimes,
            repo,
            default_approval_policy,
            workspace_trusted,
        )
        # Settles a gated operation of a turn (the agent's tools; an external
        # SubAgent's launch, runtime/subagent_external.py).
        self.asking = asking
        self.agent = AgentLoop(
            self.items,
            ToolRunner(self.items, asking, tools, workspace),
            self.inputs,
            repo,
            self.config,
            lambda: self.provider,
        )
        self._tg: TaskGroup | None = None
        # Called with every finished turn (after its terminal event).
        self.turn_listeners: list[Callable[[ActiveTurn], Any]] = []
        self.ending = TurnEnding(
            self.items,
            journal,
            runtimes,
            self.inputs,
            self.reservations,
            self.turn_listeners,
            self._spawn,
            self._after_success,
        )
        # Called with every user turn about to start, and its input (the thread
        # use cases name an untitled thread from it), before turn/started.
        # Each returns what it announces with a turn's start (a new thread name).
        self.start_listeners: list[
            Callable[[ActiveTurn, UserInput], Awaitable[Sequence[Emission]]]
        ] = []

    # --- lifecycle ---------------------------------------------------------------

    async def run(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the task group turns run in; returns when cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    def _spawn(self, task: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run ``task`` in the engine's task group (dropped if it is not running)."""
        if self._tg is not None:
            self._tg.start_soon(task)

    async def shutdown(self) -> None:
        """Cancel every running turn (``turn/cancelled`` reason ``serverShutdown``)."""
        turns = list(self.active.values())
        for active in turns:
            active.cancel("serverShutdown")
        with anyio.move_on_after(self.config.shutdown_grace):
            for active in turns:
                await active.done.wait()

    async def recover(self) -> int:
        """Fail the turns a previous process left running (see ``recovery``)."""
        return await recover(self.journal, self.repo, self.inputs)

    # --- starting ------------------------------------------------------------------

    async def start(
        self,
        thread: ThreadRecord,
        origin: Participant | None,
        user: UserInput,
        prepare: Callable[[ActiveTurn], None] | None = None,
        work: Work | None = None,
    ) -> ActiveTurn:
        """Reserve the thread for a new turn, store it, and run it.

        The reservation is synchronous: the caller checked the thread is idle,
        and no other request can slip in between the check and it. ``prepare``
        adjusts the reserved turn (attribution, userMessage extras) before
        anything is stored. ``work`` does the turn's work instead of the agent
        loop (an external SubAgent's command); it ends like any turn. When this
        returns, the turn is committed (see the module docstring); if storing
        it fails, the reservation is undone and the error propagates, so
        nothing was acknowledged.
        """
        run = work or self.agent.run
        return await self._launch(
            thread,
            origin,
            user.sender,
            prepare,
            opening=lambda active: self.items.user_message_emissions(active, user),
            work=lambda active: run(active, user),
            user=user,
        )

    async def start_compaction(
        self, thread: ThreadRecord, origin: Participant | None
    ) -> ActiveTurn:
        """Start a turn that compacts the thread's context (see ``agent.compact_turn``)."""
        return await self._launch(
            thread, origin, None, None, opening=None, work=self.agent.compact_turn
        )

    async def _launch(
        self,
        thread: ThreadRecord,
        origin: Participant | None,
        sender: turn_wire.SenderContext | None,
        prepare: Callable[[ActiveTurn], None] | None,
        *,
        opening: Callable[[ActiveTurn], list[Emission]] | None,
        work: Callable[[ActiveTurn], Awaitable[None]],
        user: UserInput | None = None,
    ) -> ActiveTurn:
        assert self._tg is not None, "engine is not running"
        active = self.reservations.reserve(thread, origin, sender)
        # Shielded: a caller that goes away mid-way must not leave a stored
        # turn with no task to finish it.
        with anyio.CancelScope(shield=True):
            try:
                if prepare is not None:
                    prepare(active)
                # Before turn/started: what they announce (a new thread name)
                # comes before the turn, never among its events.
                before = await self._announce_start(active, user) if user is not None else []
                await self._start(active, before, opening)
            except BaseException as exc:
                # Nothing was acknowledged: free the thread (its numbers stay used).
                self.reservations.withdraw(thread.id)
                if isinstance(exc, IntegrityError):
                    # Nodes sharing a database: another node started a turn on
                    # the thread first (one running turn per thread, enforced
                    # there). Its node announces the thread's flags; saying
                    # "idle" here would be wrong.
                    raise TurnInProgress(thread.id) from exc
                with contextlib.suppress(Exception):
                    await self.runtimes.set_running(thread.id, False)
                raise
            started = time.monotonic()
            log.info(
                "turn %s started on %s",
                active.record.id,
                active.thread_id,
                extra={"threadId": active.thread_id, "turnId": active.record.id},
            )
        self._tg.start_soon(self.ending.run, active, work, started)
        return active

    async def _announce_start(self, active: ActiveTurn, user: UserInput) -> list[Emission]:
        """What the start listeners announce with the turn (before its events)."""
        before: list[Emission] = []
        for listener in self.start_listeners:
            try:
                before.extend(await listener(active, user))
            except Exception:
                log.exception("turn start listener failed on %s", active.thread_id)
        return before

    async def run_turn(
        self,
        thread: ThreadRecord,
        user: UserInput,
        prepare: Callable[[ActiveTurn], None] | None = None,
    ) -> ActiveTurn:
        """Start a turn with no client behind it (cron, heartbeat, automations)
        and wait for its end (``prepare`` as for :meth:`start`). Raises
        ``RuntimeError`` if the thread already runs a turn."""
        if thread.id in self.active:
            raise RuntimeError(f"a turn is already running on {thread.id}")
        active = await self.start(thread, None, user, prepare)
        await active.done.wait()
        return active

    def turn_wire(self, active: ActiveTurn, include_items: bool = True) -> thread_wire.Turn:
        return turn_to_wire(active.record, active.items if include_items else [])

    async def _start(
        self,
        active: ActiveTurn,
        before: list[Emission],
        opening: Callable[[ActiveTurn], list[Emission]] | None,
    ) -> None:
        started = Emission(
            "turn/started",
            {"threadId": active.thread_id, "turn": turn_data(active.record, active.items)},
            include=tuple(active.watchers),
            turn=active.record,
            new_turn=True,
        )
        opened = opening(active) if opening is not None else []  # after: not in turn/started
        # What the listeners announce, the running flags, the turn and its opening
        # item (the userMessage): one commit, refused together when another node
        # started a turn on the thread first.
        running = self.runtimes.running_changed(active.thread_id, True)
        flags = [running] if running else []
        await self.journal.emit_all(active.thread_id, [*before, *flags, started, *opened])
        await self.runtimes.settle_running(active.thread_id, True, running)

    # --- interrupt, queue ----------------------------------------------------------------

    def interrupt(self, thread_id: str) -> ActiveTurn | None:
        """Cancel the thread's running turn (idempotent); ``turn/cancelled`` follows."""
        active = self.active.get(thread_id)
        if active is not None:
            active.cancel("interrupted")
        return active

    def forget_thread(self, thread_id: str) -> None:
        self.reservations.forget(thread_id)
        self.inputs.forget(thread_id)
        self.approvals.forget_thread(thread_id)

    async def cancel_and_wait(self, thread_id: str, reason: str) -> None:
        active = self.active.get(thread_id)
        if active is not None:
            active.cancel(reason)
            with anyio.move_on_after(self.config.shutdown_grace):
                await active.done.wait()

    async def enqueue(self, thread: ThreadRecord, entry: QueuedInput) -> list[QueuedInput]:
        """Queue an input; an idle thread starts it right away."""
        async with self.inputs.lock(thread.id):
            queue = await self.inputs.load(thread.id)
            queue.append(entry)
            await self.inputs.changed(thread.id, include=[entry.origin] if entry.origin else [])
            if thread.id not in self.active:
                # TurnInProgress: another node runs a turn there; it takes the input when done.
                with contextlib.suppress(TurnInProgress):
                    await self._start_next(thread)
        return queue

    async def start_next(self, thread: ThreadRecord) -> ActiveTurn | None:
        """Start the first queued input as a new turn, if the thread is idle and active."""
        async with self.inputs.lock(thread.id):
            return await self._start_next(thread)

    async def _start_next(self, thread: ThreadRecord) -> ActiveTurn | None:
        if thread.id in self.active or thread.status != "active":
            return None
        if self.busy_elsewhere is not None and await self.busy_elsewhere(thread.id):
            return None  # another node runs a turn there: it takes the input when done
        queue = await self.inputs.load(thread.id)
        entry = next((e for e in queue if e.wire.status == "queued"), None)
        if entry is None or thread.id in self.active:
            return None
        queue.remove(entry)
        try:
            active = await self.start(thread, entry.origin, entry.to_user_input("queued"))
        except BaseException:
            queue.insert(0, entry)  # not started: it stays first in line
            raise
        await self.inputs.changed(thread.id, include=active.watchers)
        return active

    async def _after_success(self, thread_id: str) -> None:
        """A completed turn hands the thread to the next queued input."""
        try:
            # Most turns leave nothing queued: then no lock is taken (across nodes,
            # a lock file) and the thread is not read. An input queued after this
            # look is started by whoever queued it: this turn was released, and its
            # end stored, before we looked, so they find the thread idle.
            queue = await self.inputs.look(thread_id)
            if not any(entry.wire.status == "queued" for entry in queue):
                return
            thread = await self.repo.get(thread_id)
            if thread is not None:
                await self.start_next(thread)
        except Exception:
            log.exception("could not start the next queued input of %s", thread_id)
