"""The core of the method table: threads and turns, the methods, notifications
and server requests every server serves, with their wire models.

Light beside the whole table (``protocol/methods.py``, which adds every
family's entries and so loads every family's wire models): the DotCraft door
routes with this and :mod:`~appserver.protocol.method_index`, and imports a
family's entries only when one of its methods is first called.
"""

from pydantic import BaseModel

from appserver.protocol import errors as rpc_errors
from appserver.protocol import fork as fork_wire
from appserver.protocol import threads as thread_wire
from appserver.protocol import turns as turn_wire
from appserver.protocol.base import Empty
from appserver.protocol.initialize import InitializeParams, InitializeResult
from appserver.protocol.limits import LIST_PAGE_BYTES
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec
from appserver.protocol.turn_models import TURN_MODELS

_THREAD_ERRORS = (rpc_errors.THREAD_NOT_FOUND, rpc_errors.INVALID_PARAMS)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "initialize",
        InitializeParams,
        InitializeResult,
        None,
        "Open the session: client info and capabilities in, server info and capabilities out.",
        (rpc_errors.ALREADY_INITIALIZED,),
    ),
    MethodSpec(
        "thread/start",
        thread_wire.ThreadStartParams,
        thread_wire.ThreadResult,
        "threadManagement",
        "Create a thread. The response is written before `thread/started`.",
        (rpc_errors.INVALID_PARAMS,),
    ),
    MethodSpec(
        "thread/resume",
        thread_wire.ThreadResumeParams,
        thread_wire.ThreadResult,
        "threadManagement",
        "Load a thread, make it active and return it with its turns; emits `thread/resumed`. "
        "Turns page like `thread/read`'s.",
        (*_THREAD_ERRORS, rpc_errors.THREAD_NOT_ACTIVE),
    ),
    MethodSpec(
        "thread/list",
        thread_wire.ThreadListParams,
        thread_wire.ThreadListResult,
        "threadManagement",
        "Thread summaries for an identity, newest activity first; optional keyset paging.",
        (rpc_errors.INVALID_PARAMS,),
        access="read",
    ),
    MethodSpec(
        "thread/read",
        thread_wire.ThreadReadParams,
        thread_wire.ThreadResult,
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
        thread_wire.ThreadRollbackParams,
        thread_wire.ThreadResult,
        "threadManagement",
        "Drop the last `numTurns` turns from the thread's history; answers with the thread "
        "and its turns (paged like `thread/read`'s).",
        (*_THREAD_ERRORS, rpc_errors.THREAD_NOT_ACTIVE, rpc_errors.TURN_IN_PROGRESS),
    ),
    MethodSpec(
        "thread/fork",
        fork_wire.ThreadForkParams,
        thread_wire.ThreadResult,
        "threadFork",
        "Start a new thread with a copy of a thread's history: its turns and items up to "
        "`forkPoint` (absent: every turn that is not running), its configuration, its title + "
        "` (fork)`; the new thread's `forkedFromId` names the source. Answers like `thread/read` "
        "with turns (none with `excludeTurns`); everyone gets `thread/started`.",
        (*_THREAD_ERRORS, rpc_errors.TURN_NOT_FOUND),
    ),
    MethodSpec(
        "thread/subscribe",
        thread_wire.ThreadSubscribeParams,
        Empty,
        "threadSubscriptions",
        "Receive every thread, turn and item event of the thread on this connection.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/unsubscribe",
        thread_wire.ThreadIdParams,
        Empty,
        "threadSubscriptions",
        "Stop receiving the thread's events on this connection.",
        (rpc_errors.INVALID_PARAMS,),
    ),
    MethodSpec(
        "thread/pause",
        thread_wire.ThreadIdParams,
        Empty,
        "threadManagement",
        "Mark the thread paused; emits `thread/statusChanged` unless already paused.",
        (*_THREAD_ERRORS, rpc_errors.THREAD_NOT_ACTIVE),
    ),
    MethodSpec(
        "thread/archive",
        thread_wire.ThreadIdParams,
        Empty,
        "threadManagement",
        "Archive the thread; emits `thread/statusChanged` unless "
        "already archived. Refused while a turn runs on it (interrupt it first).",
        (*_THREAD_ERRORS, rpc_errors.TURN_IN_PROGRESS),
    ),
    MethodSpec(
        "thread/unarchive",
        thread_wire.ThreadIdParams,
        Empty,
        "threadManagement",
        "Make an archived thread active again; emits `thread/statusChanged`.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/delete",
        thread_wire.ThreadIdParams,
        Empty,
        "threadManagement",
        "Delete the thread and all it stored; other connections get `thread/deleted`.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/rename",
        thread_wire.ThreadRenameParams,
        Empty,
        "threadManagement",
        "Set the display name; everyone gets `thread/renamed`.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/mode/set",
        thread_wire.ThreadModeSetParams,
        Empty,
        "modeSwitch",
        "Set the thread's agent mode (`agent`, `plan`, ...).",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "thread/config/update",
        thread_wire.ThreadConfigUpdateParams,
        Empty,
        "configOverride",
        "Replace the thread's configuration overrides.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "turn/start",
        turn_wire.TurnStartParams,
        turn_wire.TurnResult,
        "threadManagement",
        "Start a turn; the response (status running) precedes `turn/started`, then items "
        "stream and exactly one of `turn/completed|failed|cancelled` ends it.",
        (*_THREAD_ERRORS, rpc_errors.THREAD_NOT_ACTIVE, rpc_errors.TURN_IN_PROGRESS),
    ),
    MethodSpec(
        "turn/interrupt",
        turn_wire.TurnInterruptParams,
        Empty,
        "threadManagement",
        "Cancel the running turn; `turn/cancelled` follows. Repeating it is harmless.",
        (*_THREAD_ERRORS, rpc_errors.TURN_NOT_FOUND, rpc_errors.TURN_NOT_RUNNING),
    ),
    MethodSpec(
        "thread/compact",
        thread_wire.ThreadIdParams,
        turn_wire.TurnResult,
        "threadManagement",
        "Extension (as Codex's `thread/compact/start`): start a turn that compacts the "
        "thread's context. The model summarises the conversation so far; later turns send "
        "the summary instead of what it covers, and every stored item is kept. The turn "
        "emits `system/event` `compacting` then `compacted` (or `compactSkipped`, "
        "`compactFailed`), a `systemNotice` item with the `summary`, then its terminal event.",
        (*_THREAD_ERRORS, rpc_errors.THREAD_NOT_ACTIVE, rpc_errors.TURN_IN_PROGRESS),
    ),
    MethodSpec(
        "turn/enqueue",
        turn_wire.TurnEnqueueParams,
        turn_wire.TurnEnqueueResult,
        "threadManagement",
        "Queue an input; it starts a turn when the thread is idle (now, or after the "
        "running turn completes). Emits `thread/queue/updated`.",
        (*_THREAD_ERRORS, rpc_errors.THREAD_NOT_ACTIVE),
    ),
    MethodSpec(
        "turn/queue/remove",
        turn_wire.TurnQueueRemoveParams,
        turn_wire.QueuedInputsResult,
        "threadManagement",
        "Remove a queued input.",
        _THREAD_ERRORS,
    ),
    MethodSpec(
        "turn/steer",
        turn_wire.TurnSteerParams,
        turn_wire.TurnSteerResult,
        "threadManagement",
        "Inject a queued input into the running turn at its next safe boundary "
        "(`deliveryMode: guidance`); it returns to the queue if the turn ends first.",
        (*_THREAD_ERRORS, rpc_errors.TURN_NOT_RUNNING),
    ),
]

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "workspace/configChanged",
        thread_wire.ConfigChangedNotification,
        "all connections (not with capabilities.configChange: false)",
        "Workspace configuration changed; `regions` says which parts.",
    ),
    NotificationSpec(
        "thread/started",
        thread_wire.ThreadStartedNotification,
        "all connections (the creator after its response)",
        "A thread was created.",
    ),
    NotificationSpec(
        "thread/resumed",
        thread_wire.ThreadResumedNotification,
        "the caller and the thread's subscribers",
        "A thread was resumed; `resumedBy` is the caller's client name.",
    ),
    NotificationSpec(
        "thread/statusChanged",
        thread_wire.ThreadStatusChangedNotification,
        "all connections (the caller after its response)",
        "A thread moved between active, paused and archived.",
    ),
    NotificationSpec(
        "thread/renamed",
        thread_wire.ThreadRenamedNotification,
        "all connections",
        "A thread's display name changed.",
    ),
    NotificationSpec(
        "thread/deleted",
        thread_wire.ThreadDeletedNotification,
        "all connections except the one that deleted it",
        "A thread was deleted.",
    ),
    NotificationSpec(
        "thread/runtimeChanged",
        thread_wire.ThreadRuntimeChangedNotification,
        "all connections, only when the snapshot changes",
        "A thread's running / waiting-on-approval flags changed.",
    ),
    NotificationSpec(
        "thread/queue/updated",
        turn_wire.QueueUpdatedNotification,
        "thread subscribers and the caller",
        "The thread's queued inputs changed (full list).",
    ),
    NotificationSpec(
        "turn/started",
        turn_wire.TurnNotification,
        "thread subscribers and the turn's originator",
        "A turn began (always after the `turn/start` response).",
    ),
    NotificationSpec(
        "turn/completed",
        turn_wire.TurnNotification,
        "thread subscribers and the turn's originator",
        "Terminal: the turn finished; carries items and token usage.",
    ),
    NotificationSpec(
        "turn/failed",
        turn_wire.TurnFailedNotification,
        "thread subscribers and the turn's originator",
        "Terminal: the turn failed (after an `error` item).",
    ),
    NotificationSpec(
        "turn/cancelled",
        turn_wire.TurnCancelledNotification,
        "thread subscribers and the turn's originator",
        "Terminal: the turn was cancelled (interrupted, approvalCancelled, serverShutdown, "
        "threadDeleted).",
    ),
    NotificationSpec(
        "turn/diff/updated",
        turn_wire.TurnDiffUpdatedNotification,
        "thread subscribers and the turn's originator",
        "The turn's aggregate diff after each file change (Codex's shape; the whole diff).",
    ),
    NotificationSpec(
        "item/started",
        turn_wire.ItemNotification,
        "thread subscribers and the turn's originator",
        "An item began; deltas and `item/completed` follow.",
    ),
    NotificationSpec(
        "item/completed",
        turn_wire.ItemNotification,
        "thread subscribers and the turn's originator",
        "An item is final (and stored).",
    ),
    NotificationSpec(
        "item/agentMessage/delta",
        turn_wire.DeltaNotification,
        "as item/started; not with streamingSupport: false",
        "Streamed agent text (`deltaKind: agentMessage`).",
    ),
    NotificationSpec(
        "item/reasoning/delta",
        turn_wire.DeltaNotification,
        "as item/started; not with streamingSupport: false",
        "Streamed reasoning (`deltaKind: reasoningContent`).",
    ),
    NotificationSpec(
        "item/toolCall/argumentsDelta",
        turn_wire.DeltaNotification,
        "as item/started; not with streamingSupport: false",
        "Raw JSON fragments of a tool call's arguments (`deltaKind: toolCallArguments`).",
    ),
    NotificationSpec(
        "item/commandExecution/outputDelta",
        turn_wire.DeltaNotification,
        "only with commandExecutionStreaming: true",
        "Live output of a shell command.",
    ),
    NotificationSpec(
        "item/approval/resolved",
        turn_wire.ApprovalResolvedNotification,
        "thread subscribers and the turn's originator",
        "An approval was decided (before the approvalResponse `item/completed`).",
    ),
    NotificationSpec(
        "item/usage/delta",
        turn_wire.UsageDeltaNotification,
        "thread subscribers and the turn's originator",
        "Token usage of one model call, with running totals.",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "item/approval/request",
        turn_wire.ApprovalRequestParams,
        turn_wire.ApprovalRequestResult,
        "Ask the client to approve a gated tool call. Answer with "
        "`{decision: accept|acceptForSession|acceptAlways|decline|cancel}`; anything else "
        "counts as decline.",
    ),
]

_CORE_BY_NAME = {spec.name: spec for spec in METHOD_SPECS}

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
    """The wire models a session's turns need, in the order it first needs them:
    its first requests', then what a turn still makes typed (its notifications
    go out as the runtime's data: :data:`~appserver.protocol.turn_models.TURN_MODELS`),
    then the bundled
    plugins' manifests (read for a turn's tools). The other methods' (the
    families') and notifications' build at first use: most sessions never
    need them, and building them all cost ~60 ms of CPU a session
    (tests/test_cli.py checks that a turn builds no other)."""
    models: list[type[BaseModel]] = []
    for name in _FIRST_USED:
        models += (_CORE_BY_NAME[name].params, _CORE_BY_NAME[name].result)
    models += TURN_MODELS
    from appserver.protocol.plugins import PluginInterface  # loaded with its family

    models.append(PluginInterface)
    return list(dict.fromkeys(models))
