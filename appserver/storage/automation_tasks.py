"""Automation tasks on disk, as DotCraft keeps them: ``.craft/tasks/<dir>/task.md``
(YAML front matter + the description) and ``workflow.md`` (docs/automations.md).

The files are the truth: every read goes to disk, so a task edited, added or
removed by hand (or by DotCraft Desktop's own server) is seen at once.
Read-modify-writes of ``task.md`` hold :meth:`TaskFiles.locked` (an ``flock``
every process serving the workspace takes), so a runner marking a task
``running`` and a client's ``automation/task/run`` cannot lose each other's
change. Front matter keys this server does not use (``template_id``, a user's
own) are kept when it rewrites a file.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from appserver.protocol.limits import INT64_MAX, INT64_MIN
from appserver.storage import craft_files
from appserver.storage.lock import open_lock_file

log = logging.getLogger("appserver.automations")

TASK_FILE = "task.md"
WORKFLOW_FILE = "workflow.md"
STATUSES = ("pending", "running", "completed", "failed")
RUN_IN_THREAD = "run-in-thread"
# A task file larger than this is not a task (it is skipped, as a broken one is).
MAX_TASK_FILE_BYTES = 4 * 1024 * 1024

# Keys this server reads and writes, in the order DotCraft writes them.
_SCHEDULE_KEYS = (
    "kind",
    "at_ms",
    "every_ms",
    "initial_delay_ms",
    "daily_hour",
    "daily_minute",
    "expr",
    "tz",
)
_OWN_KEYS = (
    "id",
    "title",
    "status",
    "created_at",
    "updated_at",
    "thread_id",
    "agent_summary",
    "approval_policy",
    "schedule",
    "thread_binding",
    "next_run_at",
)


class TaskFileError(ValueError):
    """A ``task.md`` that cannot be read as a task."""


@dataclass
class ScheduleRecord:
    """A task's schedule as written (``kind`` lower-cased; ``once`` is no schedule)."""

    kind: str
    at_ms: int | None = None
    every_ms: int | None = None
    initial_delay_ms: int | None = None
    daily_hour: int | None = None
    daily_minute: int | None = None
    expr: str | None = None
    tz: str | None = None

    def to_front(self) -> dict[str, Any]:
        values = {key: getattr(self, key) for key in _SCHEDULE_KEYS}
        return {key: value for key, value in values.items() if value is not None}


@dataclass
class BindingRecord:
    """The thread a bound task's turns run in."""

    thread_id: str
    mode: str = RUN_IN_THREAD


@dataclass
class TaskRecord:
    """One task. ``directory`` holds its files; ``id`` is the front matter's
    (the directory's name when it has none). ``body`` is the text after the
    front matter as written; ``extra`` the front matter keys kept unread."""

    id: str
    title: str
    directory: Path
    status: str = "pending"
    description: str = ""
    created_at: str | None = None
    updated_at: str | None = None
    thread_id: str | None = None
    agent_summary: str | None = None
    approval_policy: str | None = None
    schedule: ScheduleRecord | None = None
    thread_binding: BindingRecord | None = None
    next_run_at_ms: int | None = None
    body: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def iso_from_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds (``...Z``)."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def ms_from_iso(text: Any) -> int | None:
    """An ISO 8601 time (DotCraft writes 7 fractional digits and an offset) as
    epoch milliseconds; ``None`` when it is not one. A time without an offset is UTC."""
    if not isinstance(text, str) or not text.strip():
        return None
    value = text.strip().replace("Z", "+00:00").replace("z", "+00:00")
    head, dot, rest = value.partition(".")
    if dot:  # Python reads at most 6 fractional digits
        digits = len(rest) - len(rest.lstrip("0123456789"))
        value = head + "." + rest[: min(digits, 6)] + rest[digits:]
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return int(moment.timestamp() * 1000)
    except (OverflowError, OSError, ValueError):
        return None


def _iso(value: Any) -> str | None:
    ms = ms_from_iso(value)
    return None if ms is None else iso_from_ms(ms)


def _text(value: Any) -> str | None:
    """A scalar as text (a YAML number or boolean where text was meant)."""
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _integer(value: Any) -> int | None:
    """A 64-bit integer, or ``None`` for anything else (a number written as text counts)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


def schedule_from_front(value: Any) -> ScheduleRecord | None:
    """The ``schedule`` mapping (``hour``/``minute`` are read as aliases)."""
    if not isinstance(value, dict):
        return None
    kind = (_text(value.get("kind")) or "").strip().lower()
    if not kind or kind == "once":
        return None
    hour = value.get("daily_hour", value.get("hour"))
    minute = value.get("daily_minute", value.get("minute"))
    return ScheduleRecord(
        kind=kind,
        at_ms=_integer(value.get("at_ms")),
        every_ms=_integer(value.get("every_ms")),
        initial_delay_ms=_integer(value.get("initial_delay_ms")),
        daily_hour=_integer(hour),
        daily_minute=_integer(minute),
        expr=_text(value.get("expr")),
        tz=_text(value.get("tz")),
    )


def _binding(value: Any) -> BindingRecord | None:
    if not isinstance(value, dict):
        return None
    thread_id = (_text(value.get("thread_id")) or "").strip()
    if not thread_id:
        return None
    mode = (_text(value.get("mode")) or "").strip()
    return BindingRecord(thread_id, mode or RUN_IN_THREAD)


def parse_task(directory: Path, text: str) -> TaskRecord:
    """The task in ``text`` (a ``task.md``); :class:`TaskFileError` when it is none."""
    from appserver.storage import front_matter  # YAML loads when a file is read, not at start

    try:
        parts = front_matter.split(text)
    except front_matter.FrontMatterError as exc:
        raise TaskFileError(str(exc)) from None
    if parts is None:
        raise TaskFileError("task.md must start with YAML front matter (--- ... ---)")
    front, body = parts
    status = (_text(front.get("status")) or "").strip().lower() or "pending"
    if status not in STATUSES:
        raise TaskFileError(f"unsupported status '{status}'")
    task_id = (_text(front.get("id")) or "").strip() or directory.name
    return TaskRecord(
        id=task_id,
        title=(_text(front.get("title")) or "").strip() or task_id or "Untitled",
        directory=directory,
        status=status,
        description=body.lstrip("\r\n").rstrip(),
        created_at=_iso(front.get("created_at")),
        updated_at=_iso(front.get("updated_at")),
        thread_id=(_text(front.get("thread_id")) or "").strip() or None,
        agent_summary=_text(front.get("agent_summary")),
        approval_policy=(_text(front.get("approval_policy")) or "").strip() or None,
        schedule=schedule_from_front(front.get("schedule")),
        thread_binding=_binding(front.get("thread_binding")),
        next_run_at_ms=ms_from_iso(front.get("next_run_at")),
        body=body.rstrip(),
        extra={key: value for key, value in front.items() if key not in _OWN_KEYS},
    )


def render_task(task: TaskRecord) -> str:
    """``task.md`` for ``task``: DotCraft's keys in its order (unset ones left
    out), the kept keys, then the body."""
    values: dict[str, Any] = {
        "id": task.id,
        "title": task.title,
        "status": task.status,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
        "thread_id": task.thread_id,
        "agent_summary": task.agent_summary,
        "approval_policy": task.approval_policy,
        "schedule": task.schedule.to_front() if task.schedule is not None else None,
        "thread_binding": (
            {"thread_id": task.thread_binding.thread_id, "mode": task.thread_binding.mode}
            if task.thread_binding is not None
            else None
        ),
        "next_run_at": iso_from_ms(task.next_run_at_ms) if task.next_run_at_ms else None,
    }
    front = {key: value for key, value in values.items() if value is not None}
    front.update({key: value for key, value in task.extra.items() if key not in front})
    from appserver.storage import front_matter  # YAML loads when a file is read, not at start

    return front_matter.compose(front, task.body + "\n")


def _system_ms() -> int:
    return int(time.time() * 1000)


class TaskFiles:
    """The tasks under ``<craft_dir>/tasks`` (created when first needed).
    ``now_ms`` stamps ``updated_at`` (the runner's clock, which tests move)."""

    def __init__(self, craft_dir: Path, now_ms: Callable[[], int] = _system_ms) -> None:
        self.craft_dir = craft_dir
        self.root = craft_dir / "tasks"
        self.now_ms = now_ms
        self._lock = anyio.Lock()

    @asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Hold the tasks' write lock (this process's tasks, then every process's)."""
        async with self._lock:
            fd = await anyio.to_thread.run_sync(self._lock_across_processes)
            try:
                yield
            finally:
                os.close(fd)  # releases the flock

    def _lock_across_processes(self) -> int:
        fd = open_lock_file(self.craft_dir / "locks", "automations.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    async def read_all(self) -> list[TaskRecord]:
        """Every readable task, by directory name (broken files are logged and left out)."""
        return await anyio.to_thread.run_sync(self._list)

    async def find(self, task_id: str) -> TaskRecord | None:
        """The task whose id is ``task_id`` (exactly), or ``None``."""
        return next((task for task in await self.read_all() if task.id == task_id), None)

    async def workflow(self, task: TaskRecord) -> str | None:
        """The task's ``workflow.md`` (``None`` when it has none)."""
        return await anyio.to_thread.run_sync(self._read, task.directory.name, WORKFLOW_FILE)

    async def create(self, task: TaskRecord, workflow: str) -> bool:
        """Write a new task's directory; ``False`` when its directory exists."""
        return await anyio.to_thread.run_sync(self._create, task, workflow)

    async def save(self, task: TaskRecord) -> bool:
        """Rewrite ``task.md`` with ``updated_at`` now (as DotCraft does); ``False``
        (nothing written) when the task's directory is gone (deleted meanwhile)."""
        task.updated_at = iso_from_ms(self.now_ms())
        task.created_at = task.created_at or task.updated_at
        return await anyio.to_thread.run_sync(self._save, task)

    async def delete(self, task: TaskRecord) -> None:
        """Delete the task's directory and everything in it."""
        await anyio.to_thread.run_sync(self._delete, task.directory.name)

    # --- in a worker thread ----------------------------------------------------------

    def _list(self) -> list[TaskRecord]:
        try:
            with craft_files.directory(self.craft_dir, ("tasks",), create=True) as root:
                names = craft_files.subdirectories(root)
        except OSError as exc:
            log.warning("cannot list %s: %s", self.root, exc)
            return []
        tasks = []
        for name in names:
            try:
                text = self._read(name, TASK_FILE)
                if text is not None:
                    tasks.append(parse_task(self.root / name, text))
            except (OSError, ValueError) as exc:
                log.warning("skipping the task in %s: %s", self.root / name, exc)
        return tasks

    def _read(self, name: str, file_name: str) -> str | None:
        try:
            with craft_files.directory(self.craft_dir, ("tasks", name)) as folder:
                return craft_files.read_text(folder, file_name, MAX_TASK_FILE_BYTES)
        except FileNotFoundError:
            return None

    def _create(self, task: TaskRecord, workflow: str) -> bool:
        with craft_files.directory(self.craft_dir, ("tasks",), create=True) as root:
            if not craft_files.make_directory(root, task.directory.name):
                return False
        with craft_files.directory(self.craft_dir, ("tasks", task.directory.name)) as folder:
            craft_files.write_text(folder, WORKFLOW_FILE, workflow)
            craft_files.write_text(folder, TASK_FILE, render_task(task))
        return True

    def _save(self, task: TaskRecord) -> bool:
        try:
            with craft_files.directory(self.craft_dir, ("tasks", task.directory.name)) as folder:
                craft_files.write_text(folder, TASK_FILE, render_task(task))
        except FileNotFoundError:
            return False
        return True

    def _delete(self, name: str) -> None:
        with craft_files.directory(self.craft_dir, ("tasks",)) as root:
            craft_files.remove_tree(root, name)
