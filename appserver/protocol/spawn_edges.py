"""The edges of the thread tree: which thread's turn spawned which SubAgent child.

Its own module because both the SubAgent methods and ``thread/read`` (a
parent's children) send edges.
"""

from typing import Literal

from appserver.protocol.base import Flag, WireModel

EdgeStatus = Literal["open", "closed"]


class SubAgentCapabilities(WireModel):
    """What a parent may do with a child (native children: everything)."""

    supports_send_input: Flag = True
    """`SendInput` may start another turn on the child."""
    supports_resume: Flag = True
    """`subagent/resume` / `ResumeAgent` may reopen it."""
    supports_close: Flag = True
    """`subagent/close` / `CloseAgent` may close it."""


class ThreadSpawnEdge(SubAgentCapabilities):
    """An edge of the thread tree: ``parentThreadId`` spawned ``childThreadId``."""

    parent_thread_id: str
    """The thread whose turn spawned the child."""
    child_thread_id: str
    """The child thread."""
    parent_turn_id: str | None = None
    """The parent's turn that spawned it."""
    depth: int
    """1 for a child of a user thread, 2 for a grandchild, ..."""
    agent_nickname: str | None = None
    """The child's short name (also its thread's `displayName`)."""
    agent_role: str | None = None
    """Its role (`default`, `worker`, ...)."""
    profile_name: str | None = None
    """Its profile (`native`)."""
    runtime_type: str | None = None
    """The profile's runtime (`native`)."""
    status: EdgeStatus
    """`open`, or `closed` once closed."""
    created_at: str
    """When it was spawned, ISO 8601."""
    updated_at: str
    """When it last changed, ISO 8601."""
