"""The agent-control tools (DotCraft's names): ``SpawnAgent``, ``SendInput``,
``WaitAgent``, ``ResumeAgent``, ``CloseAgent``.

Each answers a control result as JSON (camelCase, nulls kept, as DotCraft's
tools do). None needs approval: what a child does goes through its own
approvals. A thread whose agent-control access does not allow a tool is not
offered it (``subagent_roles.tool_offered``), and a call of it all the same
fails. Every refusal (unknown role or child, depth limit, a running child) is
a failed tool result, never a failed turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appserver.runtime.errors import Refusal
from appserver.runtime.subagent_prompt import profile_description
from appserver.runtime.subagent_roles import agent_control_tools
from appserver.tools.base import Tool, ToolContext, ToolError, ToolOutcome, ToolPlan

if TYPE_CHECKING:
    from appserver.runtime.subagents import SubAgents

_CHILD = {"childThreadId": {"type": "string", "description": "The child thread's id."}}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "SpawnAgent": (
        "Start a subagent in a child thread on a task; returns at once with its childThreadId "
        "(status running). Use WaitAgent to get its answer.",
        _schema(
            {
                "agentPrompt": {"type": "string", "description": "The task."},
                "agentNickname": {"type": "string", "description": "A short name for it."},
                "agentRole": {
                    "type": "string",
                    "description": "default, worker (may spawn) or explorer (read-only).",
                },
                "profile": {"type": "string", "description": "The profile (native)."},
                "workingDirectory": {
                    "type": "string",
                    "description": "The child's working directory, for a profile that needs one.",
                },
            },
            ["agentPrompt"],
        ),
    ),
    "SendInput": (
        "Give an idle child another message (a new turn of the child).",
        _schema({**_CHILD, "message": {"type": "string"}}, ["childThreadId", "message"]),
    ),
    "WaitAgent": (
        "Wait for a child's running turn; returns its status and its final text. "
        "timeoutSeconds 0 or absent: no timeout.",
        _schema({**_CHILD, "timeoutSeconds": {"type": "number", "minimum": 0}}, ["childThreadId"]),
    ),
    "ResumeAgent": ("Reopen a closed child.", _schema(dict(_CHILD), ["childThreadId"])),
    "CloseAgent": (
        "Stop a child (its running turn is cancelled) and close it.",
        _schema(dict(_CHILD), ["childThreadId"]),
    ),
}


class ControlTool:
    """One agent-control tool, run by the runtime's :class:`SubAgents`."""

    def __init__(self, name: str, subagents: Callable[[], SubAgents], workspace: Path) -> None:
        self.name = name
        self.description, self._schema = _TOOLS[name]
        self._subagents = subagents  # made at the first call (Runtime.subagents)
        self.workspace = workspace
        # SpawnAgent's schema for the profiles last described (built again when they change).
        self._spawn_schema: tuple[str, dict[str, Any]] | None = None

    @property
    def input_schema(self) -> dict[str, Any]:
        """The arguments; ``SpawnAgent``'s ``profile`` names the profiles offered."""
        if self.name != "SpawnAgent":
            return self._schema
        described = profile_description(self.workspace)
        if self._spawn_schema is None or self._spawn_schema[0] != described:
            properties = dict(self._schema["properties"])
            properties["profile"] = {"type": "string", "description": described}
            self._spawn_schema = (described, {**self._schema, "properties": properties})
        return self._spawn_schema[1]

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Nothing to approve; the arguments are checked when it runs."""
        return ToolPlan(tool=self.name, arguments=arguments)

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Do it; the answer is the control result as JSON."""
        thread = await self._subagents().threads.get(ctx.thread_id)
        if self.name not in agent_control_tools(thread):
            raise ToolError(f"{self.name} is not available in this thread.")
        try:
            result = await self._call(plan.arguments, ctx)
        except Refusal as exc:
            raise ToolError(str(exc)) from None
        answer = result.model_dump(by_alias=True, mode="json")
        return ToolOutcome(True, json.dumps(answer, separators=(",", ":")))

    async def _call(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        subagents = self._subagents()
        if self.name == "SpawnAgent":
            return await subagents.spawn(ctx.thread_id, ctx.turn_id, arguments)
        child = str(arguments.get("childThreadId") or "").strip()
        if self.name == "SendInput":
            return await subagents.send_input(
                ctx.thread_id, child, str(arguments.get("message") or "")
            )
        if self.name == "WaitAgent":
            timeout = arguments.get("timeoutSeconds")
            seconds = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None
            return await subagents.wait(ctx.thread_id, child, seconds)
        if self.name == "ResumeAgent":
            return await subagents.resume(ctx.thread_id, child)
        return await subagents.close(ctx.thread_id, child)


CONTROL_TOOL_NAMES: tuple[str, ...] = tuple(_TOOLS)


def control_tools(subagents: Callable[[], SubAgents], workspace: Path) -> list[Tool]:
    """The five control tools of ``workspace``'s runtime (``subagents``: its children)."""
    return [ControlTool(name, subagents, workspace) for name in _TOOLS]
