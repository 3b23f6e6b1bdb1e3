"""The handshake and the thread methods: ``initialize``, ``thread/start``,
``thread/resume``, ``thread/read``, ``thread/list``.

A Codex thread is an ordinary thread (channel ``codex``, user the client's
name): DotCraft clients and the web page list and watch it, and threads made
elsewhere can be resumed here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from appserver.faces.codex.handshake import client_name, initialize_result
from appserver.faces.codex.items import TurnItems
from appserver.faces.codex.shapes import (
    codex_policy,
    our_policy,
    sandbox,
    split_turn_key,
    thread_shape,
    turn_shape,
)
from appserver.faces.codex.wire import CodexError, Message, Reply, text_param

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession
    from appserver.storage.records import ThreadRecord

LIST_LIMIT = 100


async def initialize(session: CodexSession, params: Message) -> Message:
    if session.client_known:
        raise CodexError("Already initialized")
    session.client_name = client_name(params)
    session.client_known = True
    capabilities = params.get("capabilities")
    opted = (
        capabilities.get("optOutNotificationMethods") if isinstance(capabilities, dict) else None
    )
    if isinstance(opted, list):
        session.opted_out = session.streams.opted_out = frozenset(
            method for method in opted if isinstance(method, str)
        )
    return initialize_result(params, session.workspace)


def _model(session: CodexSession, record: ThreadRecord | None = None) -> str:
    configured = (record.configuration or {}).get("model") if record is not None else None
    provider = session.runtime.engine.provider
    return str(configured or session.model or provider.default_model)


def _status(session: CodexSession, thread_id: str, elsewhere: bool = False) -> Message:
    """``elsewhere``: a turn runs on the thread in another process."""
    if elsewhere or thread_id in session.runtime.engine.active:
        return {"type": "active", "activeFlags": []}
    return {"type": "idle"} if thread_id in session.streams.watched else {"type": "notLoaded"}


def workspace_cwd(session: CodexSession, params: Message) -> str:
    """The workspace, when ``params.cwd`` is absent or names it; else ``-32600``:
    one process serves one workspace, and threads have no working directory
    of their own."""
    cwd = params.get("cwd")
    if cwd is None:
        return session.workspace
    if not isinstance(cwd, str) or os.path.normpath(cwd) != os.path.normpath(session.workspace):
        raise CodexError(
            f"Invalid request: cwd must be this server's workspace ({session.workspace}); "
            "start one appserver-codex per workspace"
        )
    return session.workspace


async def codex_thread(session: CodexSession, record: ThreadRecord, with_turns: bool) -> Message:
    """Codex's Thread for ``record`` (its turns with their items when ``with_turns``)."""
    turns: list[Message] = []
    preview = ""
    # A thread without turns (one just started) has nothing to view.
    stored = (
        (await session.runtime.threads.view(record, include_turns=True)).thread.turns
        if record.turn_count
        else []
    )
    for turn in stored:
        items = TurnItems(session.workspace, session.streams.mcp_names)
        for item in turn.items or []:
            items.started(item.type, item.id, item.payload)
            items.completed(item.type, item.id, item.payload)
        if turn.status in ("failed", "cancelled"):
            items.unfinished("failed")
        if not preview:
            preview = next(
                (
                    str(part.get("text", ""))
                    for i in items.finished
                    if i["type"] == "userMessage"
                    for part in i["content"]
                    if part.get("type") == "text"
                ),
                "",
            )
        turns.append(
            turn_shape(
                record.id,
                turn.id,
                turn.status,
                started_at=turn.started_at,
                completed_at=turn.completed_at,
                error=turn.error,
                error_code=next(
                    (
                        str(item.payload.get("code"))
                        for item in turn.items or []
                        if item.type == "error" and item.payload.get("fatal")
                    ),
                    None,
                ),
                items=items.finished,
            )
        )
    return thread_shape(
        thread_id=record.id,
        created_at=record.created_at,
        updated_at=record.last_active_at,
        # One thread asked about: another process's turn on it counts too (a
        # thread without turns, one just started, cannot have one: no query).
        status=_status(
            session,
            record.id,
            record.turn_count > 0 and await session.runtime.threads.running_anywhere(record.id),
        ),
        cwd=session.workspace,
        model_provider=session.runtime.engine.provider.name,
        model=_model(session, record),
        name=record.display_name,
        preview=preview,
        turns=turns if with_turns else [],
        forked_from_id=record.metadata.get("forkedFromId"),
    )


# In a thread's configuration: the Codex approval policy and reviewer its client
# asked for ("never", "auto_review": questions declined unasked, which our own
# policy cannot say), so that a resume, in this process or a later one, keeps them.
KEPT_POLICY = "codexApprovals"


def kept_policy(record: ThreadRecord) -> tuple[Any, str] | None:
    """The Codex policy and reviewer stored with the thread, if any."""
    kept = (record.configuration or {}).get(KEPT_POLICY)
    if isinstance(kept, dict) and isinstance(kept.get("approvalsReviewer"), str):
        return kept.get("approvalPolicy"), kept["approvalsReviewer"]
    return None


def kept_entry(policy: Any, reviewer: str) -> dict[str, Any]:
    """The configuration entry :func:`kept_policy` reads."""
    return {"approvalPolicy": policy, "approvalsReviewer": reviewer}


def _settings(session: CodexSession, record: ThreadRecord, thread: Message) -> Message:
    policy, reviewer = (
        session.policies.get(record.id)
        or kept_policy(record)
        or (
            codex_policy((record.configuration or {}).get("approvalPolicy")),
            "user",
        )
    )
    return {
        "thread": thread,
        "model": thread["model"],
        "modelProvider": thread["modelProvider"],
        "cwd": session.workspace,
        "approvalPolicy": policy,
        "approvalsReviewer": reviewer,
        "sandbox": sandbox(session.workspace),
    }


def _remember_policy(
    session: CodexSession,
    thread_id: str,
    params: Message,
    before: tuple[Any, str] | None = None,
) -> dict[str, Any]:
    """The thread's Codex policy and reviewer, kept for its answers; our
    configuration. ``before``: the thread's (or a fork's source's) policy and
    reviewer, for the half a request leaves out."""
    policy = params.get("approvalPolicy")
    reviewer = params.get("approvalsReviewer")
    config: dict[str, Any] = {}
    if policy is not None:
        config["approvalPolicy"] = our_policy(policy)
    elif session.approval_policy:
        config["approvalPolicy"] = session.approval_policy
    model = params.get("model")
    if isinstance(model, str) and model:
        config["model"] = model
    elif session.model:
        config["model"] = session.model
    if policy is not None:
        shown = policy
    else:
        shown = before[0] if before else codex_policy(config.get("approvalPolicy"))
    kept = reviewer if isinstance(reviewer, str) else (before[1] if before else "user")
    session.policies[thread_id] = (shown, kept)
    if policy is not None or isinstance(reviewer, str):
        config[KEPT_POLICY] = kept_entry(shown, kept)
    return config


async def thread_start(session: CodexSession, params: Message) -> Any:
    from appserver.runtime.threads import NewThread

    workspace_cwd(session, params)
    threads = session.runtime.threads
    config = _remember_policy(session, "", params)
    record = await threads.create(
        NewThread(
            user_id=session.client_name,
            channel_name="codex",
            configuration=config or None,
        )
    )
    session.policies[record.id] = session.policies.pop("")
    await session.streams.watch(record.id)
    thread = await codex_thread(session, record, with_turns=False)
    return Reply(_settings(session, record, thread), [("thread/started", {"thread": thread})])


async def thread_resume(session: CodexSession, params: Message) -> Message:
    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    workspace_cwd(session, params)
    threads = session.runtime.threads
    record = await threads.get(thread_id)
    if record.status != "active":
        await threads.resume(record.id, session.seat)
        record = await threads.get(thread_id)
    earlier = session.policies.get(record.id) or kept_policy(record)
    config = _remember_policy(session, record.id, params, earlier)
    if "approvalPolicy" not in params and "approvalsReviewer" not in params:
        kept = kept_policy(record)  # what its client asked for before
        if kept is None:
            session.policies.pop(record.id, None)  # shown from the thread's own policy
        else:
            session.policies[record.id] = kept
    current = dict(record.configuration or {})
    changed = {k: v for k, v in config.items() if k in params or k in ("model", KEPT_POLICY)}
    wanted = {**current, **changed}
    if wanted != current:
        await threads.configure(record.id, wanted)
        record = await threads.get(thread_id)
    await session.streams.watch(record.id)
    exclude = params.get("excludeTurns") is True
    thread = await codex_thread(session, record, with_turns=not exclude)
    return _settings(session, record, thread)


async def thread_fork(session: CodexSession, params: Message) -> Any:
    """A new thread with the source's history through ``lastTurnId`` (all of it
    when absent), its configuration and the Codex policy asked for here."""
    from appserver.runtime.fork import ForkSpec, fork_thread

    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    last = text_param(params, "lastTurnId")
    workspace_cwd(session, params)
    last_turn = None
    if last is not None:
        try:
            owner, last_turn = split_turn_key(last)
        except ValueError:
            owner = ""
        if owner != thread_id:
            raise CodexError(f"Invalid request: turn {last} is not a turn of thread {thread_id}")
    threads = session.runtime.threads
    source = await threads.get(thread_id)
    earlier = session.policies.get(source.id) or kept_policy(source)
    asked = _remember_policy(session, "", params, earlier)
    shown = session.policies.pop("")
    # The source's configuration, changed only where this request says so.
    changed = {k: v for k, v in asked.items() if k in params or k == KEPT_POLICY}
    config = {**(source.configuration or {}), **changed}
    record = await fork_thread(
        threads, ForkSpec(thread_id=thread_id, last_turn_id=last_turn, configuration=config)
    )
    if KEPT_POLICY in changed:
        session.policies[record.id] = shown
    elif (inherited := kept_policy(record)) is not None:
        session.policies[record.id] = inherited
    await session.streams.watch(record.id)
    exclude = params.get("excludeTurns") is True
    thread = await codex_thread(session, record, with_turns=not exclude)
    started = await codex_thread(session, record, with_turns=False)
    return Reply(_settings(session, record, thread), [("thread/started", {"thread": started})])


async def thread_read(session: CodexSession, params: Message) -> Message:
    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    record = await session.runtime.threads.get(thread_id)
    include = params.get("includeTurns") is True
    return {"thread": await codex_thread(session, record, with_turns=include)}


def _listed_here(session: CodexSession, params: Message, provider: str) -> bool:
    """Whether ``thread/list``'s filters can match this server's threads at all:
    each has the workspace as its ``cwd``, ``appServer`` as its source kind and
    this server's model provider."""
    cwd = params.get("cwd")
    if isinstance(cwd, str) and cwd and os.path.realpath(cwd) != session.workspace:
        return False
    kinds = params.get("sourceKinds")
    if isinstance(kinds, list) and kinds and "appServer" not in kinds:
        return False
    providers = params.get("modelProviders")
    return not (isinstance(providers, list) and providers and provider not in providers)


async def thread_list(session: CodexSession, params: Message) -> Message:
    from appserver.storage.threads import ThreadQuery

    limit = params.get("limit")
    cursor = params.get("cursor")
    search = params.get("searchTerm")
    provider = session.runtime.engine.provider
    if not _listed_here(session, params, provider.name):
        return {"data": [], "nextCursor": None}
    excluded = params.get("excludedThreadIds")
    excluded_ids = (
        {i for i in excluded if isinstance(i, str)} if isinstance(excluded, list) else set()
    )
    query = ThreadQuery(
        workspace_path=session.workspace,
        user_id=None,
        channel_context=None,
        include_archived=params.get("archived") is True,
        # Codex lists at least one (`limit: 0` is one), at most LIST_LIMIT.
        limit=max(1, min(limit, LIST_LIMIT)) if type(limit) is int else LIST_LIMIT,
        cursor=cursor if isinstance(cursor, str) else None,
        search_term=search if isinstance(search, str) and search else None,
    )
    summaries, next_cursor = await session.runtime.threads.list(query)
    summaries = [summary for summary in summaries if summary.id not in excluded_ids]
    archived = params.get("archived") is True
    data = [
        thread_shape(
            thread_id=summary.id,
            created_at=summary.created_at,
            updated_at=summary.last_active_at,
            status=_status(session, summary.id),
            cwd=session.workspace,
            model_provider=provider.name,
            model=session.model or provider.default_model,
            name=summary.display_name,
        )
        for summary in summaries
        if (summary.status == "archived") == archived
    ]
    return {"data": data, "nextCursor": next_cursor}
