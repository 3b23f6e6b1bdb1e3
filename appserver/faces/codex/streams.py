"""The runtime's events of a connection's threads as Codex notifications.

Every turn ends with exactly one ``turn/completed`` (``completed``,
``interrupted`` or ``failed`` with ``error``): the SDK's turn stream ends on
nothing else. Calls a turn left without result complete first, ``failed``.
Item, delta and turn notifications carry the Codex turn id
(``<thread id>:<turn id>``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from appserver.faces.codex import wire
from appserver.faces.codex.items import TurnItems, mcp_server_tool, now_ms
from appserver.faces.codex.shapes import turn_key, turn_shape
from appserver.faces.codex.wire import Message
from appserver.protocol.encoding import dumps_text
from appserver.runtime.events import DELTA_KINDS

if TYPE_CHECKING:
    from appserver.faces.codex.items import Call
    from appserver.faces.seat import Seat
    from appserver.runtime.events import Event
    from appserver.runtime.host import Runtime

log = logging.getLogger("appserver.faces.codex")

TERMINAL = {"turn/completed": "completed", "turn/failed": "failed", "turn/cancelled": "cancelled"}


THREAD_NOTES = frozenset({"thread/renamed", "thread/statusChanged", "thread/deleted"})
# Deltas whose Codex frame is the item's frame around the text (no bookkeeping).
TEXT_DELTAS = ("item/agentMessage/delta", "item/reasoning/delta")
DELTA_MARK = "\x00appserver-delta-text\x00"


class Bracket(Protocol):
    """Codex items one turn opens and closes with, beyond ours (``review/start``'s
    ``enteredReviewMode``/``exitedReviewMode``): each is sent started and completed."""

    def opening(self) -> list[Message]: ...

    def closing(self, finished: list[Message]) -> list[Message]:
        """The closing items, given the turn's completed Codex items."""
        ...


class Usage:
    """A turn's token totals, for ``thread/tokenUsage/updated``."""

    def __init__(self) -> None:
        self.input = self.output = 0

    def add(self, params: Mapping[str, Any]) -> Message:
        """Count an ``item/usage/delta`` (its data)."""
        last_in, last_out = int(params["inputTokens"]), int(params["outputTokens"])
        self.input = int(params.get("totalInputTokens") or self.input + last_in)
        self.output = int(params.get("totalOutputTokens") or self.output + last_out)
        return {"total": _breakdown(self.input, self.output), "last": _breakdown(last_in, last_out)}


def _breakdown(input_tokens: int, output_tokens: int) -> Message:
    return {
        "inputTokens": input_tokens,
        "cachedInputTokens": 0,
        "outputTokens": output_tokens,
        "reasoningOutputTokens": 0,
        "totalTokens": input_tokens + output_tokens,
    }


class Streams:
    """The live turns of a connection's threads and their notifications."""

    def __init__(
        self,
        runtime: Runtime,
        seat: Seat,
        notify: Callable[[str, Message], None],
        workspace: str,
        send_frame: Callable[[str], object] | None = None,
    ) -> None:
        self.runtime = runtime
        self.seat = seat
        self.notify = notify
        self.workspace = workspace
        # A text delta's frame is its item's frame around the text (the hot
        # path of a streamed turn): (thread id, item id, kind) -> (before, after,
        # turn key). Item ids are unique in their thread only.
        self.send_frame = send_frame
        self.opted_out: frozenset[str] = frozenset()  # set at initialize
        self.delta_frames: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self.turns: dict[tuple[str, str], TurnItems] = {}
        self.usage: dict[tuple[str, str], Usage] = {}
        self.failures: dict[tuple[str, str], str] = {}  # our code of a turn's fatal error
        self.gates: dict[str, anyio.Event] = {}  # approvalRequest item id -> its call is out
        self.watched: set[str] = set()
        self.brackets: dict[tuple[str, str], Bracket] = {}  # set before the turn starts
        # Threads told idle at their turn's end, before its turn/completed (Codex's
        # order; our runtime's idle flags come after the terminal event).
        self.idle_told: set[str] = set()

    def mcp_names(self, tool: str) -> tuple[str, str] | None:
        """The MCP server and tool behind an agent tool name (see ``mcp_server_tool``)."""
        return mcp_server_tool(self.runtime.engine.tools, tool)

    async def watch(self, thread_id: str) -> None:
        """Stream ``thread_id``'s events to this connection (idempotent)."""
        await self.runtime.threads.subscribe(thread_id, self.seat)
        self.watched.add(thread_id)

    def unwatch(self, thread_id: str) -> None:
        """Stop translating ``thread_id``'s events (the caller unsubscribes the seat)."""
        self.watched.discard(thread_id)
        if self.delta_frames:
            self.delta_frames = {
                key: frame for key, frame in self.delta_frames.items() if key[0] != thread_id
            }

    async def gated_call(self, thread_id: str, turn_id: str, item_id: str) -> Call | None:
        """The call an ``approvalRequest`` item gates, once its ``item/started`` went out."""
        await self.gates.setdefault(item_id, anyio.Event()).wait()
        items = self.turns.get((thread_id, turn_id))
        return items.gated.get(item_id) if items is not None else None

    def start_file_change(
        self, thread_id: str, turn_id: str, call: Call, path: str, diff: str | None
    ) -> None:
        """Send a file change's ``item/started`` with the change its approval asks
        about, before the request (as Codex does: the dialog shows the item)."""
        items = self.turns.get((thread_id, turn_id))
        if items is not None:
            ids = {"threadId": thread_id, "turnId": turn_key(thread_id, turn_id)}
            for method, body in items.start_proposed(call, path, diff):
                self._emit(method, body, ids)

    async def pump(self) -> None:
        async for event in self.seat.events():
            try:
                self._translate(event)
            except Exception:
                log.exception("could not translate %s", event.kind)

    async def end(self) -> None:
        self.seat.close()

    def _items(self, thread_id: str, turn_id: str) -> TurnItems:
        key = (thread_id, turn_id)
        items = self.turns.get(key)
        if items is None:
            items = self.turns[key] = TurnItems(self.workspace, self.mcp_names, live=True)
        return items

    def _translate(self, event: Event) -> None:
        kind, thread_id = event.kind, event.thread_id
        notify = self.notify
        if kind in THREAD_NOTES:
            params = event.data
            about = thread_id or params.get("threadId")
            if about is not None:
                self._thread_note(kind, params, str(about))  # about any thread, as Codex broadcasts
            return
        if thread_id is None or thread_id not in self.watched:
            return
        text = event.text
        if text is not None and event.stream is not None:  # most events, unparsed
            frame = self.delta_frames.get((thread_id, event.stream, kind))
            if frame is not None and self.send_frame is not None:
                self.send_frame(frame[0] + dumps_text(text) + frame[1])
                return
        # Read as data: the runtime hands a turn's events so (runtime/wire.py), and
        # no wire model is built for them here.
        params = event.data
        if kind in DELTA_KINDS:  # straight to their frame
            turn_id, item_id = str(params["turnId"]), str(params["itemId"])
            ids = {"threadId": thread_id, "turnId": turn_key(thread_id, turn_id)}
            items = self._items(thread_id, turn_id)
            for method, body in items.delta(kind, item_id, str(params["delta"])):
                self._emit(method, body, ids)
            if kind in TEXT_DELTAS and text is not None:
                self._keep_delta_frame(kind, thread_id, item_id, ids)
            return
        if kind == "thread/runtimeChanged":
            runtime = params["runtime"]
            status: Message = {"type": "idle"}
            if runtime.get("running"):
                flags = ["waitingOnApproval"] if runtime.get("waitingOnApproval") else []
                status = {"type": "active", "activeFlags": flags}
                self.idle_told.discard(thread_id)
            elif thread_id in self.idle_told:
                self.idle_told.discard(thread_id)
                return  # said already, before the turn's end
            notify("thread/status/changed", {"threadId": thread_id, "status": status})
            return
        turn = params.get("turn")
        if kind == "turn/started" and turn is not None:
            started_id = str(turn["id"])
            self._items(thread_id, started_id)
            shape = turn_shape(thread_id, started_id, "running", started_at=turn["startedAt"])
            notify("turn/started", {"threadId": thread_id, "turn": shape})
            bracket = self.brackets.get((thread_id, started_id))
            if bracket is not None:
                self._bracket_items(bracket.opening(), thread_id, started_id)
            return
        if kind in TERMINAL and turn is not None:
            self._finish(thread_id, turn, TERMINAL[kind], params.get("error"))
            return
        about_turn = params.get("turnId")
        if about_turn is None:
            return
        turn_id = str(about_turn)
        ids = {"threadId": thread_id, "turnId": turn_key(thread_id, turn_id)}
        items = self._items(thread_id, turn_id)
        notes: list[tuple[str, Message]] = []
        if kind in ("item/started", "item/completed"):
            item = params["item"]
            item_type, item_id, payload = str(item["type"]), str(item["id"]), item["payload"]
            if kind == "item/started":
                notes = items.started(item_type, item_id, payload)
            else:
                for delta_kind in TEXT_DELTAS:
                    self.delta_frames.pop((thread_id, item_id, delta_kind), None)
                notes = items.completed(item_type, item_id, payload)
                if item_type == "error" and payload.get("fatal"):
                    self.failures[(thread_id, turn_id)] = str(payload.get("code") or "")
                if item_type == "approvalRequest":
                    self.gates.setdefault(item_id, anyio.Event()).set()
        elif kind == "item/usage/delta":
            usage = self.usage.setdefault((thread_id, turn_id), Usage())
            notes = [("thread/tokenUsage/updated", {"tokenUsage": usage.add(params)})]
        elif kind == "turn/diff/updated":
            notes = [("turn/diff/updated", {"diff": params["diff"]})]
        for method, body in notes:
            self._emit(method, body, ids)

    def _keep_delta_frame(self, kind: str, thread_id: str, item_id: str, ids: Message) -> None:
        """Keep the frame of ``item_id``'s text deltas, split where the text goes:
        what :meth:`_emit` sends for one, made once an item."""
        notes = TurnItems.delta_shape(kind, item_id, DELTA_MARK)
        if len(notes) != 1:
            return
        method, body = notes[0]
        if method in self.opted_out:
            return  # the slow path leaves it out (CodexSession.notify)
        frame = wire.encode(wire.notification(method, {**body, **ids}))
        parts = frame.split(dumps_text(DELTA_MARK))
        if len(parts) == 2:
            self.delta_frames[(thread_id, item_id, kind)] = (parts[0], parts[1], str(ids["turnId"]))

    def _thread_note(self, kind: str, params: Mapping[str, Any], thread_id: str) -> None:
        """Renames, archive changes and deletions, in Codex's words (their data)."""
        if kind == "thread/renamed":
            name = params.get("displayName")
            self.notify("thread/name/updated", {"threadId": thread_id, "threadName": name})
        elif kind == "thread/deleted":
            self.unwatch(thread_id)
            self.notify("thread/deleted", {"threadId": thread_id})
        elif params.get("newStatus") == "archived" and params.get("previousStatus") != "archived":
            self.notify("thread/archived", {"threadId": thread_id})
        elif params.get("previousStatus") == "archived" and params.get("newStatus") != "archived":
            self.notify("thread/unarchived", {"threadId": thread_id})

    def _emit(self, method: str, body: Message, ids: Message) -> None:
        body = {**body, **ids}
        if method == "item/started":
            body["startedAtMs"] = now_ms()
        elif method == "item/completed":
            body["completedAtMs"] = now_ms()
        self.notify(method, body)

    def _bracket_items(self, items: list[Message], thread_id: str, turn_id: str) -> None:
        ids = {"threadId": thread_id, "turnId": turn_key(thread_id, turn_id)}
        for item in items:
            self._emit("item/started", {"item": item}, ids)
            self._emit("item/completed", {"item": item}, ids)

    def _finish(self, thread_id: str, turn: Mapping[str, Any], status: str, error: Any) -> None:
        turn_id = str(turn["id"])
        items = self.turns.pop((thread_id, turn_id), None)
        self.usage.pop((thread_id, turn_id), None)
        ids = {"threadId": thread_id, "turnId": turn_key(thread_id, turn_id)}
        if self.delta_frames:  # an item the turn left open
            ended = ids["turnId"]
            self.delta_frames = {
                key: frame for key, frame in self.delta_frames.items() if frame[2] != ended
            }
        if items is not None:
            for method, body in items.unfinished("failed"):
                self._emit(method, body, ids)
        bracket = self.brackets.pop((thread_id, turn_id), None)
        if bracket is not None:
            finished = items.finished if items is not None else []
            self._bracket_items(bracket.closing(finished), thread_id, turn_id)
        message = str(error or turn.get("error") or "") or None
        code = self.failures.pop((thread_id, turn_id), None)
        shape = turn_shape(
            thread_id,
            turn_id,
            status,
            started_at=turn["startedAt"],
            completed_at=turn.get("completedAt"),
            error=message,
            error_code=code,
        )
        answers = [i for i in (items.finished if items else []) if i.get("type") == "agentMessage"]
        if shape["status"] == "completed" and answers:
            # Codex ends a completed turn with its final answer (itemsView "summary").
            shape.update(items=[answers[-1]], itemsView="summary")
        # Codex tells the thread idle before it ends the turn (its recorded sessions).
        self.idle_told.add(thread_id)
        self.notify("thread/status/changed", {"threadId": thread_id, "status": {"type": "idle"}})
        if shape["error"] is not None:  # Codex says why first, then ends the turn
            self.notify("error", {**ids, "error": shape["error"], "willRetry": False})
        self.notify("turn/completed", {"threadId": thread_id, "turn": shape})
