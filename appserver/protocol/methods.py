"""The one method table: every client->server method, server->client
notification and server->client request, with its wire models.

It drives params validation, the ``initialize`` capability block, docs and
(later) the JSON Schema and generated clients. Add a method here first.
"""

from __future__ import annotations

from pydantic import BaseModel

from appserver.protocol import (
    channels,
    commands,
    cron,
    dynamic_tools,
    editor_fs,
    editor_terminal,
    mcp,
    plans,
    plugins,
    skills,
    terminals,
    workspace,
)
from appserver.protocol import errors as E
from appserver.protocol import threads as T
from appserver.protocol import turns as W
from appserver.protocol.base import Empty
from appserver.protocol.initialize import InitializeParams, InitializeResult
from appserver.protocol.limits import LIST_PAGE_BYTES
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

# Each method family beyond threads and turns declares its own entries in its
# protocol module; they are merged here so there is still one table.
_FAMILIES = (
    skills,
    commands,
    plugins,
    mcp,
    cron,
    workspace,
    channels,
    dynamic_tools,
    editor_fs,
    editor_terminal,
    plans,
    terminals,
)


_THREAD_ERRORS = (E.THREAD_NOT_FOUND, E.INVALID_PARAMS)

_CORE_METHODS: list[MethodSpec] = [
    MethodSpec(
        "initialize",
        InitializeParams,
        InitializeResult,
        None,
        "Open the session: client info and capabilities in, server info and capabilities out.",
        (E.ALREADY_INITIALIZED,),
    ),
    MethodSpec(
        "thread/start",
        T.ThreadStartParams,
        T.ThreadResult,
        "threadManagement",
        "Create a thread. The response is written before `thread/started`.",
        (E.INVALID_PARAMS,),
    ),
    MethodSpec(
        "thread/resume",
        T.ThreadResumeParams,
        T.ThreadResult,
        "threadManagement",
        "Load a thread, make it active and return it with its turns; emits `thread/resumed`. "
        "Turns page like `thread/read`'s.",
        (*_THREAD_ERRORS, E.THREAD_NOT_ACTIVE),
    ),
    MethodSpec(
        "thread/list",
        T.ThreadListParams,
        T.ThreadListResult,
        "threadManagement",
        "Thread summaries for an identity, newest activity first; optional keyset paging.",
        (E.INVALID_PARAMS,),
        access="read",
    ),
    MethodSpec(
        "thread/read",
        T.ThreadReadParams,
        T.ThreadResult,
        "threadManagement",
        "Read-only snapshot of a thread; turns on request, optionally paged (`turnLimit`, "
        "`turnsCursor`: the newest turns first). A page of turns also ends early, with "
        f"`nextTurnsCursor`, before its turns pass {LIST_PAGE_BYTES // (1024 * 1024)} MiB: "
        "follow it until absent to get every turn.",
        _THREAD_ERRORS,
        access="read",
    ),
    MethodSpec(
        "thread/rollback",
        T.ThreadRollbackParams,
        T.ThreadResult,
        "threadManagement",
        "Drop the last `numTurns` turns from the thread's history; answers with the thread "
        "and its turns (paged like `thread/read`'s).",
        (*_THREAD_ERRORS, E.THREAD_NOT_ACTIVE, E.TURN_IN_PROGRESS),
    ),
    MethodSpec(
        "thread/subscribe",
        T.ThreadSubscribeParams,
        Empty,
        "threadSubscriptions",
        "Receive every thread, turn and item event of the thread on this connection.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/unsubscribe",
        T.ThreadIdParams,
        Empty,
        "threadSubscriptions",
        "Stop receiving the thread's events on this connection.",
        (E.INVALID_PARAMS,),
    ),
    MethodSpec(
        "thread/pause",
        T.ThreadIdParams,
        Empty,
        "threadManagement",
        "Mark the thread paused; emits `thread/statusChanged` unless already paused.",
        (*_THREAD_ERRORS, E.THREAD_NOT_ACTIVE),
    ),
    MethodSpec(
        "thread/archive",
        T.ThreadIdParams,
        Empty,
        "threadManagement",
        "Archive the thread; emits `thread/statusChanged` unless already archived.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/unarchive",
        T.ThreadIdParams,
        Empty,
        "threadManagement",
        "Make an archived thread active again; emits `thread/statusChanged`.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/delete",
        T.ThreadIdParams,
        Empty,
        "threadManagement",
        "Delete the thread and all it stored; other connections get `thread/deleted`.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/rename",
        T.ThreadRenameParams,
        Empty,
        "threadManagement",
        "Set the display name; everyone gets `thread/renamed`.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/mode/set",
        T.ThreadModeSetParams,
        Empty,
        "modeSwitch",
        "Set the thread's agent mode (`agent`, `plan`, ...).",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/config/update",
        T.ThreadConfigUpdateParams,
        Empty,
        "configOverride",
        "Replace the thread's configuration overrides.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "turn/start",
        W.TurnStartParams,
        W.TurnResult,
        "threadManagement",
        "Start a turn; the response (status running) precedes `turn/started`, then items "
        "stream and exactly one of `turn/completed|failed|cancelled` ends it.",
        (*_THREAD_ERRORS, E.THREAD_NOT_ACTIVE, E.TURN_IN_PROGRESS),
    ),
    MethodSpec(
        "turn/interrupt",
        W.TurnInterruptParams,
        Empty,
        "threadManagement",
        "Cancel the running turn; `turn/cancelled` follows. Repeating it is harmless.",
        (*_THREAD_ERRORS, E.TURN_NOT_FOUND, E.TURN_NOT_RUNNING),
    ),
    MethodSpec(
        "thread/compact",
        T.ThreadIdParams,
        W.TurnResult,
        "threadManagement",
        "Extension (as Codex's `thread/compact/start`): start a turn that compacts the "
        "thread's context. The model summarises the conversation so far; later turns send "
        "the summary instead of what it covers, and every stored item is kept. The turn "
        "emits `system/event` `compacting` then `compacted` (or `compactSkipped`, "
        "`compactFailed`), a `systemNotice` item with the `summary`, then its terminal event.",
        (*_THREAD_ERRORS, E.THREAD_NOT_ACTIVE, E.TURN_IN_PROGRESS),
    ),
    MethodSpec(
        "turn/enqueue",
        W.TurnEnqueueParams,
        W.TurnEnqueueResult,
        "threadManagement",
        "Queue an input; it starts a turn when the thread is idle (now, or after the "
        "running turn completes). Emits `thread/queue/updated`.",
        (*_THREAD_ERRORS, E.THREAD_NOT_ACTIVE),
    ),
    MethodSpec(
        "turn/queue/remove",
        W.TurnQueueRemoveParams,
        W.QueuedInputsResult,
        "threadManagement",
        "Remove a queued input.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "turn/steer",
        W.TurnSteerParams,
        W.TurnSteerResult,
        "threadManagement",
        "Inject a queued input into the running turn at its next safe boundary "
        "(`deliveryMode: guidance`); it returns to the queue if the turn ends first.",
        (*_THREAD_ERRORS, E.TURN_NOT_RUNNING),
    ),
]

_CORE_NOTIFICATIONS: list[NotificationSpec] = [
    NotificationSpec(
        "workspace/configChanged",
        T.ConfigChangedNotification,
        "all connections (not with capabilities.configChange: false)",
        "Workspace configuration changed; `regions` says which parts.",
    ),
    NotificationSpec(
        "thread/started",
        T.ThreadStartedNotification,
        "all connections (the creator after its response)",
        "A thread was created.",
    ),
    NotificationSpec(
        "thread/resumed",
        T.ThreadResumedNotification,
        "the caller and the thread's subscribers",
        "A thread was resumed; `resumedBy` is the caller's client name.",
    ),
    NotificationSpec(
        "thread/statusChanged",
        T.ThreadStatusChangedNotification,
        "all connections (the caller after its response)",
        "A thread moved between active, paused and archived.",
    ),
    NotificationSpec(
        "thread/renamed",
        T.ThreadRenamedNotification,
        "all connections",
        "A thread's display name changed.",
    ),
    NotificationSpec(
        "thread/deleted",
        T.ThreadDeletedNotification,
        "all connections except the one that deleted it",
        "A thread was deleted.",
    ),
    NotificationSpec(
        "thread/runtimeChanged",
        T.ThreadRuntimeChangedNotification,
        "all connections, only when the snapshot changes",
        "A thread's running / waiting-on-approval flags changed.",
    ),
    NotificationSpec(
        "thread/queue/updated",
        W.QueueUpdatedNotification,
        "thread subscribers and the caller",
        "The thread's queued inputs changed (full list).",
    ),
    NotificationSpec(
        "turn/started",
        W.TurnNotification,
        "thread subscribers and the turn's originator",
        "A turn began (always after the `turn/start` response).",
    ),
    NotificationSpec(
        "turn/completed",
        W.TurnNotification,
        "thread subscribers and the turn's originator",
        "Terminal: the turn finished; carries items and token usage.",
    ),
    NotificationSpec(
        "turn/failed",
        W.TurnFailedNotification,
        "thread subscribers and the turn's originator",
        "Terminal: the turn failed (after an `error` item).",
    ),
    NotificationSpec(
        "turn/cancelled",
        W.TurnCancelledNotification,
        "thread subscribers and the turn's originator",
        "Terminal: the turn was cancelled (interrupted, approvalCancelled, serverShutdown, "
        "threadDeleted).",
    ),
    NotificationSpec(
        "item/started",
        W.ItemNotification,
        "thread subscribers and the turn's originator",
        "An item began; deltas and `item/completed` follow.",
    ),
    NotificationSpec(
        "item/completed",
        W.ItemNotification,
        "thread subscribers and the turn's originator",
        "An item is final (and stored).",
    ),
    NotificationSpec(
        "item/agentMessage/delta",
        W.DeltaNotification,
        "as item/started; not with streamingSupport: false",
        "Streamed agent text (`deltaKind: agentMessage`).",
    ),
    NotificationSpec(
        "item/reasoning/delta",
        W.DeltaNotification,
        "as item/started; not with streamingSupport: false",
        "Streamed reasoning (`deltaKind: reasoningContent`).",
    ),
    NotificationSpec(
        "item/toolCall/argumentsDelta",
        W.DeltaNotification,
        "as item/started; not with streamingSupport: false",
        "Raw JSON fragments of a tool call's arguments (`deltaKind: toolCallArguments`).",
    ),
    NotificationSpec(
        "item/commandExecution/outputDelta",
        W.DeltaNotification,
        "only with commandExecutionStreaming: true",
        "Live output of a shell command.",
    ),
    NotificationSpec(
        "item/approval/resolved",
        W.ApprovalResolvedNotification,
        "thread subscribers and the turn's originator",
        "An approval was decided (before the approvalResponse `item/completed`).",
    ),
    NotificationSpec(
        "item/usage/delta",
        W.UsageDeltaNotification,
        "thread subscribers and the turn's originator",
        "Token usage of one model call, with running totals.",
    ),
]

_CORE_SERVER_REQUESTS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "item/approval/request",
        W.ApprovalRequestParams,
        W.ApprovalRequestResult,
        "Ask the client to approve a gated tool call. Answer with "
        "`{decision: accept|acceptForSession|acceptAlways|decline|cancel}`; anything else "
        "counts as decline.",
    ),
]


def _table(core: list, attribute: str) -> dict:  # type: ignore[type-arg]
    entries = list(core)
    for family in _FAMILIES:
        entries.extend(getattr(family, attribute))
    table = {}
    for entry in entries:
        if entry.name in table:
            raise RuntimeError(f"{entry.name} is declared twice in the method table")
        table[entry.name] = entry
    return table


METHODS: dict[str, MethodSpec] = _table(_CORE_METHODS, "METHOD_SPECS")
NOTIFICATIONS: dict[str, NotificationSpec] = _table(_CORE_NOTIFICATIONS, "NOTIFICATION_SPECS")
SERVER_REQUESTS: dict[str, ServerRequestSpec] = _table(
    _CORE_SERVER_REQUESTS, "SERVER_REQUEST_SPECS"
)

# Flags not tied to a client->server method; a service turns them on when it
# is running (for example ``approvalFlow`` once turns can ask for approval).
FEATURE_FLAGS: frozenset[str] = frozenset({"approvalFlow", "mcpServerOrigins"})


# What a session usually does first, in that order: its wire models are built
# (pydantic's deferred schema build) in the background once the server is up,
# so the first thread and turn do not pay for it.
_FIRST_USED = (
    "thread/start",
    "thread/subscribe",
    "turn/start",
    "thread/list",
    "thread/read",
    "thread/resume",
    "turn/interrupt",
)


def models_in_first_use_order() -> list[type[BaseModel]]:
    """Every wire model of the table, those of a session's first requests first."""
    first = [METHODS[name] for name in _FIRST_USED]
    models: list[type[BaseModel]] = []
    for method in first:
        models += (method.params, method.result)
    models += (notification.params for notification in NOTIFICATIONS.values())
    for request in SERVER_REQUESTS.values():
        models += (request.params, request.result)
    for method in METHODS.values():
        models += (method.params, method.result)
    return list(dict.fromkeys(models))
