"""``ServerConfig``, everything that shapes one server process, and the provider
settings it resolves to."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appserver.providers import ProviderSettings, missing_key_warning, resolve_settings
from appserver.rpc.connection import Limits
from appserver.runtime.engine_config import EngineConfig
from appserver.storage.db import parse_store
from appserver.storage.nodes import new_node_id

if TYPE_CHECKING:
    from appserver.providers.base import Provider

log = logging.getLogger("appserver.server")


@dataclass
class ServerConfig:
    """Everything that shapes one server process."""

    workspace: Path
    limits: Limits = field(default_factory=Limits)
    db_path: Path | None = None  # default: <workspace>/.craft/appserver.db
    # --store: sqlite:///path (db_path) or postgresql://... shared by several nodes.
    store: str | None = None
    node_id: str = field(default_factory=new_node_id)  # this server among those nodes
    engine: EngineConfig = field(default_factory=EngineConfig)
    # CLI-level provider choices (provider, model, base_url, api_key); merged
    # with the environment and the workspace config by resolve_settings.
    provider_options: dict[str, Any] = field(default_factory=dict)
    provider: Provider | None = None  # an already-built provider wins (tests)
    allow_private_image_urls: bool = False
    # Secret environment variables tool commands may see all the same (--tool-env).
    tool_env: tuple[str, ...] = ()
    # --trust-workspace: the user trusts this workspace's own files (storage/trust.py).
    trust_workspace: bool = False
    # --approval-policy: the policy of threads that set none (else the user's default).
    approval_policy: str | None = None

    @property
    def craft_dir(self) -> Path:
        return self.workspace / ".craft"

    @property
    def database_path(self) -> Path:
        if self.db_path is None and self.store:
            kind, location = parse_store(self.store, self.workspace)
            if kind == "sqlite":
                return Path(location)
        return self.db_path or self.craft_dir / "appserver.db"

    @property
    def shared_store(self) -> str | None:
        """The PostgreSQL URL when nodes share a database, else ``None``."""
        if not self.store:
            return None
        kind, location = parse_store(self.store, self.workspace)
        return location if kind == "postgresql" else None


def provider_settings(
    config: ServerConfig,
    workspace_config: Mapping[str, Any],
    user_settings: Mapping[str, Any],
    *,
    trusted: bool,
) -> ProviderSettings | None:
    """The provider settings the server builds its provider from, merged from the
    command line, the environment, the workspace config and the user's settings
    (``None`` when ``config.provider`` is given). A bad one raises now; a missing
    API key is a warning, said at start."""
    if config.provider is not None:
        return None
    settings = resolve_settings(
        config.provider_options,
        os.environ,
        workspace_config,
        user=user_settings,
        trusted=trusted,
    )
    log.debug("workspace %s; %s", config.workspace, settings.describe())
    # Said at start, not at the first turn; the server still starts, so
    # the key can be set (workspace/config/update) without a restart.
    warning = missing_key_warning(settings)
    if warning is not None:
        log.warning("%s", warning)
    return settings
