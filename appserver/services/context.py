"""What a method family is given when it is installed: the narrow waist
between the families and the server that composes them.

A family registers handlers on ``router``, drives threads and turns through
the runtime's use cases, may add agent tools (``runtime.engine.tools``) and
input resolvers (``runtime.materializer.resolvers``), and runs background
work with ``start_background``. Families that others use are kept here
(``skills``, ``plugins``, ``mcp``, ``commands``, ``cron``, ``heartbeat``), set by
their own ``install``: ``None`` while the family waits for its first use
(``router.load(method)`` installs it); nothing is attached to the server object. The context
imports none of the families: it holds the first four by the protocols of
``services/shared_families.py`` (each family's ``<family>_of`` gives its class).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appserver.protocol.ids import now_iso
from appserver.protocol.threads import ConfigChangedNotification
from appserver.providers.base import Provider
from appserver.runtime.host import Runtime
from appserver.runtime.threads import Threads
from appserver.services.router import Router
from appserver.services.turns import TurnService
from appserver.storage.db import Database
from appserver.storage.trust import WorkspaceTrust
from appserver.storage.workspace_config import default_approval_policy as users_default_policy

if TYPE_CHECKING:
    from appserver.cron.automations.runner import AutomationRunner
    from appserver.cron.heartbeat import HeartbeatService
    from appserver.cron.service import CronService
    from appserver.services.shared_families import PluginsFamily, SharedFamily


class FamilyContext:
    """The server's parts a family may use."""

    def __init__(
        self,
        *,
        router: Router,
        runtime: Runtime,
        turn_service: TurnService,
        workspace: Path,
        craft_dir: Path,
        workspace_config: dict[str, Any],
        user_settings: dict[str, Any],
        trust: WorkspaceTrust,
        provider_options: dict[str, Any],
        provider_fixed: bool,
        is_draining: Callable[[], bool],
        default_approval_policy: Callable[[], str] | None = None,
    ) -> None:
        self.router = router
        self.runtime = runtime
        self.turns = turn_service
        self.workspace = workspace
        self.craft_dir = craft_dir
        # The parsed .craft/config.json; the workspace family updates it in place.
        self.workspace_config = workspace_config
        # The user's settings for this workspace (storage/user_settings.py);
        # the workspace family updates it in place.
        self.user_settings = user_settings
        # Whether the workspace's own files may run code (storage/trust.py).
        self.trust = trust
        self.provider_options = provider_options
        self.provider_fixed = provider_fixed  # a provider object was injected (tests)
        # True once the server began to drain: no new work starts.
        self.is_draining = is_draining
        # The policy of threads that set none: --approval-policy, else the user's default.
        self.default_approval_policy = default_approval_policy or (
            lambda: users_default_policy(user_settings)
        )
        self.background: list[Callable[[], Awaitable[Any]]] = []
        # Set by the server once its background work runs: later work starts at once.
        self.spawn: Callable[[Callable[[], Awaitable[Any]]], None] | None = None
        self.shutdown_hooks: list[Callable[[], Awaitable[Any]]] = []
        # Typed by what others use of them (services/shared_families.py): the
        # families import this module, so it imports none of them.
        self.skills: SharedFamily | None = None
        self.plugins: PluginsFamily | None = None
        self.mcp: SharedFamily | None = None
        self.commands: SharedFamily | None = None
        self.cron: CronService | None = None
        self.heartbeat: HeartbeatService | None = None
        # None: Automations switched off, or not installed yet (no task, no call).
        self.automations: AutomationRunner | None = None

    @property
    def db(self) -> Database:
        return self.runtime.db

    @property
    def threads(self) -> Threads:
        return self.runtime.threads

    @property
    def provider(self) -> Provider:
        return self.runtime.engine.provider

    @provider.setter
    def provider(self, provider: Provider) -> None:
        self.runtime.engine.provider = provider

    def accepting(self) -> bool:
        """Whether new work may start (false once the server began to drain;
        a job runner's ``accepting``)."""
        return not self.is_draining()

    def start_background(self, run: Callable[[], Awaitable[Any]]) -> None:
        """Run ``run()`` for the server's lifetime (cancelled at shutdown).

        The task starts once the server is open (at once when it already is:
        a family installed at its first call) and never blocks start-up or
        ``/readyz``.
        """
        if self.spawn is None:
            self.background.append(run)
        elif not self.is_draining():  # work that would start while the server ends: none
            self.spawn(run)

    def announce_config_change(self, source: str, regions: list[str]) -> None:
        """``workspace/configChanged`` to every client that wants it."""
        self.runtime.bus.publish(
            "workspace/configChanged",
            ConfigChangedNotification(source=source, regions=regions, changed_at=now_iso()),
            broadcast=True,
        )
