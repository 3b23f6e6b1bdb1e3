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

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty, Flag, Int, Label, LongText, WireModel
from appserver.protocol.limits import MAX_NAME_CHARS
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec
from appserver.protocol.threads import ApprovalPolicy

ScheduleKind = Literal["every", "at", "daily", "cron"]
RunStatus = Literal["ok", "error"]
JobSource = Literal["cron", "heartbeat"]

# lastResult keeps the start of the run's final agent text (as DotCraft does).
LAST_RESULT_LIMIT = 500

# Schedule bounds. Durations feed the scheduler's arithmetic and times feed
# ``datetime`` (whose last instant is 9999-12-31T23:59:59.999Z), so both stay far
# inside 64 bits. ``cron.schedule.validate`` applies the same bounds to the agent's
# cron tool.
MIN_EVERY_MS = 1000
MAX_DURATION_MS = 3_155_760_000_000  # 100 years of 365.25 days
MAX_AT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_HUNDRED_YEARS = f"100 years ({MAX_DURATION_MS} ms)"

# Wire field -> (lowest, highest, message when below, message when above).
SCHEDULE_RANGES: dict[str, tuple[int, int, str, str]] = {
    "everyMs": (
        MIN_EVERY_MS,
        MAX_DURATION_MS,
        f"must be at least {MIN_EVERY_MS} (one second)",
        f"must be at most {_HUNDRED_YEARS}",
    ),
    "initialDelayMs": (
        0,
        MAX_DURATION_MS,
        "must not be negative",
        f"must be at most {_HUNDRED_YEARS}",
    ),
    "atMs": (
        0,
        MAX_AT_MS,
        "must not be negative",
        f"must be at most {MAX_AT_MS} (9999-12-31T23:59:59.999Z)",
    ),
    "dailyHour": (0, 23, "must be between 0 and 23", "must be between 0 and 23"),
    "dailyMinute": (0, 59, "must be between 0 and 59", "must be between 0 and 59"),
}


def schedule_range_error(field: str, value: int) -> str | None:
    """Why ``value`` is out of range for schedule field ``field`` (camelCase), or None."""
    low, high, below, above = SCHEDULE_RANGES[field]
    if value < low:
        return below
    if value > high:
        return above
    return None


_WIRE_NAMES = {
    "every_ms": "everyMs",
    "at_ms": "atMs",
    "initial_delay_ms": "initialDelayMs",
    "daily_hour": "dailyHour",
    "daily_minute": "dailyMinute",
}


class CronSchedule(WireModel):
    """When a job runs.

    ``every``: each ``everyMs`` (>= 1000), the first run after
    ``initialDelayMs`` if given. ``at``: once at ``atMs`` (epoch ms).
    ``daily``: each day at ``dailyHour:dailyMinute`` in ``tz`` (IANA, default
    UTC). ``cron``: a standard 5-field expression ``expr`` evaluated in ``tz``.
    Fields that do not belong to the kind are refused on input.
    """

    # Documentation example: a bare `{kind}` is refused (each kind needs its fields).
    # Numbers only: a JSON true is no hour (lax validation would read it as 1).
    model_config = ConfigDict(
        strict=True,
        json_schema_extra={"examples": [{"kind": "every", "everyMs": 3600000}]},
    )

    kind: ScheduleKind
    """`every`, `at`, `daily` or `cron`."""
    every_ms: Int | None = Field(default=None, ge=MIN_EVERY_MS, le=MAX_DURATION_MS)
    """Interval in milliseconds (`kind: "every"`, at least 1000)."""
    at_ms: Int | None = Field(default=None, ge=0, le=MAX_AT_MS)
    """The one run, in Unix milliseconds (`kind: "at"`)."""
    initial_delay_ms: Int | None = Field(default=None, ge=0, le=MAX_DURATION_MS)
    """Delay before the first run (`kind: "every"`); default one interval."""
    daily_hour: Int | None = Field(default=None, ge=0, le=23)
    """Hour of the day, 0-23 (`kind: "daily"`)."""
    daily_minute: Int | None = Field(default=None, ge=0, le=59)
    """Minute of the hour, 0-59 (`kind: "daily"`)."""
    tz: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    """IANA time zone of `daily` and `cron` schedules; the server's local zone when absent."""
    expr: Label | None = None
    """Five-field cron expression (`kind: "cron"`)."""

    @field_validator(
        "every_ms", "at_ms", "initial_delay_ms", "daily_hour", "daily_minute", mode="before"
    )
    @classmethod
    def _in_range(cls, value: Any, info: ValidationInfo) -> Any:
        # The bounds above with the schedule's own messages (as the agent's tool gets).
        if isinstance(value, int) and not isinstance(value, bool):
            problem = schedule_range_error(_WIRE_NAMES[info.field_name or ""], value)
            if problem is not None:
                raise ValueError(problem)
        return value


class CronJobState(WireModel):
    """A cron job's run history and next run."""

    next_run_at_ms: int | None = None
    """Next planned run, in Unix milliseconds (absent when disabled or done)."""
    last_run_at_ms: int | None = None
    """Start of the last run, in Unix milliseconds."""
    last_status: RunStatus | None = None
    """Outcome of the last run."""
    last_error: str | None = None
    """Error of the last run, if it failed."""
    last_thread_id: str | None = None
    """The thread the last run used."""
    last_result: str | None = None  # at most LAST_RESULT_LIMIT characters
    """The agent's final reply of the last run."""


class CronJobInfo(WireModel):
    """A job as clients see it (the message itself is not exposed, as in DotCraft)."""

    id: str  # 8 hex characters
    """The job's id."""
    name: str
    """Name of the job."""
    schedule: CronSchedule
    """When the job runs."""
    enabled: Flag
    """Whether the job is enabled."""
    created_at_ms: int
    """When the job was added, in Unix milliseconds."""
    delete_after_run: Flag
    """The job is removed after its first run."""
    state: CronJobState
    """Run history and next run."""
    thread_id: str | None = None  # extension: runs happen in this thread
    """The thread its runs use, if fixed."""


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value.strip()


class CronAddParams(WireModel):
    name: Label
    """Name of the job, shown in lists."""
    message: LongText
    """The prompt the agent runs at each firing."""
    schedule: CronSchedule
    """When the job runs."""
    delete_after_run: Flag = False
    """Remove the job after its first run (one-shot jobs)."""
    enabled: Flag = True
    """Whether the job starts enabled."""
    # Run in this existing thread instead of a dedicated one made on first run.
    thread_id: str | None = None
    """Run in this thread; absent: each run gets a new thread."""
    # Applied to the dedicated thread's configuration when it is created.
    approval_policy: ApprovalPolicy | None = None
    """Approval policy of the job's turns (no client is there to approve)."""

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
    """The job after the change."""


class CronListParams(WireModel):
    include_disabled: Flag = False
    """Include disabled jobs."""


class CronListResult(WireModel):
    jobs: list[CronJobInfo]
    """The jobs."""


class CronJobIdParams(WireModel):
    job_id: str
    """The job's id."""


class CronRemoveResult(WireModel):
    removed: Flag = True
    """Whether the job existed and was removed."""


class CronEnableParams(WireModel):
    job_id: str
    """The job's id."""
    enabled: Flag
    """`true` to enable, `false` to disable."""


class CronRunResult(WireModel):
    queued: Flag = True
    """Whether a run was started now."""
    job: CronJobInfo
    """The job."""


class HeartbeatTriggerResult(WireModel):
    """``{}`` when HEARTBEAT.md is missing or empty (nothing ran)."""

    result: str | None = None
    """The agent's reply to HEARTBEAT.md."""
    error: str | None = None
    """Why the heartbeat run failed."""


class CronStateChangedNotification(WireModel):
    job: CronJobInfo
    """The job as it is now."""
    removed: Flag
    """`true` when the job was removed."""


class JobTokenUsage(WireModel):
    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""


class JobResultNotification(WireModel):
    source: JobSource
    """What ran: `cron` or `heartbeat`."""
    job_id: str | None = None
    """The cron job's id."""
    job_name: str | None = None
    """The cron job's name."""
    thread_id: str | None = None
    """The thread the run used."""
    result: str | None = None
    """The agent's final reply."""
    error: str | None = None
    """Why the run failed."""
    token_usage: JobTokenUsage | None = None
    """Tokens the run used."""


_JOB_ERRORS = (rpc_errors.INVALID_PARAMS, rpc_errors.CRON_JOB_NOT_FOUND)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "cron/add",
        CronAddParams,
        CronJobResult,
        "cronManagement",
        "Extension: create a job (schedule kinds every, at, daily, cron). Runs are turns in "
        "`threadId`, or in a dedicated thread made on the first run. Emits `cron/stateChanged`.",
        (rpc_errors.INVALID_PARAMS, rpc_errors.THREAD_NOT_FOUND),
    ),
    MethodSpec(
        "cron/list",
        CronListParams,
        CronListResult,
        "cronManagement",
        "The jobs, oldest first; disabled ones only with `includeDisabled`.",
        (rpc_errors.INVALID_PARAMS,),
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
