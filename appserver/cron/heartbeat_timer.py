"""Whether the heartbeat runs on a timer, and how often: read at start, before
(and without) loading the heartbeat itself (services/cron_waiting.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from appserver.storage.workspace_config import lookup

log = logging.getLogger("appserver.heartbeat")

INTERVAL_ENV = "APPSERVER_HEARTBEAT_INTERVAL"
DEFAULT_INTERVAL_S = 1800.0


def configured_interval(env: Mapping[str, str], workspace_config: dict[str, Any]) -> float | None:
    """Seconds between periodic heartbeats, or ``None`` when the timer is off."""
    raw = env.get(INTERVAL_ENV, "").strip()
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            log.warning("ignoring %s=%r: not a number of seconds", INTERVAL_ENV, raw)
        else:
            return seconds if seconds > 0 else None
    if lookup(workspace_config, "Heartbeat", "Enabled") is not True:
        return None
    interval = lookup(workspace_config, "Heartbeat", "IntervalSeconds")
    if interval is None:
        return DEFAULT_INTERVAL_S
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        log.warning("ignoring Heartbeat.IntervalSeconds=%r; using %g", interval, DEFAULT_INTERVAL_S)
        return DEFAULT_INTERVAL_S
    return float(interval)
