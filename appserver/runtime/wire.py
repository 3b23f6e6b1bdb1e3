"""Stored turn and item records as wire models (one conversion for every caller)."""

from __future__ import annotations

from appserver.protocol import threads as thread_wire
from appserver.storage.records import ItemRecord, TurnRecord


def item_to_wire(item: ItemRecord) -> thread_wire.Item:
    return thread_wire.Item(
        id=item.id,
        turn_id=item.turn_id,
        type=item.type,
        status=item.status,
        created_at=item.created_at,
        completed_at=item.completed_at,
        payload_kind=item.type,
        payload=item.payload,
    )


def turn_to_wire(turn: TurnRecord, items: list[ItemRecord] | None) -> thread_wire.Turn:
    """``items=None`` leaves ``items`` out; a list includes exactly those items."""
    return thread_wire.Turn(
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
        items=[item_to_wire(item) for item in items] if items is not None else None,
    )
