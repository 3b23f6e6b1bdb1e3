"""A deterministic, network-free model for tests, demos and CI.

:class:`OfflineProvider` ("offline", model "offline") reads the *last* message
of the conversation and answers from it. Its answers depend only on the
request, never on time or randomness (except where ``?delay`` says to wait).

When the last message is a user message
    its text is read line by line. A directive is recognised after stripping
    the line's surrounding whitespace:

    ``!COMMAND``
        Call tool ``shell`` with ``{"command": "COMMAND"}`` (``COMMAND`` stripped).
    ``>PATH``
        Call tool ``write_file`` with ``{"path": "PATH", "content": C}``, where
        ``C`` is every following line of the message verbatim, joined with
        ``\\n`` plus a trailing ``\\n`` (``""`` if there are none). Those lines
        are content, never directives.
    ``?tool NAME JSON``
        Call tool ``NAME`` with the JSON text as its arguments, passed through
        as streamed (default ``{}``). Invalid JSON or a non-object yields
        ``ToolCallDone`` (its call's ``arguments={}``, ``arguments_error=...``), which lets tests
        exercise that path.
    ``?plan TITLE``
        Call tool ``CreatePlan`` with ``{"title": "TITLE", "overview": "Offline
        plan: TITLE", "todos": [...]}`` and three todos: ``1`` "Read the code"
        (high), ``2`` "Make the change" (medium), ``3`` "Run the tests" (low),
        all pending.
    ``?todo ID STATUS [CONTENT]``
        Call tool ``UpdateTodos`` with ``{"todos": [{"id": "ID", "status":
        "STATUS"}]}`` (plus ``"content": "CONTENT"`` if given: a new ID adds a
        todo). STATUS is passed as written, so a wrong one reaches the tool.
    ``?stream N``
        Answer with exactly N text deltas: ``"chunk 1 "``, ``"chunk 2 "``, ...
    ``?delay MS``
        Sleep MS milliseconds (``anyio.sleep``, so cancellable) between deltas.
    ``?think TEXT``
        Stream TEXT as reasoning before anything else (repeatable).
    ``?fail KIND [MESSAGE]``
        End with ``ProviderError(KIND, MESSAGE)``; KIND is one of ``auth``,
        ``rate_limit``, ``unavailable``, ``timeout``, ``other`` (anything else
        counts as ``other``). Only ``?think`` reasoning and ``?stream`` chunks
        are sent before it; with neither, the error is the first event.

    Only the first tool directive (``!``, ``>``, ``?tool``, ``?plan`` or
    ``?todo``) is used. A line
    that looks like a directive but is malformed (``?stream x``, a bare ``!``)
    is plain text. With a tool directive the response is the call: one
    :class:`ToolCallDelta` per fragment of the JSON arguments (the first
    carries the id ``offline_call_<n>`` and the name), :class:`ToolCallDone`,
    :class:`Usage`, ``Stop("tool_calls")``. Otherwise the answer is
    ``"You said: <plain lines joined with spaces>"`` (plus ``" [N image(s)
    attached]"``), or ``"OK."`` if there were no plain lines, streamed as at
    least three :class:`TextDelta` values, then :class:`Usage` and
    ``Stop("end_turn")``.

A request that offers a helper tool, whose last message is a user message
    is a helper turn of the server (docs/suggestions.md): the message is not read
    for directives, and the answer is one call of that tool (then, after its
    result, the usual summary), made from the message alone:

    ``EmitWelcomeSuggestions``
        The message's lines that start with ``- `` are the evidence (the user's
        recent requests). Four items, in this order, each from the next evidence
        line (wrapping around): ``{"title": "Continue: E", "prompt": "Continue
        the work on: E", "reason": "You asked: E"}``, then ``Test`` / ``Write tests
        for``, ``Review`` / ``Review the change for``, ``Document`` / ``Document``
        (``E`` cut to 60 characters in the title, 120 in the reason). No
        evidence line: ``E`` is ``the workspace``.
    ``CommitSuggest``
        The diff is what follows the line ``--- unified diff ---``. Its files are
        the ``b/`` names of its ``diff --git`` lines, in order, each once;
        ``{"summary": "Update F1, F2, F3 and N more", "body": "N file(s)
        changed: A line(s) added, R removed."}`` (``A``/``R`` count the ``+``/``-``
        lines that are not ``+++``/``---`` headers; no files: ``Update files``).

    ``EmitWelcomeSuggestions`` wins when both are offered.

A request with ``purpose="compaction"``
    is answered with :func:`compaction_summary` of its messages (all but the
    last, the summarising instruction): deterministic, so tests can check it.

When the last message is a tool result
    it summarises every trailing tool result, in order, and ends the turn:

    * content starting with ``Declined`` -> ``"The NAME call was declined."``
    * content starting with ``Error`` -> ``"The NAME call failed: <first line>"``
    * ``shell`` -> ``"The command exited with code N."`` (N from an
      ``exit code: N`` line), else ``"The command finished: <first line>"``
    * ``write_file`` -> ``"Wrote N bytes to PATH."`` (N from ``<N> bytes`` in the
      result, else the UTF-8 size of the call's content; PATH from the call)
    * anything else -> ``"NAME returned: <first line>"``

Usage is always reported: input tokens are the whitespace-separated words of
the system prompt and every message; output tokens are the words streamed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from appserver.providers._common import parse_arguments
from appserver.providers.base import (
    ErrorKind,
    Message,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    Stop,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    Usage,
)
from appserver.providers.offline_helpers import helper_call

_ERROR_KINDS: dict[str, ErrorKind] = {
    "auth": "auth",
    "rate_limit": "rate_limit",
    "unavailable": "unavailable",
    "timeout": "timeout",
    "other": "other",
}
_MAX_TEXT_DELTAS = 16
_TOOL_FRAGMENTS = 3


@dataclass
class OfflineScript:
    """What a user message asks the offline model to do (see the module docstring)."""

    plain_lines: list[str] = field(default_factory=list)
    stream_count: int | None = None
    delay_ms: int = 0
    think: list[str] = field(default_factory=list)
    fail: tuple[ErrorKind, str] | None = None
    tool: tuple[str, str] | None = None  # (name, raw JSON arguments)


def parse_script(text: str) -> OfflineScript:
    """Parse a user message into an :class:`OfflineScript`."""
    script = OfflineScript()
    lines = text.splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("!") and stripped[1:].strip():
            if script.tool is None:
                script.tool = ("shell", json.dumps({"command": stripped[1:].strip()}))
            continue
        if stripped.startswith(">") and stripped[1:].strip():
            # Everything after a write directive is file content, even lines that
            # look like directives, so stop scanning here.
            if script.tool is None:
                body = lines[index + 1 :]
                content = "\n".join(body) + "\n" if body else ""
                arguments = {"path": stripped[1:].strip(), "content": content}
                script.tool = ("write_file", json.dumps(arguments))
            break
        if stripped.startswith("?") and _question_directive(script, stripped[1:]):
            continue
        script.plain_lines.append(line)
    return script


def _question_directive(script: OfflineScript, directive: str) -> bool:
    """Apply one ``?`` directive; ``False`` if it is not a well-formed one."""
    word, _, rest = directive.partition(" ")
    rest = rest.strip()
    if word in ("stream", "delay"):
        if not rest.isdigit():
            return False
        if word == "stream":
            script.stream_count = int(rest)
        else:
            script.delay_ms = int(rest)
        return True
    if word == "think" and rest:
        script.think.append(rest)
        return True
    if word == "fail":
        kind, _, message = rest.partition(" ")
        error_kind = _ERROR_KINDS.get(kind, "other")
        script.fail = (
            error_kind,
            message.strip() or f"offline: simulated {kind or 'other'} failure",
        )
        return True
    if word == "tool" and rest:
        name, _, arguments = rest.partition(" ")
        if script.tool is None:
            script.tool = (name, arguments.strip() or "{}")
        return True
    if word == "plan" and rest:
        if script.tool is None:
            script.tool = ("CreatePlan", json.dumps(offline_plan(rest)))
        return True
    if word == "todo":
        todo_id, status, content = [*rest.split(None, 2), "", "", ""][:3]
        if not status:
            return False
        change = {"id": todo_id, "status": status}
        if content.strip():
            change["content"] = content.strip()
        if script.tool is None:
            script.tool = ("UpdateTodos", json.dumps({"todos": [change]}))
        return True
    return False


def offline_plan(title: str) -> dict[str, Any]:
    """The ``CreatePlan`` arguments of ``?plan TITLE``."""
    return {
        "title": title,
        "overview": f"Offline plan: {title}",
        "todos": [
            {"id": "1", "content": "Read the code", "priority": "high"},
            {"id": "2", "content": "Make the change", "priority": "medium"},
            {"id": "3", "content": "Run the tests", "priority": "low"},
        ],
    }


class OfflineProvider:
    """The deterministic offline model; see the module docstring for its grammar."""

    name = "offline"
    default_model = "offline"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream the scripted answer to ``request``; failures only via ``?fail``."""
        events, delay_ms = _respond(request)
        emitted_delta = False
        for event in events:
            is_delta = isinstance(event, TextDelta | ReasoningDelta | ToolCallDelta)
            if is_delta and emitted_delta and delay_ms:
                await anyio.sleep(delay_ms / 1000)
            else:
                # A checkpoint per event keeps even an undelayed stream cancellable.
                await anyio.lowlevel.checkpoint()
            emitted_delta = emitted_delta or is_delta
            yield event

    async def list_models(self) -> list[ModelInfo]:
        """The one offline model."""
        return [ModelInfo(id="offline", owned_by="appserver")]

    async def aclose(self) -> None:
        """Nothing to release; present for symmetry with the network providers."""


def _respond(request: ModelRequest) -> tuple[list[ModelEvent], int]:
    if request.purpose == "compaction":
        summary = compaction_summary(request.messages[:-1])  # the last is the instruction
        deltas: list[ModelEvent] = [TextDelta(c) for c in split_text(summary)]
        return [*deltas, Usage(_input_tokens(request), _words(summary)), Stop("end_turn")], 0
    last = request.messages[-1] if request.messages else None
    if last is not None and last.role == "user":
        helper = _helper_call(request, last)
        if helper is not None:
            return helper, 0
        script = parse_script(last.content)
        return _answer_user(request, last, script), script.delay_ms
    if last is not None and last.role == "tool":
        text = _summarise_tool_results(request.messages)
    else:
        text = "Nothing to do."
    events: list[ModelEvent] = [TextDelta(c) for c in split_text(text)]
    events += [Usage(_input_tokens(request), _words(text)), Stop("end_turn")]
    return events, 0


def _answer_user(
    request: ModelRequest, message: Message, script: OfflineScript
) -> list[ModelEvent]:
    events: list[ModelEvent] = []
    output_words = 0
    for thought in script.think:
        events += [ReasoningDelta(c) for c in split_text(thought)]
        output_words += _words(thought)

    chunks: list[str]
    if script.stream_count is not None:
        chunks = [f"chunk {i} " for i in range(1, script.stream_count + 1)]
    else:
        chunks = split_text(_echo(script, message))

    if script.fail is not None:
        if script.stream_count is not None:
            events += [TextDelta(c) for c in chunks]
        events.append(ProviderError(*script.fail))
        return events

    if script.tool is not None:
        name, raw = script.tool
        return events + _call_events(request, name, raw, output_words)

    events += [TextDelta(c) for c in chunks]
    output_words += sum(_words(c) for c in chunks)
    events += [Usage(_input_tokens(request), output_words), Stop("end_turn")]
    return events


def _call_events(
    request: ModelRequest, name: str, raw: str, output_words: int = 0
) -> list[ModelEvent]:
    """One call of tool ``name`` with the JSON text ``raw``, streamed, and the end."""
    call_id = f"offline_call_{_count_tool_calls(request.messages) + 1}"
    fragments = _split_even(raw, _TOOL_FRAGMENTS)
    events: list[ModelEvent] = [ToolCallDelta(0, fragments[0], call_id=call_id, name=name)]
    events += [ToolCallDelta(0, f) for f in fragments[1:]]
    arguments, error = parse_arguments(raw)
    events.append(ToolCallDone(0, ToolCall(call_id, name, arguments, arguments_error=error)))
    output_words += _words(raw)
    return [*events, Usage(_input_tokens(request), output_words), Stop("tool_calls")]


def _helper_call(request: ModelRequest, message: Message) -> list[ModelEvent] | None:
    """The call a helper turn's message asks for (offline_helpers.py), if it is one."""
    call = helper_call({tool.name for tool in request.tools}, message.content)
    if call is None:
        return None
    name, arguments = call
    return _call_events(request, name, json.dumps(arguments))


def _echo(script: OfflineScript, message: Message) -> str:
    said = " ".join(line.strip() for line in script.plain_lines if line.strip())
    if message.images:
        count = len(message.images)
        said = f"{said} [{count} image{'s' if count > 1 else ''} attached]".strip()
    return f"You said: {said}" if said else "OK."


# --- tool results ---------------------------------------------------------------


def _summarise_tool_results(messages: list[Message]) -> str:
    trailing: list[Message] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        trailing.insert(0, message)
    calls = {c.call_id: c for m in messages if m.role == "assistant" for c in m.tool_calls}
    summaries = []
    for result in trailing:
        call = calls.get(result.tool_call_id or "")
        name = result.tool_name or (call.name if call else "tool")
        summary = _summarise(name, call.arguments if call else {}, result.content)
        if result.images:
            count = len(result.images)
            summary += f" [{count} image{'s' if count > 1 else ''} attached]"
        summaries.append(summary)
    return " ".join(summaries)


_EXIT_CODE = re.compile(r"exit[ _]code\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
_BYTES = re.compile(r"(\d+)\s*bytes?\b", re.IGNORECASE)


def _summarise(name: str, arguments: dict[str, Any], content: str) -> str:
    first = _first_line(content)
    stripped = content.lstrip()
    if stripped.startswith("Declined"):
        return f"The {name} call was declined."
    if stripped.startswith("Error"):
        return f"The {name} call failed: {first}"
    if name == "shell":
        match = _EXIT_CODE.search(content)
        if match:
            return f"The command exited with code {match.group(1)}."
        return f"The command finished: {first}" if first else "The command finished."
    if name == "write_file":
        match = _BYTES.search(content)
        written = arguments.get("content")
        if match:
            size = int(match.group(1))
        else:
            size = len(written.encode()) if isinstance(written, str) else 0
        return f"Wrote {size} bytes to {arguments.get('path', 'the file')}."
    return f"{name} returned: {first}" if first else f"{name} returned no output."


def _first_line(text: str, limit: int = 160) -> str:
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[:limit] + "..."
    return ""


# --- helpers --------------------------------------------------------------------


def compaction_summary(messages: list[Message]) -> str:
    """The offline model's summary of a conversation: each user and assistant
    message's first line, cut at 80 characters, in order."""
    lines = []
    for message in messages:
        if message.role in ("user", "assistant") and message.content.strip():
            first = message.content.strip().splitlines()[0][:80]
            lines.append(f"{message.role}: {first}")
    return "Summary of the conversation so far: " + (" | ".join(lines) or "(empty)")


def split_text(text: str) -> list[str]:
    """Split ``text`` into deltas that concatenate back to it exactly.

    Word-sized pieces (at most 16), and at least three pieces whenever the text
    has three characters, so consumers always see a real stream.
    """
    words = re.findall(r"\s*\S+\s*", text)
    if len(words) < 3 or "".join(words) != text:
        return _split_even(text, 3)
    size = math.ceil(len(words) / _MAX_TEXT_DELTAS)
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def _split_even(text: str, parts: int) -> list[str]:
    """``text`` in ``parts`` nearly equal non-empty pieces (fewer if it is shorter)."""
    if len(text) <= parts:
        return list(text) or [""]
    size, extra = divmod(len(text), parts)
    pieces, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def _words(text: str) -> int:
    return len(text.split())


def _input_tokens(request: ModelRequest) -> int:
    total = _words(request.system or "")
    for message in request.messages:
        total += _words(message.content)
        total += sum(_words(json.dumps(c.arguments)) for c in message.tool_calls)
    return total


def _count_tool_calls(messages: list[Message]) -> int:
    return sum(len(m.tool_calls) for m in messages if m.role == "assistant")
