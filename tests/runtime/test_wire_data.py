"""The runtime's wire data (``runtime/wire.py``, built without pydantic) is what
the wire models write for the same records: the same JSON once encoded (a
float may be spelled otherwise: ``1e-07`` for pydantic's ``1e-7``)."""

from __future__ import annotations

from typing import Any

import pytest

from appserver.protocol import threads as thread_wire
from appserver.protocol import turns as turn_wire
from appserver.protocol.encoding import dumps, model_json
from appserver.runtime import wire
from appserver.runtime.events import Event
from appserver.storage.records import ItemRecord, ThreadRecord, TurnRecord

ITEMS = [
    ItemRecord(
        "thr_1",
        "turn_1",
        "item_1",
        1,
        "userMessage",
        "completed",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:01Z",
        {"text": "hi", "nested": {"a": None}, "list": [1, None]},
    ),
    ItemRecord("thr_1", "turn_1", "item_2", 2, "agentMessage", "streaming", "2026-01-01T00:00:00Z"),
]
TURNS = [
    TurnRecord("thr_1", "turn_1", 1, "running", "2026-01-01T00:00:00Z"),
    TurnRecord(
        "thr_1",
        "turn_1",
        1,
        "failed",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:09Z",
        {"inputTokens": 3, "output_tokens": 4},
        "boom",
        "zene",
        {"userId": "u", "x": None},
    ),
]


def _same(data: dict[str, Any], model: Any) -> None:
    assert data == model.to_wire()
    assert dumps(data) == model_json(model)


@pytest.mark.parametrize("item", ITEMS)
def test_item_data_is_the_models(item: ItemRecord) -> None:
    model = thread_wire.Item(
        id=item.id,
        turn_id=item.turn_id,
        type=item.type,
        status=item.status,
        created_at=item.created_at,
        completed_at=item.completed_at,
        payload_kind=item.type,
        payload=item.payload,
    )
    _same(wire.item_data(item), model)
    assert wire.item_to_wire(item) == model


@pytest.mark.parametrize("turn", TURNS)
@pytest.mark.parametrize("items", [None, [], ITEMS])
def test_turn_data_is_the_models(turn: TurnRecord, items: list[ItemRecord] | None) -> None:
    model = thread_wire.Turn(
        id=turn.id,
        thread_id=turn.thread_id,
        status=turn.status,
        started_at=turn.started_at,
        completed_at=turn.completed_at,
        token_usage=thread_wire.TokenUsage.model_validate(turn.token_usage)
        if turn.token_usage
        else None,
        error=turn.error,
        origin_channel=turn.origin_channel,
        initiator=turn.initiator,
        items=None if items is None else [wire.item_to_wire(item) for item in items],
    )
    _same(wire.turn_data(turn, items), model)
    notification = turn_wire.TurnNotification(thread_id=turn.thread_id, turn=model)
    _same({"threadId": turn.thread_id, "turn": wire.turn_data(turn, items)}, notification)


def test_payload_changes_after_emitting_do_not_reach_the_event() -> None:
    item = ItemRecord("thr_1", "turn_1", "item_3", 3, "commandExecution", "started", "t0")
    event = Event(
        "item/started", {"threadId": "thr_1", "turnId": "turn_1", "item": wire.item_data(item)}
    )
    item.payload["aggregatedOutput"] = "later"
    assert "aggregatedOutput" not in event.params_json()
    assert event.params.item.payload == {}  # type: ignore[attr-defined]


THREADS = [
    ThreadRecord("thr_1", "/w", "u", "zene", "active", "t0", "t0"),
    ThreadRecord(
        "thr_2",
        "/w",
        "u",
        "dotcraft",
        "active",
        "t0",
        "t1",
        channel_context="c",
        display_name="d",
        history_mode="client",
        source={"other": 1, "kind": "subagent"},
        metadata={"forkedFromId": "thr_1"},
        configuration={
            "extra_key": None,
            "approval_policy": "autoApprove",
            "zeta": [None],
            "model": "m",
            "mcpServers": [{"name": "x", "env": None}],
            "useToolProfileOnly": False,
        },
    ),
    ThreadRecord(
        "thr_3", "/w", "u", "zene", "active", "t0", "t0", source={"x": "y"}, configuration={}
    ),
    # A Python name beside its wire name stays an extra, as the open model keeps it;
    # a key that merely camel-cases to a field is no field.
    ThreadRecord(
        "thr_4",
        "/w",
        "u",
        "dotcraft",
        "active",
        "t0",
        "t0",
        configuration={
            "approvalPolicy": "default",
            "approval_policy": "autoApprove",
            "mcp__servers": 1,
            "use_tool_profile_only_": True,
        },
    ),
    ThreadRecord(
        "thr_5",
        "/w",
        "u",
        "dotcraft",
        "active",
        "t0",
        "t0",
        configuration={"approvalPolicy": None, "approval_policy": "autoApprove"},
    ),
]


@pytest.mark.parametrize("thread", THREADS)
def test_thread_data_is_the_models(thread: ThreadRecord) -> None:
    runtime = thread_wire.ThreadRuntimeState(running=False)
    model = thread_wire.Thread(
        id=thread.id,
        workspace_path=thread.workspace_path,
        user_id=thread.user_id,
        origin_channel=thread.origin_channel,
        channel_context=thread.channel_context,
        display_name=thread.display_name,
        status=thread.status,
        created_at=thread.created_at,
        last_active_at=thread.last_active_at,
        history_mode=thread.history_mode,
        metadata=thread.metadata,
        configuration=thread_wire.ThreadConfiguration.model_validate(thread.configuration)
        if thread.configuration is not None
        else None,
        source=thread_wire.ThreadSource.model_validate(thread.source) if thread.source else None,
        forked_from_id=thread.metadata.get("forkedFromId"),
        runtime=runtime,
    )
    _same(wire.thread_data(thread, runtime.to_wire()), model)


def test_configuration_fields_are_the_models() -> None:
    fields = thread_wire.ThreadConfiguration.model_fields
    assert tuple(field.alias for field in fields.values()) == wire.CONFIGURATION_FIELDS


def test_floats_json_has_no_form_for_are_null_as_the_models_write_them() -> None:
    payload = {"n": float("nan"), "i": [float("inf"), -float("inf")], "ok": 1.5}
    item = ItemRecord("thr_1", "turn_1", "item_9", 9, "toolCall", "completed", "t0", "t1", payload)
    event = Event(
        "item/completed", {"threadId": "thr_1", "turnId": "turn_1", "item": wire.item_data(item)}
    )
    model = turn_wire.ItemNotification(
        thread_id="thr_1", turn_id="turn_1", item=wire.item_to_wire(item)
    )
    assert event.params_json() == model_json(model)
    assert '"n":null,"i":[null,null],"ok":1.5' in event.params_json()


def test_a_viewed_threads_data_with_turns_and_queue_is_the_models() -> None:
    thread = THREADS[1]
    runtime = {"running": True, "waitingOnApproval": False, "waitingOnPlanConfirmation": False}
    turns = [wire.turn_data(turn, ITEMS) for turn in TURNS]
    queued = [{"id": "queued_1", "status": "queued", "content": None}]
    model = thread_wire.Thread.model_validate(
        {**wire.thread_data(thread, runtime), "turns": turns, "queuedInputs": queued}
    )
    _same(wire.thread_data(thread, runtime, queued, turns), model)
    assert wire.newest_within(turns, 1) == 1  # at least one, whatever the budget
    assert wire.newest_within(turns, 10**6) == len(turns)
