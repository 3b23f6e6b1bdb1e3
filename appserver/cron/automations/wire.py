"""Automation tasks as the wire shows them (``AutomationTask``)."""

from __future__ import annotations

from appserver.protocol import automations as automation_wire
from appserver.storage.automation_tasks import (
    BindingRecord,
    ScheduleRecord,
    TaskRecord,
    iso_from_ms,
)


def schedule_wire(schedule: ScheduleRecord | None) -> automation_wire.AutomationSchedule | None:
    """A stored schedule on the wire (constructed as stored: a hand-written
    value out of range is shown, not refused)."""
    if schedule is None:
        return None
    return automation_wire.AutomationSchedule.model_construct(
        kind=schedule.kind,
        at_ms=schedule.at_ms,
        every_ms=schedule.every_ms,
        initial_delay_ms=schedule.initial_delay_ms,
        daily_hour=schedule.daily_hour,
        daily_minute=schedule.daily_minute,
        expr=schedule.expr,
        tz=schedule.tz,
    )


def schedule_record(
    schedule: automation_wire.AutomationSchedule | None,
) -> ScheduleRecord | None:
    """A client's schedule as a record (unchecked; ``once`` and none are ``None``)."""
    if schedule is None:
        return None
    kind = schedule.kind.strip().lower()
    if kind in ("", "once"):
        return None
    return ScheduleRecord(
        kind=kind,
        at_ms=schedule.at_ms,
        every_ms=schedule.every_ms,
        initial_delay_ms=schedule.initial_delay_ms,
        daily_hour=schedule.daily_hour,
        daily_minute=schedule.daily_minute,
        expr=schedule.expr.strip() if schedule.expr and schedule.expr.strip() else None,
        tz=schedule.tz.strip() if schedule.tz and schedule.tz.strip() else None,
    )


def _binding(binding: BindingRecord | None) -> automation_wire.AutomationThreadBinding | None:
    if binding is None:
        return None
    return automation_wire.AutomationThreadBinding(thread_id=binding.thread_id, mode=binding.mode)


def task_wire(task: TaskRecord, detailed: bool = False) -> automation_wire.AutomationTask:
    """The task on the wire; ``detailed`` adds ``description`` and ``agentSummary``
    (DotCraft's ``ToWireDetailed``)."""
    return automation_wire.AutomationTask(
        id=task.id,
        title=task.title,
        status=task.status,
        thread_id=task.thread_id,
        description=task.description if detailed else None,
        agent_summary=task.agent_summary if detailed else None,
        created_at=task.created_at,
        updated_at=task.updated_at,
        approval_policy=task.approval_policy,
        schedule=schedule_wire(task.schedule),
        thread_binding=_binding(task.thread_binding),
        next_run_at=iso_from_ms(task.next_run_at_ms) if task.next_run_at_ms else None,
    )
