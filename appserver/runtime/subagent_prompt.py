"""Which SubAgent profiles the main agent is told of (DotCraft's
``SubAgentProfilePromptSectionBuilder``).

Only the profiles a client's ``subagent/profiles/list`` shows as not
``hiddenFromPrompt`` (enabled, a known runtime, no warnings, not a template, a
``bin`` found on PATH), ``native`` first, each external one marked, and those
with ``workingDirectoryMode: specified`` said to need ``workingDirectory``. A
thread that may spawn gets them as one line of its environment block; the
``SpawnAgent`` tool's ``profile`` description names them too. With nothing but
``native`` there is nothing to choose, and no line.

The list is read from ``.craft/config.json`` and PATH, and kept until the
file or PATH changes, at most :data:`CACHE_TTL_S` (a CLI installed meanwhile).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appserver.runtime.subagent_builtins import DEFAULT_PROFILE, NATIVE_RUNTIME, built_in_offer
from appserver.startup import file_stamp
from appserver.storage.subagent_config import PROFILES, SECTION
from appserver.storage.workspace import get_value
from appserver.storage.workspace_config import load_workspace_config
from appserver.tools.sandbox import STATE_DIR

CACHE_TTL_S = 60.0


@dataclass(frozen=True)
class OfferedProfile:
    """A profile the agent may name in ``SpawnAgent``."""

    name: str
    external: bool
    needs_directory: bool

    def describe(self) -> str:
        notes = ["external agent CLI"] if self.external else []
        if self.name.lower() == DEFAULT_PROFILE:
            notes.insert(0, "default")
        if self.needs_directory:
            notes.append("needs `workingDirectory`")
        return f"`{self.name}`" + (f" ({'; '.join(notes)})" if notes else "")


_cache: dict[str, tuple[tuple[Any, ...], float, tuple[OfferedProfile, ...]]] = {}


def offered_profiles(workspace: Path) -> tuple[OfferedProfile, ...]:
    """The profiles offered in ``workspace``, ``native`` first (cached; see above)."""
    craft = workspace / STATE_DIR
    key = (file_stamp(str(craft / "config.json")), os.environ.get("PATH"))
    cached = _cache.get(str(workspace))
    now = time.monotonic()
    if cached is not None and cached[0] == key and now - cached[1] < CACHE_TTL_S:
        return cached[2]
    document = load_workspace_config(craft)
    defined = get_value(document, PROFILES)
    if not isinstance(defined, dict) or not any(str(name).strip() for name in defined):
        # No profiles of the workspace's own: the built-ins' data says it all.
        disabled = get_value(document, SECTION, "DisabledProfiles")
        names = (
            [name for name in disabled if isinstance(name, str)]
            if isinstance(disabled, list)
            else []
        )
        offer = built_in_offer(names)
        offered = tuple(OfferedProfile(name, external, needs) for name, external, needs in offer)
        _cache[str(workspace)] = (key, now, offered)
        return offered
    from appserver.runtime.subagent_profiles import view_profiles
    from appserver.storage.subagent_config import read_subagent_config

    config = read_subagent_config(document)
    offered = tuple(
        OfferedProfile(
            name=view.name,
            external=view.definition.runtime.strip().lower() != NATIVE_RUNTIME,
            needs_directory=(view.definition.working_directory_mode or "").strip().lower()
            == "specified",
        )
        for view in view_profiles(config)
        if not view.hidden_reasons
    )
    _cache[str(workspace)] = (key, now, offered)
    return offered


def may_spawn(configuration: Mapping[str, Any]) -> bool:
    """Whether a thread with this configuration is offered ``SpawnAgent`` (a
    child always has an explicit access; a user thread without one has full)."""
    access = configuration.get("agentControlToolAccess") or "full"
    deny = configuration.get("toolDenyList")
    if isinstance(deny, list) and "SpawnAgent" in deny:
        return False
    if access == "allowList":
        allowed = configuration.get("allowedAgentControlTools")
        return isinstance(allowed, list) and "SpawnAgent" in allowed
    return bool(access == "full")


def environment_line(workspace: Path, configuration: Mapping[str, Any]) -> str | None:
    """The environment block's line of profiles (``None``: none to choose from)."""
    if not may_spawn(configuration):
        return None
    offered = offered_profiles(workspace)
    if not any(profile.external for profile in offered):
        return None
    listed = ", ".join(profile.describe() for profile in offered)
    return f"SubAgent profiles (SpawnAgent `profile`): {listed}"


def profile_description(workspace: Path) -> str:
    """The ``SpawnAgent`` tool's description of its ``profile`` argument."""
    names = [profile.name for profile in offered_profiles(workspace)]
    others = [name for name in names if name.lower() != DEFAULT_PROFILE]
    if not others:
        return "The profile (native)."
    return f"How the child runs: native (default) or an external agent CLI: {', '.join(others)}."
