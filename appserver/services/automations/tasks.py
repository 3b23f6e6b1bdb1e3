"""``automation/task/list|read|create|run|delete|updateBinding`` over the task files.

Answers and errors are DotCraft's (docs/automations.md), with its bugs fixed:
bindings are checked (``-32055``), schedule kinds nothing runs are refused,
and every read is of the files (DotCraft answered from a cache that could hide
a hand edit until a restart).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import BaseModel

from appserver.cron.automations import timing
from appserver.cron.automations.runner import AutomationRunner
from appserver.cron.automations.wire import schedule_record, task_wire
from appserver.cron.automations.workflow import default_workflow
from appserver.cron.schedule import ScheduleError
from appserver.protocol import automations as automation_wire
from appserver.protocol import errors as rpc_errors
from appserver.rpc.connection import RequestContext
from appserver.storage.automation_tasks import (
    RUN_IN_THREAD,
    BindingRecord,
    TaskRecord,
    iso_from_ms,
)

if TYPE_CHECKING:
    from appserver.services.automations.templates import TemplateHandlers
    from appserver.services.context import FamilyContext

MAX_TITLE = 200
MAX_DESCRIPTION = 10_000
APPROVAL_POLICIES = {"workspacescope": "workspaceScope", "fullauto": "fullAuto"}
# Read from older DotCraft files; not written by create.
_LEGACY_POLICIES = {"autoapprove": "autoApprove", "default": "default"}
_SLUG = re.compile(r"[^a-z0-9]+")
_DEVICE_NAMES = {"con", "prn", "aux", "nul", *(f"com{n}" for n in range(1, 5))}
_DEVICE_NAMES |= {f"lpt{n}" for n in range(1, 5)}


def _slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-")


def task_id_for(title: str, template_id: str | None, now_ms: int) -> str:
    """DotCraft's id: the title's slug (else the template's, else ``task``), at
    most 40 characters, then ``-`` and the UTC time ``yyyyMMddHHmmss``."""
    slug = _slug(title) or _slug(template_id or "")
    slug = slug[:40].rstrip("-") or "task"
    return f"{slug}-{iso_from_ms(now_ms)[:19].replace('-', '').replace(':', '').replace('T', '')}"


def _valid_task_id(task_id: str) -> bool:
    return (
        bool(task_id.strip())
        and ".." not in task_id
        and not any(mark in task_id for mark in "/\\:\0")
        and task_id.lower() not in _DEVICE_NAMES
    )


class TaskHandlers:
    """The task methods."""

    def __init__(
        self, server: FamilyContext, runner: AutomationRunner, templates: TemplateHandlers
    ) -> None:
        self.server = server
        self.runner = runner
        self.files = runner.files
        self.templates = templates

    def register(self) -> None:
        """Serve the six task methods."""
        router = self.server.router
        router.register("automation/task/list", self.list_tasks)
        router.register("automation/task/read", self.read)
        router.register("automation/task/create", self.create)
        router.register("automation/task/run", self.run)
        router.register("automation/task/delete", self.delete)
        router.register("automation/task/updateBinding", self.update_binding)

    async def _task(self, task_id: str) -> TaskRecord:
        task = await self.files.find(task_id)
        if task is None:
            raise rpc_errors.task_not_found(task_id)
        return task

    async def list_tasks(
        self, ctx: RequestContext, params: automation_wire.AutomationTaskListParams
    ) -> BaseModel:
        return automation_wire.AutomationTaskListResult(
            tasks=[task_wire(task) for task in await self.files.read_all()]
        )

    async def read(
        self, ctx: RequestContext, params: automation_wire.AutomationTaskIdParams
    ) -> BaseModel:
        task = task_wire(await self._task(params.task_id), detailed=True)
        return automation_wire.AutomationTaskReadResult(**dict(task), task=task)

    async def create(
        self, ctx: RequestContext, params: automation_wire.AutomationTaskCreateParams
    ) -> BaseModel:
        title = params.title.strip()
        if not title:
            raise rpc_errors.invalid_params("'title' is required.")
        if len(params.title) > MAX_TITLE:
            raise rpc_errors.invalid_params(f"'title' must be {MAX_TITLE} characters or less.")
        description = params.description or ""
        if len(description) > MAX_DESCRIPTION:
            raise rpc_errors.invalid_params(
                f"'description' must be {MAX_DESCRIPTION} characters or less."
            )
        workflow = await self._workflow(params)
        policy = _approval_policy(params.approval_policy)
        now = self.runner.clock.now_ms()
        try:
            schedule = timing.check_schedule(schedule_record(params.schedule), now)
        except ScheduleError as exc:
            raise rpc_errors.invalid_params(f"'schedule.{exc.field}': {exc.message}") from None
        binding = await self._binding(params.thread_binding)
        task_id = task_id_for(title, params.template_id, now)
        if not _valid_task_id(task_id):
            raise rpc_errors.invalid_params("Generated task ID contains invalid characters.")
        template_id = (params.template_id or "").strip()
        task = TaskRecord(
            id=task_id,
            title=title,
            directory=self.files.root / task_id,
            description=description.strip(),
            created_at=iso_from_ms(now),
            updated_at=iso_from_ms(now),
            approval_policy=policy,
            schedule=schedule,
            thread_binding=binding,
            next_run_at_ms=timing.first_run(schedule, now, now) if schedule else None,
            body="\n" + description,
            extra={"template_id": template_id} if template_id else {},
        )
        if not await self.files.create(task, workflow):
            raise rpc_errors.task_already_exists(task_id)
        self.runner.wake()
        return automation_wire.AutomationTaskCreateResult(
            task_id=task_id, task_directory=str(task.directory), task=task_wire(task, True)
        )

    async def _workflow(self, params: automation_wire.AutomationTaskCreateParams) -> str:
        """The new task's ``workflow.md``: given, else its template's, else the default."""
        if params.workflow_template and params.workflow_template.strip():
            return params.workflow_template
        template = await self.templates.find((params.template_id or "").strip())
        if template is not None:
            return template.workflow_markdown
        mode = (params.workspace_mode or "").strip().lower() or "project"
        if mode not in ("project", "isolated"):
            raise rpc_errors.invalid_params("'workspaceMode' must be 'project' or 'isolated'.")
        return default_workflow(mode)

    async def _binding(
        self, binding: automation_wire.AutomationThreadBinding | None
    ) -> BindingRecord | None:
        """A checked binding (``None``: unbound). The thread must exist, not be
        archived and keep its history on the server (``-32055`` otherwise)."""
        if binding is None or not binding.thread_id.strip():
            return None
        mode = (binding.mode or "").strip() or RUN_IN_THREAD
        if mode != RUN_IN_THREAD:
            raise rpc_errors.invalid_params(f"'threadBinding.mode' must be '{RUN_IN_THREAD}'.")
        thread_id = binding.thread_id.strip()
        thread = await self.server.threads.repo.get(thread_id)
        if thread is None:
            raise rpc_errors.thread_binding_invalid(f"Thread not found: {thread_id}")
        if thread.status == "archived":
            raise rpc_errors.thread_binding_invalid(f"Thread is archived: {thread_id}")
        if thread.history_mode == "client":
            raise rpc_errors.thread_binding_invalid(
                f"Thread {thread_id} uses client-managed history; automation turns need a "
                "server-history thread."
            )
        return BindingRecord(thread.id, mode)

    async def run(
        self, ctx: RequestContext, params: automation_wire.AutomationTaskIdParams
    ) -> BaseModel:
        _require_task_id(params.task_id)
        async with self.files.locked():
            task = await self._task(params.task_id)
            if task.status == "running":
                raise rpc_errors.task_invalid_status("Cannot run a task that is already running.")
            task.status = "pending"
            # Due now; a waiting retry is dropped (the user asked for a run).
            task.next_run_at_ms = self.runner.clock.now_ms() - 1 if task.schedule else None
            await self.files.save(task)
            await self.runner.runs.forget_retries(task.id)
        self.runner.wake()
        return automation_wire.AutomationTaskResult(task=task_wire(task, True))

    async def delete(
        self, ctx: RequestContext, params: automation_wire.AutomationTaskIdParams
    ) -> BaseModel:
        async with self.files.locked():
            task = await self._task(params.task_id)
            if task.status == "running":
                raise rpc_errors.task_invalid_status(
                    f"Task '{task.id}' cannot be deleted while the agent is running."
                )
            await self.files.delete(task)
            await self.runner.runs.forget_retries(task.id)
        return automation_wire.AutomationOkResult()

    async def update_binding(
        self, ctx: RequestContext, params: automation_wire.AutomationTaskUpdateBindingParams
    ) -> BaseModel:
        _require_task_id(params.task_id)
        async with self.files.locked():
            task = await self._task(params.task_id)
            if task.status == "running":
                raise rpc_errors.task_invalid_status(
                    "Cannot change binding while the task is running. Cancel the run first."
                )
            task.thread_binding = await self._binding(params.thread_binding)
            await self.files.save(task)
        self.runner.wake()
        return automation_wire.AutomationTaskResult(task=task_wire(task, True))


def _require_task_id(task_id: str) -> None:
    if not task_id.strip():
        raise rpc_errors.invalid_params("'taskId' is required.")


def _approval_policy(value: str | None) -> str:
    """``workspaceScope`` (the default) or ``fullAuto``; DotCraft's legacy names
    are taken as they are read from files."""
    text = (value or "").strip()
    if not text:
        return "workspaceScope"
    known = {**APPROVAL_POLICIES, **_LEGACY_POLICIES}.get(text.lower())
    if known is None:
        raise rpc_errors.invalid_params("'approvalPolicy' must be 'workspaceScope' or 'fullAuto'.")
    return known
