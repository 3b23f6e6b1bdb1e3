"""Live per-thread runtime flags (running, waiting on approval, ...).

The snapshot rides on ``Thread``/``ThreadSummary`` as ``runtime`` and is
broadcast as ``thread/runtimeChanged`` only when it actually changes. It is
``ThreadRuntimeState``'s wire form (:data:`RuntimeFlags`): one shared dict per
combination of flags, never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from appserver.runtime.emissions import Emission
from appserver.runtime.journal import ThreadJournal

#: A thread's runtime flags as ``ThreadRuntimeState``'s wire form.
RuntimeFlags = dict[str, bool]


@dataclass
class _Flags:
    running: bool = False
    pending_approvals: int = 0
    waiting_on_plan_confirmation: bool = False

    def snapshot(self) -> RuntimeFlags:
        return _SNAPSHOTS[
            self.running, self.pending_approvals > 0, self.waiting_on_plan_confirmation
        ]


def _set_running(flags: _Flags, running: bool) -> None:
    flags.running = running
    if running:
        flags.waiting_on_plan_confirmation = False
    else:
        flags.pending_approvals = 0


def _changed(thread_id: str, runtime: RuntimeFlags) -> Emission:
    """The ``thread/runtimeChanged`` saying ``runtime`` (to everyone)."""
    return Emission(
        "thread/runtimeChanged", {"threadId": thread_id, "runtime": runtime}, broadcast=True
    )


# Every snapshot there can be, made once and shared (never changed): a turn
# takes ~8 snapshots and compares them, and one of these is compared by
# identity, not field by field.
_SNAPSHOTS: dict[tuple[bool, bool, bool], RuntimeFlags] = {
    (running, waiting, planning): {
        "running": running,
        "waitingOnApproval": waiting,
        "waitingOnPlanConfirmation": planning,
    }
    for running in (False, True)
    for waiting in (False, True)
    for planning in (False, True)
}
_IDLE = _SNAPSHOTS[False, False, False]


class RuntimeStates:
    """Runtime flags of the threads with live work in this process. Idle is
    every thread's default and is not kept: a server that ran a turn on each
    of a million threads keeps the flags of those still busy only."""

    def __init__(self, journal: ThreadJournal) -> None:
        self._journal = journal
        self._flags: dict[str, _Flags] = {}

    def snapshot(self, thread_id: str) -> RuntimeFlags:
        flags = self._flags.get(thread_id)
        return flags.snapshot() if flags else _IDLE

    def key(self, thread_id: str) -> tuple[bool, int, bool] | None:
        """A cheap value that changes whenever the thread's snapshot does."""
        flags = self._flags.get(thread_id)
        if flags is None:
            return None
        return (flags.running, flags.pending_approvals, flags.waiting_on_plan_confirmation)

    async def set_running(self, thread_id: str, running: bool) -> None:
        await self.settle_running(thread_id, running, None)

    def running_changed(self, thread_id: str, running: bool) -> Emission | None:
        """The ``thread/runtimeChanged`` that setting the running flag would
        announce (``None``: nothing would change), for the caller to emit with
        the turn's own event (:meth:`ThreadJournal.emit_all`); the flags change
        only once that is stored (:meth:`settle_running`), so a refused start
        leaves them as they were and a turn is said idle no sooner than its end."""
        flags = self._flags.get(thread_id) or _Flags()
        trial = replace(flags)
        _set_running(trial, running)
        after = trial.snapshot()
        return None if after is flags.snapshot() else _changed(thread_id, after)

    async def settle_running(
        self, thread_id: str, running: bool, announced: Emission | None
    ) -> None:
        """Set the running flag (``announced``: the change, stored already);
        announce whatever the flags now are if that differs from it."""
        after = self._mutate(thread_id, lambda flags: _set_running(flags, running))
        if after is None:
            return
        said = announced.params if announced is not None else None
        if not isinstance(said, dict) or said.get("runtime") != after:
            await self._announce(thread_id, after)

    async def approval_pending(self, thread_id: str, delta: int) -> None:
        def change(flags: _Flags) -> None:
            flags.pending_approvals = max(0, flags.pending_approvals + delta)

        await self._change(thread_id, change)

    def adopt(self, thread_id: str, runtime: Mapping[str, Any]) -> None:
        """Take another node's announced flags (wire form) as this thread's
        (nodes sharing a database: the turn runs there, ``thread/read`` is
        answered here)."""
        flags = _Flags(
            running=bool(runtime.get("running")),
            pending_approvals=1 if runtime.get("waitingOnApproval") else 0,
            waiting_on_plan_confirmation=bool(runtime.get("waitingOnPlanConfirmation")),
        )
        if flags.snapshot() is _IDLE:
            self._flags.pop(thread_id, None)  # idle is the default: keep nothing
        else:
            self._flags[thread_id] = flags

    async def announce_idle(self, thread_id: str) -> None:
        """Say the thread is idle even if this node thought so already (a dead
        node's turn was failed here: the others still think it runs)."""
        self._flags.pop(thread_id, None)
        await self._announce(thread_id, _IDLE)

    def forget(self, thread_id: str) -> None:
        self._flags.pop(thread_id, None)

    async def _change(self, thread_id: str, mutate: Callable[[_Flags], None]) -> None:
        after = self._mutate(thread_id, mutate)
        if after is not None:
            await self._announce(thread_id, after)

    async def _announce(self, thread_id: str, runtime: RuntimeFlags) -> None:
        await self._journal.emit_all(thread_id, [_changed(thread_id, runtime)])

    def _mutate(self, thread_id: str, mutate: Callable[[_Flags], None]) -> RuntimeFlags | None:
        """Apply ``mutate``; the new snapshot if it changed the thread's flags."""
        flags = self._flags.setdefault(thread_id, _Flags())
        before = flags.snapshot()
        mutate(flags)
        after = flags.snapshot()
        if after is _IDLE:
            del self._flags[thread_id]  # the default: keep nothing
        return after if after is not before else None
