"""Rebuilding the model's conversation from stored items.

Server-managed history is the thread's stored items: user messages, agent
messages, tool calls and their results (a client tool's ``dynamicToolCall``
item is both: the call, and the answer the model read). Reasoning, approvals, errors and
command-execution companions are for people, not for the model. A tool call
that never got a result (the turn was interrupted or the server died) gets
a synthetic one, because every provider rejects a dangling tool call.

Compaction: a ``systemNotice`` item of kind ``compacted`` carries a summary
of the conversation before it. From there on the model sees one synthetic
user message with that summary in place of every earlier message (except
those of the notice's own turn, which the summary does not cover); the
stored items themselves are never changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from appserver.providers.base import ImagePart, Message, ToolCall
from appserver.runtime.inputs import load_image
from appserver.runtime.tool_output import DEFAULT_TOOL_OUTPUT_MAX_BYTES, tool_message
from appserver.storage.records import ItemRecord
from appserver.tools.images import viewed_image
from appserver.tools.view_image import VIEW_IMAGE_MAX_BYTES

if TYPE_CHECKING:
    from appserver.protocol.turns import ChatMessage

INTERRUPTED_RESULT = "The tool call did not complete (the turn ended first)."
IMAGE_GONE = "[the image is no longer available as it was viewed]"
SUMMARY_PREFIX = (
    "The conversation so far was compacted into this summary; it replaces the earlier messages:\n\n"
)


def compaction_summary(item: ItemRecord) -> str | None:
    """The summary a ``systemNotice`` item of kind ``compacted`` carries, if it is one."""
    if item.type != "systemNotice" or item.payload.get("kind") != "compacted":
        return None
    summary = item.payload.get("summary")
    return summary if isinstance(summary, str) and summary else None


def user_message_content(payload: dict[str, Any]) -> str:
    parts = payload.get("materializedInputParts") or []
    texts = [
        str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text"
    ]
    return "\n\n".join(texts) if texts else str(payload.get("text", ""))


def client_tool_text(result: Mapping[str, Any]) -> str:
    """What the model reads back from a client tool's answer (the fields of a
    ``dynamicToolCall`` or ``pluginFunctionCall`` item): the text parts (an
    image by URL as a note; an inline image is sent as an image, see
    :func:`client_tool_images`), else the structured result as JSON. A failed
    call reads ``Error: <why>`` (unless a text part already says it) and then
    its text parts."""
    parts: list[str] = []
    for part in result.get("contentItems") or []:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        elif not part.get("dataBase64"):
            parts.append(f"[image: {part.get('imageUrl', '')}]")
    if not result.get("success"):
        why = result.get("errorMessage") or result.get("errorCode") or "the tool failed"
        lead = f"Error: {why}"
        if not any(lead in part for part in parts):
            parts.insert(0, lead)
        return "\n".join(parts)
    if parts:
        return "\n".join(parts)
    if "structuredResult" in result:
        return json.dumps(result["structuredResult"], ensure_ascii=False)
    return ""


def client_tool_images(result: Mapping[str, Any]) -> list[ImagePart]:
    """The inline images of a client tool's answer (``{type: "image",
    dataBase64, mediaType}`` parts: the Node REPL's screenshots), for the model."""
    return [
        ImagePart(str(part.get("mediaType") or "image/png"), str(part["dataBase64"]))
        for part in result.get("contentItems") or []
        if isinstance(part, Mapping)
        and part.get("type") == "image"
        and isinstance(part.get("dataBase64"), str)
        and part["dataBase64"]
    ]


def tool_result_message(
    payload: Mapping[str, Any], call_id: str, name: str, max_bytes: int
) -> Message:
    """A stored ``toolResult``'s message: its output under the truncation rule
    (``runtime.tool_output``), and the images it names read again (a gone or
    changed image becomes a note: the model is never shown another one)."""
    output = str(payload.get("result", ""))
    entries = payload.get("images") or []
    images = [viewed_image(entry, VIEW_IMAGE_MAX_BYTES) for entry in entries]
    if any(image is None for image in images):
        output += "\n" + IMAGE_GONE
    kept = [image for image in images if image is not None]
    return tool_message(call_id, name, output, max_bytes, kept)


def messages_from_items(
    items: Iterable[ItemRecord], tool_output_max_bytes: int = DEFAULT_TOOL_OUTPUT_MAX_BYTES
) -> list[Message]:
    """The conversation the stored items describe, oldest first; each tool
    result cut to ``tool_output_max_bytes`` (``runtime.tool_output``)."""
    messages: list[Message] = []
    open_calls: dict[str, str] = {}  # call id -> tool name, awaiting a result

    def close_open_calls() -> None:
        for call_id, name in open_calls.items():
            messages.append(
                Message("tool", INTERRUPTED_RESULT, tool_call_id=call_id, tool_name=name)
            )
        open_calls.clear()

    def add_call(call: ToolCall) -> None:
        # Calls of one response share its assistant message.
        last = messages[-1] if messages else None
        if (
            last is not None
            and last.role == "assistant"
            and not open_calls.keys() - {c.call_id for c in last.tool_calls}
        ):
            last.tool_calls.append(call)
        else:
            messages.append(Message("assistant", "", tool_calls=[call]))
        open_calls[call.call_id] = call.name

    turn_id: str | None = None
    turn_start = 0  # index of the first message of the current turn
    for item in items:
        payload = item.payload
        if item.turn_id != turn_id:
            turn_id, turn_start = item.turn_id, len(messages)
        summary = compaction_summary(item)
        if summary is not None:
            close_open_calls()
            kept = messages[turn_start:]
            messages[:] = [Message("user", SUMMARY_PREFIX + summary), *kept]
            turn_start = 1
        elif item.type == "userMessage":
            close_open_calls()
            images = [
                image
                for image in (load_image(entry) for entry in payload.get("images") or [])
                if image is not None
            ]
            messages.append(Message("user", user_message_content(payload), images=images))
        elif item.type == "agentMessage":
            close_open_calls()
            text = str(payload.get("text", ""))
            if text:
                messages.append(Message("assistant", text))
        elif item.type == "toolCall":
            add_call(
                ToolCall(
                    call_id=str(payload.get("callId", item.id)),
                    name=str(payload.get("toolName", "")),
                    arguments=dict(payload.get("arguments") or {}),
                )
            )
        elif item.type in ("dynamicToolCall", "pluginFunctionCall"):
            # A dynamic tool is offered to the model as `namespace__name`
            # (runtime/turns/client_tools.py); a plugin function (a channel tool,
            # NodeReplJs) under its `functionName` alone.
            tool = str(payload.get("toolName") or payload.get("functionName") or "")
            namespace = payload.get("namespace") if item.type == "dynamicToolCall" else None
            call = ToolCall(
                call_id=str(payload.get("callId", item.id)),
                name=f"{namespace}__{tool}" if namespace else tool,
                arguments=dict(payload.get("arguments") or {}),
            )
            add_call(call)
            if "success" in payload:  # answered (or failed): the model read this
                del open_calls[call.call_id]
                text = client_tool_text(payload)
                images = client_tool_images(payload)
                messages.append(
                    tool_message(call.call_id, call.name, text, tool_output_max_bytes, images)
                )
        elif item.type == "toolResult":
            call_id = str(payload.get("callId", ""))
            name = open_calls.pop(call_id, None)
            if name is None:
                continue  # a result without its call: nothing to attach it to
            messages.append(tool_result_message(payload, call_id, name, tool_output_max_bytes))
    close_open_calls()
    return messages


def messages_from_client(history: list[ChatMessage]) -> list[Message]:
    """``historyMode: "client"``: the client's messages become the history."""
    messages: list[Message] = []
    for entry in history:
        role = entry.role.lower()
        if role in ("user", "assistant", "system"):
            messages.append(Message(role, entry.text()))  # type: ignore[arg-type]
    return messages
