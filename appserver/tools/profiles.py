"""Tool profiles (DotCraft's): tools offered only where a thread's configuration
names their profile (``toolProfile``).

- ``local-task``: ``CompleteLocalTask``, set by an automation run on each of its
  turns (a task's own thread and a thread the task is bound to), so no other
  turn has it (docs/automations.md).
- ``welcome-suggest`` / ``commit-suggest``: ``EmitWelcomeSuggestions`` /
  ``CommitSuggest``, on the internal helper threads only (docs/suggestions.md);
  those threads also set ``useToolProfileOnly``: nothing but their profile's tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOCAL_TASK_PROFILE = "local-task"
WELCOME_PROFILE = "welcome-suggest"
COMMIT_PROFILE = "commit-suggest"
COMPLETE_LOCAL_TASK = "CompleteLocalTask"
EMIT_WELCOME = "EmitWelcomeSuggestions"
COMMIT_SUGGEST = "CommitSuggest"

#: Each profile tool -> the one profile it is offered to.
PROFILE_TOOLS: dict[str, str] = {
    COMPLETE_LOCAL_TASK: LOCAL_TASK_PROFILE,
    EMIT_WELCOME: WELCOME_PROFILE,
    COMMIT_SUGGEST: COMMIT_PROFILE,
}


def profile_verdict(configuration: Mapping[str, Any], name: str) -> bool | None:
    """Whether a thread with ``configuration`` may use the tool ``name`` by its tool
    profile: a profile tool only on its profile's threads; with
    ``useToolProfileOnly``, nothing but the profile's tools. ``None``: the
    profile has no say (the thread's other lists decide)."""
    profile = configuration.get("toolProfile")
    owner = PROFILE_TOOLS.get(name)
    if owner is not None:
        return owner == profile
    if profile and configuration.get("useToolProfileOnly") is True:
        return False
    return None
