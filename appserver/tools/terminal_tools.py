"""The model's side of background terminals: ``write_stdin`` and ``stop_terminal``.

``shell`` with ``run_in_background`` starts a terminal (that call needs the
shell approval, as any command does) and returns its session id. These two
tools then work on the terminals of the model's own thread (DotCraft's
``WriteStdin``; DotCraft has no stop tool, the user stops terminals there):

* ``write_stdin {session_id, input?, yield_time_ms?, max_output_chars?}`` writes
  to the terminal's standard input (``interactive`` terminals only), waits,
  and returns its state and the tail of its output; empty input only polls.
* ``stop_terminal {session_id}`` kills the terminal and everything it started.

They reach only terminals of the same thread. ``write_stdin`` with input
for a terminal that takes it asks for approval as a shell call does (the
terminal's command was approved when it started, what is typed into it was
not): the prompt shows the input, the terminal and its directory; a session
grant covers that input to that terminal (``exact``) or any input to it
(``wider``). Polling (empty input) and ``stop_terminal`` ask nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from appserver.tools.args import check_keys, get_int, get_str, require_str
from appserver.tools.base import (
    ApprovalNeed,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolPlan,
    one_line,
)
from appserver.tools.sandbox import Sandbox
from appserver.tools.terminal_snapshots import DEFAULT_MAX_OUTPUT_CHARS
from appserver.tools.terminals import (
    DEFAULT_YIELD_MS,
    MAX_YIELD_MS,
    TerminalError,
    TerminalManager,
)

if TYPE_CHECKING:
    # The terminals' wire model loads with the first terminal (a plain turn runs none).
    from appserver.protocol.terminals import BackgroundTerminal


def format_terminal(terminal: BackgroundTerminal) -> str:
    """A terminal as the model reads it: its facts, then the tail of its output."""
    lines = [
        f"Session ID: {terminal.session_id}",
        f"Status: {terminal.status}",
        f"Command: {terminal.command}",
        f"Working directory: {terminal.working_directory}",
        f"Output path: {terminal.output_path}",
    ]
    if terminal.exit_code is not None:
        lines.append(f"Exit code: {terminal.exit_code}")
    if terminal.status == "running":
        lines.append(
            "The command is still running in the background: write_stdin with empty input "
            "reads its new output, stop_terminal stops it."
        )
    if terminal.truncated:
        lines.append(f"Output truncated from {terminal.original_output_chars} chars.")
    return "\n".join(lines) + "\n\n" + terminal.output


class _TerminalTool:
    """What the terminal tools share: the manager (attached by the runtime)."""

    name: str
    uses_terminals = True

    def __init__(self, terminals: TerminalManager | None = None) -> None:
        self.terminals = terminals

    def _manager(self) -> TerminalManager:
        if self.terminals is None:
            raise TerminalError("background terminals are not available here")
        return self.terminals


_SESSION = {
    "type": "string",
    "description": "The session id a background shell call returned (term_...).",
}
_MAX_CHARS = {
    "type": "integer",
    "minimum": 0,
    "description": f"Return at most this many trailing characters of output (default "
    f"{DEFAULT_MAX_OUTPUT_CHARS}).",
}


class WriteStdinTool(_TerminalTool):
    """``write_stdin``: write to a background terminal, or poll it with empty input."""

    name = "write_stdin"
    description = (
        "Write input to a background terminal started by shell with run_in_background, or pass "
        "empty input to poll it for new output. Only terminals started with interactive have "
        "their stdin open (a pipe, not a TTY); include \\n where the program expects Enter. "
        "Input needs the user's approval (polling does not). "
        "Returns the terminal's status and the tail of its output after yield_time_ms."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "session_id": _SESSION,
            "input": {
                "type": "string",
                "description": "Characters to write to stdin (default: none; just poll).",
            },
            "yield_time_ms": {
                "type": "integer",
                "minimum": 0,
                "description": f"Milliseconds to wait before returning (default "
                f"{DEFAULT_YIELD_MS}, at most {MAX_YIELD_MS}); less if the command ends.",
            },
            "max_output_chars": _MAX_CHARS,
        },
        "required": ["session_id"],
        "additionalProperties": False,
    }

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the arguments; input to a terminal that takes it needs approval."""
        check_keys(arguments, ("session_id", "input", "yield_time_ms", "max_output_chars"))
        session_id = require_str(arguments, "session_id", allow_empty=False)
        text = get_str(arguments, "input", required=False) or ""
        return ToolPlan(
            tool=self.name,
            arguments=arguments,
            approval=self._input_need(session_id, text, ctx) if text else None,
            resolved={
                "session_id": session_id,
                "input": text,
                "yield_ms": get_int(arguments, "yield_time_ms", minimum=0),
                # 0 is the default too: the model never gets the whole 1 MiB kept.
                "max_chars": get_int(arguments, "max_output_chars", minimum=0) or None,
            },
        )

    def _input_need(self, session_id: str, text: str, ctx: ToolContext) -> ApprovalNeed | None:
        """What typing ``text`` into the terminal asks; ``None`` when the write
        cannot happen (no such running terminal of this thread, or its stdin is
        closed: the call fails without asking)."""
        if self.terminals is None:
            return None
        found = self.terminals.input_target(session_id, thread_id=ctx.thread_id)
        if found is None:
            return None
        command, directory = found
        sandbox = Sandbox(ctx.workspace)
        place = sandbox.resolve(directory)
        outside = "" if place.inside else " (outside the workspace)"
        shown = one_line(command, 80)
        return ApprovalNeed(
            kind="shell",
            operation=text,
            target=directory,
            reason=(
                f"Write input to background terminal {session_id} (`{shown}`, "
                f"in {sandbox.display(place)}{outside})"
            ),
            outside_workspace=not place.inside,
            terminal=session_id,
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Write, wait, and report the terminal."""
        resolved = plan.resolved
        try:
            terminal = await self._manager().write(
                resolved["session_id"],
                resolved["input"],
                resolved["yield_ms"],
                resolved["max_chars"],
                thread_id=ctx.thread_id,
            )
        except TerminalError as exc:
            return ToolOutcome(False, f"Error writing to background terminal: {exc}")
        return ToolOutcome(True, format_terminal(terminal), {"session_id": terminal.session_id})


class StopTerminalTool(_TerminalTool):
    """``stop_terminal``: kill a background terminal of this thread."""

    name = "stop_terminal"
    description = (
        "Stop a background terminal started by shell with run_in_background: the command and "
        "every process it started are killed. Returns its final status and output."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {"session_id": _SESSION},
        "required": ["session_id"],
        "additionalProperties": False,
    }

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Check the arguments; no approval needed."""
        check_keys(arguments, ("session_id",))
        session_id = require_str(arguments, "session_id", allow_empty=False)
        return ToolPlan(tool=self.name, arguments=arguments, resolved={"session_id": session_id})

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Kill it (if it still runs) and report it."""
        try:
            terminal = await self._manager().stop(
                plan.resolved["session_id"], thread_id=ctx.thread_id
            )
        except TerminalError as exc:
            return ToolOutcome(False, f"Error stopping background terminal: {exc}")
        return ToolOutcome(True, format_terminal(terminal), {"session_id": terminal.session_id})


def terminal_tools(terminals: TerminalManager | None = None) -> list[Tool]:
    """Fresh ``write_stdin`` and ``stop_terminal`` tools."""
    return [WriteStdinTool(terminals), StopTerminalTool(terminals)]


def attach_terminals(tools: Iterable[Tool], terminals: TerminalManager) -> None:
    """Let the tools among ``tools`` that use background terminals (``shell``,
    ``write_stdin``, ``stop_terminal``) reach ``terminals``."""
    for tool in tools:
        if getattr(tool, "uses_terminals", False):
            tool.terminals = terminals  # type: ignore[attr-defined]
