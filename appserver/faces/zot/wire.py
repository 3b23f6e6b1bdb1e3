"""zot's RPC wire format: its constants, the parsing of a command line, and the frames
this face writes (responses, ``turn_end``, usage, zot's messages for ``get_messages``).

Frames are plain dicts, one JSON object a line; which streamed ones a lagging client
may get merged is said by ``coalescing``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appserver.faces.zot.handshake import PROTOCOL_VERSION
from appserver.protocol.decoding import JsonRejected, loads_client
from appserver.transport.outbox import text_merger

__all__ = ["PROTOCOL_VERSION"]  # and the frames below

if TYPE_CHECKING:
    from appserver.providers.base import Message
    from appserver.storage.records import ItemRecord

MAX_LINE_BYTES = 16 * 1024 * 1024  # zot's scanner limit
AUTH_REQUIRED = "auth required: send hello with token first"
BUSY = "agent is busy"
ABORTED_RESULT = "aborted: the prompt was aborted before the tool finished"

Frame = dict[str, Any]


class Malformed(Exception):
    """A line that is no zot command; the message is the response's ``error``."""


def parse_command(line: str) -> tuple[str, str | None, Frame]:
    """One command line as its ``type``, its ``id`` (``None`` when absent or empty,
    as zot omits an empty id too) and the whole frame."""
    try:
        frame = loads_client(line)
    except JsonRejected as exc:
        raise Malformed(f"malformed json: {exc}") from None
    if not isinstance(frame, dict):
        raise Malformed("malformed json: expected a JSON object")
    kind, request_id = frame.get("type", ""), frame.get("id")
    if not isinstance(kind, str) or not (request_id is None or isinstance(request_id, str)):
        raise Malformed("malformed json: 'type' and 'id' must be strings")
    return kind, request_id or None, frame


def response(request_id: str | None, command: str, data: Frame | None = None) -> Frame:
    """A command's success (``id`` echoed only when sent)."""
    frame: Frame = {"type": "response"}
    if request_id is not None:
        frame["id"] = request_id
    frame.update(command=command, success=True)
    if data is not None:
        frame["data"] = data
    return frame


def failure(request_id: str | None, command: str, error: str) -> Frame:
    """A command's failure (``id`` echoed only when sent)."""
    frame: Frame = {"type": "response"}
    if request_id is not None:
        frame["id"] = request_id
    frame.update(command=command, success=False, error=error)
    return frame


def turn_end(stop: str, error: str | None = None) -> Frame:
    frame: Frame = {"type": "turn_end", "stop": stop}
    if error:
        frame["error"] = error
    return frame


@dataclass
class Totals:
    """Token counts (this runtime prices nothing: cost is 0)."""

    input: int = 0
    output: int = 0

    def wire(self) -> Frame:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": 0,
            "cache_write": 0,
            "cost_usd": 0.0,
        }

    def add(self, input_tokens: int, output_tokens: int) -> Frame:
        """Count one model call's tokens; its usage, with the totals as ``cumulative``."""
        self.input += input_tokens
        self.output += output_tokens
        usage = Totals(input_tokens, output_tokens).wire()
        usage["cumulative"] = self.wire()
        return usage


def coalescing(frame: Frame) -> tuple[object, Callable[[list[str]], str]] | None:
    """Streamed text a lagging client may get in fewer, larger frames."""
    kind = frame.get("type")
    if kind == "text_delta":
        return ("text_delta",), _MERGE_DELTAS
    if kind == "tool_progress":
        return ("tool_progress", frame.get("id")), _MERGE_PROGRESS
    return None


_MERGE_DELTAS = text_merger("delta")
_MERGE_PROGRESS = text_merger("text")


# --- transcript ------------------------------------------------------------------------


def user_blocks(payload: dict[str, Any]) -> list[Frame]:
    """A stored user message's content as zot blocks (text, then images)."""
    blocks: list[Frame] = []
    for part in payload.get("materializedInputParts") or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"type": "text", "text": str(part["text"])})
        elif part.get("type") == "localImage":
            try:
                size = os.path.getsize(str(part.get("path", "")))
            except OSError:
                size = 0
            mime_type = str(part.get("mimeType") or "")
            blocks.append({"type": "image", "mime_type": mime_type, "bytes": size})
    if not blocks and payload.get("text"):
        blocks.append({"type": "text", "text": str(payload["text"])})
    return blocks


def _image_size(data_base64: str) -> int:
    padding = len(data_base64) - len(data_base64.rstrip("="))
    return len(data_base64) * 3 // 4 - padding


def zot_messages(messages: list[Message], items: list[ItemRecord]) -> list[Frame]:
    """``messages`` (from ``messages_from_items(items)``) as zot messages.

    Tool results of one model call form one ``tool`` message, as in zot.
    Each message's ``time`` is its item's ``created_at``: the summary of a
    compaction has the notice's, and the rest (a suffix of the conversation)
    are matched to their items from the end.
    """
    from appserver.runtime.history import SUMMARY_PREFIX

    results = {
        str(item.payload.get("callId", "")): item for item in items if item.type == "toolResult"
    }
    calls = {str(item.payload.get("callId", "")): item for item in items if item.type == "toolCall"}
    notices = [
        item
        for item in items
        if item.type == "systemNotice" and item.payload.get("kind") == "compacted"
    ]
    user_times = [item.created_at for item in items if item.type == "userMessage"]
    text_times = [
        item.created_at
        for item in items
        if item.type == "agentMessage" and str(item.payload.get("text", ""))
    ]
    user_count = sum(
        1 for m in messages if m.role == "user" and not m.content.startswith(SUMMARY_PREFIX)
    )
    text_count = sum(1 for m in messages if m.role == "assistant" and m.content)
    # The i-th kept user message is the (len - count + i)-th user item.
    user_times = user_times[max(0, len(user_times) - user_count) :] if user_count else []
    text_times = text_times[max(0, len(text_times) - text_count) :] if text_count else []
    out: list[Frame] = []
    last_time = ""
    for message in messages:
        time = last_time
        if message.role == "user":
            if message.content.startswith(SUMMARY_PREFIX) and notices:
                time = notices[-1].created_at
            elif user_times:
                time = user_times.pop(0)
            blocks: list[Frame] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks += [
                {
                    "type": "image",
                    "mime_type": image.media_type,
                    "bytes": _image_size(image.data_base64),
                }
                for image in message.images
            ]
            out.append({"role": "user", "content": blocks, "time": time})
        elif message.role == "assistant":
            if message.content and text_times:
                time = text_times.pop(0)
            elif message.tool_calls and message.tool_calls[0].call_id in calls:
                time = calls[message.tool_calls[0].call_id].created_at
            blocks = [{"type": "text", "text": message.content}] if message.content else []
            blocks += [
                {"type": "tool_call", "id": call.call_id, "name": call.name, "args": call.arguments}
                for call in message.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks, "time": time})
        elif message.role == "tool":
            call_id = message.tool_call_id or ""
            result = results.get(call_id)
            if result is not None:
                time = result.created_at
            block = {
                "type": "tool_result",
                "call_id": call_id,
                "is_error": result is None or not result.payload.get("success", False),
                "content": [{"type": "text", "text": message.content}],
            }
            if out and out[-1]["role"] == "tool":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "tool", "content": [block], "time": time})
        last_time = time
    return out
