"""What ``initialize`` advertises, declared without loading what serves it.

Light at import (the standard library and the workspace config's lookup): a
stdio server answers ``initialize`` from here before it imports anything
heavy (see appserver/services/handshake.py).

A stdio server answers its client's ``initialize`` before it imports the
runtime and the method families (see ``AppServer.open``), so the capability
block it sends then comes from here: the flags of the core methods (threads
and turns, served by ``ThreadService`` and ``TurnService``) and, for every
family in ``FAMILIES`` (appserver/services/families.py), the flags and
features its ``install`` (or its light ``prepare``) turns on. Once the server is
complete, ``initialize`` answers from the registered handlers, and those waiting
for their first call, again (``Router.capabilities``), and the
server logs an error if the two ever differ; tests/test_startup.py installs
each family and checks its declaration, so a family that is added to
``FAMILIES`` without one here fails the tests.

A new family adds one entry to ``FAMILY_CAPABILITIES``: the module that holds
its ``install`` -> :class:`Declared` (the capability flags of its methods in
the method table, and any feature flags it enables), or a function of the
workspace configuration when ``install`` serves some methods only under a
setting (as cron does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from appserver.storage.workspace_config import lookup


class Declared(NamedTuple):
    """What one family's ``install`` adds to the capability block."""

    flags: tuple[str, ...] = ()  # every method with this capability is served (or waits)
    features: tuple[str, ...] = ()  # Router.enable_feature
    extensions: tuple[str, ...] = ()  # true under capabilities.extensions (Router.extensions)


# The core methods (protocol/core_methods.py METHOD_SPECS), always served.
CORE = Declared(
    flags=(
        "configOverride",
        "modeSwitch",
        "threadFork",
        "threadManagement",
        "threadSubscriptions",
    ),
    features=("approvalFlow",),  # TurnService.register
)


def _cron(workspace_config: dict[str, Any]) -> Declared:
    # As appserver/services/cron.py install: the heartbeat always, cron unless switched off.
    if lookup(workspace_config, "Cron", "Enabled") is False:
        return Declared(flags=("heartbeatManagement",))
    return Declared(flags=("cronManagement", "heartbeatManagement"))


def _automations(workspace_config: dict[str, Any]) -> Declared:
    # As appserver/services/automations install: on unless switched off.
    if lookup(workspace_config, "Automations", "Enabled") is False:
        return Declared()
    return Declared(flags=("automations",))


# The module that holds a family's install (its FAMILIES entry) -> what it advertises.
FAMILY_CAPABILITIES: dict[str, Declared | Callable[[dict[str, Any]], Declared]] = {
    "appserver.services.workspace": Declared(
        flags=("modelCatalogManagement", "workspaceConfigManagement")
    ),
    "appserver.services.skills": Declared(flags=("skillsManagement",)),
    "appserver.services.plugins": Declared(flags=("pluginManagement",)),
    "appserver.services.mcp": Declared(
        flags=("mcpManagement", "mcpStatus"), features=("mcpServerOrigins",)
    ),
    "appserver.services.commands": Declared(flags=("commandManagement",)),
    "appserver.services.cron": _cron,
    "appserver.services.channels": Declared(flags=("channelStatus", "externalChannelManagement")),
    "appserver.services.terminals": Declared(flags=("backgroundTerminals",)),
    "appserver.services.prompt": Declared(flags=("promptRead",)),
    "appserver.services.grants": Declared(flags=("approvalGrants",)),
    "appserver.services.subagent_profiles": Declared(flags=("subAgentManagement",)),
    "appserver.services.subagent_sessions": Declared(flags=("subAgentSessions",)),
    "appserver.services.suggestions": Declared(extensions=("welcomeSuggestions",)),
    "appserver.services.automations": _automations,
}


def format_capabilities(
    flags: Iterable[str], features: Iterable[str], extensions: dict[str, Any]
) -> dict[str, Any]:
    """The ``initialize`` capability block: served flags, then enabled features
    (each sorted, ``true``), then ``extensions``."""
    block: dict[str, Any] = dict.fromkeys(sorted(flags), True)
    block.update(dict.fromkeys(sorted(features), True))
    block["extensions"] = dict(extensions)
    return block


def declared(family: str, workspace_config: dict[str, Any]) -> Declared:
    """What the family whose install is in module ``family`` advertises
    (``KeyError`` when it declares nothing)."""
    entry = FAMILY_CAPABILITIES[family]
    return entry(workspace_config) if callable(entry) else entry


def advertised_capabilities(workspace_config: dict[str, Any]) -> dict[str, Any]:
    """The capability block a complete server with every family advertises."""
    flags, features = set(CORE.flags), set(CORE.features)
    extensions: dict[str, Any] = {}
    for family in FAMILY_CAPABILITIES:
        entry = declared(family, workspace_config)
        flags.update(entry.flags)
        features.update(entry.features)
        extensions.update(dict.fromkeys(entry.extensions, True))
    return format_capabilities(flags, features, extensions)
