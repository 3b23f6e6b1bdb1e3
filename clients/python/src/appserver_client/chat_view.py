"""How the chat prints a turn: streamed text and reasoning, tool calls, command
output as it arrives, results, and numbered outputs that ``/show N`` prints
in full. A file tool's call is its name and path; what it changed is the
server's diff of what it applied (``toolResult.changes``), not its arguments.

Long outputs are cut at :data:`SHOWN_LINES` lines with a note naming the
``/show`` command; :attr:`View.activity` says what the turn is doing, for the
spinner.

With ``live`` (the line editor, whose spinner prompt is redrawn below the
output) nothing is ever written as a partial line: a prompt redraw would erase
it. A streaming message is kept in :attr:`View.live_text`, which the spinner
prompt shows above itself, and printed once complete (as Markdown with
colour, by :mod:`appserver_client.chat_render`). A message too long for the
screen is printed line by line as its lines complete, in plain text. Without
``live`` (a pipe, ``TERM=dumb``, ``--plain``) deltas are written as they come.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

from appserver_client import chat_render as render
from appserver_client.chat_exact import diff_lines, reveal
from appserver_client.notifications import Notification

SHOWN_LINES = 20  # lines of a command's output or a tool result printed at once
FILE_TOOLS = frozenset({"write_file", "edit_file", "apply_patch"})


def one_line(text: str, limit: int = 160) -> str:
    """The first line of ``text``, cut at ``limit`` characters, `` …`` if more."""
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    more = len(lines) > 1 or len(first) > limit
    return first[:limit] + (" …" if more else "")


class View:
    """Renders one session's notifications through ``write``."""

    def __init__(
        self,
        write: Callable[[str], None],
        shown_lines: int = SHOWN_LINES,
        colour: bool = False,
        live: bool = False,
    ) -> None:
        self._write = write
        self.shown_lines = shown_lines
        self.colour = colour  # colours and Markdown (a terminal)
        self.live = live  # streaming text is held in live_text (see the module doc)
        self.live_text = ""  # the streaming item's text not yet printed
        self._spilled = False  # part of the streaming item was printed already
        self.line_start = True
        self.activity = "thinking"
        self.outputs: dict[int, str] = {}  # /show N -> the full text
        self._streaming: str | None = None  # the item whose deltas we are printing
        self._streamed: set[str] = set()
        self._commands: dict[str, _Output] = {}  # commandExecution item id -> its output
        self._command_calls: set[str] = set()  # callIds whose output was shown live

    # --- output primitives --------------------------------------------------

    def write(self, text: str) -> None:
        """Write ``text`` as is."""
        if text:
            self._write(text)
            self.line_start = text.endswith("\n")

    def line(self, text: str = "", kind: str | None = None) -> None:
        """Write ``text`` on a line of its own, in the colour of ``kind`` lines."""
        if not self.live:
            self._streaming = None
        if not self.line_start:
            self.write("\n")
        if kind is not None and self.colour:
            text = render.styled(text, kind)
        self.write(text + "\n")

    def commit_live(self, *, markdown: bool = False) -> None:
        """Print what :attr:`live_text` holds (as Markdown with ``markdown`` and
        colour, when none of it was printed yet); the streaming item ends."""
        text, self.live_text = self.live_text, ""
        whole = not self._spilled
        self._streaming, self._spilled = None, False
        if not text:
            return
        if markdown and whole and self.colour:
            self.write(render.markdown(text))
        else:
            text = text.removesuffix("\n")
            self.line(render.safe(text) if self.colour else text)

    def _spill(self) -> None:
        """Print the complete lines of a streaming text that no longer fits on
        the screen above the prompt; keep the unfinished line live."""
        columns, rows = _terminal_size()
        if not self._spilled and _rows(self.live_text, columns) <= rows - 6:
            return
        self._spilled = True
        done, newline, rest = self.live_text.rpartition("\n")
        printed = [done] if newline else []
        while _rows(rest, columns) > 2:
            # A long unfinished line: print its first row, broken at a space
            # as the terminal would wrap it.
            cut = rest.rfind(" ", 0, columns) + 1 or columns
            printed.append(rest[:cut].rstrip(" "))
            rest = rest[cut:]
        if printed:
            self.live_text = rest
            done = "\n".join(printed)
            self.line(render.safe(done) if self.colour else done)

    # --- turns --------------------------------------------------------------

    def start_turn(self) -> None:
        """Forget the previous turn's streaming state."""
        self.commit_live()
        self._streaming = None
        self._streamed.clear()
        self.activity = "thinking"

    def show(self, number: int) -> bool:
        """Print output ``number`` in full; whether there is one."""
        text = self.outputs.get(number)
        if text is None:
            return False
        self.line(f"[#{number}, {len(text.splitlines())} line(s)]")
        self.write(text if text.endswith("\n") or not text else text + "\n")
        return True

    def render(self, notification: Notification) -> None:
        """Print one notification of the running turn."""
        method, params = notification.method, notification.params
        if self.live_text and not _continues(method, params, self._streaming):
            self.commit_live()  # anything else prints after the streamed text
        if method == "item/agentMessage/delta":
            self._delta(str(params.get("itemId")), "", str(params.get("delta", "")))
            self.activity = "writing"
        elif method == "item/reasoning/delta":
            self._delta(str(params.get("itemId")), "[thinking] ", str(params.get("delta", "")))
            self.activity = "thinking"
        elif method == "item/commandExecution/outputDelta":
            output = self._commands.get(str(params.get("itemId")))
            if output is not None:
                self._print_output(output, str(params.get("delta", "")))
        elif method == "item/started":
            self._started(params.get("item") or {})
        elif method == "item/completed":
            self._completed(params.get("item") or {})
        elif method == "turn/failed":
            self.line(f"[turn failed: {params.get('error', 'unknown error')}]", "error")
        elif method == "turn/cancelled":
            self.line(f"[turn cancelled: {params.get('reason', '')}]", "note")
        elif method == "turn/completed" and not self.line_start:
            self.write("\n")

    # --- items --------------------------------------------------------------

    def _delta(self, item_id: str, prefix: str, delta: str) -> None:
        if self.live:
            if self._streaming != item_id:
                self.commit_live()
                self._streaming = item_id
                self.live_text = prefix
            self._streamed.add(item_id)
            self.live_text += delta
            self._spill()
            return
        if self._streaming != item_id:
            # Another item starts streaming: it begins on a line of its own,
            # so reasoning reads before the answer it belongs to.
            if not self.line_start:
                self.write("\n")
            self.write(prefix)
            self._streaming = item_id
        self._streamed.add(item_id)
        self.write(delta)

    def _started(self, item: dict[str, Any]) -> None:
        payload = item.get("payload") or {}
        if item.get("type") == "commandExecution":
            number = len(self.outputs) + 1
            self.outputs[number] = ""
            self._commands[str(item.get("id"))] = _Output(number)
            self._command_calls.add(str(payload.get("callId")))
            # What runs is shown exactly, hidden characters as ⟨U+XXXX⟩ (chat_exact).
            command = reveal(str(payload.get("command", "")))
            self.activity = f"running {one_line(command, 40)}"
            self.line(f"[#{number} $ {command}]", "command")
        elif item.get("type") == "toolCall":
            self.activity = f"calling {payload.get('toolName', 'a tool')}"

    def _completed(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        payload = item.get("payload") or {}
        item_id = str(item.get("id"))
        if kind == "agentMessage":
            if self.live and item_id not in self._streamed:
                self.live_text = str(payload.get("text", ""))
                self.commit_live(markdown=True)
            elif self.live:
                self.commit_live(markdown=self._streaming == item_id)
            elif item_id not in self._streamed:
                self.line(str(payload.get("text", "")))
            elif not self.line_start:
                self.write("\n")
            self._streaming = None
        elif kind == "reasoningContent":
            if self.live:
                self.commit_live()
            if item_id not in self._streamed:
                self.line(f"[thinking] {payload.get('text', '')}", "thinking")
            elif self._streaming == item_id:
                self.line()  # end the streamed reasoning's line
        elif kind == "toolCall":
            name = str(payload.get("toolName", "?"))
            arguments = payload.get("arguments") or {}
            if name in FILE_TOOLS and isinstance(arguments, dict):
                path = arguments.get("path")
                where = f" {reveal(path)}" if isinstance(path, str) else ""
                self.line(f"[tool] {reveal(name)}{where}", "tool")
            else:
                shown = json.dumps(arguments, ensure_ascii=False)
                self.line(f"[tool] {reveal(name)} {one_line(reveal(shown))}", "tool")
            self.activity = f"running {payload.get('toolName', 'a tool')}"
        elif kind == "commandExecution":
            self._command_done(item_id, payload)
        elif kind == "toolResult":
            self._result(payload)
            self.activity = "thinking"
        elif kind == "approvalResponse":
            self.line(f"[approval] {reveal(str(payload.get('decision', '?')))}", "approval")
        elif kind == "error":
            self.line(f"[error] {reveal(str(payload.get('message', '')))}", "error")

    def _print_output(self, output: _Output, delta: str) -> None:
        self.outputs[output.number] += delta
        output.pending += delta
        *complete, output.pending = output.pending.split("\n")
        for text in complete:
            output.lines += 1
            if output.lines <= self.shown_lines:
                self.line(f"  {text}")

    def _command_done(self, item_id: str, payload: dict[str, Any]) -> None:
        output = self._commands.pop(item_id, None)
        if output is None:
            return
        full = str(payload.get("aggregatedOutput", ""))
        if full:  # authoritative, as item/completed always is
            self.outputs[output.number] = full
        if output.pending:
            output.lines += 1
            if output.lines <= self.shown_lines:
                self.line(f"  {output.pending}")
        total = len(self.outputs[output.number].splitlines())
        if total > self.shown_lines:
            more = total - min(output.lines, self.shown_lines)
            self.line(f"  … {more} more line(s): /show {output.number}")
        self.line(f"[#{output.number} {ending(payload)}]", "command")

    def _result(self, payload: dict[str, Any]) -> None:
        self._result_text(payload)
        changes = payload.get("changes")
        for change in changes if isinstance(changes, list) else []:
            if isinstance(change, dict) and isinstance(change.get("diff"), str):
                self._change(change)

    def _change(self, change: dict[str, Any]) -> None:
        """One file's applied diff; a long one cut, the whole by ``/show N``."""
        diff: str = change["diff"]
        moved = f" -> {change['movePath']}" if isinstance(change.get("movePath"), str) else ""
        what = f"{change.get('kind', '?')} {reveal(str(change.get('path')))}{reveal(moved)}"
        lines = diff_lines(diff, colour=self.colour, indent="  ")
        if len(lines) <= self.shown_lines:
            self.line(f"[{what}]")
            for text_line in lines:
                self.line(text_line)
            return
        number = len(self.outputs) + 1
        self.outputs[number] = diff
        self.line(f"[#{number} {what}]")
        for text_line in lines[: self.shown_lines]:
            self.line(text_line)
        self.line(f"  … {len(lines) - self.shown_lines} more line(s): /show {number}")

    def _result_text(self, payload: dict[str, Any]) -> None:
        text = str(payload.get("result", ""))
        if str(payload.get("callId")) in self._command_calls:
            # Its output was shown as it ran: the result's first line is enough.
            self.line(f"[result] {reveal(one_line(text))}", "result")
            return
        lines = text.rstrip("\n").splitlines() or [""]
        if len(lines) == 1 and len(lines[0]) <= 160:
            self.line(f"[result] {lines[0]}", "result")
            return
        number = len(self.outputs) + 1
        self.outputs[number] = text
        self.line(f"[result #{number}]", "result")
        for text_line in lines[: self.shown_lines]:
            self.line(f"  {text_line}")
        if len(lines) > self.shown_lines:
            self.line(f"  … {len(lines) - self.shown_lines} more line(s): /show {number}")


def ending(payload: dict[str, Any]) -> str:
    """How a command ended, truly: ``exit code 0, 12 ms``, ``interrupted``,
    ``running in the background``, or its status when it has no exit code."""
    code = payload.get("exitCode")
    took = payload.get("durationMs")
    timing = f", {took} ms" if isinstance(took, int) else ""
    if isinstance(code, int):
        return f"exit code {code}{timing}"
    status = str(payload.get("status") or "ended")
    said = {"cancelled": "interrupted", "backgrounded": "running in the background"}
    return reveal(said.get(status, f"{status}, no exit code")) + timing


def _continues(method: str, params: dict[str, Any], streaming: str | None) -> bool:
    """Whether ``method`` leaves the streaming item live: its own deltas and
    end, and notifications that print nothing (usage, argument deltas)."""
    if method in ("item/agentMessage/delta", "item/reasoning/delta"):
        return str(params.get("itemId")) == streaming
    if method == "item/completed":
        return str((params.get("item") or {}).get("id")) == streaming
    return method not in _PRINTING


#: Notifications that print something: streamed text is printed before them.
_PRINTING = frozenset(
    {
        "item/started",
        "item/completed",
        "item/commandExecution/outputDelta",
        "turn/completed",
        "turn/failed",
        "turn/cancelled",
    }
)


def _terminal_size() -> tuple[int, int]:
    size = shutil.get_terminal_size((80, 24))
    return max(size.columns, 20), max(size.lines, 10)


def _rows(text: str, columns: int) -> int:
    """Rows ``text`` takes on a terminal ``columns`` wide (one cell a character)."""
    return sum(max(1, -(-len(line) // columns)) for line in text.split("\n"))


class _Output:
    """A command's output as it streams: its number and what is printed so far."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.pending = ""  # the last, unfinished line
        self.lines = 0  # complete lines seen
