"""The ``shell`` tool: run a command with ``bash -c`` in the workspace.

Each command runs in its own session and process group, so a timeout or an
interrupted turn can kill everything it started (``sleep 30 &`` included),
not just the shell. stdout and stderr are merged into one stream, decoded
incrementally (a multibyte character split across reads stays intact),
streamed live through ``ToolContext.on_output`` and kept, capped, for the
model.

Outcome rules:

* exit code 0 -> ``success=True``;
* any other exit code -> ``success=False``: the call completed, but the model
  should see that the command failed. The output is returned all the same;
* timeout -> ``success=False``, the process group is killed;
* cancellation (interrupted turn) -> the process group is killed, then the
  cancellation propagates.

The result text always starts with ``exit code: N``.

When the command exits normally, processes it left running in the background
are not killed (as in a terminal); the tool stops reading their output after
a short drain period.

While a command runs, and while processes it left in the background do, its
process group is known to the server's watchdog (``tools.reaper``): if the
server dies, even by SIGKILL, the group is killed. (A process that leaves the
group with ``setsid`` escapes it, as it would a terminal.)

``run_in_background`` (DotCraft's Exec ``runInBackground``) hands the command
to the background terminals (``tools.terminals``) instead: the call returns
after ``yield_time_ms`` with a session id and the output so far, and the
``commandExecution`` item completes as ``backgrounded`` (or as the command
ended, if it ended sooner). ``interactive`` keeps its stdin open for
``write_stdin``; ``max_output_chars`` caps the output returned. The approval
prompt says how the command runs, and its grant covers only that (a grant of
the plain command does not cover it in the background); input written later
with ``write_stdin`` is asked on its own.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from appserver.tools.args import check_keys, get_bool, get_int, get_str, require_str
from appserver.tools.base import ApprovalNeed, ToolContext, ToolError, ToolOutcome, ToolPlan
from appserver.tools.editor_terminal import run_in_editor_terminal
from appserver.tools.environment import tool_environment
from appserver.tools.groups import KILL_GRACE_S, kill_process_group, open_group_process
from appserver.tools.nofollow import PathChanged, open_directory
from appserver.tools.reaper import REAPER
from appserver.tools.sandbox import Sandbox
from appserver.tools.terminal_tools import format_terminal
from appserver.tools.terminals import TerminalError, TerminalManager

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 600.0
OUTPUT_LIMIT_CHARS = 64 * 1024  # kept for the model (head + tail)
STREAM_LIMIT_CHARS = 1024 * 1024  # sent live through on_output
DRAIN_GRACE_S = 0.5  # after exit, for output still in the pipe


class _CappedOutput:
    """Keeps the first and last ``limit // 2`` characters of a stream."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        if self._head_len < self._head_limit:
            taken = text[: self._head_limit - self._head_len]
            self._head.append(taken)
            self._head_len += len(taken)
            text = text[len(taken) :]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        # Drop whole chunks from the left while the rest still covers the tail.
        while self._tail_len - len(self._tail[0]) >= self._tail_limit:
            self._tail_len -= len(self._tail.popleft())

    @property
    def truncated(self) -> bool:
        return self.total > self._head_limit + self._tail_limit

    def render(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if not self.truncated:
            return head + tail
        tail = tail[len(tail) - self._tail_limit :]
        dropped = self.total - len(head) - len(tail)
        return f"{head}\n[... {dropped} characters truncated ...]\n{tail}"


class _LiveStream:
    """Forwards output to ``on_output`` up to a budget, so ``yes`` cannot flood clients."""

    def __init__(self, on_output: Callable[[str], None] | None, limit: int) -> None:
        self._on_output = on_output
        self._left = limit

    def send(self, text: str) -> None:
        if self._on_output is None or self._left <= 0:
            return
        if len(text) >= self._left:
            text = text[: self._left] + "\n[... live output stopped; the output is too large ...]\n"
            self._left = 0
        else:
            self._left -= len(text)
        self._on_output(text)


def _status_line(exit_code: int | None) -> str:
    if exit_code is None:
        return "exit code: unknown"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"exit code: {exit_code} (killed by {name})"
    return f"exit code: {exit_code}"


_ARGUMENTS = (
    "command",
    "workdir",
    "timeout_ms",
    "run_in_background",
    "yield_time_ms",
    "max_output_chars",
    "interactive",
)
# A background call's commandExecution status, by the terminal's status then.
_ITEM_STATUS = {
    "running": "backgrounded",
    "completed": "completed",
    "killed": "cancelled",
    "timedOut": "cancelled",
}


class ShellTool:
    """``shell``: run a bash command with a timeout, live output and a capped result."""

    name = "shell"
    description = (
        "Run a command with `bash -c` and return its exit code and combined stdout/stderr. "
        "The command runs in the workspace root unless workdir is given; stdin is empty, so "
        "interactive programs will not wait for input. The result starts with 'exit code: N'; "
        f"long output keeps its first and last {OUTPUT_LIMIT_CHARS // 2} characters. Commands "
        f"time out after {DEFAULT_TIMEOUT_S:g} s unless timeout_ms says otherwise (at most "
        f"{MAX_TIMEOUT_S:g} s); on timeout the command and everything it started are killed. "
        "For long-running commands (builds, dev servers, watchers) set run_in_background: the "
        "call returns after yield_time_ms with a session id and the output so far; the command "
        "keeps running (no timeout) until it ends or stop_terminal stops it, and write_stdin "
        "reads its new output (empty input) or writes to it (with interactive)."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line, run by `bash -c`."},
            "workdir": {
                "type": "string",
                "description": "Working directory, relative to the workspace root (default: "
                "the workspace root).",
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "description": f"Timeout in milliseconds (default {int(DEFAULT_TIMEOUT_S * 1000)},"
                f" at most {int(MAX_TIMEOUT_S * 1000)}; not for run_in_background).",
            },
            "run_in_background": {
                "type": "boolean",
                "description": "Run the command as a background terminal and return a session id "
                "after yield_time_ms (default false).",
            },
            "yield_time_ms": {
                "type": "integer",
                "minimum": 0,
                "description": "With run_in_background: milliseconds to wait for output before "
                "returning (default 1000, at most 30000); less if the command ends.",
            },
            "max_output_chars": {
                "type": "integer",
                "minimum": 0,
                "description": "With run_in_background: return at most this many trailing "
                "characters of output (default 10000). Otherwise: cap the kept output.",
            },
            "interactive": {
                "type": "boolean",
                "description": "With run_in_background: keep stdin open (a pipe, not a TTY) so "
                "write_stdin can send input (default false).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        *,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        max_timeout_s: float = MAX_TIMEOUT_S,
        output_limit: int = OUTPUT_LIMIT_CHARS,
        stream_limit: int = STREAM_LIMIT_CHARS,
        kill_grace_s: float = KILL_GRACE_S,
        drain_grace_s: float = DRAIN_GRACE_S,
        shell: str = "bash",
        pass_env: Collection[str] = (),
    ) -> None:
        self.default_timeout_s = default_timeout_s
        self.max_timeout_s = max_timeout_s
        self.output_limit = output_limit
        self.stream_limit = stream_limit
        self.kill_grace_s = kill_grace_s
        self.drain_grace_s = drain_grace_s
        self.shell = shell
        self.pass_env = frozenset(pass_env)  # secrets the user passes on deliberately
        # The background terminals, attached by the runtime (tools.terminal_tools).
        self.terminals: TerminalManager | None = None

    uses_terminals = True

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan:
        """Resolve the working directory; a command is asked unless it is known to
        only read (``tools.safe_commands``), and the approval says why it is."""
        check_keys(arguments, _ARGUMENTS)
        command = require_str(arguments, "command", allow_empty=False)
        if "\0" in command:
            raise ToolError("command must not contain NUL bytes")
        workdir = get_str(arguments, "workdir", required=False) or "."
        timeout_ms = get_int(arguments, "timeout_ms", minimum=1)
        background = get_bool(arguments, "run_in_background")
        interactive = get_bool(arguments, "interactive")
        yield_ms = get_int(arguments, "yield_time_ms", minimum=0)
        # 0 is the default too: the model never gets the whole 1 MiB kept.
        max_chars = get_int(arguments, "max_output_chars", minimum=0) or None
        if interactive and not background:
            raise ToolError("interactive needs run_in_background (stdin is empty otherwise)")
        sandbox = Sandbox(ctx.workspace)
        cwd = sandbox.resolve(workdir, must_exist=True)
        if not cwd.path.is_dir():
            raise ToolError(f"workdir {workdir} is not a directory")
        timeout_s = self.default_timeout_s
        if timeout_ms is not None:
            timeout_s = min(timeout_ms / 1000, self.max_timeout_s)
        outside = "" if cwd.inside else " (outside the workspace)"
        if interactive:
            # The prompt shows how it runs; what the agent types into it later
            # (write_stdin) is asked separately.
            outside += (
                ", as a background terminal with its stdin open (each input the agent "
                "writes to it is asked separately)"
            )
        elif background:
            outside += ", as a background terminal (it keeps running after this call)"
        display = sandbox.display(cwd)
        # The classifier's tables load at the first command, not at every start.
        from appserver.tools.safe_commands import why_asked

        asked = why_asked(command, cwd.path, sandbox.root, ctx, background=background)
        return ToolPlan(
            tool=self.name,
            arguments=arguments,
            approval=None
            if asked is None
            else ApprovalNeed(
                kind="shell",
                operation=command,
                target=str(cwd.path),
                reason=f"Run a shell command in {display}{outside} — {asked}",
                outside_workspace=not cwd.inside,
                background=background,
                interactive=interactive,
            ),
            resolved={
                "command": command,
                "cwd": cwd.path,
                "timeout_s": timeout_s,
                "background": background,
                "interactive": interactive,
                "yield_ms": yield_ms,
                "max_output_chars": max_chars,
            },
        )

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome:
        """Run the command; see the module docstring for the outcome rules."""
        cwd: Path = plan.resolved["cwd"]
        # The approval named this directory: open it without following any
        # link and start the command in the opened directory itself
        # (/proc/self/fd/N: the child's chdir happens before exec closes the
        # descriptor), so a link swapped in since then fails the call instead
        # of running it somewhere else.
        try:
            workdir_fd = open_directory(cwd)
        except (PathChanged, OSError) as exc:
            why = str(exc) if isinstance(exc, PathChanged) else f"cannot open {cwd}: {exc}"
            return ToolOutcome(
                success=False,
                output=why,
                details={"exit_code": None, "working_directory": str(cwd)},
            )
        try:
            return await self._run_opened(plan, ctx, f"/proc/self/fd/{workdir_fd}")
        finally:
            os.close(workdir_fd)

    async def _run_opened(self, plan: ToolPlan, ctx: ToolContext, start_in: str) -> ToolOutcome:
        """:meth:`run` once the working directory is open; ``start_in`` is it."""
        command: str = plan.resolved["command"]
        cwd: Path = plan.resolved["cwd"]
        timeout_s: float = plan.resolved["timeout_s"]
        if plan.resolved.get("background"):
            return await self._run_in_background(plan, ctx, start_in)
        if ctx.editor_terminals is not None:
            # The bound IDE runs it in its own terminal (acpExtensions.terminalCreate).
            return await run_in_editor_terminal(
                ctx.editor_terminals, command, cwd, timeout_s, ctx, self.output_limit
            )
        started = time.monotonic()
        try:
            # Own session and process group (pgid == pid), which is what lets us
            # kill the whole tree. close_fds (default) keeps the server's
            # protocol pipes/sockets out of the child.
            process = await open_group_process(
                [self.shell, "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=start_in,
                env=tool_environment(self.pass_env),
            )
        except OSError as exc:
            return ToolOutcome(
                success=False,
                output=f"failed to start the command: {exc}",
                details={"exit_code": None, "working_directory": str(cwd)},
            )

        # Until the command ends, its group dies with the server (see tools.reaper).
        REAPER.track(process.pid)
        max_chars = plan.resolved.get("max_output_chars")
        kept = _CappedOutput(min(max_chars or self.output_limit, self.output_limit))
        live = _LiveStream(ctx.on_output, self.stream_limit)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def emit(text: str) -> None:
            if text:
                kept.add(text)
                live.send(text)

        exited: list[int] = []  # filled as soon as the shell exits, even mid-drain
        try:
            with anyio.move_on_after(timeout_s):
                await self._collect(process, decoder, emit, exited)
        finally:
            # Reached on success, timeout, cancellation and errors alike. The
            # shield lets an interrupted turn still wait until the group is dead.
            with anyio.CancelScope(shield=True):
                if not exited:
                    await kill_process_group(process.pid, self.kill_grace_s)
                    REAPER.untrack(process.pid)
                else:
                    REAPER.finished(process.pid)
                await process.aclose()
        emit(decoder.decode(b"", final=True))

        timed_out = not exited
        exit_code = exited[0] if exited else process.returncode
        lines = [_status_line(exit_code)]
        if timed_out:
            lines.append(
                f"command timed out after {timeout_s:g} s; it and its child processes were killed"
            )
        lines.append(kept.render() or "(no output)")
        return ToolOutcome(
            success=not timed_out and exit_code == 0,
            output="\n".join(lines),
            details={
                "exit_code": exit_code,
                "duration_ms": int((time.monotonic() - started) * 1000),
                "timed_out": timed_out,
                "truncated": kept.truncated,
                "original_output_chars": kept.total,
                "working_directory": str(cwd),
            },
        )

    async def _run_in_background(
        self, plan: ToolPlan, ctx: ToolContext, start_in: str
    ) -> ToolOutcome:
        """Start a background terminal; its snapshot after ``yield_time_ms``."""
        command: str = plan.resolved["command"]
        cwd: Path = plan.resolved["cwd"]
        failed = {"exit_code": None, "working_directory": str(cwd)}
        if self.terminals is None:
            return ToolOutcome(False, "Error: background terminals are not available here", failed)
        try:
            terminal = await self.terminals.start(
                thread_id=ctx.thread_id,
                turn_id=ctx.turn_id,
                call_id=ctx.call_id,
                command=command,
                cwd=cwd,
                start_in=start_in,
                argv=[self.shell, "-c", command],
                env=tool_environment(self.pass_env),
                interactive=plan.resolved["interactive"],
                yield_ms=plan.resolved["yield_ms"],
                max_output_chars=plan.resolved["max_output_chars"],
            )
        except TerminalError as exc:
            return ToolOutcome(False, f"Error executing command: {exc}", failed)
        if ctx.on_output is not None and terminal.original_output_chars:
            ctx.on_output(terminal.output)  # the output so far, on the item
        # DotCraft's CommandExecutionTracker.Complete: the item's status and facts.
        details: dict[str, Any] = {"exit_code": terminal.exit_code}
        if terminal.exit_code is None:
            details = {}  # still running, or killed: the item has no exit code
        return ToolOutcome(
            success=terminal.status in ("running", "completed"),
            output=format_terminal(terminal),
            details={
                **details,
                "command_status": _ITEM_STATUS.get(terminal.status, "failed"),
                "duration_ms": terminal.wall_time_ms,
                "session_id": terminal.session_id,
                "output_path": terminal.output_path,
                "original_output_chars": terminal.original_output_chars,
                "truncated": terminal.truncated,
                "background_reason": terminal.background_reason,
                "working_directory": str(cwd),
            },
        )

    async def _collect(
        self,
        process: Process,
        decoder: codecs.IncrementalDecoder,
        emit: Callable[[str], None],
        exited: list[int],
    ) -> None:
        """Pump output until the command exits and the pipe drains; append the exit code."""
        stdout = process.stdout
        assert stdout is not None  # opened with stdout=PIPE
        drained = anyio.Event()

        async def pump() -> None:
            try:
                async for chunk in stdout:
                    emit(decoder.decode(chunk))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            drained.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            exited.append(await process.wait())
            # Output written just before exit may still be in the pipe. A
            # background process can hold the pipe open indefinitely, so the
            # wait for end-of-file is bounded.
            with anyio.move_on_after(self.drain_grace_s):
                await drained.wait()
            tg.cancel_scope.cancel()
