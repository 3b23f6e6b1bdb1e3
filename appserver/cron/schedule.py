"""Schedules: validation and run-time arithmetic (pure functions, no I/O).

Four kinds:

``every``
    Each ``every_ms`` (at least one second). The first run comes
    ``initial_delay_ms`` after creation when given, else ``every_ms`` after.
    After a run the next one is ``every_ms`` after the run *ended*, so a late
    or overdue job never fires several times to catch up.
``at``
    Once, at ``at_ms``; it must lie in the future when the job is created.
``daily``
    Each day at ``daily_hour:daily_minute`` wall time in ``tz`` (IANA name,
    default ``UTC``). A time that a DST change skips runs at the same offset
    before the change (02:30 on a spring-forward night becomes 03:30); a time
    that occurs twice runs at the first occurrence.
``cron``
    A standard 5-field expression (minute hour day-of-month month
    day-of-week; ``*``, lists, ranges and steps; day fields OR-ed as in
    Vixie cron) evaluated with croniter in ``tz``. No seconds field, no
    ``@daily``-style aliases, no ``H`` hashes.

Every "next run" is strictly after the given time. Durations are at most 100
years and ``at_ms`` at most 9999-12-31T23:59:59.999Z (the last instant a
``datetime`` holds); the bounds live in :mod:`appserver.protocol.cron`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from datetime import time as wall_time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from appserver.protocol.cron import schedule_range_error
from appserver.protocol.limits import MAX_LABEL_CHARS, MAX_NAME_CHARS

DEFAULT_TZ = "UTC"

# Wire field name -> dataclass attribute.
_FIELDS = {
    "everyMs": "every_ms",
    "atMs": "at_ms",
    "initialDelayMs": "initial_delay_ms",
    "dailyHour": "daily_hour",
    "dailyMinute": "daily_minute",
    "tz": "tz",
    "expr": "expr",
}
# Which fields each kind uses (the others are refused, to catch mix-ups).
_USED = {
    "every": {"everyMs", "initialDelayMs"},
    "at": {"atMs"},
    "daily": {"dailyHour", "dailyMinute", "tz"},
    "cron": {"expr", "tz"},
}


class ScheduleError(ValueError):
    """A schedule that cannot be accepted; ``field`` is the wire field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Schedule:
    """A validated schedule (defaults filled in: ``tz``, ``daily_minute``)."""

    kind: str
    every_ms: int | None = None
    at_ms: int | None = None
    initial_delay_ms: int | None = None
    daily_hour: int | None = None
    daily_minute: int | None = None
    tz: str | None = None
    expr: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """camelCase dict without unset fields (stored as JSON, sent as is)."""
        wire: dict[str, Any] = {"kind": self.kind}
        for name, attribute in _FIELDS.items():
            value = getattr(self, attribute)
            if value is not None:
                wire[name] = value
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Schedule:
        """Rebuild a stored schedule (trusted: it was validated when stored)."""
        values = {attribute: wire.get(name) for name, attribute in _FIELDS.items()}
        return cls(kind=str(wire["kind"]), **values)


def validate(wire: dict[str, Any], now_ms: int) -> Schedule:
    """Check a wire schedule (``kind`` plus camelCase fields) and fill defaults.

    Raises :class:`ScheduleError` naming the first field at fault.
    """
    kind = wire.get("kind")
    if kind not in _USED:
        raise ScheduleError("kind", "must be one of every, at, daily, cron")
    for name in _FIELDS:
        if wire.get(name) is not None and name not in _USED[kind]:
            raise ScheduleError(name, f"is not used by schedule kind '{kind}'")
    _check_bounds(wire)
    schedule = Schedule.from_wire(wire)
    if kind == "every":
        return _every(schedule)
    if kind == "at":
        return _at(schedule, now_ms)
    if kind == "daily":
        return _daily(schedule)
    return _cron(schedule, now_ms)


def _check_bounds(wire: dict[str, Any]) -> None:
    """Integers within their ranges (durations, times, hour and minute), strings not
    longer than the protocol allows (the agent's tool does not go through its models)."""
    for name in ("everyMs", "initialDelayMs", "atMs", "dailyHour", "dailyMinute"):
        value = wire.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ScheduleError(name, "must be an integer")
        problem = schedule_range_error(name, value)
        if problem is not None:
            raise ScheduleError(name, problem)
    for name, limit in (("tz", MAX_NAME_CHARS), ("expr", MAX_LABEL_CHARS)):
        value = wire.get(name)
        if isinstance(value, str) and len(value) > limit:
            raise ScheduleError(name, f"must be at most {limit} characters")


def _every(schedule: Schedule) -> Schedule:
    if schedule.every_ms is None:
        raise ScheduleError("everyMs", "is required for schedule kind 'every'")
    return schedule


def _at(schedule: Schedule, now_ms: int) -> Schedule:
    if schedule.at_ms is None:
        raise ScheduleError("atMs", "is required for schedule kind 'at'")
    if schedule.at_ms <= now_ms:
        raise ScheduleError("atMs", f"is in the past (now is {now_ms})")
    return schedule


def _daily(schedule: Schedule) -> Schedule:
    if schedule.daily_hour is None:
        raise ScheduleError("dailyHour", "is required for schedule kind 'daily'")
    minute = 0 if schedule.daily_minute is None else schedule.daily_minute
    return replace(schedule, daily_minute=minute, tz=check_time_zone(schedule.tz))


def _cron(schedule: Schedule, now_ms: int) -> Schedule:
    expr = (schedule.expr or "").strip()
    if not expr:
        raise ScheduleError("expr", "is required for schedule kind 'cron'")
    fields = expr.split()
    if len(fields) != 5:
        raise ScheduleError(
            "expr",
            f"must have 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}",
        )
    # Imported here: a session that schedules no cron job never loads croniter (and dateutil).
    from croniter import CroniterBadCronError, CroniterBadDateError, croniter

    if any(field.upper().startswith("H") for field in fields) or not croniter.is_valid(expr):
        raise ScheduleError("expr", f"'{expr}' is not a valid cron expression")
    checked = replace(schedule, expr=" ".join(fields), tz=check_time_zone(schedule.tz))
    try:
        next_run(checked, now_ms)
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError):
        raise ScheduleError("expr", f"'{expr}' never matches a date") from None
    return checked


def check_time_zone(name: str | None) -> str:
    """An IANA zone name, ``UTC`` by default; :class:`ScheduleError` if unknown."""
    if name is None:
        return DEFAULT_TZ
    if not name.strip():
        raise ScheduleError("tz", "must not be empty")
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            "tz", f"unknown time zone '{name}' (use an IANA name such as Europe/Berlin)"
        ) from None
    return name.strip()


def first_run(schedule: Schedule, created_ms: int) -> int:
    """When a new job first runs."""
    if schedule.kind == "every":
        assert schedule.every_ms is not None
        delay = schedule.initial_delay_ms
        return created_ms + (schedule.every_ms if delay is None else delay)
    return next_run(schedule, created_ms)


def next_run(schedule: Schedule, now_ms: int) -> int:
    """The next run after ``now_ms`` (for ``at``: its one time, even if past)."""
    if schedule.kind == "every":
        assert schedule.every_ms is not None
        return now_ms + schedule.every_ms
    if schedule.kind == "at":
        assert schedule.at_ms is not None
        return schedule.at_ms
    zone = ZoneInfo(schedule.tz or DEFAULT_TZ)
    now = datetime.fromtimestamp(now_ms / 1000, UTC).astimezone(zone)
    if schedule.kind == "daily":
        return _next_daily(schedule, now, now_ms)
    assert schedule.expr is not None
    from croniter import croniter

    times = croniter(schedule.expr, now)
    found = times.get_next(datetime)
    if _fixed_time(schedule.expr):
        # A job at a fixed wall time runs once on the night the clock falls
        # back (as Vixie cron does), not again when that time comes round twice.
        while _repeated(found):
            found = times.get_next(datetime)
    return _ms(found)


def _fixed_time(expr: str) -> bool:
    """Whether a cron expression runs at fixed wall times, by Vixie cron's rule:
    neither its minute nor its hour field starts with ``*``, as in ``30 1 * * *``
    or ``0-59/30 1 * * *``; ``*/15 * * * *`` runs in both copies of a repeated hour."""
    fields = expr.split()  # five, validated
    return not any(field.startswith("*") for field in fields[:2])


def _repeated(moment: datetime) -> bool:
    """Whether ``moment`` is the second time its wall-clock reading occurs (the
    hour a fall-back repeats)."""
    first = moment.replace(fold=0)
    return first.utcoffset() != moment.utcoffset() and _ms(first) < _ms(moment)


def _next_daily(schedule: Schedule, now: datetime, now_ms: int) -> int:
    assert schedule.daily_hour is not None and schedule.daily_minute is not None
    at = wall_time(schedule.daily_hour, schedule.daily_minute)
    day: date = now.date()
    # Today's slot may have passed; a DST shift can move it by an hour, so
    # looking at three calendar days always finds one after now.
    for offset in range(3):
        candidate = datetime.combine(day + timedelta(days=offset), at, tzinfo=now.tzinfo)
        if _ms(candidate) > now_ms:
            return _ms(candidate)
    raise AssertionError("unreachable: a daily slot exists within three days")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def describe(schedule: Schedule) -> str:
    """A short human description, e.g. ``every 60s`` or ``daily 09:30 Europe/Berlin``."""
    if schedule.kind == "every":
        assert schedule.every_ms is not None
        seconds = schedule.every_ms / 1000
        return f"every {seconds:g}s"
    if schedule.kind == "at":
        assert schedule.at_ms is not None
        when = datetime.fromtimestamp(schedule.at_ms / 1000, UTC)
        return f"once at {when:%Y-%m-%d %H:%M:%S} UTC"
    if schedule.kind == "daily":
        return f"daily {schedule.daily_hour:02d}:{schedule.daily_minute:02d} {schedule.tz}"
    return f"cron '{schedule.expr}' {schedule.tz}"
