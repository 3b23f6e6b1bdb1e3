"""Our items as Codex's typed thread items, live (events) or stored (thread/read).

One :class:`TurnItems` per turn. Our ``toolCall`` + ``approvalRequest`` +
``commandExecution`` + ``toolResult`` items of one call become **one** Codex
item whose id is the model's call id: ``item/started`` when the call is known
(the ``toolCall`` item completes with its arguments), ``item/completed`` after
its result. ``shell`` -> ``commandExecution``; ``write_file``, ``edit_file``,
``apply_patch`` -> ``fileChange`` (the applied diffs of ``toolResult.changes``);
an MCP tool (``mcp__<server>__<tool>``, when the turn is given
:func:`mcp_server_tool`) -> ``mcpToolCall``; any other tool ->
``dynamicToolCall``. ``userMessage``, ``agentMessage`` keep
their names; ``reasoningContent`` -> ``reasoning``; ``systemNotice`` ->
``contextCompaction``. Approvals, errors and notices have no item of their own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appserver.runtime.streamed_text import append_attribute

Json = dict[str, Any]
# A tool name -> its MCP server and the tool's own name (None: not an MCP tool).
McpNames = Callable[[str], "tuple[str, str] | None"]

FILE_TOOLS = frozenset({"write_file", "edit_file", "apply_patch"})
NO_OUTPUT = "(no output)"  # what our shell tool says of a command that printed nothing
_EXIT_CODE = re.compile(r"^exit code: (-?\d+)", re.M)


def now_ms() -> int:
    return int(time.time() * 1000)


def user_content(payload: Json) -> list[Json]:
    """Codex ``UserInput`` parts of a ``userMessage`` payload."""
    parts = payload.get("nativeInputParts") or [{"type": "text", "text": payload.get("text", "")}]
    content: list[Json] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            content.append({"type": "text", "text": str(part.get("text", "")), "text_elements": []})
        elif kind == "localImage":
            content.append({"type": "localImage", "path": str(part.get("path", ""))})
        elif kind == "imageUrl":
            content.append({"type": "image", "url": str(part.get("url", ""))})
        elif kind == "fileRef":
            path = str(part.get("path", ""))
            content.append({"type": "mention", "name": path, "path": path})
        elif kind == "skillRef":  # we keep the name only: no SKILL.md path to show
            content.append({"type": "skill", "name": str(part.get("name", "")), "path": ""})
    return content


def mcp_server_tool(tools: Any, name: str) -> tuple[str, str] | None:
    """The MCP server and tool a call of ``name`` reaches, or ``None``.

    The runtime's items name only the agent tool (``mcp__<server>__<tool>``,
    reduced to ``[A-Za-z0-9_-]``). While the server's tool is registered,
    ``tools`` (the runtime's registry) knows the real names (the MCP tool
    objects carry ``server`` and ``remote.name``; duck-typed, since faces do not
    import the services layer); otherwise the name is split at its first
    ``__`` after ``mcp__``.
    """
    tool = tools.get(name) if tools is not None else None
    server = getattr(tool, "server", None)
    remote = getattr(getattr(tool, "remote", None), "name", None)
    if isinstance(server, str) and isinstance(remote, str):
        return server, remote
    if not name.startswith("mcp__"):
        return None
    server, sep, rest = name.removeprefix("mcp__").partition("__")
    return (server, rest) if sep and server and rest else None


def _change_kind(change: Json) -> Json:
    kind = change.get("kind")
    if kind in ("add", "delete"):
        return {"type": kind}
    return {"type": "update", "move_path": change.get("movePath")}


@dataclass
class Call:
    """One tool call as one Codex item."""

    id: str
    tool: str
    arguments: Json
    cwd: str
    started_ms: int = field(default_factory=now_ms)
    output: str = ""
    exit_code: int | None = None
    duration_ms: int | None = None
    mcp: tuple[str, str] | None = None  # (server, tool) of an MCP tool's call
    # A file change starts (item/started) with what it would change, as Codex's
    # does: at its approval request, or with its result when none was asked.
    started: bool = True

    def item(self, status: str, result: Json | None = None) -> Json:
        if self.tool == "shell":
            command = str(self.arguments.get("command", ""))
            item: Json = {
                "type": "commandExecution",
                "id": self.id,
                "command": command,
                "cwd": self.cwd,
                "status": status,
                "commandActions": [{"type": "unknown", "command": command}],
                # Codex: null, not a placeholder, when the command printed nothing
                # (or never ran: declined).
                "aggregatedOutput": (
                    self.output
                    if status != "inProgress" and self.output not in ("", NO_OUTPUT)
                    else None
                ),
                "exitCode": self.exit_code,
                "durationMs": self.duration_ms,
                "source": "agent",
            }
            return item
        if self.tool in FILE_TOOLS:
            changes = (result or {}).get("changes") or []
            return {
                "type": "fileChange",
                "id": self.id,
                "status": status,
                "changes": [
                    {
                        "path": str(c.get("path", "")),
                        "kind": _change_kind(c),
                        "diff": c.get("diff", ""),
                    }
                    for c in changes
                ],
            }
        if self.mcp is not None:
            return self._mcp_item(status, result)
        item = {
            "type": "dynamicToolCall",
            "id": self.id,
            "tool": self.tool,
            "arguments": self.arguments,
            "status": status,
        }
        if result is not None:
            item["success"] = bool(result.get("success"))
            item["contentItems"] = [{"type": "inputText", "text": str(result.get("result", ""))}]
        return item

    def _mcp_item(self, status: str, result: Json | None) -> Json:
        assert self.mcp is not None
        server, tool = self.mcp
        item: Json = {
            "type": "mcpToolCall",
            "id": self.id,
            "server": server,
            "tool": tool,
            "status": status,
            "arguments": self.arguments,
            "durationMs": self.duration_ms,
        }
        if result is not None:
            text = str(result.get("result", ""))
            if result.get("success"):
                item["result"] = {"content": [{"type": "text", "text": text}]}
            else:
                item["error"] = {"message": text}
        return item

    def finish(self, result: Json) -> Json:
        """The completed item, from our ``toolResult`` payload."""
        text = str(result.get("result", ""))
        declined = text.startswith("Declined")
        if self.tool == "shell":
            if self.exit_code is None:
                match = _EXIT_CODE.search(text)
                self.exit_code = int(match.group(1)) if match else None
            if not self.output and not declined:
                self.output = _EXIT_CODE.sub("", text, count=1).lstrip("\n")
        if declined:
            status = "declined" if self.tool == "shell" or self.tool in FILE_TOOLS else "failed"
        elif self.tool in FILE_TOOLS:
            status = "completed" if result.get("success") else "failed"
        elif self.tool == "shell":
            ok = result.get("success") and (self.exit_code in (None, 0))
            status = "completed" if ok else "failed"
        else:
            status = "completed" if result.get("success") else "failed"
        return self.item(status, result)

    def timed(self) -> None:
        """Measure the call's duration now (live turns; a replay has no clock)."""
        if self.mcp is not None:
            self.duration_ms = now_ms() - self.started_ms


class TurnItems:
    """The Codex items of one turn, built from our items in order.

    Each method returns the Codex notifications ``(method, params-without-ids)``
    the change makes; :attr:`finished` collects the completed Codex items."""

    def __init__(self, cwd: str, mcp_names: McpNames | None = None, live: bool = False) -> None:
        self.cwd = cwd
        # Without it every tool that is neither the shell nor a file tool is a
        # dynamicToolCall (the exec face has its own item for those).
        self.mcp_names = mcp_names
        self.live = live  # durations are measured, not replayed
        self.calls: dict[str, Call] = {}  # call id -> call
        self.pending: list[Call] = []  # started, no result yet, in order
        self.gated: dict[str, Call] = {}  # approvalRequest item id -> the call it gates
        self.commands: dict[str, Call] = {}  # our commandExecution item id -> its call
        self.finished: list[Json] = []
        self.started_ms: dict[str, int] = {}

    def started(self, item_type: str, item_id: str, payload: Json) -> list[tuple[str, Json]]:
        self.started_ms.setdefault(item_id, now_ms())
        if item_type == "agentMessage":
            return [("item/started", {"item": {"type": "agentMessage", "id": item_id, "text": ""}})]
        if item_type == "reasoningContent":
            reasoning = {"type": "reasoning", "id": item_id, "summary": [], "content": []}
            return [("item/started", {"item": reasoning})]
        if item_type == "userMessage":
            user = {"type": "userMessage", "id": item_id, "content": user_content(payload)}
            return [("item/started", {"item": user})]
        if item_type == "commandExecution":
            call = self.calls.get(str(payload.get("callId") or ""))
            if call is not None:
                self.commands[item_id] = call
        return []

    @staticmethod
    def delta_shape(kind: str, item_id: str, text: str) -> list[tuple[str, Json]]:
        """The notification of an agent message's or reasoning's delta (nothing
        kept: the same for every delta of the item but its text)."""
        if kind == "item/agentMessage/delta":
            return [("item/agentMessage/delta", {"itemId": item_id, "delta": text})]
        if kind == "item/reasoning/delta":
            return [
                ("item/reasoning/textDelta", {"itemId": item_id, "delta": text, "contentIndex": 0})
            ]
        return []

    def delta(self, kind: str, item_id: str, text: str) -> list[tuple[str, Json]]:
        shaped = self.delta_shape(kind, item_id, text)
        if shaped:
            return shaped
        if kind == "item/commandExecution/outputDelta":
            call = self.commands.get(item_id)
            if call is not None:
                append_attribute(call, "output", text)
                return [("item/commandExecution/outputDelta", {"itemId": call.id, "delta": text})]
        return []

    def completed(self, item_type: str, item_id: str, payload: Json) -> list[tuple[str, Json]]:
        item: Json | None = None
        if item_type == "agentMessage":
            item = {"type": "agentMessage", "id": item_id, "text": str(payload.get("text", ""))}
        elif item_type == "reasoningContent":
            text = str(payload.get("text", ""))
            item = {"type": "reasoning", "id": item_id, "summary": [], "content": [text]}
        elif item_type == "userMessage":
            item = {"type": "userMessage", "id": item_id, "content": user_content(payload)}
        elif item_type == "systemNotice":
            started = [("item/started", {"item": {"type": "contextCompaction", "id": item_id}})]
            item = {"type": "contextCompaction", "id": item_id}
            return [*started, *self._done(item)]
        elif item_type == "toolCall":
            return self._call(payload)
        elif item_type == "approvalRequest":
            if self.pending:
                unasked = [call for call in self.pending if call not in self.gated.values()]
                self.gated[item_id] = (unasked or self.pending)[-1]
        elif item_type == "commandExecution":
            call = self.commands.get(item_id)
            if call is not None:
                call.output = str(payload.get("aggregatedOutput") or call.output)
                code = payload.get("exitCode")
                call.exit_code = code if isinstance(code, int) else None
                duration = payload.get("durationMs")
                call.duration_ms = duration if isinstance(duration, int) else None
        elif item_type == "toolResult":
            call = self.calls.get(str(payload.get("callId") or ""))
            if call is not None and call in self.pending:
                self.pending.remove(call)
                if self.live:
                    call.timed()
                finished = call.finish(payload)
                return [*self._started(call, finished), *self._done(finished)]
        if item is None:
            return []
        return self._done(item)

    def _call(self, payload: Json) -> list[tuple[str, Json]]:
        call_id = str(payload.get("callId") or "")
        if not call_id or call_id in self.calls:
            return []
        arguments = payload.get("arguments")
        tool = str(payload.get("toolName") or "tool")
        call = Call(
            id=call_id,
            tool=tool,
            arguments=arguments if isinstance(arguments, dict) else {},
            cwd=self.cwd,
            mcp=self.mcp_names(tool) if self.mcp_names is not None else None,
        )
        self.calls[call_id] = call
        self.pending.append(call)
        if tool in FILE_TOOLS:
            call.started = False
            return []
        return [("item/started", {"item": call.item("inProgress")})]

    def start_proposed(self, call: Call, path: str, diff: str | None) -> list[tuple[str, Json]]:
        """A file change's ``item/started``, with the change its approval shows."""
        if call.started:
            return []
        call.started = True
        kind = "add" if (diff or "").startswith("--- /dev/null") else "update"
        proposed = {"path": path, "kind": kind, "diff": diff or ""}
        return [("item/started", {"item": call.item("inProgress", {"changes": [proposed]})})]

    def _started(self, call: Call, item: Json) -> list[tuple[str, Json]]:
        """``item/started`` of a file change that ends without having started."""
        if call.started:
            return []
        call.started = True
        return [("item/started", {"item": {**item, "status": "inProgress"}})]

    def _done(self, item: Json) -> list[tuple[str, Json]]:
        self.finished.append(item)
        return [("item/completed", {"item": item})]

    def unfinished(self, status: str) -> list[tuple[str, Json]]:
        """Calls a turn left without result (interrupted or failed), ended as ``status``."""
        notes: list[tuple[str, Json]] = []
        for call in self.pending:
            dynamic = call.tool != "shell" and call.tool not in FILE_TOOLS
            item = call.item("failed" if dynamic else status)
            notes += [*self._started(call, item), *self._done(item)]
        self.pending.clear()
        return notes
