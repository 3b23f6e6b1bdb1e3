"""Plan tools: ``CreatePlan`` and ``UpdateTodos`` (DotCraft's names).

The model writes the thread's plan (a title, an overview, an optional
Markdown body, todos with priority and status) and keeps its todos current.
Neither needs approval: they only write the plan. Where the plan is kept and
who hears about it is the runtime's business, behind :class:`PlanStore`
(the runtime attaches its store with :func:`attach_plan_store`); each call
stores the whole plan, which the runtime announces as ``plan/updated``.

A plan is bounded like every stored string (``protocol.limits``): the title
is a label, todo ids are names, and the whole plan is at most
:data:`~appserver.protocol.limits.MAX_PLAN_BYTES` as JSON. A call that would
pass a bound fails with a tool error and stores nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from appserver.protocol.limits import MAX_LABEL_CHARS, MAX_NAME_CHARS, MAX_PLAN_BYTES, encoded_size
from appserver.tools.args import check_keys, get_str, require_str
from appserver.tools.base import Tool, ToolContext, ToolError, ToolOutcome, ToolPlan

if TYPE_CHECKING:
    from appserver.protocol.plans import Plan, PlanTodo

# ``TodoPriority`` and ``TodoStatus``'s values (a test holds them to the types):
# the tools are listed on every turn, the plan models loaded once a plan is written.
PRIORITIES: tuple[str, ...] = ("high", "medium", "low")
STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "cancelled")
MAX_TODOS = 100

_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "cancelled": "[-]"}


class PlanStore(Protocol):
    """Where plans live (the runtime's ``ThreadPlans``)."""

    async def load(self, thread_id: str) -> Plan | None:
        """The thread's plan, or ``None``."""
        ...

    async def save(self, thread_id: str, plan: Plan) -> None:
        """Keep ``plan`` as the thread's plan and announce it."""
        ...


def _todo_schema(*, id_required: bool) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "id": {
                "type": "string",
                "description": "The todo's id, unique in the plan"
                + ("." if id_required else " (default: its position, '1', '2', ...)."),
            },
            "content": {"type": "string", "description": "What the step is."},
            "priority": {
                "type": "string",
                "enum": list(PRIORITIES),
                "description": "Default: medium.",
            },
            "status": {
                "type": "string",
                "enum": list(STATUSES),
                "description": "Default: pending.",
            },
        },
        "required": ["id"] if id_required else ["content"],
        "additionalProperties": False,
    }


def _choice(entry: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str | None:
    value = get_str(entry, key, required=False)
    if value is not None and value not in allowed:
        raise ToolError(f"todo {key} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _todo_entries(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    todos = arguments.get("todos")
    if not isinstance(todos, list) or not all(isinstance(t, dict) for t in todos):
        raise ToolError("argument todos must be a list of objects")
    if len(todos) > MAX_TODOS:
        raise ToolError(f"a plan holds at most {MAX_TODOS} todos")
    for todo in todos:
        check_keys(todo, ("id", "content", "priority", "status"))
    return todos


def _todo_id(value: str) -> str:
    if len(value) > MAX_NAME_CHARS:
        raise ToolError(f"a todo id must be at most {MAX_NAME_CHARS} characters")
    return value


def size_error(plan: Plan) -> str | None:
    """Why ``plan`` is too large to store, or ``None`` when it fits."""
    size = encoded_size(plan)
    if size <= MAX_PLAN_BYTES:
        return None
    return (
        f"the plan would be {size:,} bytes as JSON; a plan holds at most {MAX_PLAN_BYTES:,} "
        "bytes. Nothing was stored: keep the overview, content and todos short"
    )


def render(plan: Plan) -> str:
    """The plan as the model reads it back: title, progress, one line per todo."""
    done = sum(1 for todo in plan.todos if todo.status == "completed")
    lines = [f"Plan: {plan.title} ({done}/{len(plan.todos)} completed)"]
    lines += [
        f"{_MARKS[todo.status]} {todo.id} ({todo.priority}): {todo.content}" for todo in plan.todos
    ]
    return "\n".join(lines)


class _PlanTool:
    """What both plan tools share: the store they write to."""

    name: str

    def __init__(self, store: PlanStore | None = None) -> None:
        self.store = store

    def _store(self) -> PlanStore:
        if self.store is None:
            raise ToolError("plans are not available here")
        return self.store


class CreatePlanTool(_PlanTool):
    """``CreatePlan``: write (or replace) the thread's plan."""

    name = "CreatePlan"
    description = (
        "Create the plan for this task, replacing any earlier plan: a title, a short overview, "
        "an optional Markdown body and the todos (steps) in order. The user sees the plan and "
        "each update. Keep the todos current with UpdateTodos as you work."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "The plan's title."},
            "overview": {"type": "string", "description": "A short summary of the approach."},
            "content": {"type": "string", "description": "The plan's body, Markdown (optional)."},
            "todos": {
                "type": "array",
                "description": "The steps, in order.",
                "items": _todo_schema(id_required=False),
            },
        },
        "required": ["title", "overview", "todos"],
        "additionalProperties": False,
    }

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the arguments and build the plan; no approval needed."""
        from appserver.protocol.plans import Plan, PlanTodo

        check_keys(arguments, ("title", "overview", "content", "todos"))
        todos: list[PlanTodo] = []
        for position, entry in enumerate(_todo_entries(arguments), start=1):
            todo_id = _todo_id(
                get_str(entry, "id", required=False, allow_empty=False) or str(position)
            )
            if any(todo.id == todo_id for todo in todos):
                raise ToolError(f"todo id {todo_id!r} is used twice")
            todos.append(
                PlanTodo(
                    id=todo_id,
                    content=require_str(entry, "content", allow_empty=False),
                    priority=_choice(entry, "priority", PRIORITIES) or "medium",
                    status=_choice(entry, "status", STATUSES) or "pending",
                )
            )
        title = require_str(arguments, "title", allow_empty=False)
        if len(title) > MAX_LABEL_CHARS:
            raise ToolError(f"title must be at most {MAX_LABEL_CHARS} characters")
        plan = Plan(
            title=title,
            overview=require_str(arguments, "overview"),
            content=get_str(arguments, "content", required=False) or "",
            todos=todos,
        )
        too_large = size_error(plan)
        if too_large is not None:
            raise ToolError(too_large)
        return ToolPlan(tool=self.name, arguments=arguments, resolved={"plan": plan})

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Store the plan (the runtime announces it)."""
        written: Plan = plan.resolved["plan"]
        await self._store().save(ctx.thread_id, written)
        return ToolOutcome(True, "Plan created.\n" + render(written))


class UpdateTodosTool(_PlanTool):
    """``UpdateTodos``: change todos of the thread's plan by id, or add new ones."""

    name = "UpdateTodos"
    description = (
        "Update the todos of the current plan (made with CreatePlan): each entry names a todo by "
        "id and gives the fields to change (status, content, priority). An id not in the plan "
        "adds a new todo at the end (content required). Mark a todo in_progress when you start "
        "it and completed when it is done."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The todos to change or add.",
                "items": _todo_schema(id_required=True),
            },
        },
        "required": ["todos"],
        "additionalProperties": False,
    }

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the arguments; the changes are applied to the stored plan in ``run``."""
        check_keys(arguments, ("todos",))
        entries = _todo_entries(arguments)
        if not entries:
            raise ToolError("argument todos must name at least one todo")
        changes = []
        for entry in entries:
            change: dict[str, Any] = {"id": _todo_id(require_str(entry, "id", allow_empty=False))}
            content = get_str(entry, "content", required=False, allow_empty=False)
            if content is not None:
                change["content"] = content
            for key, allowed in (("priority", PRIORITIES), ("status", STATUSES)):
                value = _choice(entry, key, allowed)
                if value is not None:
                    change[key] = value
            changes.append(change)
        return ToolPlan(tool=self.name, arguments=arguments, resolved={"changes": changes})

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Apply the changes to the stored plan and store it again."""
        store = self._store()
        current = await store.load(ctx.thread_id)
        if current is None:
            return ToolOutcome(False, "Error: there is no plan yet; create one with CreatePlan")
        todos = {todo.id: todo for todo in current.todos}
        order = [todo.id for todo in current.todos]
        for change in plan.resolved["changes"]:
            todo_id = change["id"]
            if todo_id in todos:
                todos[todo_id] = todos[todo_id].model_copy(update=change)
                continue
            if "content" not in change:
                return ToolOutcome(
                    False, f"Error: no todo {todo_id!r} in the plan (a new todo needs content)"
                )
            if len(order) >= MAX_TODOS:
                return ToolOutcome(False, f"Error: a plan holds at most {MAX_TODOS} todos")
            from appserver.protocol.plans import PlanTodo

            todos[todo_id] = PlanTodo.model_validate(
                {"priority": "medium", "status": "pending", **change}
            )
            order.append(todo_id)
        updated = current.model_copy(update={"todos": [todos[todo_id] for todo_id in order]})
        too_large = size_error(updated)
        if too_large is not None:
            return ToolOutcome(False, f"Error: {too_large}")
        await store.save(ctx.thread_id, updated)
        return ToolOutcome(True, "Todos updated.\n" + render(updated))


def plan_tools() -> list[Tool]:
    """Fresh ``CreatePlan`` and ``UpdateTodos`` tools (no store until attached)."""
    return [CreatePlanTool(), UpdateTodosTool()]


def attach_plan_store(tools: Iterable[Tool], store: PlanStore) -> None:
    """Let the plan tools among ``tools`` write to ``store``."""
    for tool in tools:
        if isinstance(tool, _PlanTool):
            tool.store = store
