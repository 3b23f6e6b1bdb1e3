"""Background terminals: commands the agent left running (DotCraft's
``terminal/*``, capability ``backgroundTerminals``).

The agent's ``shell`` tool starts one with ``run_in_background``; clients list,
read, write to, stop and clean them with ``terminal/*`` and hear about them
through ``terminal/started|outputDelta|completed|stalled|cleaned``, sent only to
connections whose ``initialize.capabilities.backgroundTerminals`` is true. See
docs/tools.md, "Background terminals".
"""

from typing import Literal

from pydantic import Field

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Flag, Int, WireModel
from appserver.protocol.limits import INT64_MAX
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

TerminalStatus = Literal["running", "completed", "failed", "killed", "timedOut", "lost"]


class BackgroundTerminal(WireModel):
    """One background terminal: a command started by the agent, its state and output."""

    session_id: str
    """The terminal's id (`term_` and 12 hex digits)."""
    thread_id: str
    """The thread whose agent started it."""
    turn_id: str | None = None
    """The turn whose agent started it."""
    call_id: str | None = None
    """The `shell` tool call that started it (the `commandExecution` item's `callId`)."""
    command: str
    """The command line, run by `bash -c`."""
    working_directory: str
    """The directory it runs in (absolute)."""
    source: str = "host"
    """Where it runs: `host` (a process of the server's machine)."""
    status: TerminalStatus
    """`running`, `completed` (exit code 0), `failed` (another exit code), `killed` (stopped),
    `timedOut`, or `lost` (it was running when the server that ran it went away)."""
    output: str
    """The last `maxOutputChars` characters of its output (stdout and stderr merged), after a
    `... (truncated, N earlier chars)` line when cut; `(no output)` when there is none. Empty in
    `terminal/outputDelta`, whose `delta` carries the new text."""
    output_path: str
    """The file that holds its whole output (under the workspace's `.craft/terminals/`)."""
    exit_code: int | None = None
    """Its exit code, once it ended by itself (negative: killed by that signal)."""
    started_at: str
    """When it started (ISO 8601, UTC)."""
    completed_at: str | None = None
    """When it ended (or was found lost)."""
    wall_time_ms: int
    """Milliseconds from start to end (to now while it runs)."""
    original_output_chars: int
    """How many characters of output it has written in all (trailing newlines not counted)."""
    truncated: Flag
    """`output` leaves out earlier characters (`originalOutputChars` is larger)."""
    background_reason: str | None = None
    """Why it runs in the background: `runInBackground` (the tool call asked for it)."""


class TerminalListParams(WireModel):
    """`terminal/list`."""

    thread_id: str | None = None
    """Only the terminals of this thread (default: every thread's)."""


class TerminalListResult(WireModel):
    """The terminals, newest first."""

    terminals: list[BackgroundTerminal]
    """Running and ended terminals (ended ones stay listed; their output files remain)."""


class TerminalSessionParams(WireModel):
    """Names one terminal (`terminal/stop`)."""

    session_id: str = Field(min_length=1)
    """The terminal's `sessionId`."""


class TerminalReadParams(WireModel):
    """`terminal/read`."""

    session_id: str = Field(min_length=1)
    """The terminal's `sessionId`."""
    wait_ms: Int = Field(default=0, ge=0, le=INT64_MAX)
    """Wait up to this many milliseconds for it to end before answering (at most 30000)."""
    max_output_chars: Int | None = Field(default=None, ge=0, le=INT64_MAX)
    """Return at most this many trailing characters of output (default 10000; 0: as many as
    are kept, 1 MiB of text)."""


class TerminalWriteParams(WireModel):
    """`terminal/write`."""

    session_id: str = Field(min_length=1)
    """The terminal's `sessionId`; it must be running."""
    input: str = ""
    """Text for its standard input (include `\\n` for Enter). Empty: only wait and read. Only a
    terminal started with `interactive` has its standard input open."""
    yield_time_ms: Int = Field(default=1000, ge=0, le=INT64_MAX)
    """Milliseconds to wait after writing before answering, less if it ends (0: 1000; at most
    30000)."""
    max_output_chars: Int | None = Field(default=None, ge=0, le=INT64_MAX)
    """Return at most this many trailing characters of output (default 10000)."""


class TerminalCleanParams(WireModel):
    """`terminal/clean`."""

    thread_id: str = Field(min_length=1)
    """Stop every running terminal of this thread."""


class TerminalResult(WireModel):
    """One terminal, as it is now."""

    terminal: BackgroundTerminal
    """The terminal."""


class TerminalNotification(WireModel):
    """`terminal/started|outputDelta|completed|stalled|cleaned`."""

    terminal: BackgroundTerminal
    """The terminal, as it is now (`output` is empty in `terminal/outputDelta`)."""
    delta: str | None = None
    """New output, in order (`terminal/outputDelta` only)."""


_NOT_FOUND = (rpc_errors.INVALID_PARAMS, rpc_errors.TERMINAL_NOT_FOUND)
_GATE = "backgroundTerminals"

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "terminal/list",
        TerminalListParams,
        TerminalListResult,
        _GATE,
        "Background terminals (of one thread with `threadId`), newest first; a terminal that was "
        "running when an earlier server went away is `lost`.",
        (rpc_errors.INVALID_PARAMS,),
        access="read",
    ),
    MethodSpec(
        "terminal/read",
        TerminalReadParams,
        TerminalResult,
        _GATE,
        "A terminal and the tail of its output (`maxOutputChars`, default 10000); with `waitMs`, "
        "first wait up to that long for it to end. Unknown `sessionId`: -32090.",
        _NOT_FOUND,
        access="detached",
    ),
    MethodSpec(
        "terminal/write",
        TerminalWriteParams,
        TerminalResult,
        _GATE,
        "Write `input` to a running terminal's standard input (it must have been started with "
        "`interactive`; empty input only polls), wait `yieldTimeMs` (default 1000) or until it "
        "ends, and answer with the terminal. Unknown: -32090; not running, not interactive or "
        "its stdin closed: -32091.",
        (*_NOT_FOUND, rpc_errors.TERMINAL_NOT_WRITABLE),
        access="detached",
    ),
    MethodSpec(
        "terminal/stop",
        TerminalSessionParams,
        TerminalResult,
        _GATE,
        "Kill a running terminal and everything it started (status `killed`); an ended one is "
        "returned as it is. Unknown `sessionId`: -32090.",
        _NOT_FOUND,
    ),
    MethodSpec(
        "terminal/clean",
        TerminalCleanParams,
        TerminalListResult,
        _GATE,
        "Stop every running terminal of `threadId` (each gets `terminal/completed`, then "
        "`terminal/cleaned`) and answer with all of the thread's terminals. Output files stay.",
        (rpc_errors.INVALID_PARAMS,),
    ),
]

_DELIVERY = "connections that declared `backgroundTerminals: true` (not stored)"

NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "terminal/started",
        TerminalNotification,
        _DELIVERY,
        "The agent started a background terminal.",
    ),
    NotificationSpec(
        "terminal/outputDelta",
        TerminalNotification,
        _DELIVERY,
        "New output of a terminal in `delta` (live output stops after 1 MiB per terminal; the "
        "output file has all of it).",
    ),
    NotificationSpec(
        "terminal/completed",
        TerminalNotification,
        _DELIVERY,
        "A terminal ended: `completed`, `failed`, `killed` or `timedOut`, with its output's tail.",
    ),
    NotificationSpec(
        "terminal/stalled",
        TerminalNotification,
        _DELIVERY,
        "Declared as in DotCraft, whose terminal service never raises it; never sent here.",
    ),
    NotificationSpec(
        "terminal/cleaned",
        TerminalNotification,
        _DELIVERY,
        "`terminal/clean` stopped this terminal (after its `terminal/completed`).",
    ),
]

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
