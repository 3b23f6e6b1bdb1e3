"""SubAgent profiles: the built-in ones, the workspace's overrides over them,
validation, and whether the main agent is offered each (DotCraft's
``SubAgentProfileRegistry`` and ``SubAgentCoordinator.GetProfileDiagnostics``).

Runs are a later slice; this module answers what a profile is and whether it
may be used. Names match case-insensitively.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from appserver.protocol.subagent_profiles import SubAgentProfileWrite
from appserver.runtime.subagent_builtins import (
    BUILT_IN_DATA,
    CLI_RUNTIME,
    DEFAULT_PROFILE,
    KNOWN_RUNTIMES,
    TEMPLATE_PROFILES,
)
from appserver.storage.subagent_config import SubAgentConfig

BUILT_IN_PROFILES: dict[str, SubAgentProfileWrite] = {
    name: SubAgentProfileWrite.model_validate(fields) for name, fields in BUILT_IN_DATA.items()
}


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def _is(value: str | None, wanted: str) -> bool:
    return (value or "").strip().lower() == wanted


def validation_warnings(
    name: str, profile: SubAgentProfileWrite, *, template: bool = False
) -> list[str]:
    """What is wrong with ``profile`` (each warning names ``'<name>'``). A template
    (a built-in template without override) is not warned about what it leaves blank."""
    label = f"SubAgent profile '{name}'"
    if _blank(profile.runtime):
        return [f"{label} is missing a runtime."]
    warnings = []
    if profile.runtime.strip().lower() not in KNOWN_RUNTIMES:
        warnings.append(f"{label} references unknown runtime '{profile.runtime}'.")
    if _is(profile.runtime, CLI_RUNTIME):
        if not template and _blank(profile.bin):
            warnings.append(f"{label} is missing required field 'bin' for cli-oneshot.")
        arg_template = _is(profile.input_mode, "arg-template")
        if not template and arg_template and _blank(profile.input_arg_template):
            warnings.append(
                f"{label} uses inputMode 'arg-template' but does not define inputArgTemplate."
            )
        if _is(profile.input_mode, "env") and _blank(profile.input_env_key):
            warnings.append(f"{label} uses inputMode 'env' but does not define inputEnvKey.")
        if not template and _is(profile.output_format, "json") and _blank(profile.output_json_path):
            warnings.append(f"{label} uses outputFormat 'json' but does not define outputJsonPath.")
        if not template and profile.read_output_file and _blank(profile.output_file_arg_template):
            warnings.append(
                f"{label} enables output file capture but does not define outputFileArgTemplate."
            )
    if profile.supports_resume:
        if _blank(profile.resume_arg_template):
            warnings.append(
                f"{label} enables supportsResume but does not define resumeArgTemplate."
            )
        if _blank(profile.resume_session_id_json_path) and _blank(profile.resume_session_id_regex):
            warnings.append(
                f"{label} enables supportsResume but defines neither resumeSessionIdJsonPath "
                "nor resumeSessionIdRegex."
            )
    return warnings


@dataclass(frozen=True)
class ProfileView:
    """One profile as the workspace sees it, with why it is not offered."""

    name: str
    definition: SubAgentProfileWrite
    built_in: SubAgentProfileWrite | None
    has_override: bool
    is_template: bool
    enabled: bool
    binary_resolved: bool
    hidden_reasons: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def is_default(self) -> bool:
        """Whether this is the default profile (``native``)."""
        return self.name.lower() == DEFAULT_PROFILE


def built_in_name(name: str) -> str | None:
    """The built-in profile's own spelling of ``name``, or ``None``."""
    return next((known for known in BUILT_IN_PROFILES if known.lower() == name.lower()), None)


def view_profile(name: str, config: SubAgentConfig) -> ProfileView | None:
    """The profile called ``name`` (built-in or the workspace's), or ``None``."""
    built_in = built_in_name(name)
    override = config.override_name(name)
    if built_in is None and override is None:
        return None
    shown = built_in or override or name
    definition = config.profiles[override] if override is not None else BUILT_IN_PROFILES[shown]
    is_template = shown in TEMPLATE_PROFILES and override is None
    warnings = tuple(validation_warnings(shown, definition, template=is_template))
    enabled = shown.lower() == DEFAULT_PROFILE or not config.is_disabled(shown)
    registered = definition.runtime.strip().lower() in KNOWN_RUNTIMES
    reasons = []
    if not enabled:
        reasons.append("disabled by workspace configuration")
    if not registered:
        reasons.append("runtime not registered")
    if is_template:
        reasons.append("template profile")
    if warnings:
        reasons.append("configuration warnings present")
    resolved = False
    if _is(definition.runtime, CLI_RUNTIME):
        if _blank(definition.bin):
            reasons.append("missing required field 'bin'")
        else:
            assert definition.bin is not None
            resolved = shutil.which(definition.bin.strip()) is not None
            if not resolved:
                reasons.append(f"binary '{definition.bin}' was not found on PATH")
    return ProfileView(
        name=shown,
        definition=definition,
        built_in=BUILT_IN_PROFILES.get(shown),
        has_override=override is not None,
        is_template=is_template,
        enabled=enabled,
        binary_resolved=resolved,
        hidden_reasons=tuple(dict.fromkeys(reasons)),
        warnings=warnings,
    )


def view_profiles(config: SubAgentConfig) -> list[ProfileView]:
    """Every profile: ``native`` first, then by name (case-insensitively)."""
    names = {name.lower(): name for name in config.profiles}
    names.update({name.lower(): name for name in BUILT_IN_PROFILES})
    views = [view for name in names.values() if (view := view_profile(name, config))]
    return sorted(views, key=lambda view: (not view.is_default, view.name.lower(), view.name))
