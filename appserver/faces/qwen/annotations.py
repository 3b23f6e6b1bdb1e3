"""The RFC's chunk annotations (``--output-format stream-chunk-json`` only):
``x-qwen-tool-display``, ``x-qwen-terminal``, ``x-qwen-thought`` and
``x-qwen-session-event``, in the shapes of the RFC (QwenLM/qwen-code#810).

Tool display statuses are the RFC's ``ToolCallStatus`` in lower case:
``pending`` (the model asked for the call), ``confirming`` (awaiting the
client's ``can_use_tool`` answer, with ``confirmation``), ``executing``,
``success``, ``error`` and ``canceled`` (declined, or the turn ended first).
"""

from __future__ import annotations

import re
import time
from pathlib import PurePath
from typing import Any

Frame = dict[str, Any]
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # colour codes, replayed by the client from ``ansi``


def tool_display(
    session_id: str,
    call_id: str,
    status: str,
    *,
    result_display: Frame | None = None,
    confirmation: Frame | None = None,
) -> Frame:
    """One state of a tool call; ``pending`` is true until it runs."""
    return {
        "type": "x-qwen-tool-display",
        "tool_call_id": call_id,
        "session_id": session_id,
        "status": status,
        "result_display": result_display,
        "confirmation": confirmation,
        "pending": status in ("pending", "confirming"),
        "timestamp": int(time.time()),
    }


def result_display(text: str, changes: object) -> Frame:
    """A finished call's display: the diff of the one file it changed, else its text."""
    if isinstance(changes, list) and len(changes) == 1 and isinstance(changes[0], dict):
        path = str(changes[0].get("path", ""))
        return {"kind": "file_diff", "file_name": path, "diff": str(changes[0].get("diff", ""))}
    return {"kind": "string", "text": text}


def confirmation(tool: str, request: Any) -> Frame:
    """What the client is asked to confirm, from the runtime's approval request."""
    operation = str(getattr(request, "operation", ""))
    target = str(getattr(request, "target", ""))
    reason = getattr(request, "reason", None)
    if str(getattr(request, "approval_type", "")) == "shell":
        words = operation.split()
        return {
            "type": "exec",
            "title": "Confirm Shell Command" if tool == "shell" else "Confirm Terminal Input",
            "command": operation,
            "root_command": words[0] if words else "",
            "reason": reason,
        }
    if str(getattr(request, "approval_type", "")) == "file":
        return {
            "type": "edit",
            "title": f"Confirm {operation.capitalize()}: {target}",
            "file_name": PurePath(target).name,
            "file_path": target,
            "file_diff": getattr(request, "diff", None),
            "reason": reason,
        }
    return {"type": "info", "title": f"Confirm {tool}", "prompt": reason or operation}


def terminal(text: str, call_id: str, *, source: str, exit_code: int | None = None) -> Frame:
    """A piece of a command's output (``source: "tool"``), or its end
    (``source: "system"`` with ``exit_code``). The text rides in ``text`` with
    its colour codes taken out and listed in ``ansi``; the output fills in
    ``prompt_id``."""
    ansi: list[Frame] = []
    plain: list[str] = []
    length, last = 0, 0
    for match in _SGR.finditer(text):
        piece = text[last : match.start()]
        plain.append(piece)
        length += len(piece)
        ansi.append({"offset": length, "code": match.group()})
        last = match.end()
    plain.append(text[last:])
    return {
        "type": "x-qwen-terminal",
        "channel": "stdout",
        "source": source,
        "text": "".join(plain),
        "spans": [],
        "ansi": ansi,
        "console_level": None,
        "exit_code": exit_code,
        "prompt_id": None,
        "tool_call_id": call_id,
    }


def thought(text: str) -> Frame:
    """A whole thought; a leading ``**Subject**`` is its subject, as Qwen Code reads one."""
    match = re.match(r"\s*\*\*(.+?)\*\*\s*", text, re.S)
    if match:
        return {
            "type": "x-qwen-thought",
            "subject": match.group(1),
            "description": text[match.end() :],
        }
    return {"type": "x-qwen-thought", "subject": "", "description": text}


def session_event(event: str, message: str, metrics: Frame | None = None) -> Frame:
    """A session-level notice (compaction, cancellation, the model-call limit)."""
    return {"type": "x-qwen-session-event", "event": event, "message": message, "metrics": metrics}
