"""Wire models and method-table entries of the `commands` family (reference §3.4)."""

from typing import Literal

from pydantic import field_validator

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Flag, WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec
from appserver.protocol.threads import Thread
from appserver.protocol.turns import SenderContext


class CommandInfo(WireModel):
    """One slash command as ``command/list`` shows it."""

    name: str  # with the slash: "/new", "/frontend:component"
    """The command with its slash, e.g. `/help`."""
    aliases: list[str]
    """Other names that run the same command."""
    description: str
    """What the command does."""
    category: Literal["builtin", "custom"]
    """`builtin` or `custom` (a Markdown command file in the workspace)."""
    requires_admin: Flag
    """Only a sender with `senderRole: "admin"` may run it."""
    argument_hint: str | None = None  # custom commands: front matter ``argument-hint``
    """How to write its arguments, for a completion popup."""


class CommandListParams(WireModel):
    language: str | None = None  # "en" (default) or "zh"
    """Language of the descriptions (e.g. `en`); the server's default when absent."""
    include_builtins: Flag = True
    """Include the built-in commands, not only the workspace's custom ones."""


class CommandListResult(WireModel):
    commands: list[CommandInfo]
    """The available slash commands."""


class CommandExecuteParams(WireModel):
    thread_id: str
    """The thread the command runs on."""
    command: str  # "/stop", "/cron list", "review" (the slash is optional)
    """The slash command with its slash, e.g. `/help`."""
    arguments: list[str] | None = None
    """The command's arguments, one string each."""
    sender: SenderContext | None = None
    """Who runs it (admin-only commands need `senderRole: "admin"`)."""

    @field_validator("thread_id", "command")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()


class CommandExecuteResult(WireModel):
    handled: Flag
    """Whether a command of that name ran."""
    message: str | None = None
    """Text to show the user."""
    is_markdown: Flag = False
    """Whether `message` is Markdown."""
    expanded_prompt: str | None = None  # custom commands: submit it with turn/start
    """A prompt the command expanded to; the client may send it with `turn/start`."""
    session_reset: Flag | None = None  # /new
    """`true` when the command started a new thread (`/new`); see `thread`."""
    thread: Thread | None = None  # /new: the fresh thread
    """The new thread after a session reset."""
    archived_thread_ids: list[str] | None = None
    """Threads the command archived."""
    created_lazily: Flag | None = None
    """The new thread is not stored until its first turn."""


_EXECUTE_ERRORS = (
    rpc_errors.COMMAND_NOT_FOUND,
    rpc_errors.COMMAND_PERMISSION_DENIED,
    rpc_errors.COMMAND_SERVICE_UNAVAILABLE,
    rpc_errors.THREAD_NOT_FOUND,
    rpc_errors.INVALID_PARAMS,
)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "command/list",
        CommandListParams,
        CommandListResult,
        "commandManagement",
        "Built-in and custom slash commands, built-ins first; /cron and /heartbeat only "
        "while their services run.",
        (rpc_errors.INVALID_PARAMS,),
        access="read",
    ),
    MethodSpec(
        "command/execute",
        CommandExecuteParams,
        CommandExecuteResult,
        "commandManagement",
        "Run a slash command on a thread. Custom commands answer `expandedPrompt` "
        "(send it with turn/start); /new answers the fresh thread.",
        _EXECUTE_ERRORS,
        # /heartbeat runs a whole agent turn: do not hold up the connection's
        # later requests while it does.
        access="detached",
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
