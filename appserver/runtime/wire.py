"""Stored records in their wire form: the JSON data of DotCraft's ``Item``,
``Turn``, ``TokenUsage`` and ``Thread``, built without pydantic.

The events every turn makes carry this data (:class:`~appserver.runtime.events.Event`
takes a model or its data): a door that reads data or JSON never builds the
models, and a one-shot never imports pydantic for them. The data is what the
model's ``to_wire()`` gives for the same record (camelCase keys in the model's
field order, nulls left out); ``tests/runtime/test_wire_data.py`` holds the two
to each other, field by field. The typed forms (:func:`item_to_wire`,
:func:`turn_to_wire`) are parsed from it, so there is one mapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from appserver.protocol.encoding import dumps
from appserver.protocol.limits import utf8_size
from appserver.storage.records import ItemRecord, ThreadRecord, TurnRecord

if TYPE_CHECKING:
    from appserver.protocol import threads as thread_wire

#: ``ThreadConfiguration``'s wire fields in its order (the test checks them
#: against the model): a stored configuration's known keys come first, in this
#: order, then the others it keeps, as the open model writes them.
CONFIGURATION_FIELDS = (
    "mcpServers",
    "mode",
    "extensions",
    "customTools",
    "model",
    "workspaceOverride",
    "toolProfile",
    "useToolProfileOnly",
    "agentInstructions",
    "approvalPolicy",
    "automationTaskDirectory",
    "requireApprovalOutsideWorkspace",
    "autoApproveReadOnlyCommands",
)
_TOKEN_FIELDS = (
    ("inputTokens", "input_tokens"),
    ("outputTokens", "output_tokens"),
    ("totalTokens", "total_tokens"),
)


def _python_name(wire: str) -> str:
    """The Python field name of a camelCase wire name (``mcpServers`` -> ``mcp_servers``)."""
    return "".join(f"_{char.lower()}" if char.isupper() else char for char in wire)


def token_usage_data(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A stored token count (camelCase or snake_case keys) as ``TokenUsage``."""
    return {wire: usage.get(wire, usage.get(snake, 0)) for wire, snake in _TOKEN_FIELDS}


def item_data(item: ItemRecord) -> dict[str, Any]:
    """``item`` as an ``Item``. Its payload is copied (the record's changes on,
    while what was emitted must not)."""
    data: dict[str, Any] = {
        "id": item.id,
        "turnId": item.turn_id,
        "type": item.type,
        "status": item.status,
        "createdAt": item.created_at,
    }
    if item.completed_at is not None:
        data["completedAt"] = item.completed_at
    data["payloadKind"] = item.type
    data["payload"] = dict(item.payload)
    return data


def turn_data(turn: TurnRecord, items: Sequence[ItemRecord] | None) -> dict[str, Any]:
    """``turn`` as a ``Turn``: ``items=None`` leaves ``items`` out; a list
    includes exactly those items."""
    data: dict[str, Any] = {
        "id": turn.id,
        "threadId": turn.thread_id,
        "status": turn.status,
        "startedAt": turn.started_at,
    }
    if turn.completed_at is not None:
        data["completedAt"] = turn.completed_at
    if turn.token_usage:
        data["tokenUsage"] = token_usage_data(turn.token_usage)
    if turn.error is not None:
        data["error"] = turn.error
    if turn.origin_channel is not None:
        data["originChannel"] = turn.origin_channel
    if turn.initiator is not None:
        data["initiator"] = dict(turn.initiator)
    if items is not None:
        data["items"] = [item_data(item) for item in items]
    return data


def _open_object(stored: Mapping[str, Any], known: Sequence[str]) -> dict[str, Any]:
    """An open wire object as its model writes it: the known fields in their
    order, then the other keys as stored; nulls left out. A known field is read
    from its wire name, else from its Python name (``populate_by_name``); a
    Python name beside its wire name, like any other key, stays as it is."""
    fields: dict[str, Any] = {}
    taken: set[str] = set()
    for wire in known:
        if wire in stored:
            fields[wire] = stored[wire]
            taken.add(wire)
        else:
            python = _python_name(wire)
            if python in stored:
                fields[wire] = stored[python]
                taken.add(python)
    extras = {key: value for key, value in stored.items() if key not in taken}
    return {key: value for key, value in {**fields, **extras}.items() if value is not None}


def thread_data(
    thread: ThreadRecord,
    runtime: Mapping[str, Any],
    queued: Sequence[Mapping[str, Any]] = (),
    turns: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """``thread`` as a ``Thread``, with its ``runtime`` flags, ``queued`` inputs
    and ``turns`` (all in wire form; a thread just made has neither of the last two)."""
    data: dict[str, Any] = {
        "id": thread.id,
        "workspacePath": thread.workspace_path,
        "userId": thread.user_id,
        "originChannel": thread.origin_channel,
    }
    if thread.channel_context is not None:
        data["channelContext"] = thread.channel_context
    if thread.display_name is not None:
        data["displayName"] = thread.display_name
    data["status"] = thread.status
    data["createdAt"] = thread.created_at
    data["lastActiveAt"] = thread.last_active_at
    if thread.history_mode is not None:
        data["historyMode"] = thread.history_mode
    data["metadata"] = dict(thread.metadata)
    if thread.configuration is not None:
        data["configuration"] = _open_object(thread.configuration, CONFIGURATION_FIELDS)
    if thread.source:
        data["source"] = {"kind": "user", **_open_object(thread.source, ("kind",))}
    forked_from = thread.metadata.get("forkedFromId")
    if forked_from is not None:
        data["forkedFromId"] = forked_from
    data["queuedInputs"] = list(queued)
    data["runtime"] = dict(runtime)
    data["turns"] = list(turns)
    return data


def item_to_wire(item: ItemRecord) -> thread_wire.Item:
    """``item`` as a typed ``Item``."""
    from appserver.protocol import threads as thread_wire

    return thread_wire.Item.model_validate(item_data(item))


def turn_to_wire(turn: TurnRecord, items: list[ItemRecord] | None) -> thread_wire.Turn:
    """``turn`` as a typed ``Turn`` (``items`` as for :func:`turn_data`)."""
    from appserver.protocol import threads as thread_wire

    return thread_wire.Turn.model_validate(turn_data(turn, items))


def newest_within(turns: Sequence[Mapping[str, Any]], budget: int) -> int:
    """How many of the newest ``turns`` (wire form) encode within ``budget``
    bytes (at least one)."""
    used = kept = 0
    for turn in reversed(turns):
        used += utf8_size(dumps(turn)) + 1  # and its comma
        if kept and used > budget:
            break
        kept += 1
    return kept
