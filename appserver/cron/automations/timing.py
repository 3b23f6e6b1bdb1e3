"""When an automation task runs: its schedule checked, its first and next runs
(pure functions over :mod:`appserver.cron.schedule`).

Kinds (DotCraft's): no schedule or ``once`` (one run from ``pending``),
``every`` (the first run at once, or ``initial_delay_ms`` after the task was
made; then ``every_ms`` after each run ended), ``at`` (one run at ``at_ms``;
DotCraft ran it again on every poll) and ``daily`` (each day at
``daily_hour:daily_minute`` in ``tz``, UTC when absent). Any other kind is
refused when a task is made; one written by hand never runs.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from appserver.cron.schedule import Schedule, ScheduleError, next_run, validate
from appserver.storage.automation_tasks import ScheduleRecord

log = logging.getLogger("appserver.automations")

KINDS = ("once", "every", "at", "daily")
# The wire fields of each kind: others a client sends along are dropped (DotCraft
# Desktop sends a time zone with every schedule), not refused.
_FIELDS = {
    "every": ("everyMs", "initialDelayMs"),
    "at": ("atMs",),
    "daily": ("dailyHour", "dailyMinute", "tz"),
}


def _record(schedule: Schedule) -> ScheduleRecord:
    return ScheduleRecord(
        kind=schedule.kind,
        at_ms=schedule.at_ms,
        every_ms=schedule.every_ms,
        initial_delay_ms=schedule.initial_delay_ms,
        daily_hour=schedule.daily_hour,
        daily_minute=schedule.daily_minute,
        tz=schedule.tz,
    )


def _wire(record: ScheduleRecord) -> dict[str, object]:
    values = {
        "everyMs": record.every_ms,
        "initialDelayMs": record.initial_delay_ms,
        "atMs": record.at_ms,
        "dailyHour": record.daily_hour,
        "dailyMinute": record.daily_minute,
        "tz": record.tz,
    }
    return {"kind": record.kind} | {
        name: values[name] for name in _FIELDS.get(record.kind, ()) if values[name] is not None
    }


def check_schedule(record: ScheduleRecord | None, now_ms: int) -> ScheduleRecord | None:
    """A schedule a client gave, checked and with its defaults (``None``: run
    once). Raises :class:`ScheduleError` naming the wire field at fault."""
    if record is None or record.kind in ("", "once"):
        return None
    if record.kind not in KINDS:
        raise ScheduleError("kind", "must be one of once, every, at, daily")
    return _record(validate(_wire(record), now_ms))


def _runnable(record: ScheduleRecord) -> Schedule | None:
    """A stored schedule as the scheduler's, or ``None`` when it cannot run.
    An unknown time zone counts as UTC (as DotCraft reads one)."""
    if record.kind not in _FIELDS:
        return None
    wire = _wire(record)
    try:
        return validate(wire, now_ms=-1)  # a past `at` is fine here
    except ScheduleError as exc:
        if exc.field == "tz":
            log.warning("unknown time zone %r in a task's schedule: using UTC", record.tz)
            return _runnable(replace(record, tz=None))
        log.warning("a task's schedule cannot run (%s)", exc)
        return None


def first_run(record: ScheduleRecord, created_ms: int | None, now_ms: int) -> int | None:
    """When a scheduled task that has no next run yet runs first (``None``: never)."""
    schedule = _runnable(record)
    if schedule is None:
        return None
    if schedule.kind == "every":
        delay = schedule.initial_delay_ms or 0
        # DotCraft counts a delay from when it first looks; from creation here,
        # so a delay written before a restart is not started over.
        if delay > 0:
            return (created_ms if created_ms is not None else now_ms) + delay
        return created_ms if created_ms is not None else now_ms
    return next_run(schedule, now_ms) if schedule.kind == "daily" else schedule.at_ms


def rearm(record: ScheduleRecord, now_ms: int) -> int | None:
    """The next run after a run that ended at ``now_ms`` (``None`` for ``at``: it is done)."""
    schedule = _runnable(record)
    if schedule is None or schedule.kind == "at":
        return None
    return next_run(schedule, now_ms)
