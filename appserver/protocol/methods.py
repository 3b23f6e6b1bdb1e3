"""The one method table: every client->server method, server->client
notification and server->client request, with its wire models.

It is the source of the docs, the JSON Schema and the light index a server
routes, validates params and advertises capabilities with
(:mod:`~appserver.protocol.method_index`, :mod:`~appserver.protocol.table`).
Add a method here first: to the core
(``protocol/core_methods.py``) or to its family's protocol module, then
regenerate :mod:`~appserver.protocol.method_index` (the light index a server
routes with; a test says when it is stale).
"""

from appserver.protocol import (
    automations,
    channels,
    commands,
    core_methods,
    cron,
    dynamic_tools,
    editor_families,
    editor_fs,
    editor_terminal,
    grants,
    mcp,
    node_repl,
    plans,
    plugins,
    prompt,
    skills,
    subagent_profiles,
    subagent_sessions,
    suggestions,
    terminals,
    workspace,
)
from appserver.protocol.core_methods import FEATURE_FLAGS
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

# The core (threads and turns) and each method family declare their own entries
# in their protocol module; they are merged here so there is still one table.
DECLARING_MODULES = (
    core_methods,
    skills,
    commands,
    plugins,
    mcp,
    cron,
    workspace,
    channels,
    dynamic_tools,
    editor_fs,
    editor_terminal,
    editor_families,
    node_repl,
    plans,
    terminals,
    prompt,
    grants,
    subagent_profiles,
    subagent_sessions,
    suggestions,
    automations,
)


def _table(attribute: str) -> dict:  # type: ignore[type-arg]
    entries = []
    for module in DECLARING_MODULES:
        entries.extend(getattr(module, attribute))
    table = {}
    for entry in entries:
        if entry.name in table:
            raise RuntimeError(f"{entry.name} is declared twice in the method table")
        table[entry.name] = entry
    return table


METHODS: dict[str, MethodSpec] = _table("METHOD_SPECS")
NOTIFICATIONS: dict[str, NotificationSpec] = _table("NOTIFICATION_SPECS")
SERVER_REQUESTS: dict[str, ServerRequestSpec] = _table("SERVER_REQUEST_SPECS")

__all__ = ["FEATURE_FLAGS", "METHODS", "NOTIFICATIONS", "SERVER_REQUESTS"]
