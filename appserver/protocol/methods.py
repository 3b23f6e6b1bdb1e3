"""The one method table: every client->server method, server->client
notification and server->client request, with its wire models.

It drives params validation, the ``initialize`` capability block, docs and
(later) the JSON Schema and generated clients. Add a method here first.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from appserver.protocol import errors as E
from appserver.protocol import threads as T
from appserver.protocol.base import Empty
from appserver.protocol.initialize import InitializeParams, InitializeResult


@dataclass(frozen=True)
class MethodSpec:
    """A client->server request.

    ``capability`` names the ``initialize`` flag that gates the method; the
    flag is advertised only when every method carrying it has a handler.
    """

    name: str
    params: type[BaseModel]
    result: type[BaseModel]
    capability: str | None
    summary: str
    errors: tuple[int, ...] = ()
    # Ordering against earlier requests on the same connection: "read",
    # "write" or "detached" (long-running; not ordered).
    access: str = "write"


@dataclass(frozen=True)
class NotificationSpec:
    """A server->client notification and who receives it."""

    name: str
    params: type[BaseModel]
    delivery: str
    summary: str


_THREAD_ERRORS = (E.THREAD_NOT_FOUND, E.INVALID_PARAMS)

METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in [
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
            "Load a thread, make it active and return it with its turns; emits `thread/resumed`.",
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
            "Read-only snapshot of a thread; turns on request, optionally paged.",
            _THREAD_ERRORS,
            access="read",
        ),
        MethodSpec(
            "thread/rollback",
            T.ThreadRollbackParams,
            T.ThreadResult,
            "threadManagement",
            "Drop the last `numTurns` turns from the thread's history.",
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
    ]
}

NOTIFICATIONS: dict[str, NotificationSpec] = {
    spec.name: spec
    for spec in [
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
    ]
}

# Flags not tied to a client->server method; a service turns them on when it
# is running (for example ``approvalFlow`` once turns can ask for approval).
FEATURE_FLAGS: frozenset[str] = frozenset({"approvalFlow"})
