"""The SubAgent sections of ``<workspace>/.craft/config.json``, DotCraft's way.

``SubAgent`` holds ``DisabledProfiles`` (distinct, sorted, removed when
empty), ``EnableExternalCliSessionResume`` (written only when true), ``Model``
(removed when empty), and ``MaxDepth`` (read only: default 1, at least 1).
``SubAgentProfiles`` maps a profile's name to its definition with PascalCase
keys (``{"Runtime": "cli-oneshot", "Bin": "codex", "Timeout": 600}``), sorted
by name. Keys are matched case-insensitively; an empty section is removed and
every other key of the file is kept. The functions here read and change a
parsed document; :class:`appserver.storage.workspace.WorkspaceConfigFile`
does the safe read-modify-write around them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appserver.storage.workspace import find_key, get_value, set_value

if TYPE_CHECKING:
    from appserver.protocol.subagent_profiles import SubAgentProfileWrite

SECTION = "SubAgent"
PROFILES = "SubAgentProfiles"


@dataclass(frozen=True)
class SubAgentConfig:
    """What the workspace's file says about SubAgents."""

    profiles: dict[str, SubAgentProfileWrite]  # by the name as written
    disabled: tuple[str, ...]
    external_cli_session_resume: bool
    model: str | None
    max_depth: int

    def is_disabled(self, name: str) -> bool:
        """Whether ``name`` is among ``DisabledProfiles`` (case-insensitively)."""
        return name.lower() in {item.lower() for item in self.disabled}

    def override_name(self, name: str) -> str | None:
        """The spelling of the workspace profile called ``name``, if any."""
        return find_key(self.profiles, name)


@functools.cache
def _pascal_names() -> dict[str, str]:
    """Each profile field's stored (PascalCase) key, by Python name. Read at
    first use: a turn that only asks which profiles are offered needs no model."""
    from appserver.protocol.subagent_profiles import SubAgentProfileWrite

    names = {}
    for field, info in SubAgentProfileWrite.model_fields.items():
        alias = info.alias or field
        names[field] = alias[:1].upper() + alias[1:]
    return names


@functools.cache
def _fields_by_lower() -> dict[str, str]:
    return {pascal.lower(): field for field, pascal in _pascal_names().items()}


def profile_from_disk(stored: Any) -> SubAgentProfileWrite:
    """A stored profile object; a field of the wrong type is dropped, not fatal."""
    from pydantic import ValidationError

    from appserver.protocol.subagent_profiles import SubAgentProfileWrite

    by_lower = _fields_by_lower()
    values = {}
    if isinstance(stored, dict):
        for key, value in stored.items():
            field = by_lower.get(str(key).lower())
            if field is not None and value is not None:
                values[field] = value
    while True:
        try:
            return SubAgentProfileWrite.model_validate(values)
        except ValidationError as exc:
            bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
            if not bad & values.keys():
                return SubAgentProfileWrite()
            for field in bad:
                values.pop(field, None)


def profile_to_disk(profile: SubAgentProfileWrite) -> dict[str, Any]:
    """The PascalCase object stored for ``profile`` (absent fields left out)."""
    pascal = _pascal_names()
    return {
        pascal[field]: value
        for field, value in profile.model_dump(mode="json", exclude_none=True).items()
    }


def read_subagent_config(document: dict[str, Any]) -> SubAgentConfig:
    """The SubAgent settings and profiles of a parsed config.json (junk reads as unset)."""
    stored = get_value(document, PROFILES)
    profiles: dict[str, SubAgentProfileWrite] = {}
    if isinstance(stored, dict):
        for name, value in stored.items():
            if name.strip():
                # Case-insensitive duplicates: the last one wins, as a dictionary load would.
                existing = find_key(profiles, name)
                if existing is not None:
                    del profiles[existing]
                profiles[name] = profile_from_disk(value)
    disabled = get_value(document, SECTION, "DisabledProfiles")
    names = (
        [item for item in disabled if isinstance(item, str)] if isinstance(disabled, list) else []
    )
    model = get_value(document, SECTION, "Model")
    depth = get_value(document, SECTION, "MaxDepth")
    return SubAgentConfig(
        profiles=profiles,
        disabled=tuple(names),
        external_cli_session_resume=get_value(document, SECTION, "EnableExternalCliSessionResume")
        is True,
        model=model.strip() if isinstance(model, str) and model.strip() else None,
        max_depth=max(1, depth) if isinstance(depth, int) and not isinstance(depth, bool) else 1,
    )


def write_disabled(document: dict[str, Any], names: list[str]) -> None:
    """Store ``DisabledProfiles``: distinct (case-insensitively), sorted, removed when empty."""
    distinct: dict[str, str] = {}
    for name in names:
        distinct.setdefault(name.lower(), name)
    ordered = sorted(distinct.values(), key=lambda name: (name.lower(), name))
    set_value(document, (SECTION, "DisabledProfiles"), ordered or None)


def write_resume(document: dict[str, Any], enabled: bool) -> None:
    """Store ``EnableExternalCliSessionResume`` (only ``true`` is written)."""
    set_value(document, (SECTION, "EnableExternalCliSessionResume"), True if enabled else None)


def write_model(document: dict[str, Any], model: str | None) -> None:
    """Store ``Model``; ``None`` or blank removes it."""
    set_value(document, (SECTION, "Model"), (model or "").strip() or None)


def write_profiles(document: dict[str, Any], profiles: dict[str, SubAgentProfileWrite]) -> None:
    """Replace ``SubAgentProfiles`` with ``profiles``, sorted by name (removed when empty)."""
    ordered = sorted(profiles, key=lambda name: (name.lower(), name))
    stored = {name: profile_to_disk(profiles[name]) for name in ordered}
    set_value(document, (PROFILES,), stored or None)
