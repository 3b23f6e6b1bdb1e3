"""Running a launched turn to its end, and the one terminal event it ends with.

Every turn ends with exactly one terminal event — ``turn/completed``,
``turn/failed`` or ``turn/cancelled`` — on every path: provider error, tool
crash, interrupt, approval cancel, client gone, server shutdown.
:meth:`TurnEnding.finish` runs shielded in a ``finally`` and is the only
place a terminal event is emitted. After it the thread is free, steered
inputs the turn never reached go back to the queue, the turn listeners run
and a completed turn hands the thread to the next queued input. One log line
per finished turn says how it ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any

import anyio

from appserver.protocol.ids import now_iso
from appserver.runtime.emissions import Emission
from appserver.runtime.events import Participant
from appserver.runtime.journal import ThreadJournal
from appserver.runtime.state import RuntimeStates
from appserver.runtime.turns.items import ItemLog
from appserver.runtime.turns.model import ActiveTurn, TurnFailure
from appserver.runtime.turns.queue import InputQueues
from appserver.runtime.turns.reservations import TurnReservations
from appserver.runtime.wire import turn_data

# Turns whose end could not be stored, kept for a sweep to tell their watchers.
_UNSTORED_KEPT = 100

log = logging.getLogger("appserver.turns")

#: Runs a task in the engine's task group (dropped when the engine is not running).
Spawn = Callable[[Callable[[], Coroutine[Any, Any, Any]]], None]


class TurnEnding:
    """Runs a launched turn's work and ends it with its one terminal event."""

    def __init__(
        self,
        items: ItemLog,
        journal: ThreadJournal,
        runtimes: RuntimeStates,
        inputs: InputQueues,
        reservations: TurnReservations,
        listeners: list[Callable[[ActiveTurn], Any]],
        spawn: Spawn,
        next_input: Callable[[str], Coroutine[Any, Any, None]],
    ) -> None:
        self.items = items
        self.journal = journal
        self.runtimes = runtimes
        self.inputs = inputs
        self.reservations = reservations
        # Called with every finished turn (after its terminal event); the
        # engine's list, which others append to.
        self.listeners = listeners
        self.spawn = spawn
        # Starts a thread's next queued input after a completed turn.
        self.next_input = next_input
        # The watchers of turns whose end could not be stored (a full disk):
        # whoever fails the stranded turn later tells them too (take_watchers).
        self._unstored: dict[tuple[str, str], list[Participant]] = {}
        # Called with a turn just before its terminal event, so what they send
        # about it (a last subagent/progress) arrives before the turn's end.
        self.closing_listeners: list[Callable[[ActiveTurn], None]] = []

    async def run(
        self,
        active: ActiveTurn,
        work: Callable[[ActiveTurn], Awaitable[None]],
        started: float,
    ) -> None:
        """Run ``work``, then finish the turn; ``started`` is when it started
        (``time.monotonic``)."""
        error_kind: str | None = None
        try:
            async with anyio.create_task_group() as tg:
                active.tg = tg  # approval questions run here
                try:
                    with active.scope:
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
                await self.finish(active)
            log_turn_end(active, started, error_kind)

    async def _fail(self, active: ActiveTurn, message: str, code: str) -> None:
        active.record.status = "failed"
        active.record.error = message
        with anyio.CancelScope(shield=True):
            try:
                await self.items.error(active, message, code, fatal=True)
            except Exception:
                log.exception("could not record the failure of %s", active.record.id)

    async def finish(self, active: ActiveTurn) -> None:
        """Close open items, persist, emit the one terminal event, free the thread."""
        settled = False
        try:
            if active.announced_at_end and (active.held or active.open_items):
                # The closing listeners speak below: what the turn holds and the
                # items it leaves open go out before them, as their own commit.
                await self.journal.emit_all(active.thread_id, self._closing(active))
            end = self._end_of(active)
            # What the turn held, the items it leaves open, its terminal event and
            # the thread's idle flags: one commit.
            idle = self.runtimes.running_changed(active.thread_id, False)
            await self.journal.emit_all(active.thread_id, [*end, idle] if idle else end)
            await self.runtimes.settle_running(active.thread_id, False, idle)
            settled = True
        except Exception:
            log.exception("could not finish turn %s", active.record.id)
        finally:
            self.reservations.release(active)
            if not settled:
                self._remember_watchers(active)
            try:
                await self.journal.flush_seq(active.thread_id)
                if not settled:  # the end was not stored: the flags on their own
                    await self.runtimes.set_running(active.thread_id, False)
                await self.inputs.after_turn(active)  # steered inputs back; a paused queue said
            except Exception:
                log.exception("could not clear runtime state of %s", active.thread_id)
            active.done.set()
            if active.record.status == "completed":
                self.spawn(partial(self.next_input, active.thread_id))
            for listener in tuple(self.listeners):  # not those a listener adds
                try:
                    outcome = listener(active)
                    if outcome is not None:
                        self.spawn(partial(_await, outcome))
                except Exception:
                    log.exception("turn listener failed")

    def _remember_watchers(self, active: ActiveTurn) -> None:
        if len(self._unstored) >= _UNSTORED_KEPT:  # no sweep takes them (one process)
            self._unstored.pop(next(iter(self._unstored)))
        self._unstored[(active.thread_id, active.record.id)] = list(active.watchers)

    def take_watchers(self, thread_id: str, turn_id: str) -> list[Participant]:
        """Who watched a turn whose end could not be stored here (the client
        that started it, not subscribed to its thread): the turn's failure,
        stored later by a sweep, goes to them too. Empty for any other turn."""
        return self._unstored.pop((thread_id, turn_id), [])

    def _closing(self, active: ActiveTurn) -> list[Emission]:
        """What the turn held, and its open items closed (with the text streamed so far)."""
        closing = self.items.take_held(active)
        for item in list(active.open_items.values()):
            closing.append(self.items.completion(active, item))
        return closing

    def _end_of(self, active: ActiveTurn) -> list[Emission]:
        """What the turn held, its open items closed, and its terminal event: to emit."""
        record = active.record
        if record.status == "running":
            record.status = "cancelled"  # the scope was cancelled (interrupt, shutdown)
        closing = self._closing(active)
        record.completed_at = now_iso()
        record.token_usage = {
            "inputTokens": active.input_tokens,
            "outputTokens": active.output_tokens,
            "totalTokens": active.input_tokens + active.output_tokens,
        }
        # One event goes to every watcher, so leave out the opt-in item type:
        # clients that asked for commandExecution items got them as events.
        turn = turn_data(active.record, [i for i in active.items if i.type != "commandExecution"])
        params: dict[str, Any] = {"threadId": record.thread_id, "turn": turn}
        if record.status == "completed":
            kind = "turn/completed"
        elif record.status == "failed":
            kind = "turn/failed"
            params["error"] = record.error or "failed"
        else:
            kind = "turn/cancelled"
            params["reason"] = active.cancel_reason or "interrupted"
        for listener in self.closing_listeners:
            try:
                listener(active)
            except Exception:
                log.exception("turn closing listener failed")
        return [*closing, Emission(kind, params, include=tuple(active.watchers), turn=record)]


def log_turn_end(active: ActiveTurn, started: float, error_kind: str | None) -> None:
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
