"""The ``shell`` tool's command in the IDE's own terminal (DotCraft's
``acpExtensions.terminalCreate``).

When the client bound to the thread runs terminals, an approved command is
sent there instead of being run on the server's host: the user sees it run in
their editor, with the editor's environment. The steps, each a server->client
request (see ``runtime.turns.editor_proxy.ClientEditor``):

1. ``ext/acp/terminal/create {command, cwd}`` -> ``terminalId``;
2. ``waitForExit {timeout}`` (the call's timeout, in seconds);
3. if the command is still running then: ``kill``; if the wait did not
   answer with the output (or after a kill): ``getOutput``;
4. ``release``, always, also when the turn is interrupted (then after a
   ``kill``) or a step failed.

The result has the same shape as a command run on the host
(``exit code: N`` first, head and tail of long output), with
``details["source"] = "editor"``.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from appserver.tools.base import EditorTerminals, TerminalOutput, ToolContext, ToolOutcome

# What of the output goes out live as the command's outputDelta (as on the host).
LIVE_LIMIT_CHARS = 1024 * 1024


def cap_output(text: str, limit: int) -> tuple[str, bool]:
    """``text`` with its middle cut to keep ``limit`` characters; whether it was cut."""
    if len(text) <= limit:
        return text, False
    head, tail = text[: limit // 2], text[len(text) - (limit - limit // 2) :]
    dropped = len(text) - len(head) - len(tail)
    return f"{head}\n[... {dropped} characters truncated ...]\n{tail}", True


async def run_in_editor_terminal(
    editor: EditorTerminals,
    command: str,
    cwd: Path,
    timeout_s: float,
    ctx: ToolContext,
    output_limit: int,
) -> ToolOutcome:
    """Run ``command`` in a terminal of the client's editor; see the module docstring."""
    started = time.monotonic()
    terminal_id = await editor.create_terminal(command, str(cwd))
    killed = done = False
    try:
        result = await editor.wait_for_terminal_exit(terminal_id, timeout_s)
        timed_out = not result.exited
        if timed_out:
            killed = True
            await editor.kill_terminal(terminal_id)
        if timed_out or not result.output:
            # The kill's outcome, or DotCraft bridges that answer the wait with the exit only.
            later = await editor.terminal_output(terminal_id)
            if timed_out and later.exit_code == 0:
                timed_out = False  # it had ended by itself after all (the wait answered early)
            result = TerminalOutput(
                output=later.output or result.output,
                exited=result.exited,
                exit_code=result.exit_code if result.exited else later.exit_code,
                signal=result.signal if result.exited else later.signal,
                truncated=later.truncated or result.truncated,
            )
        done = True
    finally:
        with anyio.CancelScope(shield=True):
            if not (done or killed):
                # Interrupted or failed mid-way: the command must not outlive the call.
                await editor.kill_terminal(terminal_id)
            await editor.release_terminal(terminal_id)
    if ctx.on_output is not None and result.output:
        live, _ = cap_output(result.output, LIVE_LIMIT_CHARS)
        ctx.on_output(live)
    text, truncated = cap_output(result.output, output_limit)
    lines = [_status_line(result)]
    if timed_out:
        lines.append(f"command timed out after {timeout_s:g} s; it was killed in the editor")
    lines.append(text or "(no output)")
    return ToolOutcome(
        success=not timed_out and result.exit_code == 0,
        output="\n".join(lines),
        details={
            "exit_code": result.exit_code,
            "duration_ms": int((time.monotonic() - started) * 1000),
            "timed_out": timed_out,
            "truncated": truncated or result.truncated,
            "original_output_chars": len(result.output),
            "working_directory": str(cwd),
            "source": "editor",
            "terminal_id": terminal_id,
        },
    )


def _status_line(result: TerminalOutput) -> str:
    if result.exit_code is not None:
        return f"exit code: {result.exit_code}"
    if result.signal:
        return f"exit code: unknown (killed by {result.signal})"
    return "exit code: unknown"
