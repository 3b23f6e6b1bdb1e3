"""Wire models and method-table entries of the `commands` family (reference §3.4)."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from appserver.protocol import errors as E
from appserver.protocol.base import WireModel
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec
from appserver.protocol.threads import Thread
from appserver.protocol.turns import SenderContext


class CommandInfo(WireModel):
    """One slash command as ``command/list`` shows it."""

    name: str  # with the slash: "/new", "/frontend:component"
    aliases: list[str]
    description: str
    category: Literal["builtin", "custom"]
    requires_admin: bool
    argument_hint: str | None = None  # custom commands: front matter ``argument-hint``


class CommandListParams(WireModel):
    language: str | None = None  # "en" (default) or "zh"
    include_builtins: bool = True


class CommandListResult(WireModel):
    commands: list[CommandInfo]


class CommandExecuteParams(WireModel):
    thread_id: str
    command: str  # "/stop", "/cron list", "review" (the slash is optional)
    arguments: list[str] | None = None
    sender: SenderContext | None = None

    @field_validator("thread_id", "command")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()


class CommandExecuteResult(WireModel):
    handled: bool
    message: str | None = None
    is_markdown: bool = False
    expanded_prompt: str | None = None  # custom commands: submit it with turn/start
    session_reset: bool | None = None  # /new
    thread: Thread | None = None  # /new: the fresh thread
    archived_thread_ids: list[str] | None = None
    created_lazily: bool | None = None


_EXECUTE_ERRORS = (
    E.COMMAND_NOT_FOUND,
    E.COMMAND_PERMISSION_DENIED,
    E.COMMAND_SERVICE_UNAVAILABLE,
    E.THREAD_NOT_FOUND,
    E.INVALID_PARAMS,
)

METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "command/list",
        CommandListParams,
        CommandListResult,
        "commandManagement",
        "Built-in and custom slash commands, built-ins first; /cron and /heartbeat only "
        "while their services run.",
        (E.INVALID_PARAMS,),
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
