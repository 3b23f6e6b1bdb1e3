"""Wire models for threads: identity, configuration, thread, turn, item and
the params/results/notifications of the ``thread/*`` family."""

from typing import Any, Literal

from pydantic import Field, field_validator

from appserver.protocol.base import Flag, Int, Label, Name, OpenWireModel, PathText, WireModel
from appserver.protocol.dynamic_tools import DynamicToolSpec
from appserver.protocol.limits import INT64_MAX, MAX_THREAD_CONFIG_BYTES, check_encoded_size
from appserver.protocol.plans import Plan
from appserver.protocol.spawn_edges import ThreadSpawnEdge

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
    """Who a client acts for and where: scopes `thread/start` and `thread/list`."""

    channel_name: Name
    """The client's channel (e.g. `cli`); becomes a new thread's `originChannel`."""
    user_id: Name
    """Who owns the threads (e.g. `local`)."""
    channel_context: Label | None = None
    """Narrows threads to one conversation of the channel (a chat or group id); absent matches only
    threads without one.
    """
    workspace_path: PathText | None = None
    """The workspace the threads belong to; absent or empty: the server's workspace."""


class ThreadConfiguration(OpenWireModel):
    """Per-thread overrides. Unknown keys are kept so newer clients round-trip."""

    mcp_servers: list[dict[str, Any]] | None = None
    """MCP servers for this thread only."""
    mode: str | None = None
    """Agent mode, e.g. `agent` (default) or `plan`."""
    extensions: list[str] | None = None
    """Protocol extension prefixes to enable (e.g. `_unity`)."""
    custom_tools: list[str] | None = None
    """Names of extra tools to offer."""
    model: str | None = None
    """Model for this thread."""
    workspace_override: str | None = None
    """Directory the agent works in instead of the workspace."""
    tool_profile: str | None = None
    """Named set of tools to offer."""
    use_tool_profile_only: Flag | None = None
    """Offer only the tools of `toolProfile`."""
    agent_instructions: str | None = None
    """Extra system instructions."""
    approval_policy: ApprovalPolicy | None = None
    """`default` (ask), `autoApprove` or `interrupt` (end the turn instead of asking)."""
    automation_task_directory: str | None = None
    """Directory of an automation's task files."""
    require_approval_outside_workspace: Flag | None = None
    """Ask before touching files outside the workspace."""
    auto_approve_read_only_commands: Flag | None = None
    """Run shell commands known to only read (`ls`, `git status`, ...) without asking (default
    true); `false` asks for them too."""


class ThreadRuntimeState(WireModel):
    """What a thread is doing right now."""

    running: Flag = False
    """A turn is running."""
    waiting_on_approval: Flag = False
    """The running turn waits for an approval."""
    waiting_on_plan_confirmation: Flag = False
    """The running turn waits for a plan to be confirmed."""


class TokenUsage(WireModel):
    """Tokens a turn used."""

    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    total_tokens: int = 0
    """Both."""


class Item(WireModel):
    """One step of a turn: a message, reasoning, a tool call or result, an approval, an error."""

    id: str
    """The item's id (`item_002`), unique in its thread."""
    turn_id: str
    """The turn it belongs to."""
    type: str
    """What it is: `userMessage`, `agentMessage`, `reasoningContent`, `commandExecution`,
    `toolExecution`, `toolCall`, `toolResult`, `approvalRequest`, `approvalResponse`, `error`,
    `systemNotice`, ...
    """
    status: ItemStatus
    """`started`, `streaming` (deltas arrive) or `completed`."""
    created_at: str
    """When it started, ISO 8601."""
    completed_at: str | None = None
    """When it completed, ISO 8601."""
    payload_kind: str | None = None
    """The shape of `payload` (usually the same as `type`)."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """The item's content; its keys depend on `type` (see the item payloads in the docs)."""


class Turn(WireModel):
    """One exchange: the user's input and everything the agent did in answer."""

    id: str
    """The turn's id (`turn_001`), unique in its thread."""
    thread_id: str
    """The thread it belongs to."""
    status: TurnStatus
    """`running`, `completed`, `waitingApproval`, `failed` or `cancelled`."""
    started_at: str
    """When it started, ISO 8601."""
    completed_at: str | None = None
    """When it ended, ISO 8601."""
    token_usage: TokenUsage | None = None
    """Tokens it used."""
    error: str | None = None
    """Why it failed."""
    origin_channel: str | None = None
    """The channel that started it."""
    initiator: dict[str, Any] | None = None
    """Who started it: `{channelName, userId, userName, userRole, channelContext, groupId}`."""
    items: list[Item] | None = None
    """Its items, in order (present when the thread was read with turns)."""


class ThreadSource(OpenWireModel):
    """What started a thread. Open: sub-agent threads carry more keys."""

    kind: str = "user"
    """`user`, or `subagent` for threads an agent started."""


class Thread(WireModel):
    """A conversation: its identity, state and (when asked for) turns."""

    id: str
    """The thread's id (`thread_20261121_x7k2m4`)."""
    workspace_path: str
    """The workspace it belongs to."""
    user_id: str
    """Who owns it."""
    origin_channel: str
    """The channel it was started from."""
    channel_context: str | None = None
    """The conversation of the channel it belongs to."""
    display_name: str | None = None
    """Its title."""
    status: ThreadStatus
    """`active`, `paused` or `archived`."""
    created_at: str
    """When it was started, ISO 8601."""
    last_active_at: str
    """When it last changed, ISO 8601."""
    history_mode: HistoryMode | None = None
    """`server`: the server keeps the conversation; `client`: each `turn/start` sends `messages`."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """Free-form string metadata."""
    configuration: ThreadConfiguration | None = None
    """Its per-thread overrides."""
    source: ThreadSource | None = None
    """What started it (`{kind: "user"}`, `{kind: "subagent", ...}`)."""
    forked_from_id: str | None = None
    """The thread it was forked from (`thread/fork`), if it was."""
    queued_inputs: list[dict[str, Any]] = Field(default_factory=list)
    """Inputs waiting for the running turn to end."""
    runtime: ThreadRuntimeState | None = None
    """Whether a turn is running or waiting."""
    turns: list[Turn] = Field(default_factory=list)
    """Its turns, oldest first (empty unless asked for)."""


class ThreadSummary(WireModel):
    """A thread as `thread/list` shows it (no turns)."""

    id: str
    """The thread's id."""
    display_name: str | None = None
    """Its title."""
    status: ThreadStatus
    """`active`, `paused` or `archived`."""
    origin_channel: str
    """The channel it was started from."""
    user_id: str
    """Who owns it."""
    channel_context: str | None = None
    """The conversation of the channel it belongs to."""
    created_at: str
    """When it was started, ISO 8601."""
    last_active_at: str
    """When it last changed, ISO 8601."""
    turn_count: int = 0
    """How many turns it has."""
    runtime: ThreadRuntimeState | None = None
    """Whether a turn is running or waiting."""


# --- params and results ----------------------------------------------------


class ThreadIdParams(WireModel):
    thread_id: str
    """The thread."""


def config_size(config: ThreadConfiguration | None) -> ThreadConfiguration | None:
    """``config`` unless it encodes larger than ``MAX_THREAD_CONFIG_BYTES``."""
    if config is not None:
        check_encoded_size(config, MAX_THREAD_CONFIG_BYTES)
    return config


class ThreadStartParams(WireModel):
    identity: SessionIdentity
    """Who owns the thread and where it belongs."""
    config: ThreadConfiguration | None = None
    """Per-thread overrides."""
    dynamic_tools: list[DynamicToolSpec] | None = None
    """Tools the client implements (called with `item/tool/call`)."""
    history_mode: HistoryMode | None = None
    """`server` (default): the server keeps the conversation; `client`: each `turn/start` sends it.
    """
    display_name: Label | None = None
    """The thread's title."""

    @field_validator("config")
    @classmethod
    def _config(cls, config: ThreadConfiguration | None) -> ThreadConfiguration | None:
        return config_size(config)

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


class SubAgentChildSummary(WireModel):
    """A SubAgent child of the thread: its edge and its summary."""

    edge: ThreadSpawnEdge
    """The edge parent -> child (closed ones too)."""
    thread: ThreadSummary
    """The child thread as `thread/list` shows it (`runtime.running` while it works)."""


class ThreadResult(WireModel):
    thread: Thread
    """The thread."""
    # Beyond DotCraft: present when ``thread/read`` paged turns and older ones remain.
    next_turns_cursor: str | None = None
    """Present when turns were paged and older ones remain: pass as `turnsCursor`."""
    # Beyond DotCraft's thread/read result: the plan DotCraft keeps in thread_plans.
    plan: Plan | None = None
    """The thread's plan (`CreatePlan` / `UpdateTodos`), if the agent wrote one."""
    # Beyond DotCraft (which needs a `subagent/children/list` call for it).
    sub_agents: list[SubAgentChildSummary] | None = None
    """The SubAgent children the thread spawned, oldest first; absent when none."""


class TurnPaging(WireModel):
    """Optional turn paging shared by ``thread/read`` and ``thread/resume``."""

    turn_limit: Int | None = Field(default=None, ge=1, le=1000)
    """Return at most this many turns, the newest."""
    turns_cursor: str | None = None
    """`nextTurnsCursor` of the previous call: the turns before it."""


class ThreadResumeParams(TurnPaging):
    thread_id: str
    """The thread."""


class ThreadReadParams(TurnPaging):
    thread_id: str
    """The thread."""
    include_turns: Flag = False
    """Include the thread's turns and items."""


class ThreadListParams(WireModel):
    identity: SessionIdentity
    """Whose threads: the workspace, user and channel context to match (not `channelName`)."""
    include_archived: Flag = False
    """Include archived threads."""
    include_sub_agents: Flag = False
    """Include SubAgent child threads; they match on the workspace and `userId` only (their
    `channelContext` is their parent's id)."""
    include_internal: Flag = False
    """Include the server's internal helper threads (welcome and commit-message suggestions,
    `metadata["dotcraft.internal"]`), as DotCraft v0.2.15; they are hidden otherwise."""
    cross_channel_origins: list[str] | None = None
    """Also list threads of the same workspace started from these channels."""
    channel_name: str | None = None
    """Only threads started from this channel (case-insensitive)."""
    # Beyond DotCraft and Codex: keyset pagination. Without ``limit`` every
    # matching thread is returned, as DotCraft clients expect.
    limit: Int | None = Field(default=None, ge=1, le=1000)
    """Page size; absent: every matching thread (pages still end at the size limit)."""
    cursor: str | None = None
    """`nextCursor` of the previous page."""
    # Beyond DotCraft, as Codex's thread/list.
    search_term: Label | None = None
    """Only threads whose `displayName` or `id` contains this text (ASCII letters match
    either case); empty or absent: no filter."""


class ThreadListResult(WireModel):
    data: list[ThreadSummary]
    """The threads, most recently active first."""
    next_cursor: str | None = None
    """Pass as `cursor` for the next page; absent on the last page."""


class ThreadRollbackParams(WireModel):
    thread_id: str
    """The thread."""
    num_turns: Int = Field(ge=1, le=INT64_MAX)
    """How many of the latest turns to drop."""


class ThreadSubscribeParams(WireModel):
    thread_id: str
    """The thread."""
    replay_recent: Flag = False
    """First replay the thread's last 32 notifications."""
    # Beyond DotCraft: replay every notification with a larger seq (from
    # SQLite; streaming items as one coalesced delta), then continue live.
    after_seq: Int | None = Field(default=None, ge=0, le=INT64_MAX)
    """First replay every notification with a larger `seq` (from storage), then continue live."""


class ThreadRenameParams(WireModel):
    thread_id: str
    """The thread."""
    display_name: Label
    """The new title (not empty)."""

    @field_validator("display_name")
    @classmethod
    def _display_name(cls, value: str) -> str:
        return _non_empty(value, "displayName").strip()


class ThreadModeSetParams(WireModel):
    thread_id: str
    """The thread."""
    mode: Name
    """The new agent mode, e.g. `agent` or `plan`."""

    @field_validator("mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        return _non_empty(value, "mode").strip()


class ThreadConfigUpdateParams(WireModel):
    thread_id: str
    """The thread to change."""
    config: ThreadConfiguration
    """The new overrides; replaces the thread's configuration."""

    @field_validator("config")
    @classmethod
    def _config(cls, config: ThreadConfiguration) -> ThreadConfiguration:
        config_size(config)
        return config


# --- notifications -----------------------------------------------------------


class ThreadStartedNotification(WireModel):
    thread_id: str
    """The new thread's id."""
    thread: Thread
    """The new thread."""


class ThreadResumedNotification(WireModel):
    thread_id: str
    """The thread."""
    thread: Thread
    """The thread as resumed."""
    resumed_by: str
    """`clientInfo.name` of the client that resumed it."""


class ThreadStatusChangedNotification(WireModel):
    thread_id: str
    """The thread."""
    previous_status: ThreadStatus
    """Its status before."""
    new_status: ThreadStatus
    """Its status now."""


class ThreadRenamedNotification(WireModel):
    thread_id: str
    """The thread."""
    display_name: str
    """Its new title."""


class ThreadDeletedNotification(WireModel):
    thread_id: str
    """The deleted thread."""


class ThreadRuntimeChangedNotification(WireModel):
    thread_id: str
    """The thread."""
    runtime: ThreadRuntimeState
    """Its new runtime state."""


class ConfigChangedNotification(WireModel):
    source: str
    """The method that changed it, e.g. `workspace/config/update`."""
    regions: list[str]
    """What changed, e.g. `workspace.model`, `skills`, `mcp`."""
    changed_at: str
    """When, as an ISO 8601 timestamp."""
