"""Wire models and method-table entries of the `skills` family (reference §3.7).

``skillVariants`` (self-learning skill variants) is not implemented, so it is
never advertised and ``skills/restoreOriginal`` always answers ``restored: false``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from appserver.protocol import errors as E
from appserver.protocol.base import WireModel
from appserver.protocol.limits import Name
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

SkillSource = Literal["workspace", "plugin", "builtin", "user"]


class SkillInfo(WireModel):
    """One skill as ``skills/list`` and ``skills/setEnabled`` show it."""

    name: str  # the skill's directory name
    description: str  # front matter ``description``, else the name
    display_name: str | None = None  # from agents/openai.yaml ``interface``
    short_description: str | None = None
    source: SkillSource
    plugin_id: str | None = None
    plugin_display_name: str | None = None
    available: bool  # every required executable and environment variable is present
    unavailable_reason: str | None = None
    enabled: bool
    path: str  # absolute path of SKILL.md
    has_variant: bool = False
    icon_small_data_url: str | None = None
    icon_large_data_url: str | None = None
    default_prompt: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)  # front matter, values as text


class _Named(WireModel):
    name: Name

    @field_validator("name")
    @classmethod
    def _non_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("must not be empty")
        return name.strip()


class SkillsListParams(WireModel):
    include_unavailable: bool = True


class SkillsListResult(WireModel):
    skills: list[SkillInfo]


class SkillNameParams(_Named):
    """``{name}`` of skills/read, view, restoreOriginal and uninstall."""


class SkillsReadResult(WireModel):
    name: str
    content: str  # raw SKILL.md, front matter included
    metadata: dict[str, str] | None = None  # None when there is no front matter


class SkillsViewResult(WireModel):
    name: str
    content: str  # the body the agent sees (front matter stripped)


class SkillsRestoreOriginalResult(WireModel):
    name: str
    restored: bool


class SkillsSetEnabledParams(_Named):
    enabled: bool


class SkillsSetEnabledResult(WireModel):
    skill: SkillInfo


class SkillsUninstallResult(WireModel):
    name: str
    uninstalled: bool
    source: SkillSource
    removed_source_path: str  # the deleted skill directory
    removed_variant_count: int = 0


_NAMED_ERRORS = (E.SKILL_NOT_FOUND, E.INVALID_PARAMS)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "skills/list",
        SkillsListParams,
        SkillsListResult,
        "skillsManagement",
        "Every skill the workspace can use (workspace > enabled plugins > built-in > user), "
        "with availability and enabled state.",
        (E.INVALID_PARAMS,),
        access="read",
    ),
    MethodSpec(
        "skills/read",
        SkillNameParams,
        SkillsReadResult,
        "skillsManagement",
        "The raw SKILL.md of a skill and its front matter.",
        _NAMED_ERRORS,
        access="read",
    ),
    MethodSpec(
        "skills/view",
        SkillNameParams,
        SkillsViewResult,
        "skillsManagement",
        "The skill body the agent receives (front matter stripped).",
        _NAMED_ERRORS,
        access="read",
    ),
    MethodSpec(
        "skills/restoreOriginal",
        SkillNameParams,
        SkillsRestoreOriginalResult,
        "skillsManagement",
        "Drop the skill's workspace variant. There are no variants here: always "
        "`restored: false` for an existing skill.",
        _NAMED_ERRORS,
    ),
    MethodSpec(
        "skills/setEnabled",
        SkillsSetEnabledParams,
        SkillsSetEnabledResult,
        "skillsManagement",
        "Switch a skill on or off for this workspace; emits `workspace/configChanged` "
        "(regions `skills`) when that changed anything.",
        _NAMED_ERRORS,
    ),
    MethodSpec(
        "skills/uninstall",
        SkillNameParams,
        SkillsUninstallResult,
        "skillsManagement",
        "Delete a workspace or user skill directory; emits `workspace/configChanged` "
        "(regions `skills`). Built-in and plugin skills cannot be uninstalled.",
        _NAMED_ERRORS,
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
