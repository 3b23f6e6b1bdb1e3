"""Wire models for threads: identity, configuration, thread, turn, item and
the params/results/notifications of the ``thread/*`` family."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from appserver.protocol.base import OpenWireModel, WireModel
from appserver.protocol.limits import (
    INT64_MAX,
    MAX_THREAD_CONFIG_BYTES,
    Label,
    Name,
    PathText,
    check_encoded_size,
)

ThreadStatus = Literal["active", "paused", "archived"]
HistoryMode = Literal["server", "client"]
ApprovalPolicy = Literal["default", "autoApprove", "interrupt"]
TurnStatus = Literal["running", "completed", "waitingApproval", "failed", "cancelled"]
ItemStatus = Literal["started", "streaming", "completed"]


def _non_empty(value: str, field: str) -> str:
    if not value.strip():
        raise ValueError(f"'{field}' must not be empty")
    return value


class SessionIdentity(WireModel):
    channel_name: Name
    user_id: Name
    channel_context: Label | None = None
    workspace_path: PathText | None = None


class ThreadConfiguration(OpenWireModel):
    """Per-thread overrides. Unknown keys are kept so newer clients round-trip."""

    mcp_servers: list[dict[str, Any]] | None = None
    mode: str | None = None
    extensions: list[str] | None = None
    custom_tools: list[str] | None = None
    model: str | None = None
    workspace_override: str | None = None
    tool_profile: str | None = None
    use_tool_profile_only: bool | None = None
    agent_instructions: str | None = None
    approval_policy: ApprovalPolicy | None = None
    automation_task_directory: str | None = None
    require_approval_outside_workspace: bool | None = None


class ThreadRuntimeState(WireModel):
    running: bool = False
    waiting_on_approval: bool = False
    waiting_on_plan_confirmation: bool = False


class TokenUsage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class Item(WireModel):
    id: str
    turn_id: str
    type: str
    status: ItemStatus
    created_at: str
    completed_at: str | None = None
    payload_kind: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)


class Turn(WireModel):
    id: str
    thread_id: str
    status: TurnStatus
    started_at: str
    completed_at: str | None = None
    token_usage: TokenUsage | None = None
    error: str | None = None
    origin_channel: str | None = None
    initiator: dict[str, Any] | None = None
    items: list[Item] | None = None


class ThreadSource(OpenWireModel):
    kind: str = "user"


class Thread(WireModel):
    id: str
    workspace_path: str
    user_id: str
    origin_channel: str
    channel_context: str | None = None
    display_name: str | None = None
    status: ThreadStatus
    created_at: str
    last_active_at: str
    history_mode: HistoryMode | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    configuration: ThreadConfiguration | None = None
    source: ThreadSource | None = None
    queued_inputs: list[dict[str, Any]] = Field(default_factory=list)
    runtime: ThreadRuntimeState | None = None
    turns: list[Turn] = Field(default_factory=list)


class ThreadSummary(WireModel):
    id: str
    display_name: str | None = None
    status: ThreadStatus
    origin_channel: str
    user_id: str
    channel_context: str | None = None
    created_at: str
    last_active_at: str
    turn_count: int = 0
    runtime: ThreadRuntimeState | None = None


class DynamicToolSpec(OpenWireModel):
    namespace: str | None = None
    name: str
    description: str
    input_schema: dict[str, Any]
    defer_loading: bool | None = None
    approval: dict[str, Any] | None = None

    @field_validator("namespace")
    @classmethod
    def _namespace_not_empty(cls, value: str | None) -> str | None:
        if value is not None:
            _non_empty(value, "namespace")
        return value


# --- params and results ----------------------------------------------------


class ThreadIdParams(WireModel):
    thread_id: str


def _config_size(config: ThreadConfiguration | None) -> ThreadConfiguration | None:
    if config is not None:
        check_encoded_size(config, MAX_THREAD_CONFIG_BYTES)
    return config


class ThreadStartParams(WireModel):
    identity: SessionIdentity
    config: ThreadConfiguration | None = None
    dynamic_tools: list[DynamicToolSpec] | None = None
    history_mode: HistoryMode | None = None
    display_name: Label | None = None

    @field_validator("config")
    @classmethod
    def _config(cls, config: ThreadConfiguration | None) -> ThreadConfiguration | None:
        return _config_size(config)

    @field_validator("dynamic_tools")
    @classmethod
    def _unique_tools(cls, tools: list[DynamicToolSpec] | None) -> list[DynamicToolSpec] | None:
        seen: set[tuple[str | None, str]] = set()
        for tool in tools or []:
            key = (tool.namespace, tool.name)
            if key in seen:
                raise ValueError(f"duplicate dynamic tool '{tool.name}'")
            seen.add(key)
        return tools


class ThreadResult(WireModel):
    thread: Thread
    # Beyond DotCraft: present when ``thread/read`` paged turns and older ones remain.
    next_turns_cursor: str | None = None


class TurnPaging(WireModel):
    """Optional turn paging shared by ``thread/read`` and ``thread/resume``."""

    turn_limit: int | None = Field(default=None, ge=1, le=1000)
    turns_cursor: str | None = None


class ThreadResumeParams(TurnPaging):
    thread_id: str


class ThreadReadParams(TurnPaging):
    thread_id: str
    include_turns: bool = False


class ThreadListParams(WireModel):
    identity: SessionIdentity
    include_archived: bool = False
    include_sub_agents: bool = False
    cross_channel_origins: list[str] | None = None
    channel_name: str | None = None
    # Beyond DotCraft and Codex: keyset pagination. Without ``limit`` every
    # matching thread is returned, as DotCraft clients expect.
    limit: int | None = Field(default=None, ge=1, le=1000)
    cursor: str | None = None


class ThreadListResult(WireModel):
    data: list[ThreadSummary]
    next_cursor: str | None = None


class ThreadRollbackParams(WireModel):
    thread_id: str
    num_turns: int = Field(ge=1, le=INT64_MAX)


class ThreadSubscribeParams(WireModel):
    thread_id: str
    replay_recent: bool = False
    # Beyond DotCraft: replay every notification with a larger seq (from
    # SQLite; streaming items as one coalesced delta), then continue live.
    after_seq: int | None = Field(default=None, ge=0, le=INT64_MAX)


class ThreadRenameParams(WireModel):
    thread_id: str
    display_name: Label

    @field_validator("display_name")
    @classmethod
    def _display_name(cls, value: str) -> str:
        return _non_empty(value, "displayName").strip()


class ThreadModeSetParams(WireModel):
    thread_id: str
    mode: Name

    @field_validator("mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        return _non_empty(value, "mode").strip()


class ThreadConfigUpdateParams(WireModel):
    thread_id: str
    config: ThreadConfiguration

    @field_validator("config")
    @classmethod
    def _config(cls, config: ThreadConfiguration) -> ThreadConfiguration:
        _config_size(config)
        return config


# --- notifications -----------------------------------------------------------


class ThreadStartedNotification(WireModel):
    thread_id: str
    thread: Thread


class ThreadResumedNotification(WireModel):
    thread_id: str
    thread: Thread
    resumed_by: str


class ThreadStatusChangedNotification(WireModel):
    thread_id: str
    previous_status: ThreadStatus
    new_status: ThreadStatus


class ThreadRenamedNotification(WireModel):
    thread_id: str
    display_name: str


class ThreadDeletedNotification(WireModel):
    thread_id: str


class ThreadRuntimeChangedNotification(WireModel):
    thread_id: str
    runtime: ThreadRuntimeState


class ConfigChangedNotification(WireModel):
    source: str
    regions: list[str]
    changed_at: str
