"""SubAgent roles and what a child's configuration is made of (DotCraft's built-ins).

``default`` may not spawn (agent control disabled); ``worker`` keeps agent
control and loses the plan tools; ``explorer`` may only read (an allow-list).
A child's configuration is a copy of its parent's with the role's tool lists
and agent-control access; at the depth
limit ``SpawnAgent`` is taken away. ``agentControlTools`` says which of the
five control tools a thread may call: a thread without an explicit access
has all of them if it is a user thread and none if it is a child.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appserver.storage.records import ThreadRecord
from appserver.storage.workspace_config import load_workspace_config
from appserver.tools.base import ToolError
from appserver.tools.profiles import profile_verdict
from appserver.tools.sandbox import STATE_DIR

CONTROL_TOOLS = ("SpawnAgent", "SendInput", "WaitAgent", "ResumeAgent", "CloseAgent")
MAX_NICKNAME = 48


@dataclass(frozen=True)
class Role:
    """A built-in role."""

    name: str
    access: str  # full | disabled | allowList
    deny: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()  # empty: every tool the parent has
    instructions: str | None = None


ROLES = {
    "default": Role(
        "default",
        "disabled",
        instructions="You are a subagent: do the task yourself and do not spawn other agents.",
    ),
    "worker": Role("worker", "full", deny=("UpdateTodos", "TodoWrite", "CreatePlan")),
    # DotCraft's read-only allow-list (ReadFile, GrepFiles, FindFiles, WebFetch, ...)
    # in our tools' names.
    "explorer": Role(
        "explorer",
        "disabled",
        allow=("read_file", "list_dir", "grep", "find_files", "web_fetch", "view_image"),
        instructions="You are a read-only explorer subagent: look things up and report; "
        "change nothing and do not spawn other agents.",
    ),
}


def find_role(name: str) -> Role:
    """The role called ``name`` (any case; blank: ``default``)."""
    key = name.strip().lower() or "default"
    role = ROLES.get(key)
    if role is None:
        raise ToolError(f"Unknown subagent role '{name.strip()}'")
    return role


def child_configuration(
    parent: dict[str, Any] | None, role: Role, depth: int, max_depth: int
) -> dict[str, Any]:
    """The parent's configuration adjusted for a child with ``role`` at ``depth``."""
    config = copy.deepcopy(parent or {})
    deny = list(dict.fromkeys([*config.get("toolDenyList", []), *role.deny]))
    if deny:
        config["toolDenyList"] = deny
    parent_allow = [name for name in config.get("toolAllowList") or [] if isinstance(name, str)]
    if parent_allow and role.allow:
        config["toolAllowList"] = [name for name in parent_allow if name in role.allow]
    elif role.allow:
        config["toolAllowList"] = list(role.allow)
    config["promptProfile"] = "subagent-light"
    if role.instructions:
        config["roleInstructions"] = role.instructions
    tools = list(CONTROL_TOOLS) if role.access == "full" else []
    at_limit = depth >= max_depth
    if at_limit:
        tools = [name for name in tools if name != "SpawnAgent"]
    config.pop("allowedAgentControlTools", None)
    if not tools:
        config["agentControlToolAccess"] = "disabled"
    elif at_limit or role.access == "allowList":
        config["agentControlToolAccess"] = "allowList"
        config["allowedAgentControlTools"] = tools
    else:
        config["agentControlToolAccess"] = "full"
    return config


def agent_control_tools(thread: ThreadRecord) -> set[str]:
    """The control tools ``thread``'s turns may call."""
    config = thread.configuration or {}
    access = config.get("agentControlToolAccess")
    if access is None:
        access = "disabled" if thread.source_kind == "subagent" else "full"
    if access == "full":
        return set(CONTROL_TOOLS)
    if access == "allowList":
        allowed = config.get("allowedAgentControlTools")
        return set(CONTROL_TOOLS) & set(allowed if isinstance(allowed, list) else [])
    return set()


def tool_offered(thread: ThreadRecord, name: str) -> bool:
    """Whether ``thread``'s turns may use the built-in tool ``name``: the control
    tools by the thread's agent-control access, the others by its
    ``toolDenyList`` and (when set) ``toolAllowList``. A thread's tool
    profile comes first (tools/profiles.py)."""
    by_profile = profile_verdict(thread.configuration or {}, name)
    if by_profile is not None:
        return by_profile
    if name in CONTROL_TOOLS:
        return name in agent_control_tools(thread)
    config = thread.configuration or {}
    deny = config.get("toolDenyList")
    if isinstance(deny, list) and name in deny:
        return False
    allow = config.get("toolAllowList")
    return not (isinstance(allow, list) and allow) or name in allow


def subagent_max_depth(workspace: Path) -> int:
    """``SubAgent.MaxDepth`` of the workspace's ``.craft/config.json`` (default 1, at least 1)."""
    section = load_workspace_config(workspace / STATE_DIR).get("SubAgent")
    value = section.get("MaxDepth") if isinstance(section, dict) else None
    return max(1, value) if isinstance(value, int) and not isinstance(value, bool) else 1
