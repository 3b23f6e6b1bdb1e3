"""The thread-management, steering and catalogue methods: ``thread/archive``,
``thread/unarchive``, ``thread/name/set``, ``thread/compact/start``,
``thread/delete``, ``thread/unsubscribe``, ``thread/loaded/list``,
``thread/turns/list``, ``thread/revert``, ``turn/steer``, ``model/list`` and
``account/read``.

Each is one runtime call. The notifications they cause (``thread/archived``,
``thread/unarchived``, ``thread/name/updated``, ``thread/deleted``, a compaction
turn's stream) come from the runtime's events (:mod:`~appserver.faces.codex.streams`),
so a change made by a DotCraft client is announced the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appserver.faces.codex.shapes import split_turn_key, turn_key
from appserver.faces.codex.threads import codex_thread
from appserver.faces.codex.turns import input_parts, steer_input
from appserver.faces.codex.wire import CodexError, Message, Reply, text_param

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession

SUMMARY_TYPES = frozenset({"userMessage", "agentMessage"})


def _thread_id(params: Message) -> str:
    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    return thread_id


def _page(items: list[Any], params: Message) -> tuple[list[Any], str | None]:
    """One page of ``items`` by ``cursor`` (an offset we gave) and ``limit``."""
    cursor = params.get("cursor")
    start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
    limit = params.get("limit")
    end = start + limit if type(limit) is int and limit > 0 else len(items)
    return items[start:end], (str(end) if end < len(items) else None)


async def thread_archive(session: CodexSession, params: Message) -> Message:
    await session.runtime.subagents.archive(_thread_id(params))
    return {}


async def thread_unarchive(session: CodexSession, params: Message) -> Message:
    threads = session.runtime.threads
    thread_id = _thread_id(params)
    await session.runtime.subagents.unarchive(thread_id)
    return {"thread": await codex_thread(session, await threads.get(thread_id), with_turns=False)}


async def thread_name_set(session: CodexSession, params: Message) -> Message:
    name = text_param(params, "name", required=True)
    assert name is not None
    await session.runtime.threads.rename(_thread_id(params), name)
    return {}


async def thread_compact_start(session: CodexSession, params: Message) -> Message:
    """A compaction turn (its ``contextCompaction`` item and ``turn/completed``
    stream like any turn's); answered ``{}`` once it has ended, so the client's
    next ``turn/start`` does not find the thread busy."""
    from appserver.faces.common import wait_out_turn

    thread_id = _thread_id(params)
    await session.streams.watch(thread_id)
    await session.runtime.turns.compact(thread_id, session.seat)
    await wait_out_turn(session.runtime, thread_id)
    return {}


async def thread_delete(session: CodexSession, params: Message) -> Message:
    await session.runtime.subagents.delete(_thread_id(params))
    return {}


async def thread_unsubscribe(session: CodexSession, params: Message) -> Message:
    thread_id = _thread_id(params)
    record = await session.runtime.threads.repo.get(thread_id)
    if record is None:
        return {"status": "notLoaded"}
    if thread_id not in session.streams.watched:
        return {"status": "notSubscribed"}
    session.streams.unwatch(thread_id)
    session.runtime.threads.unsubscribe(thread_id, session.seat)
    return {"status": "unsubscribed"}


async def thread_loaded_list(session: CodexSession, params: Message) -> Message:
    """Threads with a live runtime here: a turn runs, or this connection watches them."""
    loaded = sorted(set(session.runtime.engine.active) | session.streams.watched)
    data, next_cursor = _page(loaded, params)
    return {"data": data, "nextCursor": next_cursor}


async def thread_turns_list(session: CodexSession, params: Message) -> Message:
    """The thread's turns, newest first unless ``sortDirection: asc``; items as
    ``itemsView`` asks (default ``summary``: the user's and the agent's messages)."""
    record = await session.runtime.threads.get(_thread_id(params))
    turns = (await codex_thread(session, record, with_turns=True))["turns"]
    if params.get("sortDirection") != "asc":
        turns.reverse()
    view = params.get("itemsView")
    view = view if view in ("notLoaded", "summary", "full") else "summary"
    for turn in turns:
        if view == "notLoaded":
            turn["items"] = []
        elif view == "summary":
            turn["items"] = [item for item in turn["items"] if item["type"] in SUMMARY_TYPES]
        turn["itemsView"] = view
    data, next_cursor = _page(turns, params)
    return {"data": data, "nextCursor": next_cursor, "backwardsCursor": None}


async def thread_revert(session: CodexSession, params: Message) -> Reply:
    """Drop ``beforeTurnId`` and every later turn (our rollback of that many
    turns); the thread's files are left as they are, as in Codex. Answered
    ``{thread}`` without turns, then ``thread/reverted``."""
    thread_id = _thread_id(params)
    key = text_param(params, "beforeTurnId", required=True)
    assert key is not None
    try:
        owner, turn_id = split_turn_key(key)
    except ValueError:
        owner = turn_id = ""
    threads = session.runtime.threads
    await threads.get(thread_id)  # an unknown thread is refused in the runtime's words
    turn_ids = [turn.id for turn in (await threads.repo.turns(thread_id))[0]]
    if owner != thread_id or turn_id not in turn_ids:
        raise CodexError(f"Invalid request: turn {key} is not a turn of thread {thread_id}")
    record = await threads.rollback(thread_id, len(turn_ids) - turn_ids.index(turn_id))
    thread = await codex_thread(session, record, with_turns=False)
    return Reply({"thread": thread}, [("thread/reverted", {"threadId": thread_id})])


async def turn_steer(session: CodexSession, params: Message) -> Message:
    """Codex's input goes into the running turn at its next safe boundary (ours:
    a queued input steered into the turn)."""
    thread_id = _thread_id(params)
    key = text_param(params, "expectedTurnId", required=True)
    assert key is not None
    parts = input_parts(params.get("input"))
    try:
        owner, turn_id = split_turn_key(key)
    except ValueError:
        raise CodexError("no active turn to steer") from None
    active = session.runtime.engine.active.get(thread_id)
    if owner != thread_id or active is None or active.record.id != turn_id:
        raise CodexError("no active turn to steer")
    return {"turnId": turn_key(thread_id, await steer_input(session, thread_id, turn_id, parts))}


async def model_list(session: CodexSession, params: Message) -> Message:
    """The provider's models in Codex's ``Model`` shape (no reasoning-effort
    catalogue here: efforts are left empty, ``medium`` named as default)."""
    from appserver.providers.base import ProviderUnavailable

    provider = session.runtime.engine.provider
    try:
        models = await provider.list_models()
    except ProviderUnavailable as exc:
        raise CodexError(f"model/list failed: {exc.message}") from None
    default = session.model or provider.default_model
    ids = sorted({model.id for model in models} | {default}, key=str.lower)
    data = [
        {
            "id": model_id,
            "model": model_id,
            "displayName": model_id,
            "description": "",
            "hidden": False,
            "isDefault": model_id == default,
            "defaultReasoningEffort": "medium",
            "supportedReasoningEfforts": [],
        }
        for model_id in ids
    ]
    page, next_cursor = _page(data, params)
    return {"data": page, "nextCursor": next_cursor}


async def account_read(session: CodexSession, params: Message) -> Message:
    """No OpenAI account here: the model provider's key is the server's own
    configuration (what Codex answers with an API-key provider)."""
    return {"account": None, "requiresOpenaiAuth": False}
