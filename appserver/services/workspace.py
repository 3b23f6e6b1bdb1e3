"""The workspace family: ``model/list``, ``workspace/config/schema`` and
``workspace/config/update`` (reference §3.4, §3.12).

Settings live in the user's own file for this workspace, outside it
(``<home>/workspaces/<digest>/config.json``, :mod:`appserver.storage.user_settings`),
with DotCraft's keys (``Model``, ``ApiKey``, ``EndPoint``, ``Provider``,
``Permissions.DefaultApprovalPolicy``, ``WelcomeSuggestions.Enabled``), written
atomically with mode 0600 by :class:`WorkspaceConfigFile`: a key never lands in a
repository, and a checkout cannot set the approval default. An update takes effect
at once ("hot"): the server's in-memory copy of the user's settings is refreshed in
place and, when a model setting changed, the provider is rebuilt and handed
to the turn engine (turns already streaming finish on the old one). The
default approval policy needs no rebuild: the engine reads it from
``server.user_settings`` on every approval.

``workspace/trust`` reads or sets the workspace's trust (:mod:`appserver.storage.trust`).

Settings still follow the provider precedence of :mod:`appserver.providers`
(CLI flags and ``APPSERVER_*`` variables beat the workspace file), and a
provider object injected into :class:`~appserver.server.config.ServerConfig`
(tests) is never replaced.

Secrets never leave the server in clear: the schema carries no values, the
update result masks ``apiKey``, and nothing here logs a key. Sending the
masked value back (a settings form that round-trips what it was shown)
leaves the stored key unchanged.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from appserver import __version__
from appserver.protocol import errors as rpc_errors
from appserver.protocol import workspace as workspace_wire
from appserver.protocol.base import Empty
from appserver.protocol.errors import RpcError
from appserver.providers import make_provider, resolve_settings
from appserver.providers.base import Provider, ProviderUnavailable, close_providers
from appserver.rpc.connection import RequestContext
from appserver.storage.user_settings import merged, user_home, workspace_home
from appserver.storage.workspace import ConfigFileError, WorkspaceConfigFile, get_value, set_value
from appserver.storage.workspace_config import load_workspace_config

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.workspace")

MASK = "********"


def mask_secret(value: str | None) -> str | None:
    """A display form of a secret: a long key keeps its first 3 and last 4
    characters (enough to tell keys apart), anything shorter is all stars."""
    if not value:
        return None
    if len(value) >= 20:
        return f"{value[:3]}…{value[-4:]}"
    return MASK


# --- normalisers: wire value -> stored value (None = remove) ---------------------------


def _text(value: str | None, _field: str) -> str | None:
    stripped = (value or "").strip()
    return stripped or None


def _model(value: str | None, field: str) -> str | None:
    text = _text(value, field)
    # DotCraft: "Default" (any case) means "no workspace model": the provider's default.
    return None if text is None or text.lower() == "default" else text


def _endpoint(value: str | None, field: str) -> str | None:
    text = _text(value, field)
    if text is None:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise rpc_errors.invalid_params(f"'{field}' must be an absolute http(s) URL.")
    return text


def _policy(value: str | None, field: str) -> str | None:
    text = _text(value, field)
    if text is None:
        return None
    if text in ("default", "Default"):
        return "default"
    if text in ("autoApprove", "AutoApprove"):
        return "autoApprove"
    raise rpc_errors.invalid_params(f"'{field}' must be 'default', 'autoApprove', or null.")


@dataclass(frozen=True)
class Setting:
    """One ``workspace/config/update`` field and where it lives in config.json."""

    field: str  # attribute of WorkspaceConfigUpdateParams
    wire: str  # camelCase name, for messages
    path: tuple[str, ...]
    region: str  # workspace/configChanged region
    normalise: Callable[[str | None, str], str | None]
    provider: bool  # whether a change needs a new provider


SETTINGS: tuple[Setting, ...] = (
    Setting("model", "model", ("Model",), "workspace.model", _model, True),
    Setting("api_key", "apiKey", ("ApiKey",), "workspace.apiKey", _text, True),
    Setting("end_point", "endPoint", ("EndPoint",), "workspace.endpoint", _endpoint, True),
    Setting(
        "default_approval_policy",
        "defaultApprovalPolicy",
        ("Permissions", "DefaultApprovalPolicy"),
        "workspace.defaultApprovalPolicy",
        _policy,
        False,
    ),
    Setting("provider", "provider", ("Provider",), "workspace.provider", _text, True),
)


# A boolean, so not a Setting: whether turns refresh the welcome suggestions
# (services/suggestions/welcome.py reads it from the user's settings).
WELCOME_PATH = ("WelcomeSuggestions", "Enabled")
WELCOME_REGION = "welcomeSuggestions"


def _welcome(document: dict[str, Any]) -> bool | None:
    value = get_value(document, *WELCOME_PATH)
    return value if isinstance(value, bool) else None


def _stored(document: dict[str, Any], setting: Setting) -> str | None:
    """The current value, normalised like a new one (junk in the file reads as unset)."""
    raw = get_value(document, *setting.path)
    if not isinstance(raw, str):
        return None
    try:
        return setting.normalise(raw, setting.wire)
    except RpcError:
        return None


def config_schema() -> list[workspace_wire.ConfigSchemaSection]:
    """The settings ``workspace/config/update`` can change (values never included)."""
    return [
        workspace_wire.ConfigSchemaSection(
            section="Core",
            order=0,
            path=None,
            fields=[
                workspace_wire.ConfigSchemaField(
                    key="Provider",
                    display_name="Provider",
                    type="select",
                    options=["offline", "openai", "anthropic"],
                    hint="Empty = openai when EndPoint or ApiKey is set, otherwise offline.",
                    reload="hot",
                ),
                workspace_wire.ConfigSchemaField(
                    key="ApiKey",
                    display_name="API Key",
                    type="password",
                    sensitive=True,
                    hint="Empty = taken from the environment (APPSERVER_API_KEY, "
                    "OPENAI_API_KEY, ANTHROPIC_API_KEY).",
                    reload="hot",
                ),
                workspace_wire.ConfigSchemaField(
                    key="Model",
                    display_name="Model",
                    type="text",
                    hint="Empty or 'Default' = the provider's default model.",
                    reload="hot",
                ),
                workspace_wire.ConfigSchemaField(
                    key="EndPoint",
                    display_name="Endpoint",
                    type="text",
                    hint="API root, e.g. https://api.openai.com/v1. Empty = the provider's own.",
                    reload="hot",
                ),
            ],
        ),
        workspace_wire.ConfigSchemaSection(
            section="Permissions",
            order=25,
            path=["Permissions"],
            fields=[
                workspace_wire.ConfigSchemaField(
                    key="DefaultApprovalPolicy",
                    display_name="Default Approval Policy",
                    type="select",
                    options=["default", "autoApprove"],
                    hint="Policy for threads whose approvalPolicy is 'default'.",
                    reload="hot",
                    default_value="default",
                ),
            ],
        ),
    ]


class WorkspaceService:
    """Handlers of the family; owns the config file writer."""

    def __init__(self, server: FamilyContext) -> None:
        self.server = server
        self.home = user_home()
        self.file = WorkspaceConfigFile(workspace_home(server.workspace, self.home))
        # Replaced providers may still serve a streaming turn: closed at shutdown.
        self._retired: list[Provider] = []

    def register(self) -> None:
        router = self.server.router
        router.register("model/list", self.list_models)
        router.register("workspace/config/schema", self.schema)
        router.register("workspace/config/update", self.update)
        router.register("workspace/trust", self.trust)
        router.register("workspace/status", self.status)
        self.server.shutdown_hooks.append(self._close_providers)

    # --- model/list ---------------------------------------------------------------

    async def list_models(self, ctx: RequestContext, params: Empty) -> BaseModel:
        provider = self.server.provider
        try:
            models = await provider.list_models()
        except ProviderUnavailable as exc:
            return self._failure(provider, exc.code, exc.message)
        except Exception as exc:  # a provider bug must not become -32603 here
            log.warning("model/list failed: %s", type(exc).__name__)
            return self._failure(provider, "Unknown", f"Model list request failed ({exc}).")
        items = [
            workspace_wire.ModelCatalogItem(id=m.id, owned_by=m.owned_by, created_at=m.created_at)
            for m in sorted(models, key=lambda m: m.id.lower())
        ]
        return workspace_wire.ModelListResult(success=True, models=items)

    @staticmethod
    def _failure(provider: Provider, code: str, message: str) -> workspace_wire.ModelListResult:
        endpoint = getattr(provider, "base_url", None)
        text = message.strip() or "Model list request failed."
        if isinstance(endpoint, str) and endpoint.strip():
            text = f"{text} Endpoint: {endpoint.strip()}"
        return workspace_wire.ModelListResult(
            success=False, models=[], error_code=code, error_message=text
        )

    # --- workspace/config/* --------------------------------------------------------------

    async def schema(self, ctx: RequestContext, params: Empty) -> BaseModel:
        return workspace_wire.WorkspaceConfigSchemaResult(sections=config_schema())

    async def update(
        self, ctx: RequestContext, params: workspace_wire.WorkspaceConfigUpdateParams
    ) -> BaseModel:
        given = [s for s in SETTINGS if s.field in params.model_fields_set]
        welcome = "welcome_suggestions_enabled" in params.model_fields_set
        if not given and not welcome:
            raise rpc_errors.invalid_params(
                "At least one of 'model', 'apiKey', 'endPoint', 'defaultApprovalPolicy', "
                "'provider' or 'welcomeSuggestionsEnabled' is required."
            )
        wanted = {s.field: s.normalise(getattr(params, s.field), s.wire) for s in given}
        changed: list[Setting] = []
        regions: list[str] = []
        new_provider: Provider | None = None
        try:
            async with self.file.edit() as document:
                if welcome and _welcome(document) != params.welcome_suggestions_enabled:
                    set_value(document, WELCOME_PATH, params.welcome_suggestions_enabled)
                    regions.append(WELCOME_REGION)
                for setting in given:
                    current = _stored(document, setting)
                    value = wanted[setting.field]
                    if (
                        setting.field == "api_key"
                        and value is not None
                        and value == mask_secret(current)
                    ):
                        continue  # the masked key sent back: keep the real one
                    if value != current:
                        changed.append(setting)
                        set_value(document, setting.path, value)
                view = merged(load_workspace_config(self.home), document)
                if any(s.provider for s in changed) and not self.server.provider_fixed:
                    # Built inside the edit so a bad combination is refused unwritten.
                    new_provider = self._build_provider(view)
                result = self._result(view)
                snapshot = copy.deepcopy(view)
        except ConfigFileError as exc:
            raise RpcError(
                rpc_errors.INTERNAL_ERROR, "Internal error", {"detail": str(exc)}
            ) from None
        if changed or regions:
            self._apply(snapshot, new_provider)
            self.server.announce_config_change(
                "workspace/config/update", [s.region for s in changed] + regions
            )
        return result

    def _build_provider(self, user_settings: dict[str, Any]) -> Provider:
        try:
            settings = resolve_settings(
                self.server.provider_options,
                os.environ,
                self.server.workspace_config,
                user=user_settings,
                trusted=self.server.trust.trusted,
            )
            provider = make_provider(settings)
        except ValueError as exc:
            raise rpc_errors.invalid_params(str(exc)) from None
        log.info("workspace config changed; provider is now %s", settings.describe())
        return provider

    def _apply(self, user_settings: dict[str, Any], provider: Provider | None) -> None:
        # In place: the server, the engine's approval default and other
        # families hold this very dict.
        self.server.user_settings.clear()
        self.server.user_settings.update(user_settings)
        if provider is not None:
            self._retired.append(self.server.provider)
            self.server.provider = provider

    @staticmethod
    def _result(document: dict[str, Any]) -> workspace_wire.WorkspaceConfigUpdateResult:
        values = {s.field: _stored(document, s) for s in SETTINGS}
        values["api_key"] = mask_secret(values["api_key"])
        return workspace_wire.WorkspaceConfigUpdateResult(
            **values, welcome_suggestions_enabled=_welcome(document)
        )

    # --- workspace/trust ------------------------------------------------------------------

    async def trust(
        self, ctx: RequestContext, params: workspace_wire.WorkspaceTrustParams
    ) -> BaseModel:
        trust = self.server.trust
        if params.trusted is True:
            if await trust.trust("trusted by a client (workspace/trust)"):
                # After the response: the caller sees its answer before what starts.
                for start in trust.on_trusted:
                    ctx.after_response(start)
        elif params.trusted is False:
            trust.revoke()
        return workspace_wire.WorkspaceTrustResult(
            trusted=trust.trusted, reason=trust.reason, workspace_path=str(trust.workspace)
        )

    # --- workspace/status -----------------------------------------------------------------

    async def status(self, ctx: RequestContext, params: Empty) -> BaseModel:
        provider = self.server.provider
        endpoint = getattr(provider, "base_url", None)
        return workspace_wire.WorkspaceStatusResult(
            workspace_path=str(self.server.workspace),
            provider=provider.name,
            model=provider.default_model,
            endpoint=str(endpoint) if endpoint else None,
            default_approval_policy=self.server.default_approval_policy(),
            trusted=self.server.trust.trusted,
            version=__version__,
        )

    async def _close_providers(self) -> None:
        """At shutdown: close the providers ``workspace/config/update`` replaced
        (their HTTP clients; the server closes the active one)."""
        providers, self._retired = self._retired, []
        await close_providers(providers)


def install(server: FamilyContext) -> None:
    """Register ``model/list`` and ``workspace/config/*`` on ``server``."""
    WorkspaceService(server).register()
