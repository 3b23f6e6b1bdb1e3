"""Every optional method family, installed in this order when a server opens.

A family's ``install(server)`` registers its handlers on ``server.router``
(so its capability is advertised only when it really works), may add agent
tools to ``server.runtime.engine.tools``, input resolvers to ``server.runtime.materializer``,
and background tasks through ``server.start_background``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from appserver.services import (
    automations,
    channels,
    commands,
    cron,
    grants,
    mcp,
    plugins,
    prompt,
    skills,
    subagent_profiles,
    subagent_sessions,
    suggestions,
    terminals,
    workspace,
)

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

FAMILIES: list[Callable[[FamilyContext], None]] = [
    workspace.install,
    skills.install,
    plugins.install,
    mcp.install,
    commands.install,
    cron.install,
    channels.install,
    terminals.install,
    prompt.install,
    grants.install,
    subagent_profiles.install,
    subagent_sessions.install,
    suggestions.install,
    automations.install,
]
