"""A turn's runtime events as Codeswarm router events.

:func:`relay` reads one injection's turn from its :class:`~appserver.faces.seat.Seat`
and hands each router event (``turn_started``, ``assistant_delta``, ``assistant``,
``reasoning_delta``, ``reasoning``, ``tool_call``, ``tool_result``, ``agent_error``,
``usage``, ``turn_complete``) to ``broadcast``, until the turn's terminal event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appserver.faces.common import ItemData, item_of
from appserver.faces.seat import Seat
from appserver.runtime.events import Event

#: The streamed texts, by the router event that carries each.
TEXT_DELTAS = {
    "item/agentMessage/delta": "assistant_delta",
    "item/reasoning/delta": "reasoning_delta",
}

#: Sends one event (name, data) to every connected client.
Broadcast = Callable[[str, dict[str, Any]], None]


async def relay(seat: Seat, base: dict[str, Any], broadcast: Broadcast) -> None:
    """Translate the turn's events until its terminal one; ``base`` is the fields
    every event about the injection carries."""
    error_code = "turn_failed"
    while True:
        event = await seat.next_event()
        kind = event.kind
        if kind in TEXT_DELTAS:
            _item_id, text = event.delta()
            broadcast(TEXT_DELTAS[kind], {**base, "content": text})
            continue
        # Read as data: the runtime hands a turn's events so, and no model is built.
        if kind == "turn/started":
            turn = event.data["turn"]
            broadcast(
                "turn_started", {**base, "thread_id": turn["threadId"], "turn_id": turn["id"]}
            )
        elif kind == "item/completed" and (item := item_of(event)) is not None:
            error_code = _item(item, base, broadcast) or error_code
        elif kind in ("turn/completed", "turn/failed", "turn/cancelled"):
            _finish(event, base, error_code, broadcast)
            return


def _item(item: ItemData, base: dict[str, Any], broadcast: Broadcast) -> str | None:
    """Events for a completed item; an error item's code is returned."""
    payload = item.payload
    if item.type == "agentMessage" and payload.get("text"):
        broadcast("assistant", {**base, "content": str(payload["text"])})
    elif item.type == "reasoningContent" and payload.get("text"):
        broadcast("reasoning", {**base, "content": str(payload["text"])})
    elif item.type == "toolCall":
        arguments = payload.get("arguments")
        broadcast(
            "tool_call",
            {
                **base,
                "call_id": str(payload.get("callId", "")),
                "tool": str(payload.get("toolName", "")),
                "arguments": arguments if isinstance(arguments, dict) else {},
            },
        )
    elif item.type == "toolResult":
        broadcast(
            "tool_result",
            {
                **base,
                "call_id": str(payload.get("callId", "")),
                "success": bool(payload.get("success")),
                "result": str(payload.get("result", "")),
            },
        )
    elif item.type == "error":
        return str(payload.get("code") or "turn_failed")
    return None


def _finish(event: Event, base: dict[str, Any], error_code: str, broadcast: Broadcast) -> None:
    params = event.data
    turn = params["turn"]
    status = "completed"
    extra: dict[str, Any] = {}
    if event.kind == "turn/failed":
        status = "failed"
        message = params.get("error", "")
        broadcast("agent_error", {**base, "message": message, "error_code": error_code})
    elif event.kind == "turn/cancelled":
        status = "cancelled"
        extra["reason"] = params.get("reason", "")
    usage = turn.get("tokenUsage") or {}
    broadcast(
        "usage",
        {
            **base,
            "total_tokens": usage.get("totalTokens", 0),
            "input_tokens": usage.get("inputTokens", 0),
            "output_tokens": usage.get("outputTokens", 0),
        },
    )
    broadcast(
        "turn_complete",
        {
            **base,
            "thread_id": turn["threadId"],
            "turn_id": turn["id"],
            "status": status,
            **extra,
        },
    )
