"""User automation templates on disk, as DotCraft keeps them:
``.craft/automations/templates/<id>/template.md``, YAML front matter (``id``,
``title``, ``description``, ``icon``, ``category``, ``default_schedule``,
``default_workspace_mode``, ``default_approval_policy``,
``needs_thread_binding``, ``default_title``, ``default_description``,
``created_at``, ``updated_at``) followed by the whole ``workflow.md`` a task
made from it gets."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from appserver.storage import craft_files
from appserver.storage.automation_tasks import ScheduleRecord, iso_from_ms, ms_from_iso
from appserver.storage.automation_tasks import schedule_from_front as _schedule

log = logging.getLogger("appserver.automations")

TEMPLATE_FILE = "template.md"
ID_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$")
_MAX_TEMPLATE_BYTES = 4 * 1024 * 1024
_PATH = ("automations", "templates")


@dataclass
class TemplateRecord:
    """A template (built-in or the user's)."""

    id: str
    title: str
    workflow_markdown: str
    description: str | None = None
    icon: str | None = None
    category: str | None = None
    default_schedule: ScheduleRecord | None = None
    default_workspace_mode: str | None = None
    default_approval_policy: str | None = None
    needs_thread_binding: bool = False
    default_title: str | None = None
    default_description: str | None = None
    is_user: bool = False
    created_at: str | None = None
    updated_at: str | None = None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value)
    return text if text.strip() else None


def _iso(value: Any) -> str | None:
    ms = ms_from_iso(value)
    return None if ms is None else iso_from_ms(ms)


def parse_template(directory_name: str, text: str) -> TemplateRecord | None:
    """The template in ``text``; ``None`` (logged) when it has no front matter
    or its id has not the template shape."""
    from appserver.storage import front_matter  # YAML loads when a file is read, not at start

    try:
        parts = front_matter.split(text)
    except front_matter.FrontMatterError as exc:
        log.warning("skipping user template %s: %s", directory_name, exc)
        return None
    if parts is None:
        log.warning("skipping user template %s: no YAML front matter", directory_name)
        return None
    front, body = parts
    template_id = _text(front.get("id")) or directory_name
    if not ID_PATTERN.fullmatch(template_id):
        log.warning("skipping user template with the invalid id %r", template_id)
        return None
    return TemplateRecord(
        id=template_id,
        title=(_text(front.get("title")) or template_id).strip(),
        workflow_markdown=body.rstrip(),
        description=_text(front.get("description")),
        icon=_text(front.get("icon")),
        category=_text(front.get("category")),
        default_schedule=_schedule(front.get("default_schedule")),
        default_workspace_mode=_text(front.get("default_workspace_mode")),
        default_approval_policy=_text(front.get("default_approval_policy")),
        needs_thread_binding=front.get("needs_thread_binding") is True,
        default_title=_text(front.get("default_title")),
        default_description=_text(front.get("default_description")),
        is_user=True,
        created_at=_iso(front.get("created_at")),
        updated_at=_iso(front.get("updated_at")),
    )


def render_template(template: TemplateRecord) -> str:
    """``template.md``: DotCraft's keys in its order, unset ones left out."""
    values: dict[str, Any] = {
        "id": template.id,
        "title": template.title,
        "description": template.description,
        "icon": template.icon,
        "category": template.category,
        "default_schedule": (
            template.default_schedule.to_front() if template.default_schedule else None
        ),
        "default_workspace_mode": template.default_workspace_mode,
        "default_approval_policy": template.default_approval_policy,
        "needs_thread_binding": template.needs_thread_binding,
        "default_title": template.default_title,
        "default_description": template.default_description,
        "created_at": template.created_at,
        "updated_at": template.updated_at,
    }
    front = {key: value for key, value in values.items() if value is not None}
    from appserver.storage import front_matter  # YAML loads when a file is read, not at start

    return front_matter.compose(front, template.workflow_markdown)


class TemplateFiles:
    """The user's templates under ``<craft_dir>/automations/templates``."""

    def __init__(self, craft_dir: Path) -> None:
        self.craft_dir = craft_dir
        self.root = craft_dir.joinpath(*_PATH)
        self._lock = anyio.Lock()

    async def read_all(self) -> list[TemplateRecord]:
        """Every readable template, by directory name."""
        return await anyio.to_thread.run_sync(self._list)

    async def save(self, template: TemplateRecord) -> TemplateRecord:
        """Create or replace ``template`` (its ``id`` already checked); an
        existing template's ``created_at`` is kept. Returns it as written."""
        async with self._lock:
            return await anyio.to_thread.run_sync(self._save, template)

    async def delete(self, template_id: str) -> None:
        """Delete the template's directory (nothing to do when it is missing)."""
        async with self._lock:
            await anyio.to_thread.run_sync(self._delete, template_id)

    # --- in a worker thread ----------------------------------------------------------

    def _list(self) -> list[TemplateRecord]:
        try:
            with craft_files.directory(self.craft_dir, _PATH, create=True) as root:
                names = craft_files.subdirectories(root)
        except OSError as exc:
            log.warning("cannot list %s: %s", self.root, exc)
            return []
        templates = []
        for name in names:
            try:
                with craft_files.directory(self.craft_dir, (*_PATH, name)) as folder:
                    text = craft_files.read_text(folder, TEMPLATE_FILE, _MAX_TEMPLATE_BYTES)
            except (OSError, ValueError) as exc:
                log.warning("skipping user template %s: %s", name, exc)
                continue
            if text is not None and (template := parse_template(name, text)) is not None:
                templates.append(template)
        return templates

    def _save(self, template: TemplateRecord) -> TemplateRecord:
        with craft_files.directory(self.craft_dir, (*_PATH, template.id), create=True) as folder:
            try:
                existing = craft_files.read_text(folder, TEMPLATE_FILE, _MAX_TEMPLATE_BYTES)
            except (OSError, ValueError):
                existing = None
            previous = parse_template(template.id, existing) if existing is not None else None
            if previous is not None and previous.created_at is not None:
                template.created_at = previous.created_at
            craft_files.write_text(folder, TEMPLATE_FILE, render_template(template))
        return template

    def _delete(self, template_id: str) -> None:
        try:
            with craft_files.directory(self.craft_dir, _PATH) as root:
                craft_files.remove_tree(root, template_id)
        except FileNotFoundError:
            pass
