"""Tools offered only where the thread's configuration names their profile
(DotCraft's tool profiles): ``toolProfile: "local-task"`` adds
``CompleteLocalTask`` to the usual tools. An automation run sets it on each of
its turns (docs/automations.md), so a task's own thread and a thread the task
is bound to both have the tool while the task runs, and no other turn has it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOCAL_TASK_PROFILE = "local-task"
COMPLETE_LOCAL_TASK = "CompleteLocalTask"

# Tool name -> the profile that offers it.
PROFILE_OF_TOOL = {COMPLETE_LOCAL_TASK: LOCAL_TASK_PROFILE}


def in_profile(configuration: Mapping[str, Any], name: str) -> bool:
    """Whether a turn with ``configuration`` may use the tool ``name`` as far
    as profiles go (a tool in no profile always may)."""
    profile = PROFILE_OF_TOOL.get(name)
    return profile is None or configuration.get("toolProfile") == profile
