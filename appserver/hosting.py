"""Opening a workspace's runtime for a face (``appserver host|rpc|router``).

Two shapes, one runtime API:

* **lean** (the default): the workspace lock, the database and the runtime,
  nothing else, so a one-shot face answers fast;
* **with ``--websocket``**: the whole AppServer (method families included),
  which also serves DotCraft JSON-RPC clients on that address from the same
  process, so a WebSocket client can list and watch the threads a face drives.

Either way a face gets a :class:`~appserver.runtime.host.Runtime` and the
same workspace, provider and approval settings as ``appserver app-server``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from appserver import __version__, startup
from appserver.providers import ProviderSettings, key_variables, make_provider, resolve_settings
from appserver.providers.base import Provider, ProviderConfigError
from appserver.runtime.host import Runtime
from appserver.runtime.turns import EngineConfig
from appserver.server.background import build_models, warm_provider
from appserver.storage.craft_ignore import write_craft_gitignore
from appserver.storage.lock import WorkspaceLock
from appserver.storage.opening import locked_database
from appserver.storage.trust import settle_trust
from appserver.storage.user_settings import load_user_settings
from appserver.storage.workspace_config import (
    default_approval_policy,
    load_workspace_config,
    warn_ignored,
)
from appserver.tools.registry import ToolRegistry, default_tools

if TYPE_CHECKING:
    from appserver.storage.preparation import Preparation
    from appserver.transport.listen_options import ListenerOptions

log = logging.getLogger("appserver")


@dataclass
class HostOptions:
    """Everything that shapes a face's runtime."""

    workspace: Path
    provider_options: dict[str, Any] = field(default_factory=dict)
    engine: EngineConfig = field(default_factory=EngineConfig)
    tool_env: tuple[str, ...] = ()
    # None: every built-in tool; a list: only those (zot's --tools / --no-tools).
    tools: list[str] | None = None
    websocket: ListenerOptions | None = None
    lock_wait: float = 0.0  # seconds to wait for another process to leave the workspace
    # Load the provider's HTTP library in the background from the start. A
    # one-shot (one turn, then exit) leaves it to its turn: the worker thread
    # would only compete with that turn, and delay the exit of one that never
    # calls the model (a replayed answer, a refusal).
    warm_provider: bool = True
    # With warm_provider: build the models of what every turn says in the
    # background, for a door that reads a turn's events typed. A door that reads
    # them as data (the Codex face) builds none, and loads no pydantic for them.
    build_turn_models: bool = True
    provider: Provider | None = None  # an already-built provider wins (tests)
    trust_workspace: bool = False  # --trust-workspace (storage/trust.py)
    # The workspace's lock and database, being taken and created ahead (a face
    # that answered its client's first line early: appserver/early_start.py).
    prepared: Preparation | None = None

    @property
    def craft_dir(self) -> Path:
        return self.workspace / ".craft"


def provider_settings(options: HostOptions, trusted: bool = False) -> ProviderSettings:
    """The provider settings (flags > environment > the user's settings > the
    workspace config, whose key and endpoint count only when ``trusted``), checked.

    Raises :class:`ProviderConfigError` for a bad value or a hosted provider
    without an API key (a custom ``base_url``, such as a local server, may
    need none).
    """
    workspace_config = load_workspace_config(options.craft_dir)
    try:
        settings = resolve_settings(
            options.provider_options,
            os.environ,
            workspace_config,
            user=load_user_settings(options.workspace),
            trusted=trusted,
        )
    except ValueError as exc:
        raise ProviderConfigError(str(exc)) from None
    if settings.provider != "offline" and not settings.api_key and not settings.base_url:
        names = " or ".join(key_variables(settings))
        raise ProviderConfigError(
            f"no API key for provider {settings.provider}: pass --api-key or set {names}"
        )
    return settings


def _tools(options: HostOptions) -> ToolRegistry:
    from appserver.runtime.subagent_tools import CONTROL_TOOL_NAMES

    tools = default_tools(options.tool_env)
    if options.tools is None:
        return ToolRegistry(tools)
    unknown = set(options.tools) - {tool.name for tool in tools} - set(CONTROL_TOOL_NAMES)
    if unknown:
        raise ValueError(f"unknown tool(s): {', '.join(sorted(unknown))}")
    chosen = [tool for tool in tools if tool.name in options.tools]
    return ToolRegistry(chosen, restricted_to=options.tools)


@asynccontextmanager
async def open_host(options: HostOptions) -> AsyncIterator[Runtime]:
    """Open the workspace's runtime (see the module docstring).

    Raises :class:`ProviderConfigError` before touching the workspace when the
    provider settings are unusable, and ``WorkspaceLocked`` when another
    process keeps the workspace past ``lock_wait``.
    """
    options.workspace = options.workspace.resolve()
    if options.provider is None:
        # Refused before the workspace is touched when no trust could help; the
        # settings that count are known once its trust is (a trusted workspace's
        # old .craft/config.json key).
        provider_settings(options, trusted=True)
    tools = _tools(options)
    if options.websocket is not None:
        async with _full_server(options, tools) as runtime:
            yield runtime
        return
    prepared = options.prepared
    lock = (
        WorkspaceLock(options.craft_dir / "appserver.lock") if prepared is None else prepared.lock
    )
    info = {"workspacePath": str(options.workspace), "version": __version__}
    database = options.craft_dir / "appserver.db"
    write_craft_gitignore(options.craft_dir)  # its machine state stays out of the user's git
    async with locked_database(lock, database, info, options.lock_wait, prepared) as db:
        trust = await settle_trust(db, options.workspace, flag=options.trust_workspace)
        provider = options.provider
        if provider is None:
            settings = provider_settings(options, trust.trusted)
            log.debug("workspace %s; %s", options.workspace, settings.describe())
            provider = make_provider(settings)
        warn_ignored(load_workspace_config(options.craft_dir))
        user_settings = load_user_settings(options.workspace)
        runtime = Runtime(
            db,
            options.workspace,
            provider,
            config=options.engine,
            tools=tools,
            attachments=options.craft_dir / "attachments" / "images",
            default_approval_policy=lambda: default_approval_policy(user_settings),
            workspace_trusted=lambda: trust.trusted,
        )
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            startup.ready()
            if options.warm_provider:
                warm_provider(tg, provider)
            if options.warm_provider and options.build_turn_models:
                from appserver.protocol.turn_models import EVERY_TURN

                tg.start_soon(build_models, EVERY_TURN)
            try:
                yield runtime
            finally:
                with anyio.CancelScope(shield=True):
                    await runtime.shutdown()
                tg.cancel_scope.cancel()


@asynccontextmanager
async def _full_server(options: HostOptions, tools: ToolRegistry) -> AsyncIterator[Runtime]:
    # Imported here: the method families cost start-up time a lean face saves.
    from appserver.server.app import AppServer
    from appserver.server.config import ServerConfig

    websocket = options.websocket
    assert websocket is not None
    config = ServerConfig(
        workspace=options.workspace,
        engine=options.engine,
        provider_options=options.provider_options,
        provider=options.provider,
        tool_env=options.tool_env,
        trust_workspace=options.trust_workspace,
    )
    async with AppServer.open(config, tools=tools, lock_wait=options.lock_wait) as server:
        if options.provider is None:
            provider_settings(options, server.trust.trusted)  # a face refuses a missing key
        async with server.listen_websocket(websocket):
            endpoint = server.endpoints.get("appServerWebSocket")
            # The same line `appserver app-server` prints, for scripts to wait on.
            sys.stderr.write(f"appserver: listening on {endpoint}\n")
            sys.stderr.flush()
            yield server.runtime
