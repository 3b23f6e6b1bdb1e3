"""``CompleteLocalTask(summary)``: the agent says its automation task is done.

Offered only to the turns an automation run starts (its ``local-task`` tool
profile, tools/profiles.py), in the task's own thread and in a thread
the task is bound to alike (DotCraft offered it only in the task's own
thread, so a bound task always ran every round). The call marks ``task.md``
``completed`` with the summary; the run stops after the turn. The answer is
text for the model, never an error: the turn goes on either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appserver.storage.automation_tasks import TaskFiles
from appserver.tools.args import check_keys, get_str
from appserver.tools.base import ToolContext, ToolError, ToolOutcome, ToolPlan
from appserver.tools.profiles import COMPLETE_LOCAL_TASK

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {
            "type": "string",
            "description": "A short account of what was done to complete the task.",
        }
    },
    "required": ["summary"],
    "additionalProperties": False,
}

# (thread id, turn id) -> the id of the task whose run started that turn.
TaskOfTurn = Callable[[str, str], str | None]


class CompleteLocalTaskTool:
    """Marks the running automation task completed."""

    name = COMPLETE_LOCAL_TASK
    description = (
        "Call this once the automation task is fully done: it marks the task completed "
        "with your summary, and the task stops after this turn. Do the work first."
    )
    input_schema = _SCHEMA

    def __init__(self, files: TaskFiles, task_of_turn: TaskOfTurn) -> None:
        self.files = files
        self.task_of_turn = task_of_turn

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the arguments; no approval (it only writes the task's own file)."""
        check_keys(arguments, ("summary",))
        summary = get_str(arguments, "summary", required=False) or ""
        task_id = self.task_of_turn(ctx.thread_id, ctx.turn_id)
        if task_id is None:
            raise ToolError("no automation task runs in this turn")
        return ToolPlan(
            tool=self.name, arguments=arguments, resolved={"taskId": task_id, "summary": summary}
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Mark the task completed when it is running (DotCraft's answers)."""
        task_id: str = plan.resolved["taskId"]
        async with self.files.locked():
            task = await self.files.find(task_id)
            if task is None:
                return ToolOutcome(False, "The task no longer exists.")
            if task.status == "completed":
                return ToolOutcome(True, "The task is already marked as completed.")
            if task.status != "running":
                return ToolOutcome(
                    False,
                    f"Cannot complete a task whose status is {task.status}: "
                    "CompleteLocalTask works only while the task runs.",
                )
            summary = plan.resolved["summary"].strip()
            if summary:
                task.agent_summary = summary
            task.status = "completed"
            await self.files.save(task)
        return ToolOutcome(True, "The task is marked as completed; it stops after this turn.")
