"""The turn engine: one user input becomes a turn; the agent calls the model,
streams its answer, calls tools (pausing on approvals) and ends the turn.

A turn belongs to the runtime, not to the client that started it: it runs
in the engine's task group, every participant subscribed to the thread (plus
the one that started it) sees its events, and a vanished client changes
nothing but who can answer approvals.

Every turn ends with exactly one terminal event — ``turn/completed``,
``turn/failed`` or ``turn/cancelled`` — on every path: provider error, tool
crash, interrupt, approval cancel, client gone, server shutdown. The
``_finish`` step runs shielded in a ``finally`` and is the only place a
terminal event is emitted.

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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from appserver.protocol import threads as thread_wire
from appserver.protocol import turns as turn_wire
from appserver.protocol.base import WireModel
from appserver.protocol.ids import now_iso
from appserver.providers.base import Provider
from appserver.runtime.approvals import ApprovalBroker
from appserver.runtime.errors import TurnInProgress
from appserver.runtime.events import Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.state import RuntimeStates
from appserver.runtime.turns.agent import AgentLoop
from appserver.runtime.turns.approval_conversation import ApprovalConversation
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import (
    ActiveTurn,
    EngineConfig,
    QueuedInput,
    TurnFailure,
    UserInput,
    initiator,
)
from appserver.runtime.turns.queue import InputQueues
from appserver.runtime.turns.recovery import recover
from appserver.runtime.turns.tooling import ToolRunner
from appserver.runtime.wire import turn_to_wire
from appserver.storage.db import IntegrityError
from appserver.storage.records import ThreadRecord, TurnRecord
from appserver.storage.threads import ThreadRepository
from appserver.tools.registry import ToolRegistry

log = logging.getLogger("appserver.turns")


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
        self.active: dict[str, ActiveTurn] = {}
        # Set when nodes share a database: whether another node runs a turn there.
        self.busy_elsewhere: Callable[[str], Awaitable[bool]] | None = None
        # The highest turn and item numbers handed out per thread in this
        # process. A caller's thread record may be stale (read before another
        # turn started and ended), so numbering never trusts it alone.
        self._numbers: dict[str, tuple[int, int]] = {}
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
        # Called with every user turn about to start, and its input (the thread
        # use cases name an untitled thread from it), before turn/started.
        self.start_listeners: list[Callable[[ActiveTurn, UserInput], Awaitable[None]]] = []

    # --- lifecycle ---------------------------------------------------------------

    async def run(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the task group turns run in; returns when cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

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
        return await recover(self.journal, self.repo)

    # --- starting ------------------------------------------------------------------

    async def start(
        self,
        thread: ThreadRecord,
        origin: Participant | None,
        user: UserInput,
        prepare: Callable[[ActiveTurn], None] | None = None,
    ) -> ActiveTurn:
        """Reserve the thread for a new turn, store it, and run it.

        The reservation is synchronous: the caller checked the thread is idle,
        and no other request can slip in between the check and it. ``prepare``
        adjusts the reserved turn (attribution, userMessage extras) before
        anything is stored. When this returns, the turn is committed (see the
        module docstring); if storing it fails, the reservation is undone and
        the error propagates, so nothing was acknowledged.
        """
        return await self._launch(
            thread,
            origin,
            user.sender,
            prepare,
            opening=lambda active: self.items.user_message(active, user),
            work=lambda active: self.agent.run(active, user),
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
        opening: Callable[[ActiveTurn], Awaitable[None]] | None,
        work: Callable[[ActiveTurn], Awaitable[None]],
        user: UserInput | None = None,
    ) -> ActiveTurn:
        assert self._tg is not None, "engine is not running"
        active = self._reserve(thread, origin, sender)
        failure: Exception | None = None
        # Shielded: a caller that goes away mid-way must not leave a stored
        # turn with no task to finish it.
        with anyio.CancelScope(shield=True):
            try:
                if prepare is not None:
                    prepare(active)
                if user is not None:
                    # Before turn/started: what they announce (a new thread
                    # name) comes before the turn, never among its events.
                    await self._announce_start(active, user)
                await self._start(active)
            except BaseException as exc:
                # Nothing was acknowledged: free the thread (its numbers stay used).
                self.active.pop(thread.id, None)
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
            try:
                if opening is not None:
                    await opening(active)  # the userMessage: committed with the turn
            except Exception as exc:
                failure = exc  # stored and announced: the turn ends as failed
        self._tg.start_soon(self._run_turn, active, work, failure, started)
        return active

    async def _announce_start(self, active: ActiveTurn, user: UserInput) -> None:
        for listener in self.start_listeners:
            try:
                await listener(active, user)
            except Exception:
                log.exception("turn start listener failed on %s", active.thread_id)

    def _reserve(
        self,
        thread: ThreadRecord,
        origin: Participant | None,
        sender: turn_wire.SenderContext | None,
    ) -> ActiveTurn:
        assert thread.id not in self.active
        last_turn, last_item = self._numbers.get(thread.id, (0, 0))
        seq = max(thread.turn_serial, last_turn) + 1
        thread.turn_serial = seq
        thread.item_serial = max(thread.item_serial, last_item)
        self._numbers[thread.id] = (seq, thread.item_serial)
        record = TurnRecord(
            thread_id=thread.id,
            id=f"turn_{seq:03d}",
            seq=seq,
            status="running",
            started_at=now_iso(),
            origin_channel=thread.origin_channel,
            initiator=initiator(thread, sender, origin),
        )
        active = ActiveTurn(thread=thread, record=record, origin=origin)
        active.next_item_seq = thread.item_serial
        self.active[thread.id] = active
        return active

    async def run_turn(self, thread: ThreadRecord, user: UserInput) -> ActiveTurn:
        """Start a turn with no client behind it (cron, heartbeat) and wait for
        its end. Raises ``RuntimeError`` if the thread already runs a turn."""
        if thread.id in self.active:
            raise RuntimeError(f"a turn is already running on {thread.id}")
        active = await self.start(thread, None, user)
        await active.done.wait()
        return active

    def turn_wire(self, active: ActiveTurn, include_items: bool = True) -> thread_wire.Turn:
        return turn_to_wire(active.record, active.items if include_items else [])

    # --- the turn ----------------------------------------------------------------------

    async def _run_turn(
        self,
        active: ActiveTurn,
        work: Callable[[ActiveTurn], Awaitable[None]],
        failure: Exception | None,
        started: float,
    ) -> None:
        error_kind: str | None = None
        try:
            async with anyio.create_task_group() as tg:
                active.tg = tg  # approval questions run here
                try:
                    with active.scope:
                        if failure is not None:
                            raise failure
                        await work(active)
                        active.record.status = "completed"
                except TurnFailure as exc:
                    error_kind = exc.code
                    await self._fail(active, str(exc), exc.code)
                except Exception as exc:
                    log.exception("turn %s on %s crashed", active.record.id, active.thread_id)
                    error_kind = "internal"
                    await self._fail(active, f"internal error: {type(exc).__name__}", "internal")
                finally:
                    tg.cancel_scope.cancel()  # stop approval askers still waiting
        finally:
            with anyio.CancelScope(shield=True):
                await self._finish(active)
            _log_end(active, started, error_kind)

    async def _fail(self, active: ActiveTurn, message: str, code: str) -> None:
        active.record.status = "failed"
        active.record.error = message
        with anyio.CancelScope(shield=True):
            try:
                await self.items.error(active, message, code, fatal=True)
            except Exception:
                log.exception("could not record the failure of %s", active.record.id)

    async def _start(self, active: ActiveTurn) -> None:
        await self.runtimes.set_running(active.thread_id, True)
        await self.journal.emit(
            active.thread_id,
            "turn/started",
            turn_wire.TurnNotification(thread_id=active.thread_id, turn=self.turn_wire(active)),
            include=active.watchers,
            turn=active.record,
            new_turn=True,
        )

    async def _finish(self, active: ActiveTurn) -> None:
        """Close open items, persist, emit the one terminal event."""
        try:
            record = active.record
            if record.status == "running":
                record.status = "cancelled"  # the scope was cancelled (interrupt, shutdown)
            for item in list(active.open_items.values()):
                await self.items.complete(active, item)  # keep the text streamed so far
            record.completed_at = now_iso()
            record.token_usage = {
                "inputTokens": active.input_tokens,
                "outputTokens": active.output_tokens,
                "totalTokens": active.input_tokens + active.output_tokens,
            }
            # One event goes to every watcher, so leave out the opt-in item type:
            # clients that asked for commandExecution items got them as events.
            turn = turn_to_wire(
                active.record, [i for i in active.items if i.type != "commandExecution"]
            )
            params: WireModel
            if record.status == "completed":
                kind, params = (
                    "turn/completed",
                    turn_wire.TurnNotification(thread_id=turn.thread_id, turn=turn),
                )
            elif record.status == "failed":
                kind = "turn/failed"
                params = turn_wire.TurnFailedNotification(
                    thread_id=turn.thread_id, turn=turn, error=record.error or "failed"
                )
            else:
                reason = active.cancel_reason or "interrupted"
                kind = "turn/cancelled"
                params = turn_wire.TurnCancelledNotification(
                    thread_id=turn.thread_id, turn=turn, reason=reason
                )
            await self.journal.emit(
                active.thread_id, kind, params, include=active.watchers, turn=record
            )
        except Exception:
            log.exception("could not finish turn %s", active.record.id)
        finally:
            self.active.pop(active.thread_id, None)
            # Items this turn numbered: the next turn goes on from here.
            last_turn, last_item = self._numbers.get(active.thread_id, (0, 0))
            self._numbers[active.thread_id] = (last_turn, max(last_item, active.next_item_seq))
            try:
                await self.journal.flush_seq(active.thread_id)
                await self.runtimes.set_running(active.thread_id, False)
                await self.inputs.after_turn(active)  # steered inputs back; a paused queue said
            except Exception:
                log.exception("could not clear runtime state of %s", active.thread_id)
            active.done.set()
            if active.record.status == "completed" and self._tg is not None:
                self._tg.start_soon(self._after_success, active.thread_id)
            for listener in self.turn_listeners:
                try:
                    outcome = listener(active)
                    if outcome is not None and self._tg is not None:
                        self._tg.start_soon(_await, outcome)
                except Exception:
                    log.exception("turn listener failed")

    # --- interrupt, queue ----------------------------------------------------------------

    def interrupt(self, thread_id: str) -> ActiveTurn | None:
        """Cancel the thread's running turn (idempotent); ``turn/cancelled`` follows."""
        active = self.active.get(thread_id)
        if active is not None:
            active.cancel("interrupted")
        return active

    def forget_thread(self, thread_id: str) -> None:
        self._numbers.pop(thread_id, None)
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
            thread = await self.repo.get(thread_id)
            if thread is not None:
                await self.start_next(thread)
        except Exception:
            log.exception("could not start the next queued input of %s", thread_id)


def _log_end(active: ActiveTurn, started: float, error_kind: str | None) -> None:
    """One line per finished turn: info, or warning when it failed (the
    operator's only trace of a bad key or a crashed tool)."""
    record = active.record
    duration = round((time.monotonic() - started) * 1000)
    fields: dict[str, Any] = {
        "threadId": active.thread_id,
        "turnId": record.id,
        "status": record.status,
        "durationMs": duration,
    }
    if record.status == "failed":
        fields |= {"errorKind": error_kind or "failed", "error": record.error or ""}
        log.warning(
            "turn %s on %s failed after %d ms: %s: %s",
            record.id,
            active.thread_id,
            duration,
            fields["errorKind"],
            fields["error"],
            extra=fields,
        )
        return
    if record.status == "cancelled":
        fields["reason"] = active.cancel_reason or "interrupted"
        log.info(
            "turn %s on %s cancelled after %d ms (%s)",
            record.id,
            active.thread_id,
            duration,
            fields["reason"],
            extra=fields,
        )
        return
    log.info(
        "turn %s on %s %s after %d ms",
        record.id,
        active.thread_id,
        record.status,
        duration,
        extra=fields,
    )


async def _await(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("turn listener failed")
