"""Runtime events as zot events: ``PromptStream`` follows one prompt turn (its steps,
text, tool calls and results, and how it ended), ``CompactStream`` one compaction turn.

Both read the session's seat, which gets the events of the turns this face starts, and
write through the session's ``send``; usage is counted in the session's ``Totals``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from appserver.faces.common import item_of, turn_id_of
from appserver.faces.zot.wire import ABORTED_RESULT, Frame, Totals, turn_end, user_blocks
from appserver.runtime.streamed_text import append_attribute

if TYPE_CHECKING:
    from appserver.faces.seat import Seat
    from appserver.runtime.events import Event

# Item types that belong to running tools, not to the model's answer.
TOOL_ITEMS = frozenset({"approvalRequest", "approvalResponse", "commandExecution", "toolResult"})
MODEL_ITEMS = frozenset({"agentMessage", "reasoningContent", "toolCall"})
MODEL_DELTAS = frozenset(
    {"item/agentMessage/delta", "item/reasoning/delta", "item/toolCall/argumentsDelta"}
)
TERMINAL = frozenset({"turn/completed", "turn/failed", "turn/cancelled"})

#: How a stream writes a frame (``Session.send``).
Send = Callable[[Frame], Awaitable[None]]


class PromptStream:
    """Translates one prompt turn's runtime events into zot events."""

    def __init__(self, seat: Seat, send: Send, totals: Totals, turn_id: str) -> None:
        self.seat = seat
        self.send = send
        self.totals = totals
        self.turn_id = turn_id
        self.step = 0
        self.open = False  # a model call (step) is in progress
        self.text = ""
        self.calls: list[Frame] = []  # the open step's tool calls
        self.step_time: str | None = None
        self.running: dict[str, str] = {}  # call id -> name, results still to come
        self.commands: dict[str, str] = {}  # commandExecution item id -> call id

    async def emit(self, frame: Frame) -> None:
        await self.send(frame)

    async def run(self) -> None:
        while True:
            event = await self.seat.next_event()
            if turn_id_of(event) != self.turn_id:
                continue
            if await self.handle(event):
                return

    async def handle(self, event: Event) -> bool:
        """Translate one event; ``True`` once the turn is over."""
        kind = event.kind
        item = item_of(event)
        if kind == "item/completed" and item is not None and item.type == "userMessage":
            await self.emit(
                {
                    "type": "user_message",
                    "content": user_blocks(item.payload),
                    "time": item.created_at,
                }
            )
            if self.step == 0:
                await self.begin_step()
        elif kind in MODEL_DELTAS or (
            kind in ("item/started", "item/completed")
            and item is not None
            and item.type in MODEL_ITEMS
        ):
            await self.model_output(event)
        elif kind == "item/usage/delta":
            if not self.open:
                await self.begin_step()
            params = event.data  # a turn's events are read as data: no model built
            await self.emit(
                {
                    "type": "usage",
                    **self.totals.add(
                        int(params.get("inputTokens", 0)), int(params.get("outputTokens", 0))
                    ),
                }
            )
        elif item is not None and item.type in TOOL_ITEMS:
            if self.open:
                await self.end_step("tool_use")
            if kind == "item/started" and item.type == "commandExecution":
                call_id = str(item.payload.get("callId") or "")
                self.commands[item.id] = call_id
            elif kind == "item/completed" and item.type == "toolResult":
                call_id = str(item.payload.get("callId", ""))
                self.running.pop(call_id, None)
                await self.emit(
                    {
                        "type": "tool_result",
                        "id": call_id,
                        "is_error": not item.payload.get("success", False),
                        "content": [{"type": "text", "text": str(item.payload.get("result", ""))}],
                    }
                )
        elif kind == "item/commandExecution/outputDelta":
            item_id = str(event.data.get("itemId", ""))
            command_call = self.commands.get(item_id)
            if command_call is not None:
                delta = str(event.data.get("delta", ""))
                await self.emit({"type": "tool_progress", "id": command_call, "text": delta})
        elif kind in TERMINAL:
            await self.finish(event)
            return True
        return False

    async def begin_step(self) -> None:
        self.step += 1
        self.open = True
        self.text = ""
        self.calls = []
        self.step_time = None
        await self.emit({"type": "turn_start", "step": self.step})
        await self.emit({"type": "assistant_start"})

    async def model_output(self, event: Event) -> None:
        if not self.open:
            await self.begin_step()
        if event.kind == "item/agentMessage/delta":
            _item_id, delta = event.delta()
            append_attribute(self, "text", delta)
            await self.emit({"type": "text_delta", "delta": delta})
            return
        item = item_of(event)
        if item is None:
            return
        if event.kind == "item/started" and item.type in ("agentMessage", "toolCall"):
            self.step_time = self.step_time or item.created_at
        elif event.kind == "item/completed" and item.type == "agentMessage":
            self.text = str(item.payload.get("text", self.text))
        elif event.kind == "item/completed" and item.type == "toolCall":
            self.step_time = self.step_time or item.created_at
            payload = item.payload
            self.calls.append(
                {
                    "type": "tool_call",
                    "id": str(payload.get("callId", "")),
                    "name": str(payload.get("toolName", "")),
                    "args": payload.get("arguments") or {},
                }
            )

    async def close_step(self) -> None:
        """The open step's model call is over: its assistant message, then one
        ``tool_call`` per call (whose results are now awaited)."""
        from appserver.protocol.ids import now_iso

        content: list[Frame] = [{"type": "text", "text": self.text}] if self.text else []
        content += self.calls
        if content:
            time = self.step_time or now_iso()
            await self.emit({"type": "assistant_message", "content": content, "time": time})
        for call in self.calls:
            await self.emit(dict(call))
            self.running[call["id"]] = call["name"]
        self.open = False

    async def end_step(self, stop: str) -> None:
        await self.close_step()
        await self.emit(turn_end(stop))

    async def settle_running(self, why: str) -> None:
        """An error result for each call the turn ended before answering."""
        for call_id in list(self.running):
            await self.emit(
                {
                    "type": "tool_result",
                    "id": call_id,
                    "is_error": True,
                    "content": [{"type": "text", "text": why}],
                }
            )
        self.running.clear()

    async def finish(self, event: Event) -> None:
        kind = event.kind
        if kind == "turn/completed":
            if not self.open:
                await self.begin_step()  # a model call that streamed nothing
            await self.end_step("end_turn")
        elif kind == "turn/failed":
            message = str(event.data.get("error") or "the prompt failed")
            if self.open:
                await self.close_step()
            await self.settle_running(f"failed: {message}")
            await self.emit(turn_end("error", message))
            await self.emit({"type": "error", "message": message})
        else:
            reason = str(event.data.get("reason") or "interrupted")
            if self.open:
                await self.close_step()  # what the model said before the abort is kept
            await self.settle_running(ABORTED_RESULT)
            why = None if reason in ("interrupted", "serverShutdown") else reason
            await self.emit(turn_end("aborted", why))
        await self.emit({"type": "done"})


class CompactStream:
    """One compaction turn: ``compact_done {summary}`` (or ``error``), then ``done``."""

    def __init__(self, seat: Seat, send: Send, totals: Totals, turn_id: str) -> None:
        self.seat = seat
        self.send = send
        self.totals = totals
        self.turn_id = turn_id
        self.summary: str | None = None
        self.skipped: str | None = None

    async def run(self) -> None:
        while True:
            event = await self.seat.next_event()
            if turn_id_of(event) != self.turn_id:
                continue
            kind = event.kind
            item = item_of(event)
            if kind == "item/completed" and item is not None and item.type == "systemNotice":
                if item.payload.get("kind") == "compacted":
                    self.summary = str(item.payload.get("summary", ""))
            elif kind == "system/event" and event.data.get("kind") == "compactSkipped":
                self.skipped = str(event.data.get("message") or "nothing to compact")
            elif kind == "item/usage/delta":
                params = event.data
                self.totals.add(
                    int(params.get("inputTokens", 0)), int(params.get("outputTokens", 0))
                )
            elif kind in TERMINAL:
                break
        if event.kind == "turn/completed":
            if self.summary is not None:
                await self.send({"type": "compact_done", "summary": self.summary})
            else:
                await self.send({"type": "error", "message": self.skipped or "nothing to compact"})
        elif event.kind == "turn/failed":
            message = str(event.data.get("error") or "compaction failed")
            await self.send({"type": "error", "message": message})
        else:
            reason = str(event.data.get("reason") or "interrupted")
            why = None if reason in ("interrupted", "serverShutdown") else reason
            await self.send(turn_end("aborted", why))
        await self.send({"type": "done"})
