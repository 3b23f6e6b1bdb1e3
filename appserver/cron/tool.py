"""The agent's ``cron`` tool: schedule, list and remove jobs from a turn.

Arguments follow DotCraft's Cron tool: ``action`` (add|list|remove);
for ``add``: ``message`` plus one schedule —

* ``everySeconds`` (recurring; with ``delaySeconds``, the first run comes
  after that delay),
* ``delaySeconds`` alone (once, then the job is removed),
* ``dailyHour``/``dailyMinute`` or ``dailyTime: "HH:mm"`` (daily),
* ``cronExpr`` (5-field cron expression),

with ``timeZone`` (IANA, default UTC) for the daily and cron kinds, and an
optional ``name`` (default: the start of the message). ``remove`` takes
``jobId``. DotCraft's delivery arguments (``deliver``, ``channel``,
``toUser``) do not exist here: results stay in the thread and go out as
``system/jobResult``.

Jobs made by the tool run in the thread whose turn made them. The tool
reaches only the jobs of its own thread, as the terminal tools reach only
its terminals: ``list`` shows the jobs that run in this thread, ``remove``
of any other job answers ``not_found``. (Clients manage every job with
``cron/*``.) The tool needs no approval: it only schedules work in its own
thread, and each scheduled run is a normal turn whose own tool calls go
through the approval flow.
"""

from __future__ import annotations

import json
import re
from typing import Any

from appserver.cron.schedule import Schedule, ScheduleError, validate
from appserver.cron.service import CronService, job_info
from appserver.cron.tool_spec import ACTIONS, DESCRIPTION, NAME, SCHEMA
from appserver.protocol.limits import MAX_LABEL_CHARS, MAX_TEXT_CHARS
from appserver.tools.args import check_keys, get_int, get_str, require_str
from appserver.tools.base import ToolContext, ToolError, ToolOutcome, ToolPlan

_DAILY_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_NAME_FROM_MESSAGE = 30
# Tool argument each schedule field comes from, for error messages.
_ARGUMENT_OF = {
    "everyMs": "everySeconds",
    "atMs": "delaySeconds",
    "initialDelayMs": "delaySeconds",
    "dailyHour": "dailyHour",
    "dailyMinute": "dailyMinute",
    "tz": "timeZone",
    "expr": "cronExpr",
}
_KEYS = {
    "add": (
        "action",
        "message",
        "name",
        "everySeconds",
        "delaySeconds",
        "dailyHour",
        "dailyMinute",
        "dailyTime",
        "timeZone",
        "cronExpr",
    ),
    "list": ("action",),
    "remove": ("action", "jobId"),
}


class CronTool:
    """``cron``: add, list or remove scheduled jobs."""

    name = NAME
    description = DESCRIPTION
    input_schema = SCHEMA

    def __init__(self, service: CronService) -> None:
        self.service = service

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Validate the call; ``add`` builds its schedule now so errors reach the model."""
        action = require_str(arguments, "action").strip().lower()
        if action not in ACTIONS:
            raise ToolError(f"unknown action '{action}'; use one of: {', '.join(ACTIONS)}")
        check_keys(arguments, _KEYS[action])
        plan = ToolPlan(tool=self.name, arguments=arguments, resolved={"action": action})
        if action == "add":
            plan.resolved.update(self._add_plan(arguments))
        elif action == "remove":
            plan.resolved["jobId"] = require_str(arguments, "jobId", allow_empty=False).strip()
        return plan

    def _add_plan(self, arguments: dict[str, Any]) -> dict[str, Any]:
        message = require_str(arguments, "message", allow_empty=False)
        name = get_str(arguments, "name", required=False)
        name = name.strip() if name and name.strip() else message.strip()[:_NAME_FROM_MESSAGE]
        # The bounds cron/add applies to what it stores.
        if len(message) > MAX_TEXT_CHARS:
            raise ToolError(f"message must be at most {MAX_TEXT_CHARS} characters")
        if len(name) > MAX_LABEL_CHARS:
            raise ToolError(f"name must be at most {MAX_LABEL_CHARS} characters")
        wire = _schedule_from_arguments(arguments, self.service.clock.now_ms())
        try:
            schedule = validate(wire, self.service.clock.now_ms())
        except ScheduleError as exc:
            raise ToolError(f"{_ARGUMENT_OF.get(exc.field, exc.field)}: {exc.message}") from None
        one_shot = schedule.kind == "at"
        return {"message": message, "name": name, "schedule": schedule, "oneShot": one_shot}

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Do it; the answer is JSON for the model."""
        action = plan.resolved["action"]
        if action == "add":
            schedule: Schedule = plan.resolved["schedule"]
            job = await self.service.add_job(
                name=plan.resolved["name"],
                message=plan.resolved["message"],
                schedule=schedule,
                delete_after_run=plan.resolved["oneShot"],
                thread_id=ctx.thread_id,
            )
            answer: dict[str, Any] = {
                "status": "created",
                "id": job.id,
                "name": job.name,
                "nextRunAtMs": job.state.next_run_at_ms,
            }
        elif action == "list":
            # This thread's jobs only (the stored thread: a dedicated job's too,
            # once its first run made the thread).
            records = await self.service.repo.list_jobs(include_disabled=True)
            jobs = [job_info(job) for job in records if job.thread_id == ctx.thread_id]
            answer = {
                "count": len(jobs),
                "jobs": [
                    {
                        "id": job.id,
                        "name": job.name,
                        "enabled": job.enabled,
                        "schedule": job.schedule.kind,
                        "nextRunAtMs": job.state.next_run_at_ms,
                        "lastRunAtMs": job.state.last_run_at_ms,
                        "lastStatus": job.state.last_status,
                    }
                    for job in jobs
                ],
            }
        else:
            job_id = plan.resolved["jobId"]
            stored = await self.service.repo.get(job_id)
            # Another thread's job is not this thread's to see: not found, as an unknown id.
            mine = stored is not None and stored.thread_id == ctx.thread_id
            removed = await self.service.remove_job(job_id) if mine else None
            answer = {"status": "removed" if removed else "not_found", "jobId": job_id}
        return ToolOutcome(True, json.dumps(answer, separators=(",", ":")))


def _schedule_from_arguments(arguments: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """Map the tool's arguments onto a wire schedule (checked by ``validate``)."""
    every = get_int(arguments, "everySeconds", minimum=1)
    delay = get_int(arguments, "delaySeconds", minimum=1)
    hour = get_int(arguments, "dailyHour", minimum=0)
    minute = get_int(arguments, "dailyMinute", minimum=0)
    daily_time = get_str(arguments, "dailyTime", required=False)
    zone = get_str(arguments, "timeZone", required=False)
    expr = get_str(arguments, "cronExpr", required=False)
    if daily_time is not None:
        if hour is not None or minute is not None:
            raise ToolError("give dailyTime or dailyHour/dailyMinute, not both")
        match = _DAILY_TIME.match(daily_time.strip())
        if match is None:
            raise ToolError("dailyTime must look like HH:mm, e.g. 09:30")
        hour, minute = int(match.group(1)), int(match.group(2))
    daily = hour is not None or minute is not None
    kinds = [
        kind
        for kind, given in (
            ("every/delay", every is not None or delay is not None),
            ("daily", daily),
            ("cron", expr is not None),
        )
        if given
    ]
    if len(kinds) != 1:
        raise ToolError(
            "give exactly one schedule: everySeconds and/or delaySeconds, "
            "dailyHour/dailyMinute or dailyTime, or cronExpr"
            + (f" (got {' and '.join(kinds)})" if kinds else "")
        )
    if zone is not None and not (daily or expr is not None):
        raise ToolError("timeZone applies only to daily and cronExpr jobs")
    if daily:
        if hour is None:
            raise ToolError("dailyHour is required for a daily job")
        return {"kind": "daily", "dailyHour": hour, "dailyMinute": minute, "tz": zone}
    if expr is not None:
        return {"kind": "cron", "expr": expr, "tz": zone}
    if every is None:
        assert delay is not None
        return {"kind": "at", "atMs": now_ms + delay * 1000}
    schedule: dict[str, Any] = {"kind": "every", "everyMs": every * 1000}
    if delay is not None:
        schedule["initialDelayMs"] = delay * 1000
    return schedule
