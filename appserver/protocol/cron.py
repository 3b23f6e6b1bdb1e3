"""Wire models and method-table entries of the `cron` and `heartbeat`
families (reference §3.5, §3.6, §4).

Both families live here because they share ``system/jobResult``.
``cron/add`` is an extension: DotCraft has no RPC to create a job (only the
agent's tool does), but clients need one that does not go through the model.

``CronJobInfo`` is DotCraft's wire shape plus two additions: the schedule kind
``cron`` (5-field expressions; DotCraft's internal ``expr`` field, never used
there) and ``threadId``, present when runs happen in a given thread rather
than in the job's own dedicated one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, field_validator

from appserver.protocol import errors as E
from appserver.protocol.base import Empty, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec
from appserver.protocol.threads import ApprovalPolicy

ScheduleKind = Literal["every", "at", "daily", "cron"]
RunStatus = Literal["ok", "error"]
JobSource = Literal["cron", "heartbeat"]

# lastResult keeps the start of the run's final agent text (as DotCraft does).
LAST_RESULT_LIMIT = 500


class CronSchedule(WireModel):
    """When a job runs.

    ``every``: each ``everyMs`` (>= 1000), the first run after
    ``initialDelayMs`` if given. ``at``: once at ``atMs`` (epoch ms).
    ``daily``: each day at ``dailyHour:dailyMinute`` in ``tz`` (IANA, default
    UTC). ``cron``: a standard 5-field expression ``expr`` evaluated in ``tz``.
    Fields that do not belong to the kind are refused on input.
    """

    # Documentation example: a bare `{kind}` is refused (each kind needs its fields).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"kind": "every", "everyMs": 3600000}]}
    )

    kind: ScheduleKind
    every_ms: int | None = None
    at_ms: int | None = None
    initial_delay_ms: int | None = None
    daily_hour: int | None = None
    daily_minute: int | None = None
    tz: str | None = None
    expr: str | None = None


class CronJobState(WireModel):
    next_run_at_ms: int | None = None
    last_run_at_ms: int | None = None
    last_status: RunStatus | None = None
    last_error: str | None = None
    last_thread_id: str | None = None
    last_result: str | None = None  # at most LAST_RESULT_LIMIT characters


class CronJobInfo(WireModel):
    """A job as clients see it (the message itself is not exposed, as in DotCraft)."""

    id: str  # 8 hex characters
    name: str
    schedule: CronSchedule
    enabled: bool
    created_at_ms: int
    delete_after_run: bool
    state: CronJobState
    thread_id: str | None = None  # extension: runs happen in this thread


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value.strip()


class CronAddParams(WireModel):
    name: str
    message: str
    schedule: CronSchedule
    delete_after_run: bool = False
    enabled: bool = True
    # Run in this existing thread instead of a dedicated one made on first run.
    thread_id: str | None = None
    # Applied to the dedicated thread's configuration when it is created.
    approval_policy: ApprovalPolicy | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _not_blank(value)

    @field_validator("message")
    @classmethod
    def _message(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class CronJobResult(WireModel):
    job: CronJobInfo


class CronListParams(WireModel):
    include_disabled: bool = False


class CronListResult(WireModel):
    jobs: list[CronJobInfo]


class CronJobIdParams(WireModel):
    job_id: str


class CronRemoveResult(WireModel):
    removed: bool = True


class CronEnableParams(WireModel):
    job_id: str
    enabled: bool


class CronRunResult(WireModel):
    queued: bool = True
    job: CronJobInfo


class HeartbeatTriggerResult(WireModel):
    """``{}`` when HEARTBEAT.md is missing or empty (nothing ran)."""

    result: str | None = None
    error: str | None = None


class CronStateChangedNotification(WireModel):
    job: CronJobInfo
    removed: bool


class JobTokenUsage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0


class JobResultNotification(WireModel):
    source: JobSource
    job_id: str | None = None
    job_name: str | None = None
    thread_id: str | None = None
    result: str | None = None
    error: str | None = None
    token_usage: JobTokenUsage | None = None


_JOB_ERRORS = (E.INVALID_PARAMS, E.CRON_JOB_NOT_FOUND)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "cron/add",
        CronAddParams,
        CronJobResult,
        "cronManagement",
        "Extension: create a job (schedule kinds every, at, daily, cron). Runs are turns in "
        "`threadId`, or in a dedicated thread made on the first run. Emits `cron/stateChanged`.",
        (E.INVALID_PARAMS, E.THREAD_NOT_FOUND),
    ),
    MethodSpec(
        "cron/list",
        CronListParams,
        CronListResult,
        "cronManagement",
        "The jobs, oldest first; disabled ones only with `includeDisabled`.",
        (E.INVALID_PARAMS,),
        access="read",
    ),
    MethodSpec(
        "cron/remove",
        CronJobIdParams,
        CronRemoveResult,
        "cronManagement",
        "Delete a job; emits `cron/stateChanged` with `removed: true`.",
        _JOB_ERRORS,
    ),
    MethodSpec(
        "cron/enable",
        CronEnableParams,
        CronJobResult,
        "cronManagement",
        "Switch a job on or off. Enabling recomputes `nextRunAtMs` only if it is null or "
        "past; disabling keeps it. Emits `cron/stateChanged`.",
        _JOB_ERRORS,
    ),
    MethodSpec(
        "cron/run",
        CronJobIdParams,
        CronRunResult,
        "cronManagement",
        "Queue one immediate run (even of a disabled job). `cron/stateChanged` and "
        "`system/jobResult` follow when it ends.",
        _JOB_ERRORS,
    ),
    MethodSpec(
        "heartbeat/trigger",
        Empty,
        HeartbeatTriggerResult,
        "heartbeatManagement",
        "Run the heartbeat now: a turn in the heartbeat thread with `.craft/HEARTBEAT.md` "
        "as the task, unless that file is missing or empty (then `{}`). Failures are "
        "`{error}`, not JSON-RPC errors. Long-running.",
        (),
        access="detached",
    ),
]

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "cron/stateChanged",
        CronStateChangedNotification,
        "all connections",
        "A job was added, changed, removed (`removed: true`) or ran.",
    ),
    NotificationSpec(
        "system/jobResult",
        JobResultNotification,
        "all connections",
        "A cron job or heartbeat run ended: its final agent text (`result`) or `error`.",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
