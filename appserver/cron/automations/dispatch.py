"""One run of an automation task: rounds of turns in its thread, then its outcome.

The runner (``runner.py``) has claimed the task; here it is marked ``running``,
given its thread (the bound one, or its own: identity ``automations`` /
``task-<id>``, made once and kept), and its workflow's steps run as turns,
round after round, until ``max_rounds``, a failed or cancelled turn, or
``CompleteLocalTask``. Then the task is ``completed``, ``failed``, or (a
scheduled one) ``pending`` again with its next run. Each status change is
announced as ``automation/task/updated``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from appserver.cron.automations import timing
from appserver.cron.automations.workflow import load
from appserver.cron.clock import Clock
from appserver.cron.runner import JobRunner, ShuttingDown, ThreadSpec, Trigger
from appserver.runtime.threads import Threads
from appserver.runtime.turns import ActiveTurn
from appserver.storage.automation_tasks import TaskFiles, TaskRecord
from appserver.tools.profiles import LOCAL_TASK_PROFILE

log = logging.getLogger("appserver.automations")

CHANNEL = "automations"
TRIGGER_KIND = "automation"
# DotCraft's task approval policies that let the agent act outside the workspace.
_FULL_AUTO = ("fullauto", "autoapprove")


class Ending(Enum):
    """How a dispatch ended, for the runner's bookkeeping."""

    DONE = "done"  # the task has its outcome (or nothing was to be done)
    INTERRUPTED = "interrupted"  # the server stopped under it: try again later


@dataclass
class TurnRegistry:
    """Which task's run started which turn (``CompleteLocalTask`` asks)."""

    turns: dict[tuple[str, str], str] = field(default_factory=dict)

    def task_of_turn(self, thread_id: str, turn_id: str) -> str | None:
        """The task whose run started ``turn_id`` of ``thread_id``."""
        return self.turns.get((thread_id, turn_id))


def thread_configuration(task: TaskRecord) -> dict[str, object]:
    """What a task's own thread is set to: DotCraft's, but for its workspace
    override (the runtime has one workspace) and its tool profile, which each
    of the run's turns gets instead (so a person's turn in the thread is not
    offered ``CompleteLocalTask``). ``workspaceScope``: what lies outside the
    workspace is refused; ``fullAuto``: it is asked (and declined when nobody
    answers), since this server never approves it unasked."""
    policy = (task.approval_policy or "").strip().lower()
    return {
        "approvalPolicy": "autoApprove",
        "requireApprovalOutsideWorkspace": policy in _FULL_AUTO,
        "automationTaskDirectory": str(task.directory),
    }


class BindingGone(Exception):
    """A bound task's thread no longer exists."""


class Dispatcher:
    """Runs claimed tasks."""

    def __init__(
        self,
        files: TaskFiles,
        job_runner: JobRunner,
        threads: Threads,
        clock: Callable[[], Clock],
        announce: Callable[[TaskRecord], None],
    ) -> None:
        self.files = files
        self.job_runner = job_runner
        self.threads = threads
        self.clock = clock
        self.announce = announce
        self.registry = TurnRegistry()

    async def run(self, task_id: str) -> Ending:
        """Run the task if it is still pending and due (the caller holds its claim).

        Raises on an unexpected failure (a file that cannot be read or
        written, ...): the runner retries the task later."""
        task = await self._start(task_id)
        if task is None:
            return Ending.DONE
        try:
            thread_id = await self._thread(task)
        except BindingGone:
            log.warning("task %s: its bound thread is gone", task.id)
            await self._set(task.id, status="failed")
            return Ending.DONE
        task = await self._set(task.id, thread_id=thread_id) or task
        text = await self.files.workflow(task)
        if text is None:
            raise FileNotFoundError(f"{task.directory}/workflow.md is missing")
        workflow = load(text, task, self.threads.workspace)
        summary: str | None = None
        failure: str | None = None
        for _ in range(workflow.max_rounds):
            for prompt in workflow.steps:
                trigger = Trigger(prompt, TRIGGER_KIND, task.title, task.id)
                try:
                    outcome = await self.job_runner.run(
                        thread_id, None, trigger, self._prepare(task)
                    )
                except ShuttingDown:
                    return Ending.INTERRUPTED
                finally:
                    self._forget_turns(task.id)
                if not self.job_runner.accepting():
                    return Ending.INTERRUPTED  # cut by shutdown: run it again later
                summary = outcome.result or summary
                current = await self.files.find(task.id)
                if current is None:
                    return Ending.DONE  # deleted by hand meanwhile
                if current.status == "completed":
                    return await self._finish(task.id, summary, None)
                if not outcome.ok:
                    failure = outcome.error
                    return await self._finish(task.id, summary, failure)
        return await self._finish(task.id, summary, failure)

    async def _start(self, task_id: str) -> TaskRecord | None:
        """Mark the task ``running`` if it still is pending and due (another
        node may have run it between the poll and the claim)."""
        now = self.clock().now_ms()
        async with self.files.locked():
            task = await self.files.find(task_id)
            if task is None or task.status != "pending":
                return None
            if task.schedule is not None and (task.next_run_at_ms or now) > now:
                return None
            task.status = "running"
            await self.files.save(task)
        self.announce(task)
        return task

    async def _set(
        self, task_id: str, *, status: str | None = None, thread_id: str | None = None
    ) -> TaskRecord | None:
        async with self.files.locked():
            task = await self.files.find(task_id)
            if task is None:
                return None
            task.status = status or task.status
            task.thread_id = thread_id or task.thread_id
            await self.files.save(task)
        self.announce(task)
        return task

    async def _thread(self, task: TaskRecord) -> str:
        """The thread the task's turns run in."""
        if task.thread_binding is not None:
            bound = await self.threads.repo.get(task.thread_binding.thread_id)
            if bound is None:
                raise BindingGone(task.thread_binding.thread_id)
            return bound.id
        config = thread_configuration(task)
        own = await self.threads.repo.get(task.thread_id) if task.thread_id else None
        if (
            own is not None
            and own.status == "active"
            and own.origin_channel == CHANNEL
            and own.user_id == f"task-{task.id}"
        ):
            await self.threads.configure(own.id, {**(own.configuration or {}), **config})
            return own.id
        made = await self.job_runner.create_thread(
            ThreadSpec(
                channel_name=CHANNEL,
                user_id=f"task-{task.id}",
                display_name=task.title,
                source={"kind": TRIGGER_KIND, "taskId": task.id},
                configuration=config,
            )
        )
        return made.id

    def _prepare(self, task: TaskRecord) -> Callable[[ActiveTurn], None]:
        """Give the turn the task's tool profile (in a bound thread too: its
        own configuration is not changed) and remember whose turn it is."""

        def prepare(active: ActiveTurn) -> None:
            config = dict(active.thread.configuration or {})
            config["toolProfile"] = LOCAL_TASK_PROFILE
            config["automationTaskDirectory"] = str(task.directory)
            active.thread.configuration = config  # this turn's copy only
            self.registry.turns[(active.thread_id, active.record.id)] = task.id

        return prepare

    def _forget_turns(self, task_id: str) -> None:
        turns = self.registry.turns
        for key in [key for key, owner in turns.items() if owner == task_id]:
            del turns[key]

    async def _finish(self, task_id: str, summary: str | None, failure: str | None) -> Ending:
        """Store the run's outcome: ``CompleteLocalTask``'s summary wins over
        the last agent message (DotCraft let the message replace it)."""
        now = self.clock().now_ms()
        async with self.files.locked():
            task = await self.files.find(task_id)
            if task is None:
                return Ending.DONE
            completed_by_tool = task.status == "completed"
            if failure is not None and not completed_by_tool:
                log.info("task %s failed: %s", task.id, failure)
                task.status = "failed"
            else:
                if summary and not (completed_by_tool and task.agent_summary):
                    task.agent_summary = summary
                rearmed = timing.rearm(task.schedule, now) if task.schedule else None
                task.status = "pending" if rearmed is not None else "completed"
                task.next_run_at_ms = rearmed
            await self.files.save(task)
        self.announce(task)
        return Ending.DONE
