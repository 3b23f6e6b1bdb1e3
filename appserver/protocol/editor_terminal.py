"""Wire models and method-table entries of the IDE terminal bridge (DotCraft's
``acpExtensions.terminalCreate``): when the connection bound to a thread
advertised it, the ``shell`` tool runs its command in the editor's terminal
through the server->client requests ``ext/acp/terminal/create``,
``waitForExit``, ``getOutput``, ``kill`` and ``release`` (ACP's ``terminal/*``
with ``threadId`` for ``sessionId``), after the workspace sandbox and
approvals. See docs/tools.md.

The shapes are DotCraft's (``command`` is one command line, ``env`` an
object, ``timeout`` in seconds, answers ``{output, exitCode?}``); answers in
ACP's own shapes (``exitStatus: {exitCode, signal}``, ``truncated``) are
understood too, so a bridge can forward the IDE's answer as it is.
"""

from pydantic import Field

from appserver.protocol.base import Flag, Int, OpenWireModel, WireModel
from appserver.protocol.limits import INT64_MAX, INT64_MIN
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


class EditorTerminalCreateParams(WireModel):
    """Run a command in a new editor terminal (`ext/acp/terminal/create`)."""

    thread_id: str
    """The thread whose agent runs the command."""
    command: str
    """The command line, as the agent wrote it (run it with the user's shell)."""
    cwd: str | None = None
    """Absolute working directory (inside the workspace, or approved)."""
    env: dict[str, str] | None = None
    """Extra environment variables (not sent by this server: the editor's own apply)."""
    output_byte_limit: int | None = None
    """ACP's limit: keep at most this many bytes of output (the end), so answers stay
    well under the server's frame limit."""


class EditorTerminalCreateResult(OpenWireModel):
    """The new terminal."""

    terminal_id: str
    """The editor's id of the terminal, used by the other `ext/acp/terminal/*` requests."""


class EditorTerminalParams(WireModel):
    """One editor terminal (`ext/acp/terminal/getOutput`, `kill`, `release`)."""

    thread_id: str
    """The thread whose agent runs the command."""
    terminal_id: str
    """The id `ext/acp/terminal/create` answered."""


class EditorTerminalWaitParams(WireModel):
    """Wait until the terminal's command exits (`ext/acp/terminal/waitForExit`)."""

    thread_id: str
    """The thread whose agent runs the command."""
    terminal_id: str
    """The id `ext/acp/terminal/create` answered."""
    timeout: int | None = None
    """Seconds to wait at most; answer without `exitCode` if the command is still running
    then (the server kills it)."""


class EditorTerminalExitStatus(OpenWireModel):
    """ACP's exit status (accepted in answers; DotCraft answers `exitCode` directly)."""

    exit_code: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """The command's exit code (absent: killed by a signal)."""
    signal: str | None = None
    """The signal that ended the command."""


class EditorTerminalOutputResult(OpenWireModel):
    """The terminal's output and, once the command exited, its exit code (the answer to
    `getOutput` and `waitForExit`)."""

    output: str | None = None
    """Everything the command printed so far (the editor may have cut its start)."""
    exit_code: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """The exit code; absent while the command runs."""
    truncated: Flag | None = None
    """The editor cut the output (ACP)."""
    exit_status: EditorTerminalExitStatus | None = None
    """ACP's form of the exit: `{exitCode, signal}` (absent while the command runs)."""
    signal: str | None = None
    """The signal that ended the command (ACP's `waitForExit` answer)."""


class EditorTerminalDone(OpenWireModel):
    """The editor did it (`{}`; anything in it is ignored)."""

    success: Flag | None = None
    """DotCraft's bridges may answer `{success}`; not required."""


METHOD_SPECS: list[MethodSpec] = []
NOTIFICATION_SPECS: list[NotificationSpec] = []

_COMMON = (
    "Sent to the connection bound to the thread when it advertised "
    "`acpExtensions.terminalCreate`; a client that reconnects and resumes the thread "
    "in time is asked again. A timeout, a vanished client or an error fail the "
    "`shell` call, not the turn."
)

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "ext/acp/terminal/create",
        EditorTerminalCreateParams,
        EditorTerminalCreateResult,
        "`shell` runs its command in the editor's terminal, after the workspace sandbox and "
        f"approvals. Answer `{{terminalId}}`. {_COMMON}",
    ),
    ServerRequestSpec(
        "ext/acp/terminal/waitForExit",
        EditorTerminalWaitParams,
        EditorTerminalOutputResult,
        "Wait for the command to exit, at most `timeout` seconds (the `shell` call's "
        "timeout). Answer `{output?, exitCode?}`; no `exitCode` means it still runs and "
        f"the server kills it. {_COMMON}",
    ),
    ServerRequestSpec(
        "ext/acp/terminal/getOutput",
        EditorTerminalParams,
        EditorTerminalOutputResult,
        "The terminal's output (asked when `waitForExit` answered without `output`, or "
        f"after a kill). Answer `{{output, exitCode?}}`. {_COMMON}",
    ),
    ServerRequestSpec(
        "ext/acp/terminal/kill",
        EditorTerminalParams,
        EditorTerminalDone,
        "Kill the command (its timeout passed, or the turn was interrupted); the terminal "
        "stays until `release`. Answer `{}`.",
    ),
    ServerRequestSpec(
        "ext/acp/terminal/release",
        EditorTerminalParams,
        EditorTerminalDone,
        "The server is done with the terminal (always sent last, also after a failure or an "
        "interrupted turn); the editor may close it. Answer `{}`.",
    ),
]
