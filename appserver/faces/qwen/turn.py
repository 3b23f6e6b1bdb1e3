"""One turn's runtime events as Qwen Code stream-json messages.

Like Qwen Code's ``StreamJsonOutputAdapter``, one assistant message holds one
kind of content block: a model call that thinks, answers and calls tools
gives a ``thinking`` message, a ``text`` message and a ``tool_use`` message
(``stop_reason: "tool_use"``, all of the call's tool uses), the last carrying
the call's ``usage``. Each tool result is a ``user`` message with one
``tool_result`` block. Partial ``stream_event``s follow the Anthropic shape:
``message_start`` once per model call, ``content_block_start`` /
``content_block_delta`` (``text_delta``, ``thinking_delta``,
``input_json_delta``) / ``content_block_stop`` (block indexes count within
an assistant message), ``message_stop`` at the end of the call.

A model call ends at the first tool-execution item after it (approval,
command, result) or at the turn's end. The turn ends with one ``result``:
``success`` (``result`` is the text of the last assistant message, or a
compaction's summary), ``error_max_turns`` (the model-call limit) or
``error_during_execution`` (a failure, or ``Operation cancelled.`` after an
interrupt). Tool uses still open then get an error ``tool_result`` first.

Under ``stream-chunk-json`` the stream also annotates (``Output.annotate``;
``annotations``): each tool call's states (``pending`` once its model call
ended, ``executing`` once approved or started, then ``success`` / ``error``
/ ``canceled``; the seat adds ``confirming``), a command's output
(``x-qwen-terminal``), compaction, cancellation and the model-call limit
(``x-qwen-session-event``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from appserver.faces.common import item_of
from appserver.faces.qwen.annotations import (
    result_display,
    session_event,
    terminal,
    tool_display,
)
from appserver.runtime.streamed_text import append_text

if TYPE_CHECKING:
    from appserver.faces.qwen.wire import Output
    from appserver.runtime.events import Event

Frame = dict[str, Any]
TOOL_ITEMS = frozenset({"approvalRequest", "approvalResponse", "commandExecution", "toolResult"})
TERMINAL = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})
CANCELLED = "Operation cancelled."
# The runtime's compaction notices (system/event kinds) as session events.
COMPACTION_EVENTS = {
    "compacting": ("ChatCompressing", "Compressing the conversation."),
    "compacted": ("ChatCompressed", "The conversation was compressed."),
    "compactFailed": ("ChatCompressionFailed", "The conversation could not be compressed."),
    "compactSkipped": ("ChatCompressionSkipped", "Nothing to compress."),
}


@dataclass
class Draft:
    """The assistant message being built (one kind of block)."""

    kind: str
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    blocks: list[Frame] = field(default_factory=list)
    open_index: int | None = None  # a text/thinking block not yet stopped


class TurnStream:
    """Translates the events of one turn for ``out``."""

    def __init__(self, out: Output, session_id: str, model: str, started: float) -> None:
        self.out = out
        self.session_id = session_id
        self.model = model
        self.started = started
        self.draft: Draft | None = None
        self.call_open = True  # the first model call is in flight from the start
        self.call_started = started
        self.call_usage = [0, 0]
        self.message_started = False
        self.num_turns = 1
        self.api_seconds = 0.0
        self.last_text = ""
        self.usage = [0, 0]
        self.tool_uses: dict[str, tuple[str, Any]] = {}
        self.new_calls: list[str] = []  # tool uses of the model call in flight
        self.statuses: dict[str, str] = {}  # call id -> its last tool display status
        self.asked: dict[str, str] = {}  # approval request id -> call id
        self.commands: dict[str, str] = {}  # commandExecution item id -> call id
        self.tokens_before: int | None = None  # a compaction's
        self.sent: dict[str, str] = {}  # item id -> the text its deltas carried
        self.denials: list[Frame] = []
        self.error_code: str | None = None
        self.summary: str | None = None
        self.skipped: str | None = None
        self.compaction = False
        self.outcome = ""  # completed, failed, max_turns or cancelled, once finished
        self.turn_id: str | None = None  # known once the turn is stored
        self.done = anyio.Event()  # its result went out

    def envelope(self, kind: str, **fields: Any) -> Frame:
        return {
            "type": kind,
            "uuid": str(uuid.uuid4()),
            "session_id": self.session_id,
            "parent_tool_use_id": None,
            **fields,
        }

    async def partial(self, event: Frame) -> None:
        await self.out.emit(self.envelope("stream_event", event=event))

    # --- events ------------------------------------------------------------------

    async def handle(self, event: Event) -> Frame | None:
        """Translate one event; the ``result`` message once the turn is over."""
        kind = event.kind
        if kind in ("item/agentMessage/delta", "item/reasoning/delta"):
            block = "text" if kind == "item/agentMessage/delta" else "thinking"
            item_id, delta = event.delta()
            self.sent[item_id] = self.sent.get(item_id, "") + delta
            await self.block_text(block, delta)
            return None
        item = item_of(event)  # a turn's events are read as data: no model built
        if kind == "item/usage/delta":
            self.open_call()
            self.call_usage[0] += int(event.data.get("inputTokens", 0))
            self.call_usage[1] += int(event.data.get("outputTokens", 0))
        elif kind == "system/event":
            await self.system_event(event.params)  # made typed by the runtime
        elif kind == "item/commandExecution/outputDelta":
            call_id = self.commands.get(str(event.data.get("itemId", "")), "")
            text = str(event.data.get("delta", ""))
            await self.out.annotate(terminal(text, call_id, source="tool"))
        elif item is not None and kind in ("item/started", "item/completed"):
            await self.item(kind, item)
        elif kind in TERMINAL:
            return await self.finish(event)
        return None

    async def item(self, kind: str, item: Any) -> None:
        payload = item.payload
        completed = kind == "item/completed"
        if item.type in TOOL_ITEMS:
            await self.end_call()
            self.call_started = time.monotonic()  # the next model call starts after it
            if completed and item.type == "toolResult":
                await self.tool_result(payload)
            else:
                await self.tool_step(completed, item)
        elif not completed:
            return
        elif item.type in ("agentMessage", "reasoningContent"):
            # What the deltas did not carry (a provider that sent none).
            text, sent = str(payload.get("text", "")), self.sent.pop(item.id, "")
            if text.startswith(sent) and len(text) > len(sent):
                await self.block_text(
                    "text" if item.type == "agentMessage" else "thinking", text[len(sent) :]
                )
        elif item.type == "toolCall":
            await self.tool_use(payload)
        elif item.type == "error" and payload.get("fatal"):
            self.error_code = str(payload.get("code") or "") or None
        elif item.type == "systemNotice" and payload.get("kind") == "compacted":
            self.summary = str(payload.get("summary", ""))

    # --- model output --------------------------------------------------------------

    def open_call(self) -> None:
        if not self.call_open:
            self.call_open = True
            self.num_turns += 1

    async def start_draft(self, kind: str) -> Draft:
        self.open_call()
        if self.draft is not None and self.draft.kind != kind:
            await self.flush_draft(final=False)
        if self.draft is None:
            self.draft = Draft(kind)
        if not self.message_started:
            self.message_started = True
            message = {"id": self.draft.id, "role": "assistant", "model": self.model, "content": []}
            await self.partial({"type": "message_start", "message": message})
        return self.draft

    async def block_text(self, kind: str, delta: str) -> None:
        if not delta:
            return
        draft = await self.start_draft(kind)
        key = "text" if kind == "text" else "thinking"
        if draft.open_index is None:
            draft.open_index = len(draft.blocks)
            block = {"type": kind, key: ""}
            draft.blocks.append(block)
            await self.partial(
                {
                    "type": "content_block_start",
                    "index": draft.open_index,
                    "content_block": dict(block),
                }
            )
        append_text(draft.blocks[draft.open_index], key, delta)
        delta_type = "text_delta" if kind == "text" else "thinking_delta"
        await self.partial(
            {
                "type": "content_block_delta",
                "index": draft.open_index,
                "delta": {"type": delta_type, key: delta},
            }
        )

    async def tool_use(self, payload: Frame) -> None:
        call_id = str(payload.get("callId", ""))
        name = str(payload.get("toolName", ""))
        arguments = payload.get("arguments")
        if not isinstance(arguments, dict):
            arguments = {}
        draft = await self.start_draft("tool_use")
        index = len(draft.blocks)
        draft.blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
        start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        await self.partial({"type": "content_block_start", "index": index, "content_block": start})
        partial_json = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        await self.partial(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": partial_json},
            }
        )
        await self.partial({"type": "content_block_stop", "index": index})
        self.tool_uses[call_id] = (name, arguments)
        self.new_calls.append(call_id)

    async def flush_draft(self, final: bool) -> None:
        """Send the assistant message being built (with the call's usage if it
        is the call's last)."""
        draft, self.draft = self.draft, None
        if draft is None or not draft.blocks:
            return
        if draft.open_index is not None:
            await self.partial({"type": "content_block_stop", "index": draft.open_index})
        usage = {"input_tokens": 0, "output_tokens": 0}
        if final:
            usage = {"input_tokens": self.call_usage[0], "output_tokens": self.call_usage[1]}
        only_tools = all(block["type"] == "tool_use" for block in draft.blocks)
        message = {
            "id": draft.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": draft.blocks,
            "stop_reason": "tool_use" if only_tools else None,
            "usage": usage,
        }
        self.last_text = "".join(
            str(block.get("text", "")) for block in draft.blocks if block["type"] == "text"
        )
        envelope = self.envelope("assistant", message=message)
        envelope["uuid"] = draft.id  # as Qwen Code: the message's id
        await self.out.emit(envelope)

    async def end_call(self) -> None:
        """The model call is over (a tool runs, or the turn ended)."""
        if not self.call_open:
            return
        await self.flush_draft(final=True)
        if self.message_started:
            await self.partial({"type": "message_stop"})
        self.message_started = False
        self.call_open = False
        self.api_seconds += time.monotonic() - self.call_started
        self.usage[0] += self.call_usage[0]
        self.usage[1] += self.call_usage[1]
        self.call_usage = [0, 0]
        calls, self.new_calls = self.new_calls, []
        for call_id in calls:
            await self.display(call_id, "pending")

    # --- tools and the end --------------------------------------------------------------

    async def display(self, call_id: str, status: str, shown: Frame | None = None) -> None:
        self.statuses[call_id] = status
        await self.out.annotate(
            tool_display(self.session_id, call_id, status, result_display=shown)
        )

    async def tool_step(self, completed: bool, item: Any) -> None:
        """An approval or a command of the running call, as its display states."""
        payload = item.payload
        if item.type == "approvalRequest" and completed:
            # Calls run one at a time: the approval is about the oldest one not yet run.
            waiting = [call for call in self.tool_uses if self.statuses.get(call) == "pending"]
            if waiting:
                self.asked[str(payload.get("requestId"))] = waiting[0]
        elif item.type == "approvalResponse" and completed:
            call_id = self.asked.pop(str(payload.get("requestId")), None)
            if call_id is not None and payload.get("approved"):
                await self.display(call_id, "executing")
            elif call_id is not None:
                self.statuses[call_id] = "canceled"  # its result says so
        elif item.type == "commandExecution":
            call_id = str(payload.get("callId", ""))
            self.commands[item.id] = call_id
            if not completed and self.statuses.get(call_id) != "executing":
                await self.display(call_id, "executing")
            elif completed:
                code = payload.get("exitCode")
                exit_code = code if isinstance(code, int) else None
                await self.out.annotate(terminal("", call_id, source="system", exit_code=exit_code))

    async def system_event(self, params: Any) -> None:
        kind = str(getattr(params, "kind", ""))
        if kind == "compactSkipped":
            self.skipped = str(getattr(params, "message", "") or "Nothing to compress.")
        if kind not in COMPACTION_EVENTS:
            return
        name, message = COMPACTION_EVENTS[kind]
        tokens = getattr(params, "token_count", None)
        metrics: Frame | None = None
        if kind == "compacting" and tokens is not None:
            self.tokens_before = int(tokens)
            metrics = {"original_tokens": self.tokens_before}
        elif kind == "compacted":
            metrics = {"original_tokens": self.tokens_before, "compressed_tokens": tokens}
        await self.out.annotate(session_event(name, message, metrics))

    async def tool_result(self, payload: Frame) -> None:
        call_id = str(payload.get("callId", ""))
        text = str(payload.get("result", ""))
        success = bool(payload.get("success", False))
        name, arguments = self.tool_uses.pop(call_id, ("", {}))
        if not success and text.startswith("Declined"):
            self.denials.append(
                {"tool_name": name, "tool_use_id": call_id, "tool_input": arguments}
            )
        await self.send_result_block(call_id, text, is_error=not success)
        declined = self.statuses.get(call_id) == "canceled" or text.startswith("Declined")
        status = "success" if success else "canceled" if declined else "error"
        await self.display(call_id, status, result_display(text, payload.get("changes")))

    async def send_result_block(self, call_id: str, text: str, is_error: bool) -> None:
        block = {
            "type": "tool_result",
            "tool_use_id": call_id,
            "is_error": is_error,
            "content": text,
        }
        await self.out.emit(self.envelope("user", message={"role": "user", "content": [block]}))

    async def finish(self, event: Event) -> Frame:
        await self.end_call()
        kind = event.kind
        for call_id in list(self.tool_uses):
            why = CANCELLED if kind == "turn/cancelled" else "Error: the turn ended first"
            await self.send_result_block(call_id, why, is_error=True)
            await self.display(call_id, "canceled", {"kind": "string", "text": why})
        self.tool_uses.clear()
        turn = event.data.get("turn")
        usage = turn.get("tokenUsage") if isinstance(turn, dict) else None
        if usage and (usage.get("inputTokens") or usage.get("outputTokens")):
            self.usage = [int(usage.get("inputTokens", 0)), int(usage.get("outputTokens", 0))]
        if kind == "turn/completed":
            self.outcome = "completed"
            if self.compaction:
                text = self.summary if self.summary is not None else self.skipped or ""
                return self.result_frame(None, text)
            return self.result_frame(None, self.last_text)
        if kind == "turn/failed":
            message = str(event.data.get("error") or "the turn failed")
            self.outcome = "max_turns" if self.error_code == "max_model_calls" else "failed"
            if self.outcome == "max_turns":
                await self.out.annotate(session_event("MaxSessionTurns", message))
            extra = {"code": self.error_code} if self.error_code else {}
            return self.result_frame(message, **extra)
        reason = str(event.data.get("reason") or "interrupted")
        self.outcome = "cancelled"
        await self.out.annotate(session_event("USER_CANCELLED", CANCELLED))
        return self.result_frame(
            CANCELLED, **({} if reason == "interrupted" else {"reason": reason})
        )

    def result_frame(self, error: str | None, text: str = "", **details: Any) -> Frame:
        """The ``result`` message for :attr:`outcome` (``error`` is its message
        unless the turn completed)."""
        result: Frame = {
            "type": "result",
            "subtype": "success",
            "uuid": str(uuid.uuid4()),
            "session_id": self.session_id,
            "is_error": False,
            "duration_ms": int((time.monotonic() - self.started) * 1000),
            "duration_api_ms": int(self.api_seconds * 1000),
            "num_turns": self.num_turns,
        }
        if self.outcome == "completed":
            result["result"] = text
        else:
            result["subtype"] = (
                "error_max_turns" if self.outcome == "max_turns" else "error_during_execution"
            )
            result["is_error"] = True
        input_tokens, output_tokens = self.usage
        result["usage"] = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "cache_read_input_tokens": 0,
        }
        result["permission_denials"] = self.denials
        if self.outcome != "completed":
            result["error"] = {"message": error or "error", **details}
        return result
