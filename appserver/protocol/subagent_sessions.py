"""SubAgent sessions: the child threads an agent spawns (DotCraft's ``subAgentSessions``).

A parent turn's ``SpawnAgent`` tool makes a child thread (``source.kind``
``subagent``) and an edge parent -> child; ``subagent/children/list`` reads the
edges, ``subagent/close`` and ``subagent/resume`` set their status, and every
edge change is broadcast as ``subagent/graphChanged``.
"""

from pydantic import ConfigDict

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Flag, WireModel
from appserver.protocol.spawn_edges import SubAgentCapabilities, ThreadSpawnEdge
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec
from appserver.protocol.threads import Thread


class SubAgentChildrenListParams(WireModel):
    """``subagent/children/list`` params."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"parentThreadId": "thr_1", "includeClosed": True}]}
    )

    parent_thread_id: str = ""
    """The parent thread (required)."""
    include_closed: Flag = False
    """Include closed edges."""
    include_threads: Flag = False
    """Also send each child thread (the `thread/read` shape, without turns)."""


class SubAgentChild(WireModel):
    """One child of the parent."""

    edge: ThreadSpawnEdge
    """The edge."""
    thread: Thread | None = None
    """The child thread, with `includeThreads`."""


class SubAgentChildrenListResult(WireModel):
    """The parent's children, the most recently changed first."""

    data: list[SubAgentChild]
    """The children."""


class SubAgentChildParams(WireModel):
    """``subagent/close`` and ``subagent/resume`` params."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"parentThreadId": "thr_1", "childThreadId": "thr_2"}]}
    )

    parent_thread_id: str = ""
    """The parent thread (required; the edge parent -> child must exist)."""
    child_thread_id: str = ""
    """The child thread (required)."""


class SubAgentControlResult(SubAgentCapabilities):
    """What a control call did (DotCraft's ``SubAgentControlResult``; the tools answer it too)."""

    child_thread_id: str
    """The child thread."""
    status: str
    """`running`, `open`, `closed`, or a wait's outcome (`completed`, `failed`, `cancelled`,
    `timeout`, `idle`)."""
    message: str | None = None
    """`WaitAgent`: the child turn's agent text."""
    agent_nickname: str | None = None
    """The child's nickname."""
    agent_role: str | None = None
    """The child's role."""
    profile_name: str | None = None
    """The child's profile."""
    runtime_type: str | None = None
    """The profile's runtime."""


class SubAgentGraphChangedNotification(WireModel):
    """``subagent/graphChanged``: an edge was made or its status set."""

    parent_thread_id: str
    """The parent thread."""
    child_thread_id: str
    """The child thread."""


class SubAgentProgressEntry(WireModel):
    """One child of the parent turn, as its own events show it now."""

    label: str
    """The child's nickname (DotCraft's clients match entries to children by it)."""
    child_thread_id: str | None = None
    """The child thread (beyond DotCraft: labels need not be unique)."""
    current_tool: str | None = None
    """The tool the child runs now, else the last one it ran (`external-cli` for an
    external CLI child)."""
    current_tool_display: str | None = None
    """A readable line for it: the command, the file, or an external child's stage."""
    input_tokens: int = 0
    """Input tokens of the child's turn so far."""
    output_tokens: int = 0
    """Output tokens of the child's turn so far."""
    is_completed: Flag = False
    """The child's turn has ended (however it ended)."""


class SubAgentProgressNotification(WireModel):
    """``subagent/progress``: a snapshot of every child the parent turn spawned."""

    thread_id: str
    """The parent thread."""
    turn_id: str
    """The parent turn that spawned them."""
    entries: list[SubAgentProgressEntry]
    """One entry per child, in spawn order."""


_ERRORS = (rpc_errors.INVALID_PARAMS, rpc_errors.THREAD_NOT_FOUND)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "subagent/children/list",
        SubAgentChildrenListParams,
        SubAgentChildrenListResult,
        "subAgentSessions",
        "The parent's child edges, `updatedAt` newest first (closed ones with `includeClosed`; "
        "each child thread without turns with `includeThreads`). An unknown parent has none.",
        _ERRORS,
        access="read",
    ),
    MethodSpec(
        "subagent/close",
        SubAgentChildParams,
        SubAgentControlResult,
        "subAgentSessions",
        "Cancel the child's running turn and close its edge (`status: closed`); "
        "`subagent/graphChanged` follows. No edge parent -> child: -32602.",
        _ERRORS,
    ),
    MethodSpec(
        "subagent/resume",
        SubAgentChildParams,
        SubAgentControlResult,
        "subAgentSessions",
        "Reopen a closed child (`status: open`; sends no input); `subagent/graphChanged` "
        "follows. An archived child: -32011.",
        (*_ERRORS, rpc_errors.THREAD_NOT_ACTIVE),
    ),
]

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "subagent/graphChanged",
        SubAgentGraphChangedNotification,
        "all connections",
        "A child edge was made (spawn) or its status set (close, resume), changed or not.",
    ),
    NotificationSpec(
        "subagent/progress",
        SubAgentProgressNotification,
        "the parent turn's client and the parent thread's subscribers",
        "While a turn's children run: a snapshot of each (current tool, tokens, completed), "
        "at most every 200 ms and only when it changed, and a last one before the parent "
        "turn's terminal event. Not stored or replayed.",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
