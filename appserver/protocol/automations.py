"""Wire models and method-table entries of DotCraft's Automations
(``automation/task/*``, ``automation/template/*``, ``automation/task/updated``).

A task is a directory under ``.craft/tasks/`` with ``task.md`` and
``workflow.md`` (docs/automations.md); a template is a preset for one. The
capability ``automations`` gates the nine methods.

Where DotCraft's spec and its code disagree, the answers satisfy both:
``automation/task/read`` answers the bare task (the code) with the same task
again under ``task`` (the spec), and ``automation/task/create`` answers
``{taskId, taskDirectory}`` (the code) plus ``task`` (the spec).
"""

from pydantic import ConfigDict, Field

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Flag, Int, Label, LongText, Name, PathText, WireModel
from appserver.protocol.limits import INT64_MAX, INT64_MIN
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


class AutomationSchedule(WireModel):
    """When a task runs (DotCraft's ``AutomationScheduleWire``).

    `once` (or no schedule): one run from `pending`. `every`: each `everyMs`, the
    first run at once or after `initialDelayMs`. `at`: one run at `atMs`. `daily`:
    each day at `dailyHour:dailyMinute` in `tz` (IANA; UTC when absent). Other kinds
    are refused by `automation/task/create`; a task file may still hold one (it is
    shown, and does not run).
    """

    # Numbers only: a JSON true is no hour (lax validation would read it as 1).
    model_config = ConfigDict(
        strict=True,
        json_schema_extra={"examples": [{"kind": "every", "everyMs": 3600000}]},
    )

    kind: Name = "once"
    """`once`, `every`, `at` or `daily`."""
    at_ms: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """The one run, in Unix milliseconds (`at`)."""
    every_ms: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """Interval in milliseconds (`every`, at least 1000)."""
    initial_delay_ms: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """Delay before the first run (`every`); absent: the first run comes at once."""
    daily_hour: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """Hour of the day, 0-23 (`daily`)."""
    daily_minute: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """Minute of the hour, 0-59 (`daily`, default 0)."""
    expr: Label | None = None
    """Kept as written; no kind that reads it is accepted."""
    tz: Name | None = None
    """IANA time zone of a `daily` schedule."""


class AutomationThreadBinding(WireModel):
    """An existing thread the task's turns run in instead of its own thread."""

    thread_id: Name = ""
    """The thread; blank in `updateBinding`: unbind."""
    mode: Name | None = None
    """`run-in-thread` (the only mode; the default)."""


class AutomationTask(WireModel):
    """A task (DotCraft's ``AutomationTaskWire``). `description` and `agentSummary` are
    sent by `read`, `run`, `updateBinding` and `create`; `list` and
    `automation/task/updated` leave them out."""

    id: str
    """The task's id: its directory's name."""
    title: str
    """Its title."""
    status: str
    """`pending`, `running`, `completed` or `failed`."""
    thread_id: str | None = None
    """The thread its turns ran in (the bound thread, or its own)."""
    description: str | None = None
    """The body of `task.md`."""
    agent_summary: str | None = None
    """What the agent said it did (`CompleteLocalTask`, else its last message)."""
    created_at: str | None = None
    """When it was created, ISO 8601."""
    updated_at: str | None = None
    """When `task.md` was last written, ISO 8601."""
    approval_policy: str | None = None
    """`workspaceScope` (default) or `fullAuto` (legacy `autoApprove`, `default` are read)."""
    schedule: AutomationSchedule | None = None
    """When it runs; absent: once."""
    thread_binding: AutomationThreadBinding | None = None
    """The thread its turns run in, when bound."""
    next_run_at: str | None = None
    """Its next scheduled run, ISO 8601 (scheduled tasks)."""


class AutomationTaskListParams(WireModel):
    """``automation/task/list``."""

    workspace_path: PathText | None = None
    """Accepted and ignored (DotCraft's DTO has it): the server's workspace is used."""


class AutomationTaskListResult(WireModel):
    """Every readable task under `.craft/tasks/`, in id order."""

    tasks: list[AutomationTask]
    """The tasks (short form)."""


class AutomationTaskIdParams(WireModel):
    """``automation/task/read``, ``run`` and ``delete``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"taskId": "weekly-report"}]})

    workspace_path: PathText | None = None
    """Accepted and ignored."""
    task_id: Name = ""
    """The task's id."""


class AutomationTaskReadResult(AutomationTask):
    """The task itself (DotCraft's code and desktop), and again under `task` (its spec)."""

    task: AutomationTask
    """The same task."""


class AutomationTaskCreateParams(WireModel):
    """``automation/task/create``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "title": "Weekly report",
                    "description": "Summarise the week's merged changes.",
                    "schedule": {"kind": "every", "everyMs": 604800000},
                }
            ]
        }
    )

    workspace_path: PathText | None = None
    """Accepted and ignored."""
    title: Label = ""
    """Required, at most 200 characters; the task's id is made from it."""
    description: LongText | None = None
    """What the agent is to do (at most 10,000 characters): the body of `task.md`."""
    workflow_template: LongText | None = None
    """The whole `workflow.md`; absent: the template's (`templateId`), else a default one."""
    approval_policy: Name | None = None
    """`workspaceScope` (default) or `fullAuto`."""
    workspace_mode: Name | None = None
    """`project` (default) or `isolated`, for the default `workflow.md`."""
    schedule: AutomationSchedule | None = None
    """When it runs; absent or `once`: one run."""
    thread_binding: AutomationThreadBinding | None = None
    """Run its turns in this existing thread (it must exist and not be archived)."""
    template_id: Name | None = None
    """The template it was made from (kept in `task.md`)."""


class AutomationTaskCreateResult(WireModel):
    """DotCraft's code answers the first two; its spec answers `task`."""

    task_id: str
    """The new task's id."""
    task_directory: str
    """Its directory (absolute)."""
    task: AutomationTask
    """The task as stored."""


class AutomationTaskResult(WireModel):
    """``automation/task/run`` and ``updateBinding``."""

    task: AutomationTask
    """The task after the change."""


class AutomationTaskUpdateBindingParams(WireModel):
    """``automation/task/updateBinding``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"taskId": "weekly-report", "threadBinding": {"threadId": "thr_1"}}]
        }
    )

    workspace_path: PathText | None = None
    """Accepted and ignored."""
    task_id: Name = ""
    """The task's id."""
    thread_binding: AutomationThreadBinding | None = None
    """The new binding; `null` or a blank `threadId` unbinds."""


class AutomationOkResult(WireModel):
    """``{ok: true}``."""

    ok: Flag = True
    """Always `true`."""


class AutomationTemplate(WireModel):
    """A preset for a new task (DotCraft's ``AutomationTemplateWire``)."""

    id: str
    """The template's id."""
    title: str
    """Its title."""
    description: str | None = None
    """What it does."""
    icon: str | None = None
    """An emoji."""
    category: str | None = None
    """`review`, `digest`, `insight`, `watch`, `creative`, ..."""
    workflow_markdown: str
    """The whole `workflow.md` a task made from it gets."""
    default_schedule: AutomationSchedule | None = None
    """The schedule to suggest."""
    default_workspace_mode: str | None = None
    """`project` or `isolated`."""
    default_approval_policy: str | None = None
    """`workspaceScope` or `fullAuto`."""
    needs_thread_binding: Flag
    """The task is meant to run in an existing thread."""
    default_title: str | None = None
    """The title to suggest."""
    default_description: str | None = None
    """The description to suggest."""
    is_user: Flag | None = None
    """`true` for templates saved with `automation/template/save` (absent for built-ins)."""
    created_at: str | None = None
    """When a user template was first saved, ISO 8601."""
    updated_at: str | None = None
    """When a user template was last saved, ISO 8601."""


class AutomationTemplateListParams(WireModel):
    """``automation/template/list``."""

    locale: Name | None = None
    """`zh`, `zh-CN` or `zh-Hans` for the built-ins in Chinese; anything else: English."""


class AutomationTemplateListResult(WireModel):
    """The built-in templates, then the user's."""

    templates: list[AutomationTemplate]
    """The templates."""


class AutomationTemplateSaveParams(WireModel):
    """``automation/template/save``: create or replace a user template."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"title": "Nightly check", "workflowMarkdown": "Run the test suite."}]
        }
    )

    id: Name | None = None
    """`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`, not a built-in's; absent: `user-` + 10 hex digits."""
    title: Label = ""
    """Required, at most 200 characters."""
    description: LongText | None = None
    """What it does."""
    icon: Name | None = None
    """An emoji."""
    category: Name | None = None
    """A category."""
    workflow_markdown: LongText = ""
    """Required: the whole `workflow.md`."""
    default_schedule: AutomationSchedule | None = None
    """The schedule to suggest."""
    default_workspace_mode: Name | None = None
    """`project` or `isolated`."""
    default_approval_policy: Name | None = None
    """`workspaceScope` or `fullAuto`."""
    needs_thread_binding: Flag = False
    """The task is meant to run in an existing thread."""
    default_title: Label | None = None
    """The title to suggest."""
    default_description: LongText | None = None
    """The description to suggest."""


class AutomationTemplateResult(WireModel):
    """The template as saved."""

    template: AutomationTemplate
    """The template."""


class AutomationTemplateDeleteParams(WireModel):
    """``automation/template/delete``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "user-0123456789"}]})

    id: Name = ""
    """A user template's id (a missing one is fine)."""


class AutomationTaskUpdatedNotification(WireModel):
    """A task's status changed, or it got its thread."""

    workspace_path: str
    """The server's workspace."""
    task: AutomationTask
    """The task (short form)."""


_TASK_ERRORS = (rpc_errors.INVALID_PARAMS, rpc_errors.TASK_NOT_FOUND)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "automation/task/list",
        AutomationTaskListParams,
        AutomationTaskListResult,
        "automations",
        "Every task under `.craft/tasks/` read from disk (short form: no `description`, "
        "`agentSummary`); unreadable files are left out.",
        access="read",
    ),
    MethodSpec(
        "automation/task/read",
        AutomationTaskIdParams,
        AutomationTaskReadResult,
        "automations",
        "One task, read from disk: the task itself, and again under `task`.",
        _TASK_ERRORS,
        access="read",
    ),
    MethodSpec(
        "automation/task/create",
        AutomationTaskCreateParams,
        AutomationTaskCreateResult,
        "automations",
        "Write a new task's `task.md` and `workflow.md` under `.craft/tasks/<id>/`; its id is "
        "the title's slug and the UTC time. An unscheduled task runs at once (trusted "
        "workspace).",
        (
            rpc_errors.INVALID_PARAMS,
            rpc_errors.TASK_ALREADY_EXISTS,
            rpc_errors.THREAD_BINDING_INVALID,
        ),
    ),
    MethodSpec(
        "automation/task/run",
        AutomationTaskIdParams,
        AutomationTaskResult,
        "automations",
        "Make a task `pending` and due now (also a `completed` or `failed` one); it runs at once.",
        (*_TASK_ERRORS, rpc_errors.TASK_INVALID_STATUS),
    ),
    MethodSpec(
        "automation/task/delete",
        AutomationTaskIdParams,
        AutomationOkResult,
        "automations",
        "Delete a task's directory (not while it runs); its thread is kept.",
        (*_TASK_ERRORS, rpc_errors.TASK_INVALID_STATUS),
    ),
    MethodSpec(
        "automation/task/updateBinding",
        AutomationTaskUpdateBindingParams,
        AutomationTaskResult,
        "automations",
        "Bind a task to an existing thread, or unbind it (not while it runs).",
        (*_TASK_ERRORS, rpc_errors.TASK_INVALID_STATUS, rpc_errors.THREAD_BINDING_INVALID),
    ),
    MethodSpec(
        "automation/template/list",
        AutomationTemplateListParams,
        AutomationTemplateListResult,
        "automations",
        "The nine built-in templates, then the user's (`.craft/automations/templates/`).",
        access="read",
    ),
    MethodSpec(
        "automation/template/save",
        AutomationTemplateSaveParams,
        AutomationTemplateResult,
        "automations",
        "Create or replace a user template (`createdAt` is kept).",
        (rpc_errors.INVALID_PARAMS,),
    ),
    MethodSpec(
        "automation/template/delete",
        AutomationTemplateDeleteParams,
        AutomationOkResult,
        "automations",
        "Delete a user template (a missing one is fine; a built-in is refused).",
        (rpc_errors.INVALID_PARAMS,),
    ),
]

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "automation/task/updated",
        AutomationTaskUpdatedNotification,
        "all connections (not after optOutNotificationMethods)",
        "A task's status changed (pending, running, completed, failed) or it got its thread.",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
