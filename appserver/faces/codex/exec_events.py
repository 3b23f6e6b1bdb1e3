"""One turn's runtime events as ``codex exec --experimental-json`` thread events.

The app-server face's :class:`~appserver.faces.codex.items.TurnItems` builds
Codex's v2 items (one per tool call); this module writes them in exec's flat,
snake_case form, as Codex 0.169 does (recorded in the research's
``transcripts-ts-exec``):

- ``agent_message {text}`` and ``reasoning {text}``: ``item.completed`` only
  (exec has no deltas; empty ones are left out);
- ``command_execution {command, aggregated_output, exit_code, status}``:
  ``item.started`` (``in_progress``) at the call, ``item.completed`` after the
  result (``completed``, or ``failed`` for a non-zero exit or a declined call);
- ``file_change {changes: [{path, kind}], status}``: ``item.completed`` only;
- any other tool: ``mcp_tool_call {server, tool, arguments, result|error,
  status}``, ``server`` ``appserver`` for built-in tools (exec has no other
  generic tool item);
- the plan (``CreatePlan``/``UpdateTodos``): ``todo_list {items: [{text,
  completed}]}``, started at the first change, ``item.updated`` after later
  ones, completed when the turn ends;
- a non-fatal ``error`` item: ``error {message}``.

Item ids are ``item_0``, ``item_1``, ... per process, as exec numbers them.
``turn.completed`` carries the thread's token totals so far (Codex reports
its session's running totals), ``turn.failed`` the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appserver.faces.codex.items import TurnItems

if TYPE_CHECKING:
    from appserver.runtime.events import Event

Json = dict[str, Any]
BUILT_IN_SERVER = "appserver"
OUTPUT_DELTA = "item/commandExecution/outputDelta"


def usage(input_tokens: int, output_tokens: int) -> Json:
    """Exec's ``Usage`` (no cache or reasoning counts here)."""
    return {
        "input_tokens": input_tokens,
        "cached_input_tokens": 0,
        "cache_write_input_tokens": 0,
        "output_tokens": output_tokens,
        "reasoning_output_tokens": 0,
    }


def _status(status: str) -> str:
    return {"inProgress": "in_progress", "completed": "completed"}.get(status, "failed")


def _tool_result(item: Json) -> Json:
    texts = [str(part.get("text", "")) for part in item.get("contentItems") or []]
    return {
        "content": [{"type": "text", "text": text} for text in texts],
        "structured_content": None,
    }


def exec_item(item: Json) -> Json | None:
    """Exec's item body (without ``id``) for a Codex v2 item; ``None`` if exec shows none."""
    kind = item.get("type")
    if kind == "agentMessage":
        text = str(item.get("text", ""))
        return {"type": "agent_message", "text": text} if text else None
    if kind == "reasoning":
        text = "".join(str(part) for part in item.get("content") or [])
        return {"type": "reasoning", "text": text} if text else None
    if kind == "commandExecution":
        output = item.get("aggregatedOutput")
        return {
            "type": "command_execution",
            "command": str(item.get("command", "")),
            "aggregated_output": output if isinstance(output, str) else "",
            "exit_code": item.get("exitCode"),
            "status": _status(str(item.get("status"))),
        }
    if kind == "fileChange":
        changes = [
            {"path": change["path"], "kind": change["kind"]["type"]}
            for change in item.get("changes") or []
        ]
        status = "completed" if item.get("status") == "completed" else "failed"
        return {"type": "file_change", "changes": changes, "status": status}
    if kind == "dynamicToolCall":
        body: Json = {
            "type": "mcp_tool_call",
            "server": BUILT_IN_SERVER,
            "tool": str(item.get("tool", "")),
            "arguments": item.get("arguments"),
            "status": _status(str(item.get("status"))),
        }
        if body["status"] == "completed":
            body["result"] = _tool_result(item)
        elif body["status"] == "failed":
            texts = _tool_result(item)["content"]
            body["error"] = {"message": texts[0]["text"] if texts else "the tool call failed"}
        return body
    return None


class ExecTurn:
    """Translates one turn's events; :attr:`write` gets each exec event."""

    def __init__(self, workspace: str, write: Callable[[Json], None]) -> None:
        self.items = TurnItems(workspace)
        self.write = write
        self.ids: dict[str, str] = {}  # Codex v2 item id -> exec item id
        self.input_tokens = self.output_tokens = 0  # this turn's, so far
        self.todo: Json | None = None

    def _id(self, key: str) -> str:
        if key not in self.ids:
            self.ids[key] = f"item_{len(self.ids)}"
        return self.ids[key]

    def _event(self, kind: str, item_id: str, body: Json) -> None:
        self.write({"type": kind, "item": {"id": self._id(item_id), **body}})

    def feed(self, event: Event) -> None:
        """Translate one event of this turn (terminal ones are the caller's)."""
        kind, params = event.kind, event.params
        notes: list[tuple[str, Json]] = []
        if kind in ("item/started", "item/completed"):
            item = params.item  # type: ignore[attr-defined]
            payload = item.payload or {}
            if kind == "item/completed" and item.type == "error":
                if not payload.get("fatal"):  # a fatal one ends the turn: turn.failed says it
                    self._event("item.completed", item.id, self._error(payload))
                return
            handle = self.items.started if kind == "item/started" else self.items.completed
            notes = handle(item.type, item.id, payload)
        elif kind == OUTPUT_DELTA:
            self.items.delta(kind, str(params.item_id), str(params.delta))  # type: ignore[attr-defined]
        elif kind == "item/usage/delta":
            last_in, last_out = int(params.input_tokens), int(params.output_tokens)  # type: ignore[attr-defined]
            self.input_tokens = int(params.total_input_tokens or self.input_tokens + last_in)  # type: ignore[attr-defined]
            self.output_tokens = int(params.total_output_tokens or self.output_tokens + last_out)  # type: ignore[attr-defined]
        elif kind == "plan/updated":
            self._plan(params)
        for method, body in notes:
            self._note(method, body["item"])

    @staticmethod
    def _error(payload: Json) -> Json:
        return {"type": "error", "message": str(payload.get("message") or "error")}

    def _note(self, method: str, item: Json) -> None:
        body = exec_item(item)
        if body is None:
            return
        if method == "item/started":
            if body["type"] in ("command_execution", "mcp_tool_call"):
                self._event("item.started", item["id"], body)
        else:
            self._event("item.completed", item["id"], body)

    def _plan(self, params: Any) -> None:
        todos = [
            {"text": str(todo.content), "completed": todo.status == "completed"}
            for todo in params.todos
        ]
        first = self.todo is None
        self.todo = {"type": "todo_list", "items": todos}
        self._event("item.started" if first else "item.updated", "plan", self.todo)

    def finish(self) -> None:
        """Close what the turn left open: unfinished calls (failed), the plan."""
        for method, body in self.items.unfinished("failed"):
            self._note(method, body["item"])
        if self.todo is not None:
            self._event("item.completed", "plan", self.todo)
