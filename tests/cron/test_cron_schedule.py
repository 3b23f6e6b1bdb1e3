"""Schedule arithmetic (appserver.cron.schedule): next runs across days, time zones and
DST changes, and what validation fills in."""

from __future__ import annotations

import pytest

from appserver.cron.schedule import (
    Schedule,
    ScheduleError,
    describe,
    first_run,
    next_run,
    validate,
)
from tests.support.cron_clock import epoch_ms

NOW = epoch_ms("2030-06-15T12:00:00")  # a Saturday


def daily(hour: int, minute: int = 0, tz: str = "UTC") -> Schedule:
    return validate({"kind": "daily", "dailyHour": hour, "dailyMinute": minute, "tz": tz}, NOW)


def cron(expr: str, tz: str = "UTC") -> Schedule:
    return validate({"kind": "cron", "expr": expr, "tz": tz}, NOW)


def test_every_runs_from_creation_then_from_each_run() -> None:
    schedule = validate({"kind": "every", "everyMs": 5000}, NOW)
    assert first_run(schedule, NOW) == NOW + 5000
    assert next_run(schedule, NOW + 123) == NOW + 5123
    delayed = validate({"kind": "every", "everyMs": 5000, "initialDelayMs": 0}, NOW)
    assert first_run(delayed, NOW) == NOW


def test_at_keeps_its_time() -> None:
    schedule = validate({"kind": "at", "atMs": NOW + 1}, NOW)
    assert first_run(schedule, NOW) == NOW + 1
    assert next_run(schedule, NOW + 10_000) == NOW + 1  # past: due at once if re-enabled
    with pytest.raises(ScheduleError) as caught:
        validate({"kind": "at", "atMs": NOW}, NOW)
    assert caught.value.field == "atMs"


def test_daily_is_strictly_after_now() -> None:
    assert next_run(daily(12), NOW) == epoch_ms("2030-06-16T12:00:00")
    assert next_run(daily(12), NOW - 1) == NOW
    assert next_run(daily(23, 59), NOW) == epoch_ms("2030-06-15T23:59:00")
    # Tokyo is UTC+9: 08:00 there is 23:00 UTC the day before.
    assert next_run(daily(8, tz="Asia/Tokyo"), NOW) == epoch_ms("2030-06-15T23:00:00")


def test_daily_across_daylight_saving_changes() -> None:
    berlin = daily(9, 30, "Europe/Berlin")
    # The evening before spring-forward (2030-03-31): 09:30 CEST = 07:30 UTC.
    assert next_run(berlin, epoch_ms("2030-03-30T20:00:00")) == epoch_ms("2030-03-31T07:30:00")
    # And before fall-back (2030-10-27): 09:30 CET = 08:30 UTC.
    assert next_run(berlin, epoch_ms("2030-10-26T20:00:00")) == epoch_ms("2030-10-27T08:30:00")
    # 02:30 does not exist on spring-forward night: it runs at 03:30 CEST (01:30 UTC).
    gap = daily(2, 30, "Europe/Berlin")
    assert next_run(gap, epoch_ms("2030-03-30T22:00:00")) == epoch_ms("2030-03-31T01:30:00")
    # 02:30 happens twice on fall-back night: the first one (CEST, 00:30 UTC) counts.
    twice = daily(2, 30, "Europe/Berlin")
    assert next_run(twice, epoch_ms("2030-10-26T22:00:00")) == epoch_ms("2030-10-27T00:30:00")


def test_cron_expressions_in_time_zones() -> None:
    weekdays = cron("0 9 * * 1-5", "America/New_York")
    # Saturday noon UTC: next is Monday 09:00 EDT = 13:00 UTC.
    assert next_run(weekdays, NOW) == epoch_ms("2030-06-17T13:00:00")
    assert next_run(cron("*/15 * * * *"), NOW) == NOW + 15 * 60_000
    assert next_run(cron("0 0 1 * *"), NOW) == epoch_ms("2030-07-01T00:00:00")
    assert next_run(cron("0 12 * * SAT"), NOW) == epoch_ms("2030-06-22T12:00:00")


def test_a_fixed_time_expression_runs_once_on_fall_back_night() -> None:
    """As Vixie cron: 01:30 comes twice on 2030-11-03 in New York (05:30 and
    06:30 UTC); a job at 01:30 runs at the first, then the next day."""
    nightly = cron("30 1 * * *", "America/New_York")
    first = next_run(nightly, epoch_ms("2030-11-03T04:00:00"))
    assert first == epoch_ms("2030-11-03T05:30:00")
    assert next_run(nightly, first + 60_000) == epoch_ms("2030-11-04T06:30:00")
    assert next_run(cron("0 1-2 * * *", "America/New_York"), first) == epoch_ms(
        "2030-11-03T07:00:00"
    )
    ranged = cron("0-59/30 1 * * *", "America/New_York")  # Vixie: no leading *, fixed
    assert next_run(ranged, first) == epoch_ms("2030-11-04T06:00:00")
    # An expression that runs at intervals runs in both copies of the hour.
    quarters = cron("*/30 * * * *", "America/New_York")
    assert next_run(quarters, epoch_ms("2030-11-03T05:40:00")) == epoch_ms("2030-11-03T06:00:00")


def test_validation_fills_defaults_and_round_trips() -> None:
    schedule = daily(7)
    assert schedule.to_wire() == {"kind": "daily", "dailyHour": 7, "dailyMinute": 0, "tz": "UTC"}
    assert Schedule.from_wire(schedule.to_wire()) == schedule
    assert cron("  0   9 * * *  ").expr == "0 9 * * *"


@pytest.mark.parametrize(
    "expr", ["@daily", "H * * * *", "* * * * * *", "0 0 30 2 *", "99 * * * *", ""]
)
def test_non_standard_or_impossible_expressions_are_refused(expr: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        cron(expr)
    assert caught.value.field == "expr"


def test_describe() -> None:
    assert describe(validate({"kind": "every", "everyMs": 90_000}, NOW)) == "every 90s"
    assert describe(validate({"kind": "at", "atMs": NOW + 1000}, NOW)) == (
        "once at 2030-06-15 12:00:01 UTC"
    )
    assert describe(daily(9, 5, "Europe/Berlin")) == "daily 09:05 Europe/Berlin"
    assert describe(cron("0 9 * * 1-5")) == "cron '0 9 * * 1-5' UTC"


def test_a_boolean_is_no_number_on_the_wire() -> None:
    """``dailyHour: true`` was read as hour 1 (lax validation)."""
    from pydantic import ValidationError

    from appserver.protocol.automations import AutomationSchedule
    from appserver.protocol.cron import CronSchedule

    for model in (CronSchedule, AutomationSchedule):
        with pytest.raises(ValidationError):
            model.model_validate({"kind": "daily", "dailyHour": True})
        assert model.model_validate({"kind": "daily", "dailyHour": 3}).daily_hour == 3
