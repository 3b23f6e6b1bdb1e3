"""The automation runner: polls ``.craft/tasks/``, claims due tasks and runs them
(``server.automations``).

One background task polls: at start, every ``PollingInterval``, when a task
comes due, when a client changes a task (``wake``), when a run ends, and, while
other nodes are alive, within their lease (one of them may die under a task).
Each poll reads every ``task.md`` (the files are the truth) and:

- claims each due ``pending`` task in the database (``automation_runs``) before
  running it, so of several processes or nodes exactly one runs it; the run
  then checks the file again, so a task another node ran meanwhile is not run
  twice (an ``at`` task runs once);
- finds a ``running`` task whose node is gone (killed, or this process before a
  restart) and counts that run as a failed attempt: ``pending`` again after
  the back-off, or ``failed`` past ``MaxRetries``. A restart never leaves a task
  ``running``;
- runs at most ``MaxConcurrentTasks`` tasks at once on this node.

A run that ends unexpectedly (a file it cannot read, the server shutting down
under it) is retried the same way: after ``RetryInitialDelay``, doubling up to
``RetryMaxDelay``, at most ``MaxRetries`` times. A failed or cancelled turn is
an outcome, not an unexpected end: the task is ``failed``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from appserver.cron.automations import timing
from appserver.cron.automations.dispatch import Dispatcher, Ending
from appserver.cron.automations.settings import AutomationSettings
from appserver.cron.automations.wire import task_wire
from appserver.cron.clock import Clock, SystemClock, sleep_until_or_woken
from appserver.cron.runner import JobRunner
from appserver.protocol.automations import AutomationTaskUpdatedNotification
from appserver.runtime.bus import EventBus
from appserver.runtime.threads import Threads
from appserver.storage.automation_runs import AutomationRunRepository, RunClaim
from appserver.storage.automation_tasks import TaskFiles, TaskRecord, ms_from_iso

if TYPE_CHECKING:
    from appserver.runtime.cluster import ClusterNode

log = logging.getLogger("appserver.automations")

_FAULT_BACKOFF_S = 1.0  # after a poll failed unexpectedly (a full disk), before the next
_DRAIN_GRACE_S = 3.0  # how long a stopping server waits for runs to record their end


class AutomationRunner:
    """Polls the task files and runs due tasks."""

    def __init__(
        self,
        files: TaskFiles,
        runs: AutomationRunRepository,
        job_runner: JobRunner,
        threads: Threads,
        bus: EventBus,
        settings: AutomationSettings,
        cluster: ClusterNode | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.files = files
        self.runs = runs
        self.job_runner = job_runner
        self.bus = bus
        self.settings = settings
        self.cluster = cluster
        self.clock: Clock = clock or SystemClock()
        files.now_ms = lambda: self.clock.now_ms()
        self.workspace = threads.workspace
        self.node_id = cluster.node_id if cluster is not None else "local"
        self.dispatcher = Dispatcher(files, job_runner, threads, lambda: self.clock, self.announce)
        self.active: dict[str, anyio.Event] = {}  # task id -> set when its run has recorded
        # False while the workspace is not trusted: its tasks wait (wake() when it is).
        self.may_run: Callable[[], bool] = lambda: True
        self._changed = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    def use_clock(self, clock: Clock) -> None:
        """Switch the time source (tests); the runner polls again at once."""
        self.clock = clock
        self._changed.set()

    def wake(self) -> None:
        """Poll at once (a task changed, the workspace became trusted)."""
        self._changed.set()

    def task_of_turn(self, thread_id: str, turn_id: str) -> str | None:
        """The task whose run started this turn (for ``CompleteLocalTask``)."""
        return self.dispatcher.registry.task_of_turn(thread_id, turn_id)

    def announce(self, task: TaskRecord) -> None:
        """``automation/task/updated`` to every ready connection that did not opt out."""
        self.bus.publish(
            "automation/task/updated",
            AutomationTaskUpdatedNotification(workspace_path=self.workspace, task=task_wire(task)),
            broadcast=True,
        )

    # --- the poll loop ---------------------------------------------------------------

    async def run(self) -> None:
        """The runner's background task (its runs live in its task group)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            while True:
                # A fresh event before looking: a change made meanwhile is not missed.
                self._changed = changed = anyio.Event()
                if not self.job_runner.accepting() or not self.may_run():
                    await changed.wait()  # draining, or an untrusted workspace's tasks
                    continue
                try:
                    wake_at: int | None = await self.poll()
                except Exception:
                    log.exception("automation poll failed; trying again")
                    await anyio.sleep(_FAULT_BACKOFF_S)
                    continue
                await sleep_until_or_woken(self.clock, wake_at, changed)

    async def poll(self) -> int:
        """Start what is due, recover what a dead node left; when to look again."""
        now = self.clock.now_ms()
        wake_at = now + self.settings.polling_interval_ms
        if self.cluster is not None and self.cluster.peers:
            wake_at = min(wake_at, now + int(self.cluster.silence * 1000))
        tasks = await self.files.read_all()
        claims = await self.runs.all()
        live = await self._live_nodes()
        for task in tasks:
            if task.id in self.active:
                continue
            claim = claims.get(task.id)
            held_elsewhere = claim is not None and claim.node_id in live
            if task.status == "running":
                if not held_elsewhere:
                    await self._recover(task, claim, now)
                continue
            if task.status != "pending" or held_elsewhere:
                continue
            if claim is not None and claim.node_id is None and (claim.retry_at_ms or 0) > now:
                wake_at = min(wake_at, claim.retry_at_ms or now)
                continue
            due = await self._due_at(task, now)
            if due is None:
                continue
            if due > now:
                wake_at = min(wake_at, due)
                continue
            if len(self.active) >= self.settings.max_concurrent_tasks:
                continue  # the end of a run wakes the loop
            if await self.runs.claim(task.id, self.node_id, claim, now):
                self._start(task.id, claim.attempts if claim is not None else 0)
        return wake_at

    async def _live_nodes(self) -> set[str]:
        """Other nodes that are alive (this one's own claims are in ``active``)."""
        if self.cluster is None:
            return set()
        return set(await self.cluster.store.live_peers(self.cluster.silence))

    async def _due_at(self, task: TaskRecord, now: int) -> int | None:
        """When a pending task is due (``None``: its schedule cannot run). A
        scheduled task without a next run gets one, written to its file."""
        if task.schedule is None:
            return now
        if task.next_run_at_ms is not None:
            return task.next_run_at_ms
        first = timing.first_run(task.schedule, ms_from_iso(task.created_at), now)
        if first is None:
            return None
        async with self.files.locked():
            current = await self.files.find(task.id)
            if current is not None and current.status == "pending":
                if current.next_run_at_ms is not None:
                    return current.next_run_at_ms  # another node set it first
                current.next_run_at_ms = first
                await self.files.save(current)
        return first

    # --- runs ------------------------------------------------------------------------

    def _start(self, task_id: str, attempts: int) -> None:
        assert self._tg is not None
        self.active[task_id] = anyio.Event()
        self._tg.start_soon(self._dispatch, task_id, attempts)

    async def _dispatch(self, task_id: str, attempts: int) -> None:
        try:
            try:
                ending = await self.dispatcher.run(task_id)
            except Exception:
                log.exception("automation task %s: its run failed", task_id)
                ending = Ending.INTERRUPTED
            # Shielded: a stopping server cancels this task; the end is recorded first.
            with anyio.CancelScope(shield=True):
                if ending is Ending.DONE:
                    await self.runs.finish(task_id, self.node_id)
                else:
                    await self._retry_or_fail(task_id, attempts + 1)
        except Exception:
            log.exception("automation task %s: cannot record its run", task_id)
        finally:
            self.active.pop(task_id).set()
            self._changed.set()

    async def _retry_or_fail(self, task_id: str, attempt: int) -> None:
        """Count a run that ended unexpectedly: ``pending`` until its retry, or
        ``failed`` past ``MaxRetries``."""
        now = self.clock.now_ms()
        if attempt <= self.settings.max_retries:
            retry_at = now + self.settings.retry_delay_ms(attempt)
            await self.runs.retry_later(task_id, self.node_id, attempt, retry_at)
            status = "pending"
            log.info("automation task %s: retry %d from %d", task_id, attempt, retry_at)
        else:
            await self.runs.finish(task_id, self.node_id)
            status = "failed"
        async with self.files.locked():
            task = await self.files.find(task_id)
            if task is None:
                return
            task.status = status
            await self.files.save(task)
        self.announce(task)

    async def _recover(self, task: TaskRecord, claim: RunClaim | None, now: int) -> None:
        """A task left ``running`` by a node that is gone: take it, count the run."""
        if not await self.runs.claim(task.id, self.node_id, claim, now):
            return  # another node took it first
        holder = claim.node_id if claim is not None else None
        log.warning("automation task %s was left running (by %s)", task.id, holder or "nobody")
        current = await self.files.find(task.id)
        if current is None or current.status != "running":
            await self.runs.finish(task.id, self.node_id)
            return
        await self._retry_or_fail(task.id, (claim.attempts if claim is not None else 0) + 1)

    async def drain(self) -> None:
        """The server stops: wait (briefly) for the runs it cut to record their end."""
        with anyio.move_on_after(_DRAIN_GRACE_S):
            for done in list(self.active.values()):
                await done.wait()
