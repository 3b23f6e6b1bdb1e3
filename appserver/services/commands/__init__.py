"""The ``commands`` family: ``command/list``, ``command/execute`` and
``commandRef`` input parts.

``install`` attaches the :class:`CommandsService` as ``server.commands``
(typed access: :func:`commands_of`). The user commands root is
``$APPSERVER_USER_COMMANDS_DIR`` when set, else ``~/.craft/commands``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from appserver.services.commands.service import CommandsService

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

USER_COMMANDS_ENV = "APPSERVER_USER_COMMANDS_DIR"

__all__ = ["USER_COMMANDS_ENV", "CommandsService", "commands_of", "install", "user_commands_root"]


def user_commands_root() -> Path | None:
    """``$APPSERVER_USER_COMMANDS_DIR`` or ``~/.craft/commands`` (``None`` without a home)."""
    configured = os.environ.get(USER_COMMANDS_ENV)
    if configured:
        return Path(configured).expanduser().absolute()
    try:
        return Path.home() / ".craft" / "commands"
    except RuntimeError:
        return None


def commands_of(server: FamilyContext) -> CommandsService | None:
    """The server's commands service, if the family is installed."""
    service = getattr(server, "commands", None)
    return service if isinstance(service, CommandsService) else None


def install(server: FamilyContext) -> None:
    """Serve ``command/*``, resolve ``commandRef`` parts, expose ``server.commands``."""
    service = CommandsService(server, user_commands_root())
    service.register(server.router)
    server.runtime.materializer.resolvers["commandRef"] = service.resolve_command_ref
    server.commands = service
