"""Wire models and method-table entries of the IDE file system bridge
(DotCraft's ``acpExtensions``): when the connection bound to a thread
advertised ``capabilities.acpExtensions.fsReadTextFile`` /
``fsWriteTextFile``, the agent's file tools read and write through the
server->client requests ``ext/acp/fs/readTextFile`` and
``ext/acp/fs/writeTextFile`` (ACP's ``fs/read_text_file`` /
``fs/write_text_file`` with ``threadId`` for ``sessionId``), so the editor's
unsaved buffers are what the agent sees and edits. See docs/tools.md.
"""

from pydantic import Field

from appserver.protocol.base import Flag, OpenWireModel, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec


class AcpExtensionsCapability(OpenWireModel):
    """`initialize.capabilities.acpExtensions`: the client serves `ext/acp/*` requests."""

    fs_read_text_file: Flag = False
    """The client answers `ext/acp/fs/readTextFile` (the file tools read through it)."""
    fs_write_text_file: Flag = False
    """The client answers `ext/acp/fs/writeTextFile` (the file tools write through it)."""
    terminal_create: Flag = False
    """The client runs commands in its terminals (`ext/acp/terminal/*`: the `shell` tool
    uses them)."""
    extensions: list[str] = Field(default_factory=list)
    """Custom families the client serves (`_unity`): tools of these families send
    `ext/acp/<family>/<method>` (see `ext/acp/<family>/<method>`)."""


class ReadTextFileParams(WireModel):
    """Read a file as the editor has it (`ext/acp/fs/readTextFile`)."""

    thread_id: str
    """The thread whose agent reads."""
    path: str
    """Absolute path of the file (inside the workspace, or approved)."""
    line: int | None = None
    """1-based line to start at (absent: the first line); ACP's name."""
    offset: int | None = None
    """The same as `line` (the name DotCraft's bridges read); always equal to it."""
    limit: int | None = None
    """Maximum number of lines (absent: the whole file)."""


class ReadTextFileResult(OpenWireModel):
    """The editor's text of the file."""

    content: str
    """The file's text (its unsaved buffer if the editor has one), from `line`, at most
    `limit` lines."""


class WriteTextFileParams(WireModel):
    """Write a file through the editor (`ext/acp/fs/writeTextFile`)."""

    thread_id: str
    """The thread whose agent writes."""
    path: str
    """Absolute path of the file (inside the workspace, or approved)."""
    content: str
    """The file's complete new text."""


class WriteTextFileResult(OpenWireModel):
    """The editor wrote the file (`{}`)."""


METHOD_SPECS: list[MethodSpec] = []
NOTIFICATION_SPECS: list[NotificationSpec] = []

SERVER_REQUEST_SPECS: list[ServerRequestSpec] = [
    ServerRequestSpec(
        "ext/acp/fs/readTextFile",
        ReadTextFileParams,
        ReadTextFileResult,
        "`read_file` (and `edit_file`) read through the editor: sent to the connection bound "
        "to the thread when it advertised `acpExtensions.fsReadTextFile`, after the workspace "
        "sandbox and approvals. Answer `{content}`. A timeout, a vanished client or an error "
        "fail the tool call, not the turn.",
    ),
    ServerRequestSpec(
        "ext/acp/fs/writeTextFile",
        WriteTextFileParams,
        WriteTextFileResult,
        "`write_file` (and `edit_file`) write through the editor: sent to the connection "
        "bound to the thread when it advertised `acpExtensions.fsWriteTextFile`, after the "
        "workspace sandbox and approvals. Answer `{}`. A timeout, a vanished client or an "
        "error fail the tool call, not the turn.",
    ),
]
