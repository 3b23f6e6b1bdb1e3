"""``automation/template/list|save|delete``: the built-in templates and the user's."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from pydantic import BaseModel

from appserver.cron.automations.runner import AutomationRunner
from appserver.cron.automations.timing import KINDS
from appserver.cron.automations.wire import schedule_record, schedule_wire
from appserver.protocol import automations as automation_wire
from appserver.protocol import errors as rpc_errors
from appserver.rpc.connection import RequestContext
from appserver.services.automations.builtin_templates import BUILTIN_IDS, builtin_templates
from appserver.storage.automation_tasks import iso_from_ms
from appserver.storage.automation_templates import ID_PATTERN, TemplateFiles, TemplateRecord

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

MAX_TITLE = 200


def template_wire(template: TemplateRecord) -> automation_wire.AutomationTemplate:
    """A template on the wire (blank texts left out; ``isUser`` only when true)."""
    return automation_wire.AutomationTemplate(
        id=template.id,
        title=template.title,
        description=template.description or None,
        icon=template.icon or None,
        category=template.category or None,
        workflow_markdown=template.workflow_markdown,
        default_schedule=schedule_wire(template.default_schedule),
        default_workspace_mode=template.default_workspace_mode,
        default_approval_policy=template.default_approval_policy,
        needs_thread_binding=template.needs_thread_binding,
        default_title=template.default_title,
        default_description=template.default_description,
        is_user=True if template.is_user else None,
        created_at=template.created_at,
        updated_at=template.updated_at,
    )


def _blank_to_none(value: str | None) -> str | None:
    return value if value is not None and value.strip() else None


class TemplateHandlers:
    """The template methods."""

    def __init__(self, server: FamilyContext, runner: AutomationRunner) -> None:
        self.server = server
        self.runner = runner
        self.files = TemplateFiles(server.craft_dir)

    def register(self) -> None:
        """Serve the three template methods."""
        router = self.server.router
        router.register("automation/template/list", self.list_templates)
        router.register("automation/template/save", self.save)
        router.register("automation/template/delete", self.delete)

    async def find(self, template_id: str) -> TemplateRecord | None:
        """The built-in or user template ``template_id`` (``None``: no such template)."""
        if not template_id:
            return None
        for template in [*builtin_templates(None), *await self.files.read_all()]:
            if template.id == template_id:
                return template
        return None

    async def list_templates(
        self, ctx: RequestContext, params: automation_wire.AutomationTemplateListParams
    ) -> BaseModel:
        templates = [*builtin_templates(params.locale), *await self.files.read_all()]
        return automation_wire.AutomationTemplateListResult(
            templates=[template_wire(template) for template in templates]
        )

    async def save(
        self, ctx: RequestContext, params: automation_wire.AutomationTemplateSaveParams
    ) -> BaseModel:
        if not params.title.strip():
            raise rpc_errors.invalid_params("'title' is required.")
        if len(params.title) > MAX_TITLE:
            raise rpc_errors.invalid_params(f"'title' must be {MAX_TITLE} characters or less.")
        if not params.workflow_markdown.strip():
            raise rpc_errors.invalid_params("'workflowMarkdown' is required.")
        template_id = (params.id or "").strip() or "user-" + secrets.token_hex(5)
        _check_id(template_id, "is reserved by a built-in template.")
        schedule = schedule_record(params.default_schedule)
        if schedule is not None and schedule.kind not in KINDS:
            raise rpc_errors.invalid_params(
                "'defaultSchedule.kind' must be one of " + ", ".join(KINDS) + "."
            )
        now = iso_from_ms(self.runner.clock.now_ms())
        template = TemplateRecord(
            id=template_id,
            title=params.title.strip(),
            workflow_markdown=params.workflow_markdown,
            description=_blank_to_none(params.description),
            icon=_blank_to_none(params.icon),
            category=_blank_to_none(params.category),
            default_schedule=schedule,
            default_workspace_mode=_blank_to_none(params.default_workspace_mode),
            default_approval_policy=_blank_to_none(params.default_approval_policy),
            needs_thread_binding=params.needs_thread_binding,
            default_title=_blank_to_none(params.default_title),
            default_description=_blank_to_none(params.default_description),
            is_user=True,
            created_at=now,
            updated_at=now,
        )
        saved = await self.files.save(template)
        return automation_wire.AutomationTemplateResult(template=template_wire(saved))

    async def delete(
        self, ctx: RequestContext, params: automation_wire.AutomationTemplateDeleteParams
    ) -> BaseModel:
        if not params.id.strip():
            raise rpc_errors.invalid_params("'id' is required.")
        _check_id(params.id, "is a built-in template and cannot be deleted.")
        await self.files.delete(params.id)
        return automation_wire.AutomationOkResult()


def _check_id(template_id: str, built_in: str) -> None:
    """``-32602`` for a built-in's id or one not of the template shape."""
    if template_id in BUILTIN_IDS:
        raise rpc_errors.invalid_params(f"Template id '{template_id}' {built_in}")
    if not ID_PATTERN.fullmatch(template_id):
        raise rpc_errors.invalid_params("'id' must match ^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$.")
