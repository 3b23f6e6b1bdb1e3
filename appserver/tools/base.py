"""The one interface every agent tool implements.

A call goes through three steps, driven by the turn engine:

1. ``plan(arguments, ctx)`` validates arguments, resolves paths through the
   workspace sandbox and says which approval (if any) the call needs. It
   raises :class:`ToolError` for bad arguments or a refused path.
2. The engine runs the approval flow (policy, ``scopeKey``, client request).
3. ``run(plan, ctx)`` does the work and returns a :class:`ToolOutcome`.
   Failures are outcomes with ``success=False``, never exceptions, except
   cancellation, which propagates after the tool cleaned up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from appserver.providers.base import ImagePart


class ToolError(Exception):
    """Bad arguments or a refused operation; becomes ``toolResult {success: false}``."""


@dataclass(frozen=True)
class ApprovalNeed:
    """What the client is asked to approve.

    ``kind``: ``shell`` or ``file`` (a client tool's ``approval`` hint may
    name another, e.g. ``remoteResource``). ``operation``: the command for shell;
    ``read|write|edit|list`` for file. ``target``: working directory for
    shell, the resolved path for file. ``outside_workspace``: the call
    touches a path outside the workspace (subject to
    ``requireApprovalOutsideWorkspace``). ``diff``: for ``write`` and
    ``edit``, a unified diff of the file as it is when planned against what
    the call would write (``tools.file_diff``; bounded), for the prompt.
    ``background``/``interactive``: a shell command run as a background
    terminal (with its stdin open); shown in the prompt and part of the grant
    key, so a grant of the plain command does not cover them.
    ``terminal``: the background terminal (session id) that ``write_stdin``
    types ``operation`` into (``kind`` ``shell``, ``target`` its directory).
    """

    kind: str  # shell, file, or a client tool's kind (remoteResource, ...)
    operation: str
    target: str
    reason: str
    outside_workspace: bool = False
    diff: str | None = None
    background: bool = False
    interactive: bool = False
    terminal: str | None = None


@dataclass
class ToolPlan:
    """A validated call, ready to run once approved."""

    tool: str
    arguments: dict[str, Any]
    approval: ApprovalNeed | None = None
    resolved: dict[str, Any] = field(default_factory=dict)  # tool-private (paths, cwd, ...)


class EditorFiles(Protocol):
    """The client's editor, serving file reads and writes (DotCraft's
    ``acpExtensions``: ``ext/acp/fs/readTextFile`` / ``writeTextFile``).

    Paths are absolute and already through the sandbox and approvals. A
    failure (timeout, disconnect, error or invalid answer) raises
    :class:`ToolError`: the tool call fails, not the turn.
    """

    can_read: bool
    can_write: bool

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str:
        """The editor's text of ``path`` (its unsaved buffer if it has one)."""

    async def write_text_file(self, path: str, content: str) -> None:
        """Replace the text of ``path`` in the editor."""


@dataclass(frozen=True)
class TerminalOutput:
    """What an editor terminal printed, and how its command ended."""

    output: str
    exited: bool  # False: still running (waitForExit's timeout passed)
    exit_code: int | None = None  # None once exited: ended by ``signal``
    signal: str | None = None
    truncated: bool = False  # the editor cut the output


class EditorTerminals(Protocol):
    """The client's editor, running commands in its terminals (DotCraft's
    ``acpExtensions.terminalCreate``: ``ext/acp/terminal/*``).

    The command and directory are already through the sandbox and approvals.
    A failure (timeout, disconnect, error or invalid answer) raises
    :class:`ToolError`: the tool call fails, not the turn.
    """

    async def create_terminal(self, command: str, cwd: str) -> str:
        """Start ``command`` in ``cwd`` in a new terminal; its id."""

    async def wait_for_terminal_exit(self, terminal_id: str, timeout_s: float) -> TerminalOutput:
        """Wait at most ``timeout_s`` for the command to end."""

    async def terminal_output(self, terminal_id: str) -> TerminalOutput:
        """What the terminal printed so far."""

    async def kill_terminal(self, terminal_id: str) -> None:
        """Kill the command (best effort: never raises)."""

    async def release_terminal(self, terminal_id: str) -> None:
        """The server is done with the terminal (best effort: never raises)."""


@dataclass
class ToolContext:
    """What a tool may use while running."""

    workspace: Path
    thread_id: str
    turn_id: str
    call_id: str
    # Called with each chunk of live output (shell); the engine turns it into
    # item/commandExecution/outputDelta for clients that asked.
    on_output: Callable[[str], None] | None = None
    # The client's editor when it serves the file system (file tools use it).
    editor: EditorFiles | None = None
    # The client's editor when it runs commands in its terminals (shell uses it).
    editor_terminals: EditorTerminals | None = None
    # Shell commands known to only read (tools.safe_commands) run unasked; the
    # thread's autoApproveReadOnlyCommands or the workspace's setting turns it off.
    read_only_unasked: bool = True
    # The user trusts the workspace's own files (storage/trust.py); git, which
    # runs programs named in the repository's config, is unasked only then.
    workspace_trusted: bool = True


@dataclass
class ToolOutcome:
    success: bool
    output: str  # the text the model sees as the tool result
    # Extra facts for items: exit_code, duration_ms, truncated, bytes_written, ...
    # ``images``: what the ``toolResult`` item stores of the images below
    # (``{path, mimeType, sha256}``: never their bytes).
    details: dict[str, Any] = field(default_factory=dict)
    # Images the model sees with the result (``view_image``); not stored.
    images: list[ImagePart] = field(default_factory=list)


class Tool(Protocol):
    name: str
    description: str

    @property
    def input_schema(self) -> dict[str, Any]:
        """The arguments' JSON Schema (read when the model is offered the tool)."""

    def plan(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolPlan: ...

    async def run(self, plan: ToolPlan, ctx: ToolContext) -> ToolOutcome: ...


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters (a command can be a script)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
