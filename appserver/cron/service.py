"""Cron jobs: storage-backed job management and the one scheduler task.

The scheduler is a single background task. It asks SQLite for the earliest
``nextRunAtMs`` of an enabled job, sleeps until then on the injected
:class:`~appserver.cron.clock.Clock`, and is woken early whenever jobs
change (an ``anyio.Event``). Runs happen one at a time inside that task, so
runs of all jobs are serialised; ``cron/run`` requests queue in front of
scheduled runs.

Restart semantics: jobs live in SQLite; when the server starts again the
scheduler simply finds the jobs whose ``nextRunAtMs`` has passed. Each such
overdue job runs once (not once per missed interval) and its next run is
then computed from the time the run ended. A ``cron/run`` that was queued
but had not started when the server stopped is not remembered.

After a run: ``at`` jobs and ``deleteAfterRun`` jobs are removed, whether the
run succeeded or not (a one-shot job never retries by itself); other jobs
get their next run. A disabled job run by ``cron/run`` keeps its
``nextRunAtMs``.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
from collections.abc import Callable
from typing import Any, cast

import anyio
from pydantic import ValidationError

from appserver.cron.clock import Clock, SystemClock, sleep_until_or_woken
from appserver.cron.runner import JobRunner, RunOutcome, ShuttingDown, ThreadSpec, Trigger
from appserver.cron.schedule import Schedule, describe, first_run, next_run
from appserver.protocol.cron import (
    LAST_RESULT_LIMIT,
    CronJobInfo,
    CronJobState,
    CronSchedule,
    CronStateChangedNotification,
    JobResultNotification,
    ScheduleKind,
)
from appserver.runtime.bus import EventBus
from appserver.storage.cron import CronJobRecord, CronRepository, RunRecord

log = logging.getLogger("appserver.cron")

# Runs ``callback`` now, or later (a handler passes ``ctx.after_response`` so
# the caller sees its response before the notification).
Defer = Callable[[Callable[[], Any]], None]

# How long the scheduler pauses after an unexpected failure (e.g. disk full)
# before trying again, so a persistent fault does not spin.
_FAULT_BACKOFF_S = 1.0
_DRAIN_GRACE_S = 3.0  # how long a stopping server waits for a cut run to be recorded
_RECORD_BOUND_S = 10.0  # how long recording a run may take once shielded from a stop


def _now(callback: Callable[[], Any]) -> None:
    callback()


def _wire_schedule(stored: dict[str, Any]) -> CronSchedule:
    """A stored schedule as a wire model. It was validated when stored; one stored
    before the protocol's bounds existed is still shown as it is, not refused."""
    try:
        return CronSchedule.model_validate(stored)
    except ValidationError:
        schedule = Schedule.from_wire(stored)
        return CronSchedule.model_construct(
            kind=cast(ScheduleKind, schedule.kind),
            every_ms=schedule.every_ms,
            at_ms=schedule.at_ms,
            initial_delay_ms=schedule.initial_delay_ms,
            daily_hour=schedule.daily_hour,
            daily_minute=schedule.daily_minute,
            tz=schedule.tz,
            expr=schedule.expr,
        )


def job_info(job: CronJobRecord) -> CronJobInfo:
    """The wire ``CronJobInfo`` of a stored job."""
    return CronJobInfo(
        id=job.id,
        name=job.name,
        schedule=_wire_schedule(job.schedule),
        enabled=job.enabled,
        created_at_ms=job.created_at_ms,
        delete_after_run=job.delete_after_run,
        state=CronJobState(
            next_run_at_ms=job.next_run_at_ms,
            last_run_at_ms=job.last_run_at_ms,
            last_status=job.last_status,
            last_error=job.last_error,
            last_thread_id=job.last_thread_id,
            last_result=job.last_result,
        ),
        thread_id=None if job.dedicated else job.thread_id,
    )


class CronService:
    """The jobs, their scheduler and their runs (``server.cron``)."""

    def __init__(
        self, repo: CronRepository, runner: JobRunner, bus: EventBus, clock: Clock | None = None
    ) -> None:
        self.repo = repo
        self.runner = runner
        self.bus = bus
        self.clock: Clock = clock or SystemClock()
        self.running_job: str | None = None  # the job whose run is in progress
        self._run_done: anyio.Event | None = None  # set once that run is recorded
        self._manual: list[str] = []  # cron/run requests, oldest first
        self._changed = anyio.Event()
        self._lock = anyio.Lock()  # read-modify-write of one job at a time
        # False while the workspace is not trusted: its stored jobs wait (wake() when it is).
        self.may_run: Callable[[], bool] = lambda: True

    def use_clock(self, clock: Clock) -> None:
        """Switch the time source (tests); the scheduler re-plans at once."""
        self.clock = clock
        self._changed.set()

    def wake(self) -> None:
        """Re-plan at once (e.g. the workspace became trusted)."""
        self._changed.set()

    # --- management -----------------------------------------------------------------

    async def add_job(
        self,
        *,
        name: str,
        message: str,
        schedule: Schedule,
        enabled: bool = True,
        delete_after_run: bool = False,
        thread_id: str | None = None,
        approval_policy: str | None = None,
        defer: Defer = _now,
    ) -> CronJobInfo:
        """Store a new job (``schedule`` already validated) and announce it.

        Without ``thread_id`` the job gets a dedicated thread on its first run.
        """
        created = self.clock.now_ms()
        for _ in range(5):
            job = CronJobRecord(
                id=secrets.token_hex(4),
                name=name,
                message=message,
                schedule=schedule.to_wire(),
                enabled=enabled,
                delete_after_run=delete_after_run,
                created_at_ms=created,
                dedicated=thread_id is None,
                thread_id=thread_id,
                approval_policy=approval_policy,
                next_run_at_ms=first_run(schedule, created),
            )
            try:
                await self.repo.insert(job)
                break
            except sqlite3.IntegrityError:
                continue  # id collision: draw again
        else:
            raise RuntimeError("could not allocate a unique cron job id")
        info = job_info(job)
        defer(lambda: self._state_changed(info, removed=False))
        self._changed.set()
        return info

    async def list_jobs(self, include_disabled: bool = True) -> list[CronJobInfo]:
        """Jobs, oldest first (``/cron`` shows disabled ones too, hence the default)."""
        return [job_info(job) for job in await self.repo.list_jobs(include_disabled)]

    async def describe_jobs(self) -> str:
        """A Markdown list of every job, for chat commands (``/cron``)."""
        jobs = await self.repo.list_jobs(include_disabled=True)
        if not jobs:
            return "No cron jobs."
        lines = []
        for job in jobs:
            when = describe(Schedule.from_wire(job.schedule))
            status = "enabled" if job.enabled else "disabled"
            line = f"- `{job.id}` **{job.name}**: {when}, {status}"
            if job.enabled and job.next_run_at_ms is not None:
                line += f", next run at {job.next_run_at_ms} ms"
            if job.last_status is not None:
                line += f", last run {job.last_status}"
            lines.append(line)
        return "\n".join(lines)

    async def remove_job(self, job_id: str, defer: Defer = _now) -> CronJobInfo | None:
        """Delete a job; its last state, or ``None`` if there was no such job."""
        async with self._lock:
            job = await self.repo.get(job_id)
            if job is None or not await self.repo.delete(job_id):
                return None
        if job_id in self._manual:
            self._manual.remove(job_id)
        info = job_info(job)
        defer(lambda: self._state_changed(info, removed=True))
        self._changed.set()
        return info

    async def enable_job(
        self, job_id: str, enabled: bool, defer: Defer = _now
    ) -> CronJobInfo | None:
        """Switch a job on or off; ``None`` if there is no such job.

        Enabling recomputes the next run only if it is unset or already past
        (a past ``at`` time stays: the job then runs at once); disabling
        keeps it.
        """
        async with self._lock:
            job = await self.repo.get(job_id)
            if job is None:
                return None
            now = self.clock.now_ms()
            if enabled and (job.next_run_at_ms is None or job.next_run_at_ms <= now):
                job.next_run_at_ms = next_run(Schedule.from_wire(job.schedule), now)
            job.enabled = enabled
            await self.repo.set_enabled(job_id, enabled, job.next_run_at_ms)
        info = job_info(job)
        defer(lambda: self._state_changed(info, removed=False))
        self._changed.set()
        return info

    async def queue_run(self, job_id: str) -> CronJobInfo | None:
        """Queue one immediate run, even of a disabled job; ``None`` if no such job.

        A job already waiting in the queue is not queued twice.
        """
        job = await self.repo.get(job_id)
        if job is None:
            return None
        if job_id not in self._manual:
            self._manual.append(job_id)
        self._changed.set()
        return job_info(job)

    # --- the scheduler -------------------------------------------------------------------

    async def run(self) -> None:
        """The scheduler task: run what is due, then sleep until the next job."""
        while True:
            # A fresh event before looking at the jobs: a change made while we
            # look sets it, so it is never missed.
            self._changed = changed = anyio.Event()
            if not self.runner.accepting() or not self.may_run():
                # Draining, or an untrusted workspace's jobs: start nothing (due
                # jobs stay due for the next start, or until the workspace is trusted).
                await changed.wait()
                continue
            try:
                job, manual = await self._next_job()
                if job is not None:
                    # A cron/run request is this process's own: not claimed
                    # (a disabled job could not be); due runs are.
                    if manual or await self.repo.claim(job):
                        await self._execute(job)
                    continue  # else another node took it first
                earliest = await self.repo.earliest_run()
                if self.repo.cluster is not None and self.repo.peers():
                    # Look again within a lease: a node running a job may die
                    # (its run is then due here), and others' changes wake no one here.
                    soon = self.clock.now_ms() + int(self.repo.cluster[1] * 1000)
                    earliest = soon if earliest is None else min(earliest, soon)
            except Exception:
                log.exception("cron scheduler step failed; retrying")
                await anyio.sleep(_FAULT_BACKOFF_S)
                continue
            await sleep_until_or_woken(self.clock, earliest, changed)

    async def _next_job(self) -> tuple[CronJobRecord | None, bool]:
        """The next job to run, and whether a ``cron/run`` request asked for it."""
        while self._manual:
            job = await self.repo.get(self._manual.pop(0))
            if job is not None:
                return job, True
        return await self.repo.first_due(self.clock.now_ms()), False

    async def drain(self) -> None:
        """The server stops: wait (briefly) for the run it cut to record its end
        (an ``at`` job would otherwise run again at the next start)."""
        done = self._run_done
        if done is not None:
            with anyio.move_on_after(_DRAIN_GRACE_S):
                await done.wait()

    async def _execute(self, job: CronJobRecord) -> None:
        started = self.clock.now_ms()
        self.running_job = job.id
        self._run_done = done = anyio.Event()
        try:
            dedicated = None
            if job.dedicated:
                config = {"approvalPolicy": job.approval_policy} if job.approval_policy else None
                dedicated = ThreadSpec(
                    channel_name="cron",
                    user_id="cron",
                    display_name=f"Cron: {job.name}",
                    source={"kind": "cron", "jobId": job.id},
                    configuration=config,
                )
            trigger = Trigger(job.message, "cron", job.name, job.id)

            async def made(thread_id: str) -> None:
                await self.repo.set_thread(job.id, thread_id)

            try:
                outcome = await self.runner.run(job.thread_id, dedicated, trigger, made=made)
            except ShuttingDown:
                return  # not run: still due at the next start
            except Exception as exc:
                log.exception("cron job %s crashed", job.id)
                outcome = RunOutcome(job.thread_id, error=f"internal error: {exc}")
            # A stop waits for it (drain), but not for ever: a stalled database
            # must not hold the server's exit.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RECORD_BOUND_S):
                await self._record(job, outcome, started)
        finally:
            self.running_job = None
            self._run_done = None
            done.set()

    async def _record(self, job: CronJobRecord, outcome: RunOutcome, started: int) -> None:
        """Store the run's outcome, reschedule or remove the job, announce both."""
        async with self._lock:
            current = await self.repo.get(job.id)
            removed = current is None
            if current is not None:
                if current.dedicated and outcome.created_thread:
                    current.thread_id = outcome.thread_id
                current.last_run_at_ms = started
                current.last_status = "ok" if outcome.ok else "error"
                current.last_error = outcome.error
                current.last_thread_id = outcome.thread_id
                current.last_result = (
                    outcome.result[:LAST_RESULT_LIMIT] if outcome.result is not None else None
                )
                schedule = Schedule.from_wire(current.schedule)
                if current.delete_after_run or schedule.kind == "at":
                    removed = await self.repo.delete(current.id)
                else:
                    if current.enabled:
                        current.next_run_at_ms = next_run(schedule, self.clock.now_ms())
                    await self.repo.save_run(
                        current.id,
                        RunRecord(
                            thread_id=current.thread_id,
                            last_run_at_ms=started,
                            last_status=current.last_status,
                            last_error=current.last_error,
                            last_thread_id=current.last_thread_id,
                            last_result=current.last_result,
                            next_run_at_ms=current.next_run_at_ms,
                        ),
                    )
                self._state_changed(job_info(current), removed=removed)
        self.bus.publish(
            "system/jobResult",
            JobResultNotification(
                source="cron",
                job_id=job.id,
                job_name=job.name,
                thread_id=outcome.thread_id,
                result=outcome.result,
                error=outcome.error,
                token_usage=outcome.token_usage,
            ),
            broadcast=True,
        )
        self._changed.set()

    def _state_changed(self, job: CronJobInfo, removed: bool) -> None:
        self.bus.publish(
            "cron/stateChanged",
            CronStateChangedNotification(job=job, removed=removed),
            broadcast=True,
        )
