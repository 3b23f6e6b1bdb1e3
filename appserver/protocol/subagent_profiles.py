"""Wire models and method-table entries of SubAgent profile management
(DotCraft's ``subagent/profiles/*`` and ``subagent/settings/update``).

A profile says *how* a child agent runs: on this server's own runtime
(``native``) or as another agent's command line run once per task
(``cli-oneshot``). ``subAgentManagement`` gates the five methods; every
successful write emits ``workspace/configChanged`` with region ``subagent``.
"""

from typing import Any

from pydantic import ConfigDict, Field, field_validator

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Empty, Flag, Int, WireModel
from appserver.protocol.limits import (
    MAX_NAME_CHARS,
    MAX_SERVER_CONFIG_BYTES,
    check_encoded_size,
    check_length,
)
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

# DotCraft reads these as 32-bit integers.
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


class SubAgentProfileWrite(WireModel):
    """A profile's definition, as stored in the workspace and as written by `upsert`.

    Only `runtime`, `bin`, the input, output, resume and timeout fields are used by a run;
    `supportsStreaming`, `supportsModelSelection`, `inputFormat`, `trustLevel` and
    `sanitizationRules` are stored and echoed only.
    """

    runtime: str = "native"
    """`native` (a child thread on this server) or `cli-oneshot` (an external command per task)."""
    bin: str | None = None
    """The executable (a name on PATH or an absolute path); required for `cli-oneshot`."""
    args: list[str] | None = None
    """Fixed leading arguments."""
    env: dict[str, str] | None = None
    """Environment variables set last (they override everything)."""
    env_passthrough: list[str] | None = None
    """Names of this server's environment variables copied to the command when set."""
    working_directory_mode: str = "workspace"
    """`workspace` (the workspace root) or `specified` (the spawn call names an existing one)."""
    supports_streaming: Flag | None = None
    """Stored and echoed only."""
    supports_model_selection: Flag | None = None
    """Stored and echoed only."""
    input_format: str | None = None
    """Stored and echoed only."""
    trust_level: str | None = None
    """Stored and echoed only (`trusted`, `prompt`, `restricted`)."""
    sanitization_rules: dict[str, Any] | None = None
    """Stored and echoed only."""
    supports_resume: Flag | None = None
    """The command can continue a saved session (needs `resumeArgTemplate` and an id extractor)."""
    input_mode: str | None = None
    """`arg` (default: the task is the last argument), `stdin`, `arg-template` or `env`."""
    input_arg_template: str | None = None
    """Arguments with a `{task}` placeholder (`arg-template`)."""
    input_env_key: str | None = None
    """The variable that carries the task (`env`)."""
    output_format: str | None = None
    """`text` (default) or `json`."""
    output_json_path: str | None = None
    """Dotted path of the answer in the JSON on stdout (`json`)."""
    output_input_tokens_json_path: str | None = None
    """Dotted path of the input token count."""
    output_output_tokens_json_path: str | None = None
    """Dotted path of the output token count."""
    output_total_tokens_json_path: str | None = None
    """Dotted path of the total token count (used as output when the other two are 0)."""
    output_file_arg_template: str | None = None
    """Arguments with a `{path}` placeholder: a temporary file the command writes its answer to."""
    read_output_file: Flag | None = None
    """Prefer the output file over stdout."""
    delete_output_file_after_read: Flag | None = None
    """Delete the output file once read."""
    resume_arg_template: str | None = None
    """Arguments with a `{sessionId}` placeholder, to continue a session."""
    resume_session_id_json_path: str | None = None
    """Dotted path of the command's session id in its JSON output."""
    resume_session_id_regex: str | None = None
    """A regular expression finding the session id in stdout (named group `sessionId`, else
    group 1)."""
    max_output_bytes: Int | None = Field(default=None, ge=_INT32_MIN, le=_INT32_MAX)
    """The answer is cut at this many bytes (default 1 MiB)."""
    timeout: Int | None = Field(default=None, ge=_INT32_MIN, le=_INT32_MAX)
    """Seconds before the command is stopped (default 300; 0 or less: none)."""
    permission_mode_mapping: dict[str, str] | None = None
    """`interactive`, `auto-approve`, `restricted` -> extra arguments for that approval mode."""


class SubAgentProfileDiagnostic(WireModel):
    """Whether the main agent is offered the profile, and why not."""

    enabled: Flag
    """Not disabled by the workspace."""
    binary_resolved: Flag
    """A `cli-oneshot` profile whose `bin` is found (on PATH or as a path)."""
    hidden_from_prompt: Flag
    """The main agent is not told about this profile."""
    hidden_reason: str | None = None
    """Why it is hidden (reasons joined with `; `)."""
    warnings: list[str] = Field(default_factory=list)
    """The validation warnings about this profile."""


class SubAgentProfileEntry(WireModel):
    """One profile as `subagent/profiles/list` shows it."""

    name: str
    """The profile's name (names match case-insensitively)."""
    is_built_in: Flag
    """One of the server's own profiles."""
    is_template: Flag
    """`custom-cli-oneshot` without a workspace override: a starting point, never offered."""
    has_workspace_override: Flag
    """The workspace's config.json defines it (for a built-in: replaces the built-in)."""
    is_default: Flag
    """The default profile (`native`)."""
    enabled: Flag
    """Not listed in the workspace's disabled profiles (`native` always is)."""
    definition: SubAgentProfileWrite
    """The effective definition: the workspace's override, else the built-in."""
    built_in_defaults: SubAgentProfileWrite | None = None
    """The built-in definition (built-in names only)."""
    diagnostic: SubAgentProfileDiagnostic
    """Whether the main agent is offered it."""


class SubAgentSettings(WireModel):
    """The workspace's SubAgent settings."""

    external_cli_session_resume_enabled: Flag
    """External command-line children may continue their saved sessions."""
    model: str | None = None
    """The model of child agents (absent: the parent's)."""


class SubAgentProfileListResult(WireModel):
    """Every profile, `native` first, then by name (case-insensitively)."""

    profiles: list[SubAgentProfileEntry]
    """The profiles."""
    default_name: str
    """The default profile's name (`native`)."""
    settings: SubAgentSettings
    """The SubAgent settings."""


class SubAgentSettingsUpdateParams(WireModel):
    """``subagent/settings/update``: at least one field must be present."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "gpt-4.1-mini"}]})

    external_cli_session_resume_enabled: Flag | None = None
    """Let external command-line children continue their saved sessions."""
    model: str | None = None
    """The child agents' model; `null` or blank clears it (the key's presence counts)."""


class SubAgentSettingsUpdateResult(WireModel):
    """The settings after the write."""

    settings: SubAgentSettings
    """The SubAgent settings."""


class SubAgentProfileSetEnabledParams(WireModel):
    """``subagent/profiles/setEnabled``."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "cursor-cli", "enabled": False}]}
    )

    name: str = ""
    """The profile's name."""
    enabled: Flag = False
    """Offer it to the agent (`true`) or not."""


class SubAgentProfileUpsertParams(WireModel):
    """``subagent/profiles/upsert``: create or wholly replace a workspace profile."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "my-cli",
                    "definition": {"runtime": "cli-oneshot", "bin": "my-agent", "timeout": 600},
                }
            ]
        }
    )

    name: str = ""
    """The profile's name (a built-in's name overrides it)."""
    definition: SubAgentProfileWrite = Field(default_factory=SubAgentProfileWrite)
    """The whole definition (not merged with the built-in)."""

    @field_validator("name")
    @classmethod
    def _short_name(cls, name: str) -> str:
        check_length(name, MAX_NAME_CHARS, "name")
        return name

    @field_validator("definition")
    @classmethod
    def _bounded(cls, definition: SubAgentProfileWrite) -> SubAgentProfileWrite:
        # What upsert stores in config.json (checked here, not on the model: stored
        # profiles are read through it).
        check_encoded_size(definition, MAX_SERVER_CONFIG_BYTES)
        return definition


class SubAgentProfileResult(WireModel):
    """The profile after the write."""

    profile: SubAgentProfileEntry
    """The profile."""


class SubAgentProfileRemoveParams(WireModel):
    """``subagent/profiles/remove``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "my-cli"}]})

    name: str = ""
    """The name of a profile the workspace defines."""


class SubAgentProfileRemoveResult(WireModel):
    """Always `{removed: true}` (an unknown name is an error)."""

    removed: Flag
    """`true`."""


_WRITE_NOTE = "Emits `workspace/configChanged` (`subagent`)."

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "subagent/profiles/list",
        Empty,
        SubAgentProfileListResult,
        "subAgentManagement",
        "The SubAgent profiles (built-in and the workspace's), their diagnostics and the "
        "SubAgent settings; read from the workspace's config.json on every call.",
        access="read",
    ),
    MethodSpec(
        "subagent/settings/update",
        SubAgentSettingsUpdateParams,
        SubAgentSettingsUpdateResult,
        "subAgentManagement",
        f"Change the SubAgent settings (`model`, `externalCliSessionResumeEnabled`). {_WRITE_NOTE}",
        (rpc_errors.INVALID_PARAMS,),
    ),
    MethodSpec(
        "subagent/profiles/setEnabled",
        SubAgentProfileSetEnabledParams,
        SubAgentProfileResult,
        "subAgentManagement",
        f"Offer a profile to the agent or not; `native` cannot be disabled. {_WRITE_NOTE}",
        (
            rpc_errors.INVALID_PARAMS,
            rpc_errors.SUBAGENT_PROFILE_NOT_FOUND,
            rpc_errors.SUBAGENT_PROFILE_PROTECTED,
        ),
    ),
    MethodSpec(
        "subagent/profiles/upsert",
        SubAgentProfileUpsertParams,
        SubAgentProfileResult,
        "subAgentManagement",
        "Create or wholly replace a workspace profile (a built-in's name overrides the "
        f"built-in); a definition with validation warnings is refused. {_WRITE_NOTE}",
        (rpc_errors.INVALID_PARAMS, rpc_errors.SUBAGENT_PROFILE_VALIDATION_FAILED),
    ),
    MethodSpec(
        "subagent/profiles/remove",
        SubAgentProfileRemoveParams,
        SubAgentProfileRemoveResult,
        "subAgentManagement",
        "Delete a workspace profile (for a built-in: its override, restoring the built-in). "
        f"{_WRITE_NOTE}",
        (rpc_errors.INVALID_PARAMS, rpc_errors.SUBAGENT_PROFILE_NOT_FOUND),
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
