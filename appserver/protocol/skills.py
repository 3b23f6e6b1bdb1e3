"""Wire models and method-table entries of the `skills` family (reference §3.7).

``skillVariants`` (self-learning skill variants) is not implemented, so it is
never advertised and ``skills/restoreOriginal`` always answers ``restored: false``.
"""

from typing import Literal

from pydantic import Field, field_validator

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Flag, Name, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

SkillSource = Literal["workspace", "plugin", "builtin", "user"]


class SkillInfo(WireModel):
    """One skill as ``skills/list`` and ``skills/setEnabled`` show it."""

    name: str  # the skill's directory name
    """The skill's name (its directory name)."""
    description: str  # front matter ``description``, else the name
    """What the skill does (from its front matter; its name when missing)."""
    display_name: str | None = None  # from agents/openai.yaml ``interface``
    """Name to show."""
    short_description: str | None = None
    """One-line description."""
    source: SkillSource
    """Where it comes from: `workspace`, `plugin`, `builtin` or `user`."""
    plugin_id: str | None = None
    """The plugin that contributes it."""
    plugin_display_name: str | None = None
    """That plugin's display name."""
    available: bool  # every required executable and environment variable is present
    """Whether its requirements (programs, environment variables) are met."""
    unavailable_reason: str | None = None
    """Why it is not available."""
    enabled: Flag
    """Whether it is enabled."""
    path: str  # absolute path of SKILL.md
    """Absolute path of its SKILL.md."""
    has_variant: Flag = False
    """Whether a workspace variant overrides the original."""
    icon_small_data_url: str | None = None
    """Small icon as a `data:` URL."""
    icon_large_data_url: str | None = None
    """Large icon as a `data:` URL."""
    default_prompt: str | None = None
    """A prompt that uses it."""
    metadata: dict[str, str] = Field(default_factory=dict)  # front matter, values as text
    """Other front-matter keys."""


class _Named(WireModel):
    name: Name
    """The skill's name."""

    @field_validator("name")
    @classmethod
    def _non_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("must not be empty")
        return name.strip()


class SkillsListParams(WireModel):
    include_unavailable: Flag = True
    """Include skills whose requirements are not met."""


class SkillsListResult(WireModel):
    skills: list[SkillInfo]
    """The skills."""


class SkillNameParams(_Named):
    """``{name}`` of skills/read, view, restoreOriginal and uninstall."""


class SkillsReadResult(WireModel):
    name: str
    """The skill's name."""
    content: str  # raw SKILL.md, front matter included
    """SKILL.md without its front matter."""
    metadata: dict[str, str] | None = None  # None when there is no front matter
    """The front matter."""


class SkillsViewResult(WireModel):
    name: str
    """The skill's name."""
    content: str  # the body the agent sees (front matter stripped)
    """The whole SKILL.md, front matter included."""


class SkillsRestoreOriginalResult(WireModel):
    name: str
    """The skill's name."""
    restored: Flag
    """Whether a variant existed and was removed."""


class SkillsSetEnabledParams(_Named):
    enabled: Flag
    """`true` to enable, `false` to disable."""


class SkillsSetEnabledResult(WireModel):
    skill: SkillInfo
    """The skill after the change."""


class SkillsUninstallResult(WireModel):
    name: str
    """The skill's name."""
    uninstalled: Flag
    """Whether it was removed."""
    source: SkillSource
    """Where it came from."""
    removed_source_path: str  # the deleted skill directory
    """The directory that was removed."""
    removed_variant_count: int = 0
    """Workspace variants removed with it."""


_NAMED_ERRORS = (rpc_errors.SKILL_NOT_FOUND, rpc_errors.INVALID_PARAMS)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "skills/list",
        SkillsListParams,
        SkillsListResult,
        "skillsManagement",
        "Every skill the workspace can use (workspace > enabled plugins > built-in > user), "
        "with availability and enabled state.",
        (rpc_errors.INVALID_PARAMS,),
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
