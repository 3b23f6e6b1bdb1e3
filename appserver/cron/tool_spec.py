"""What the agent sees of the ``cron`` tool (its name, description and input
schema), apart from the tool: light, so a server whose cron family waits for
its first use (services/cron_waiting.py) offers the same tool (appserver/cron/tool.py)."""

from __future__ import annotations

from typing import Any

NAME = "cron"
ACTIONS = ("add", "list", "remove")
DESCRIPTION = (
    "Schedule work for later. action=add with message and one of: everySeconds "
    "(recurring, optionally delaySeconds before the first run), delaySeconds alone (once), "
    "dailyHour/dailyMinute or dailyTime 'HH:mm' (daily), cronExpr (5-field cron); "
    "timeZone applies to daily and cron jobs. Each run is a turn in this thread. "
    "action=list shows this thread's jobs; action=remove deletes one of them by jobId."
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "enum": list(ACTIONS),
            "description": "add (create a job), list (show this thread's jobs), remove (delete "
            "one of them).",
        },
        "message": {
            "type": "string",
            "description": "add: the prompt the agent runs each time the job fires.",
        },
        "name": {"type": "string", "description": "add: a short name for the job."},
        "everySeconds": {
            "type": "integer",
            "minimum": 1,
            "description": "add: run every N seconds (recurring).",
        },
        "delaySeconds": {
            "type": "integer",
            "minimum": 1,
            "description": "add: alone, run once after N seconds; with everySeconds, "
            "the first run comes after N seconds.",
        },
        "dailyHour": {"type": "integer", "minimum": 0, "maximum": 23},
        "dailyMinute": {"type": "integer", "minimum": 0, "maximum": 59},
        "dailyTime": {"type": "string", "description": "add: daily at HH:mm."},
        "timeZone": {
            "type": "string",
            "description": "IANA time zone for daily and cronExpr jobs (default UTC).",
        },
        "cronExpr": {
            "type": "string",
            "description": "add: a 5-field cron expression, e.g. '0 9 * * 1-5'.",
        },
        "jobId": {"type": "string", "description": "remove: the job's id (see list)."},
    },
    "required": ["action"],
    "additionalProperties": False,
}
