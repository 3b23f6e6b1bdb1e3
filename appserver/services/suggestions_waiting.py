"""The suggestions family at start: installed when it has something to do.

The family (welcome suggestions, commit messages, their helper turns and wire
models: ~5 ms of a server's start) waits for the first call of one of its
methods. Until then a turn that ends asks nothing of it unless a welcome
snapshot from an earlier run is on disk (``.craft/cache/welcome-suggestions.json``:
the refresh keeps it current): the first completed turn then installs it and
hands it that turn (not while the setting, :func:`welcome_enabled`, is off).
The suggestion tools (offered only to the family's helper turns, by profile)
and the ``welcomeSuggestions`` extension are set at start, as the family sets
them.

One difference: in a workspace with no snapshot yet, a turn that ended less
than the refresh's debounce (1 s) before the first ``welcome/suggestions``
request did not wake a refresh (the family was not listening yet); the next
completed turn does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from appserver.storage.welcome_cache import cache_path
from appserver.storage.workspace_config import lookup
from appserver.tools.suggestion_tools import suggestion_tools

if TYPE_CHECKING:
    from appserver.runtime.turns.model import ActiveTurn
    from appserver.services.context import FamilyContext


log = logging.getLogger("appserver.suggestions")


def prepare(server: FamilyContext, wait: Callable[[], Callable[[], None]]) -> None:
    """Set the family up on ``server`` (see the module's docstring)."""
    tools = server.runtime.engine.tools
    for tool in suggestion_tools():
        if tools.admits(tool.name):
            tools.register(tool, replace=True)
    server.router.extensions["welcomeSuggestions"] = True
    install = wait()
    listeners = server.runtime.engine.turn_listeners
    snapshot = cache_path(server.craft_dir)

    def turn_ended(active: ActiveTurn) -> Awaitable[None] | None:
        if "welcome/suggestions" in server.router.handlers:  # installed: it listens itself
            return None
        if active.record.status != "completed" or active.thread.is_internal:
            return None
        if not welcome_enabled(server):  # switched off: the family would do nothing
            return None
        if not snapshot.is_file():
            return None
        before = len(listeners)
        try:
            install()
        except Exception:  # logged; tried again at the next completed turn
            log.exception("could not load the suggestions family")
            return None
        outcomes = [listener(active) for listener in listeners[before:]]
        waits = [outcome for outcome in outcomes if outcome is not None]
        return _all(waits) if waits else None

    listeners.append(turn_ended)


SETTING = ("WelcomeSuggestions", "Enabled")


def welcome_enabled(server: FamilyContext) -> bool:
    """The setting: the user's settings for this workspace, else the workspace's
    ``.craft/config.json``, else on."""
    for config in (server.user_settings, server.workspace_config):
        value = lookup(config, *SETTING)
        if isinstance(value, bool):
            return value
    return True


async def _all(outcomes: list[Any]) -> None:
    for outcome in outcomes:
        await outcome
