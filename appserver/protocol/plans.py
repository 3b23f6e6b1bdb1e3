"""Plans: the agent's plan of a thread (DotCraft's CreatePlan / UpdateTodos).

The model writes the plan with its ``CreatePlan`` and ``UpdateTodos`` tools;
every change is sent whole as ``plan/updated``. DotCraft's params carry no
``threadId``; ours add it at the top (as every thread-scoped notification
here does), which DotCraft clients ignore.
"""

from typing import Literal

from appserver.protocol.base import WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

TodoPriority = Literal["high", "medium", "low"]
TodoStatus = Literal["pending", "in_progress", "completed", "cancelled"]


class PlanTodo(WireModel):
    """One step of a plan."""

    id: str
    """The todo's id, unique within the plan (`UpdateTodos` names todos by it)."""
    content: str
    """What the step is."""
    priority: TodoPriority
    """`high`, `medium` or `low`."""
    status: TodoStatus
    """`pending`, `in_progress`, `completed` or `cancelled`."""


class Plan(WireModel):
    """A thread's plan: the whole snapshot, as the model last wrote it."""

    title: str
    """The plan's title."""
    overview: str
    """A short summary of the approach."""
    content: str
    """The plan's body (Markdown; may be empty)."""
    todos: list[PlanTodo]
    """The steps, in order."""


class PlanUpdatedNotification(WireModel):
    """``plan/updated``: the full plan after a ``CreatePlan`` or ``UpdateTodos`` call."""

    thread_id: str
    """The thread the plan belongs to (beyond DotCraft, whose params have no thread id)."""
    title: str
    """The plan's title."""
    overview: str
    """A short summary of the approach."""
    content: str
    """The plan's body (Markdown; may be empty)."""
    todos: list[PlanTodo]
    """The steps, in order, each with its priority and status."""

    @classmethod
    def of(cls, thread_id: str, plan: Plan) -> "PlanUpdatedNotification":
        """The notification announcing ``plan`` of ``thread_id``."""
        return cls(
            thread_id=thread_id,
            title=plan.title,
            overview=plan.overview,
            content=plan.content,
            todos=plan.todos,
        )


METHOD_SPECS: list[MethodSpec] = []

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "plan/updated",
        PlanUpdatedNotification,
        "all connections (stored with the thread's events)",
        "The agent created or changed the thread's plan (`CreatePlan`, `UpdateTodos`): the whole "
        "plan. `threadId` is ours; DotCraft's params have none.",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
