"""SubAgent profile management: ``subagent/profiles/list|setEnabled|upsert|remove``
and ``subagent/settings/update`` (DotCraft parity 2 §2.3).

Everything lives in the workspace's ``.craft/config.json``
(:mod:`appserver.storage.subagent_config`), read fresh on every call and
changed under the file's cross-process lock
(:class:`~appserver.storage.workspace.WorkspaceConfigFile`), so several
processes on one workspace, and hand edits, are seen at once. Every
successful write emits ``workspace/configChanged {regions: ["subagent"]}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from appserver.protocol import errors as rpc_errors
from appserver.protocol import subagent_profiles as profile_wire
from appserver.protocol.base import Empty
from appserver.protocol.errors import RpcError
from appserver.rpc.connection import RequestContext
from appserver.runtime.subagent_builtins import DEFAULT_PROFILE
from appserver.runtime.subagent_profiles import (
    ProfileView,
    built_in_name,
    validation_warnings,
    view_profile,
    view_profiles,
)
from appserver.storage import subagent_config
from appserver.storage.workspace import ConfigFileError, WorkspaceConfigFile, find_key

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

REGION = "subagent"


def to_entry(view: ProfileView) -> profile_wire.SubAgentProfileEntry:
    """The wire form of one profile."""
    return profile_wire.SubAgentProfileEntry(
        name=view.name,
        is_built_in=view.built_in is not None,
        is_template=view.is_template,
        has_workspace_override=view.has_override,
        is_default=view.is_default,
        enabled=view.enabled,
        definition=view.definition,
        built_in_defaults=view.built_in,
        diagnostic=profile_wire.SubAgentProfileDiagnostic(
            enabled=view.enabled,
            binary_resolved=view.binary_resolved,
            hidden_from_prompt=bool(view.hidden_reasons),
            hidden_reason="; ".join(view.hidden_reasons) or None,
            warnings=list(view.warnings),
        ),
    )


def to_settings(config: subagent_config.SubAgentConfig) -> profile_wire.SubAgentSettings:
    """The wire form of the settings."""
    return profile_wire.SubAgentSettings(
        external_cli_session_resume_enabled=config.external_cli_session_resume,
        model=config.model,
    )


def _trimmed(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip() or None
    return value


def normalised(definition: profile_wire.SubAgentProfileWrite) -> profile_wire.SubAgentProfileWrite:
    """As DotCraft stores a definition: strings trimmed, blank ones absent, a blank
    ``workingDirectoryMode`` ``workspace`` (a blank runtime stays blank, to be refused)."""
    values = {field: _trimmed(value) for field, value in definition}
    values["runtime"] = definition.runtime.strip()
    values["working_directory_mode"] = values["working_directory_mode"] or "workspace"
    return profile_wire.SubAgentProfileWrite.model_validate(values)


def _required_name(name: str) -> str:
    if not name.strip():
        raise rpc_errors.invalid_params("'name' is required.")
    return name.strip()


class SubAgentProfileService:
    """Handlers over the workspace's config.json."""

    def __init__(self, server: FamilyContext) -> None:
        self.server = server
        self.file = WorkspaceConfigFile(server.craft_dir)

    def register(self) -> None:
        """Register the five methods on the router."""
        router = self.server.router
        router.register("subagent/profiles/list", self.list)
        router.register("subagent/settings/update", self.update_settings)
        router.register("subagent/profiles/setEnabled", self.set_enabled)
        router.register("subagent/profiles/upsert", self.upsert)
        router.register("subagent/profiles/remove", self.remove)

    def _config(self) -> subagent_config.SubAgentConfig:
        try:
            return subagent_config.read_subagent_config(self.file.read())
        except ConfigFileError as exc:
            raise _unreadable(exc) from None

    def _entry(self, name: str) -> profile_wire.SubAgentProfileEntry:
        view = view_profile(name, self._config())
        if view is None:  # removed by another process between the write and this read
            raise rpc_errors.subagent_profile_not_found(name)
        return to_entry(view)

    def _announce(self, source: str) -> None:
        self.server.announce_config_change(source, [REGION])

    async def list(self, ctx: RequestContext, params: Empty) -> BaseModel:
        config = self._config()
        return profile_wire.SubAgentProfileListResult(
            profiles=[to_entry(view) for view in view_profiles(config)],
            default_name=DEFAULT_PROFILE,
            settings=to_settings(config),
        )

    async def update_settings(
        self, ctx: RequestContext, params: profile_wire.SubAgentSettingsUpdateParams
    ) -> BaseModel:
        resume = params.external_cli_session_resume_enabled
        set_model = "model" in params.model_fields_set
        if resume is None and not set_model:
            raise rpc_errors.invalid_params(
                "At least one of 'externalCliSessionResumeEnabled' or 'model' is required."
            )
        try:
            async with self.file.edit() as document:
                if resume is not None:
                    subagent_config.write_resume(document, resume)
                if set_model:
                    subagent_config.write_model(document, params.model)
                config = subagent_config.read_subagent_config(document)
        except ConfigFileError as exc:
            raise _unreadable(exc) from None
        self._announce("subagent/settings/update")
        return profile_wire.SubAgentSettingsUpdateResult(settings=to_settings(config))

    async def set_enabled(
        self, ctx: RequestContext, params: profile_wire.SubAgentProfileSetEnabledParams
    ) -> BaseModel:
        name = _required_name(params.name)
        if name.lower() == DEFAULT_PROFILE and not params.enabled:
            raise rpc_errors.subagent_profile_protected(
                f"The default SubAgent profile '{DEFAULT_PROFILE}' cannot be disabled."
            )
        try:
            async with self.file.edit() as document:
                config = subagent_config.read_subagent_config(document)
                view = view_profile(name, config)
                if view is None:
                    raise rpc_errors.subagent_profile_not_found(name)
                others = [item for item in config.disabled if item.lower() != view.name.lower()]
                disabled = others if params.enabled else [*others, view.name]
                subagent_config.write_disabled(document, disabled)
        except ConfigFileError as exc:
            raise _unreadable(exc) from None
        self._announce("subagent/profiles/setEnabled")
        return profile_wire.SubAgentProfileResult(profile=self._entry(view.name))

    async def upsert(
        self, ctx: RequestContext, params: profile_wire.SubAgentProfileUpsertParams
    ) -> BaseModel:
        name = built_in_name(_required_name(params.name)) or params.name.strip()
        definition = normalised(params.definition)
        warnings = validation_warnings(name, definition)
        if warnings:
            raise rpc_errors.subagent_profile_validation_failed(" ".join(warnings))
        try:
            async with self.file.edit() as document:
                profiles = subagent_config.read_subagent_config(document).profiles
                existing = find_key(profiles, name)
                if existing is not None:
                    del profiles[existing]
                profiles[name] = definition
                subagent_config.write_profiles(document, profiles)
        except ConfigFileError as exc:
            raise _unreadable(exc) from None
        self._announce("subagent/profiles/upsert")
        return profile_wire.SubAgentProfileResult(profile=self._entry(name))

    async def remove(
        self, ctx: RequestContext, params: profile_wire.SubAgentProfileRemoveParams
    ) -> BaseModel:
        name = _required_name(params.name)
        try:
            async with self.file.edit() as document:
                config = subagent_config.read_subagent_config(document)
                stored = config.override_name(name)
                if stored is None:
                    raise rpc_errors.subagent_profile_not_found(name)
                profiles = dict(config.profiles)
                del profiles[stored]
                subagent_config.write_profiles(document, profiles)
                if built_in_name(stored) is None:
                    # A custom profile takes its disabled state with it; a built-in keeps it.
                    subagent_config.write_disabled(
                        document, [item for item in config.disabled if item.lower() != name.lower()]
                    )
        except ConfigFileError as exc:
            raise _unreadable(exc) from None
        self._announce("subagent/profiles/remove")
        return profile_wire.SubAgentProfileRemoveResult(removed=True)


def _unreadable(exc: ConfigFileError) -> RpcError:
    """A broken config.json is never overwritten: the write is refused."""
    return RpcError(rpc_errors.INTERNAL_ERROR, "Internal error", {"detail": str(exc)})


def install(server: FamilyContext) -> None:
    """Register the SubAgent profile methods (the workspace's .craft is always known)."""
    SubAgentProfileService(server).register()
