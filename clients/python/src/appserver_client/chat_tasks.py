"""The chat's view of the workspace's automation tasks (docs/automations.md):
``/tasks`` lists them, ``/tasks run N`` (or an id) runs one, and a compact ``⚙``
line says when one starts running, is done, failed or waits for its next run.

The list comes from ``automation/task/list``, read anew each time; the lines
from ``automation/task/updated``, which the server sends to every connection on
each status change of a run. A line is printed only when a task's status
changed (a run's second ``running``, which brings its thread, prints nothing).
A server that does not advertise the ``automations`` capability (a workspace can
switch them off) has no tasks to show.

Titles and ids come from files anyone may have written: they are printed with
hidden characters revealed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from appserver_client.chat_exact import reveal
from appserver_client.client import AppServerClient
from appserver_client.errors import AppServerError, RpcError
from appserver_client.notifications import Notification

Note = Callable[[str], None]
WATCHED = ("automation/task/updated",)
MARK = "⚙"
USAGE = "Usage: /tasks (list them), /tasks run N (N from /tasks, or a task's id)."
# The protocol's status words as the chat says them (the web page's words.js says
# the same at more length).
STATUS_WORDS = {"pending": "waiting", "running": "running", "completed": "done", "failed": "failed"}
_UNITS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1_000, "second"))


def title_of(task: dict[str, Any]) -> str:
    """The task's title (else its id), fit for one line."""
    title = task.get("title") or task.get("id") or "?"
    return reveal(" ".join(str(title).split())[:60])


def local_time(value: object) -> str:
    """An ISO 8601 time of the server's as ``2026-11-29 09:00`` here ('' if it is none)."""
    if not isinstance(value, str) or not value:
        return ""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return reveal(value[:32])
    if moment.tzinfo is not None:
        moment = moment.astimezone()
    return moment.strftime("%Y-%m-%d %H:%M")


def every(milliseconds: object) -> str:
    """``3600000`` -> ``every hour``, ``300000`` -> ``every 5 minutes``."""
    if not isinstance(milliseconds, int) or isinstance(milliseconds, bool) or milliseconds <= 0:
        return "every (no interval)"
    for size, unit in _UNITS:
        if milliseconds % size == 0:
            count = milliseconds // size
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {milliseconds} ms"


def schedule_words(schedule: object) -> str:
    """``once``, ``every 7 days``, ``daily at 09:00 (UTC)``, ``once at …``."""
    if not isinstance(schedule, dict):
        return "once"
    kind = schedule.get("kind") or "once"
    if kind == "once":
        return "once"
    if kind == "every":
        return every(schedule.get("everyMs"))
    if kind == "at":
        at_ms = schedule.get("atMs")
        if isinstance(at_ms, int) and not isinstance(at_ms, bool):
            try:
                return f"once at {datetime.fromtimestamp(at_ms / 1000).strftime('%Y-%m-%d %H:%M')}"
            except (OverflowError, OSError, ValueError):
                pass
        return "once at an unknown time"
    if kind == "daily":
        hour, minute = schedule.get("dailyHour"), schedule.get("dailyMinute")
        zone = reveal(str(schedule.get("tz") or "UTC"))
        return f"daily at {_two(hour)}:{_two(minute)} ({zone})"
    # A kind written by hand or by a newer DotCraft: listed, never run here.
    return f"{reveal(str(kind))} (not run here)"


def status_words(task: dict[str, Any]) -> str:
    """``running``, ``done``, ``waiting, next run 2026-11-29 09:00``."""
    status = str(task.get("status") or "")
    words = STATUS_WORDS.get(status) or reveal(status)
    following = local_time(task.get("nextRunAt")) if status == "pending" else ""
    return f"{words}, next run {following}" if following else words


def thread_of(task: dict[str, Any]) -> str:
    """The thread the task ran in, else the one it is bound to ('' if none yet)."""
    thread_id = task.get("threadId")
    if isinstance(thread_id, str) and thread_id:
        return thread_id
    binding = task.get("threadBinding")
    bound = binding.get("threadId") if isinstance(binding, dict) else None
    return f"{bound} (bound)" if isinstance(bound, str) and bound else ""


class Tasks:
    """``/tasks`` and the ``⚙`` lines for one chat."""

    def __init__(self, client: AppServerClient, note: Note) -> None:
        self.client = client
        self.note = note  # prints one line on its own, wherever the chat is
        self.listed: list[str] = []  # task ids, as /tasks last numbered them
        self.said: dict[str, str] = {}  # task id -> the status last shown
        # Collects from now: nothing that comes before watch() runs is lost.
        self.stream = client.notifications(methods=WATCHED, buffer=None)

    def offered(self) -> bool:
        """Whether the server serves the automation methods."""
        return bool(self.client.server_capabilities.get("automations"))

    # --- what arrives -------------------------------------------------------

    async def watch(self) -> None:
        """Print a line for each status change, for the chat's whole life."""
        try:
            async for notification in self.stream:
                self.updated(notification)
        except AppServerError:
            pass  # the connection is gone for good: the chat says so itself

    def updated(self, notification: Notification) -> None:
        """One ``automation/task/updated``: a line when the task's status changed."""
        task = notification.params.get("task")
        if not isinstance(task, dict) or not isinstance(task.get("id"), str):
            return
        status = str(task.get("status") or "")
        if self.said.get(task["id"]) == status:
            return
        self.said[task["id"]] = status
        self.note(f"{MARK} task {title_of(task)}: {status_words(task)}")

    # --- /tasks -------------------------------------------------------------

    async def command(self, rest: str) -> None:
        """``/tasks`` (list) or ``/tasks run N|ID``."""
        if not self.offered():
            self.note("This server has no automation tasks (the workspace switched them off).")
            return
        action, _, choice = rest.partition(" ")
        if not action:
            await self.show()
        elif action == "run" and choice.strip():
            await self.run(choice.strip())
        else:
            self.note(USAGE)

    async def show(self) -> None:
        """The workspace's tasks, numbered for ``/tasks run N``."""
        tasks: list[dict[str, Any]] = [
            dict(task)
            for task in (await self.client.automation_task_list()).get("tasks") or []
            if isinstance(task, dict) and isinstance(task.get("id"), str)
        ]
        self.listed = [task["id"] for task in tasks]
        if not tasks:
            self.note("This workspace has no automation tasks (.craft/tasks/).")
            return
        self.note("Tasks of this workspace (/tasks run N runs one now):")
        for number, task in enumerate(tasks, 1):
            self.said[task["id"]] = str(task.get("status") or "")
            facts = f"{status_words(task)}, {schedule_words(task.get('schedule'))}"
            thread = thread_of(task)
            self.note(
                f" {number:>2}) {title_of(task)}  [{facts}]  {reveal(task['id'])}"
                + (f"  thread {reveal(thread)}" if thread else "")
            )

    async def run(self, choice: str) -> None:
        """Run task ``choice``: its number in ``/tasks``, or its id."""
        if choice.isdigit() and 1 <= int(choice) <= len(self.listed):
            task_id = self.listed[int(choice) - 1]
        elif choice.isdigit():
            known = len(self.listed)
            self.note(f"No task {choice}: /tasks lists {known}." if known else USAGE)
            return
        else:
            task_id = choice
        try:
            result = await self.client.automation_task_run(task_id=task_id)
        except RpcError as exc:
            self.note(f"Not run: {reveal(exc.message)}")
            return
        self.note(f"Running {title_of(dict(result['task']))} ({reveal(task_id)}) now.")


def _two(value: object) -> str:
    number = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return f"{number:02d}"
