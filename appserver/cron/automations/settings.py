"""The ``Automations`` section of ``.craft/config.json`` (DotCraft's keys).

``Enabled`` (default true), ``PollingInterval`` (30 s), ``MaxConcurrentTasks``
(3), ``MaxRetries`` (3), ``RetryInitialDelay`` (30 s) and ``RetryMaxDelay``
(10 min). Durations are .NET TimeSpan text (``"00:00:30"``, ``"1.00:00:00"``)
or a number of seconds. ``LocalTasksRoot`` and ``UserTemplatesRoot`` are not
read: the file can arrive with a checkout, and a root outside ``.craft/`` would
let it direct the server's writes and deletions anywhere. ``TurnTimeout`` and
``StallTimeout`` are not read (DotCraft reads them nowhere either).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from appserver.storage.workspace_config import lookup

log = logging.getLogger("appserver.automations")

_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?$")


@dataclass(frozen=True)
class AutomationSettings:
    """How the runner polls, how many tasks run at once and how runs are retried."""

    polling_interval_ms: int = 30_000
    max_concurrent_tasks: int = 3
    max_retries: int = 3
    retry_initial_delay_ms: int = 30_000
    retry_max_delay_ms: int = 600_000

    def retry_delay_ms(self, attempt: int) -> int:
        """The wait before retry ``attempt`` (1-based): doubling, capped."""
        delay: int = self.retry_initial_delay_ms * 2 ** max(0, attempt - 1)
        return min(delay, self.retry_max_delay_ms)


def enabled(workspace_config: dict[str, Any]) -> bool:
    """``Automations.Enabled`` (anything but ``false`` is on)."""
    return lookup(workspace_config, "Automations", "Enabled") is not False


def _duration_ms(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value * 1000) if value >= 0 else None
    if not isinstance(value, str):
        return None
    match = _TIMESPAN.match(value.strip())
    if match is None:
        return None
    days, hours, minutes, seconds, fraction = match.groups()
    total = ((int(days or 0) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds or 0)
    return total * 1000 + int((fraction or "0").ljust(7, "0")[:3])


def read_settings(workspace_config: dict[str, Any]) -> AutomationSettings:
    """The settings, each unreadable one logged and left at its default."""
    defaults = AutomationSettings()
    values: dict[str, int] = {}
    for key, attribute, minimum in (
        ("PollingInterval", "polling_interval_ms", 1000),
        ("RetryInitialDelay", "retry_initial_delay_ms", 0),
        ("RetryMaxDelay", "retry_max_delay_ms", 0),
    ):
        raw = lookup(workspace_config, "Automations", key)
        if raw is None:
            continue
        duration = _duration_ms(raw)
        if duration is None or duration < minimum:
            log.warning("ignoring Automations.%s=%r", key, raw)
        else:
            values[attribute] = duration
    for key, attribute, minimum in (
        ("MaxConcurrentTasks", "max_concurrent_tasks", 1),
        ("MaxRetries", "max_retries", 0),
    ):
        raw = lookup(workspace_config, "Automations", key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
            log.warning("ignoring Automations.%s=%r", key, raw)
        else:
            values[attribute] = raw
    return AutomationSettings(**{**defaults.__dict__, **values})
