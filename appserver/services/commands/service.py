"""The ``command/*`` handlers, the built-in commands and the ``commandRef``
input resolver.

Built-ins that drive another family's service look it up at call time:
``/cron`` needs capability ``cronManagement`` and ``server.cron.describe_jobs()``
(Markdown) or, failing that, ``server.cron.list_jobs()``;
``/heartbeat`` needs ``heartbeatManagement`` and ``server.heartbeat.trigger()``
(returning ``{result?, error?}``). Either may be a plain or async call and may
return dicts or wire models.

Where DotCraft's spec and code differ we follow the spec: an unknown command
is ``-32060`` (DotCraft's handler answers it in-band with a hint), and a
``commandRef`` naming an unknown command is ``-32060`` too (DotCraft sends its
raw text to the model). /new creates a thread without archiving the old ones
(DotCraft archives every thread of the identity), and no built-in is
admin-only (DotCraft marks /stop admin-only; turn/interrupt needs no role).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel

from appserver.protocol import commands as command_wire
from appserver.protocol import errors as rpc_errors
from appserver.protocol.errors import RpcError
from appserver.protocol.turns import CommandRefPart
from appserver.rpc.connection import RequestContext
from appserver.runtime.inputs import Resolved
from appserver.runtime.threads import NewThread
from appserver.services.commands import catalog
from appserver.services.commands.catalog import BuiltinCommand, CustomCommand
from appserver.services.router import Router
from appserver.storage.records import ThreadRecord

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

log = logging.getLogger("appserver.commands")

# Which server attribute backs each capability-gated built-in, and a method of
# its family (which loads the family when it waits for its first use).
_SERVICE_ATTRIBUTES = {
    "cronManagement": ("cron", "cron/list"),
    "heartbeatManagement": ("heartbeat", "heartbeat/trigger"),
}

BuiltinHandler = Callable[
    [RequestContext, ThreadRecord, list[str]], Awaitable[command_wire.CommandExecuteResult]
]


def command_not_found(name: str) -> RpcError:
    return RpcError(rpc_errors.COMMAND_NOT_FOUND, f"Command not found: {name}")


def permission_denied(name: str, detail: str | None = None) -> RpcError:
    data = {"detail": detail} if detail else None
    return RpcError(
        rpc_errors.COMMAND_PERMISSION_DENIED, f"Permission denied for command: {name}", data
    )


def service_unavailable(name: str) -> RpcError:
    return RpcError(
        rpc_errors.COMMAND_SERVICE_UNAVAILABLE, f"Service unavailable for command: {name}"
    )


def _is_admin(params: command_wire.CommandExecuteParams) -> bool:
    role = params.sender.sender_role if params.sender is not None else None
    return (role or "").lower() == "admin"


class CommandsService:
    """Slash commands: listing, executing and expanding ``commandRef`` parts."""

    def __init__(self, server: FamilyContext, user_root: Path | None) -> None:
        self.server = server
        self.workspace_root = server.craft_dir / "commands"
        self.user_root = user_root
        self._builtins: dict[str, BuiltinHandler] = {
            "/new": self._new,
            "/stop": self._stop,
            "/help": self._help,
            "/cron": self._cron,
            "/heartbeat": self._heartbeat,
        }

    def register(self, router: Router) -> None:
        """Serve ``command/list`` and ``command/execute`` on ``router``."""
        router.register("command/list", self.list_commands)
        router.register("command/execute", self.execute)

    # --- catalogue ----------------------------------------------------------------

    def available(self, command: BuiltinCommand) -> bool:
        """Whether the service a built-in drives is on (served, or waiting for
        its first use)."""
        capability = command.capability
        return capability is None or bool(self.server.router.capabilities().get(capability))

    def service(self, command: BuiltinCommand) -> Any:
        """The service object a built-in drives (``True`` when it needs none),
        or ``None`` while that service is off; a family that waits for its first
        use is installed now."""
        if command.capability is None:
            return True
        if not self.available(command):
            return None
        attribute, method = _SERVICE_ATTRIBUTES[command.capability]
        try:
            self.server.router.load(method)
        except Exception:  # answered as a service that is off
            log.exception("could not load the service of %s", command.name)
            return None
        return getattr(self.server, attribute, None)

    def visible_builtins(self) -> list[BuiltinCommand]:
        """Built-ins whose backing service is on."""
        return [command for command in catalog.BUILTINS if self.available(command)]

    async def custom_commands(self) -> list[CustomCommand]:
        """Custom commands (a custom command never shadows a built-in), by name."""
        roots = [("user", self.user_root)] if self.user_root is not None else []
        roots.append(("workspace", self.workspace_root))
        found = await anyio.to_thread.run_sync(catalog.scan_custom, roots)
        return [found[name] for name in sorted(found) if catalog.builtin(name) is None]

    async def find_custom(self, name: str) -> CustomCommand | None:
        wanted = catalog.command_name(name)
        return next((c for c in await self.custom_commands() if c.name == wanted), None)

    async def infos(
        self, language: str | None, include_builtins: bool
    ) -> list[command_wire.CommandInfo]:
        """What ``command/list`` shows: built-ins (in their fixed order), then custom."""
        infos: list[command_wire.CommandInfo] = []
        if include_builtins:
            infos += [
                command_wire.CommandInfo(
                    name=command.name,
                    aliases=list(command.aliases),
                    description=command.description(language),
                    category="builtin",
                    requires_admin=command.requires_admin,
                )
                for command in self.visible_builtins()
            ]
        infos += [
            command_wire.CommandInfo(
                name=command.name,
                aliases=[],
                description=command.description,
                category="custom",
                requires_admin=command.requires_admin,
                argument_hint=command.argument_hint,
            )
            for command in await self.custom_commands()
        ]
        return infos

    # --- handlers -----------------------------------------------------------------

    async def list_commands(
        self, ctx: RequestContext, params: command_wire.CommandListParams
    ) -> BaseModel:
        commands = await self.infos(params.language, params.include_builtins)
        return command_wire.CommandListResult(commands=commands)

    async def execute(
        self, ctx: RequestContext, params: command_wire.CommandExecuteParams
    ) -> BaseModel:
        token, *words = params.command.split()
        name = catalog.command_name(token)
        if name == "/":
            raise rpc_errors.invalid_params("'command' must name a command")
        args = [*words, *(params.arguments or [])]
        command = catalog.builtin(name)
        if command is not None:
            if command.requires_admin and not _is_admin(params):
                raise permission_denied(command.name)
            if self.service(command) is None:
                raise service_unavailable(command.name)
            thread = await self.server.threads.get(params.thread_id)
            return await self._builtins[command.name](ctx, thread, args)
        custom = await self.find_custom(name)
        if custom is None:
            raise command_not_found(name)
        if custom.requires_admin and not _is_admin(params):
            raise permission_denied(custom.name)
        await self.server.threads.get(params.thread_id)  # -32010 for an unknown thread
        return command_wire.CommandExecuteResult(
            handled=True, is_markdown=False, expanded_prompt=custom.expand(" ".join(args))
        )

    # --- commandRef -----------------------------------------------------------------

    async def resolve_command_ref(self, part: CommandRefPart) -> Resolved:
        """A custom ``commandRef`` becomes its expanded prompt as a text part.

        Built-ins are refused (they are actions, run with ``command/execute``);
        so are admin-only commands, because an input part carries no proof of
        the sender's role.
        """
        name, args_text = _ref_name_and_args(part)
        if name == "/":
            raise rpc_errors.invalid_params("commandRef: 'name' must not be empty")
        command = catalog.builtin(name)
        if command is not None:
            raise rpc_errors.invalid_params(
                f"Built-in slash command '{command.name}' cannot be sent as 'commandRef' in "
                "'turn/start'. Use 'command/execute' instead."
            )
        custom = await self.find_custom(name)
        if custom is None:
            raise command_not_found(name)
        if custom.requires_admin:
            raise permission_denied(
                custom.name,
                "admin-only commands run through command/execute with an admin sender",
            )
        return Resolved(parts=[{"type": "text", "text": custom.expand(args_text)}])

    # --- built-ins ------------------------------------------------------------------

    async def _new(
        self, ctx: RequestContext, thread: ThreadRecord, args: list[str]
    ) -> command_wire.CommandExecuteResult:
        # Same identity, configuration and history mode as the thread the
        # command ran on. Nothing is archived: the newest thread already comes
        # first in thread/list, and clients with many threads keep them.
        threads = self.server.threads
        created = await threads.create(
            NewThread(
                user_id=thread.user_id,
                channel_name=thread.origin_channel,
                workspace_path=thread.workspace_path,
                channel_context=thread.channel_context,
                history_mode=thread.history_mode,
                configuration=thread.configuration,
            ),
            announce=False,
        )
        started = await threads.view(created)
        # command/execute is not held back like writes are: announce after the answer.
        ctx.after_response(lambda: threads.announce_started(created))
        return command_wire.CommandExecuteResult(
            handled=True,
            message="Started a new conversation.",
            is_markdown=False,
            session_reset=True,
            thread=started.thread,
            archived_thread_ids=[],
            created_lazily=False,
        )

    async def _stop(
        self, ctx: RequestContext, thread: ThreadRecord, args: list[str]
    ) -> command_wire.CommandExecuteResult:
        active = self.server.runtime.engine.interrupt(thread.id)
        if active is None:
            cluster = self.server.runtime.cluster
            running = await cluster.store.running_turn(thread.id) if cluster else None
            if running is not None:  # on another node: that node is told to stop it
                await self.server.runtime.turns.interrupt(thread.id, running[0])
                return command_wire.CommandExecuteResult(
                    handled=True, message=f"Stopped the running turn ({running[0]})."
                )
            return command_wire.CommandExecuteResult(handled=True, message="No turn is running.")
        return command_wire.CommandExecuteResult(
            handled=True, message=f"Stopped the running turn ({active.record.id})."
        )

    async def _help(
        self, ctx: RequestContext, thread: ThreadRecord, args: list[str]
    ) -> command_wire.CommandExecuteResult:
        infos = await self.infos(None, include_builtins=True)
        lines = ["**Commands**", ""]
        lines += [_help_line(info) for info in infos if info.category == "builtin"]
        custom = [info for info in infos if info.category == "custom"]
        if custom:
            lines += ["", "**Custom commands**", ""]
            lines += [_help_line(info) for info in custom]
        return command_wire.CommandExecuteResult(
            handled=True, message="\n".join(lines), is_markdown=True
        )

    async def _cron(
        self, ctx: RequestContext, thread: ThreadRecord, args: list[str]
    ) -> command_wire.CommandExecuteResult:
        if args and args[0].lower() != "list":
            return command_wire.CommandExecuteResult(handled=True, message="Usage: /cron [list]")
        cron: Any = getattr(self.server, "cron", None)  # checked by service() before the call
        describe = getattr(cron, "describe_jobs", None)
        if describe is not None:  # the cron service's own Markdown rendering
            text = str(await _call(describe))
        else:
            jobs = [_as_dict(job) for job in await _call(cron.list_jobs)]
            text = "\n".join(_cron_line(job) for job in jobs) or "No cron jobs."
        return command_wire.CommandExecuteResult(handled=True, message=text, is_markdown=True)

    async def _heartbeat(
        self, ctx: RequestContext, thread: ThreadRecord, args: list[str]
    ) -> command_wire.CommandExecuteResult:
        if args and args[0].lower() != "trigger":
            return command_wire.CommandExecuteResult(
                handled=True, message="Usage: /heartbeat [trigger]"
            )
        heartbeat: Any = getattr(self.server, "heartbeat", None)  # checked by service()
        outcome = _as_dict(await _call(heartbeat.trigger))
        if outcome.get("error"):
            return command_wire.CommandExecuteResult(
                handled=True, message=f"Heartbeat failed: {outcome['error']}"
            )
        if not outcome.get("result"):
            return command_wire.CommandExecuteResult(
                handled=True, message="Heartbeat finished: nothing to report."
            )
        return command_wire.CommandExecuteResult(
            handled=True, message=f"Heartbeat result:\n\n{outcome['result']}", is_markdown=True
        )


def _ref_name_and_args(part: CommandRefPart) -> tuple[str, str]:
    """Name and argument text of a ``commandRef`` (``rawText`` fills the gaps)."""
    raw_token, _, raw_rest = (part.raw_text or "").strip().partition(" ")
    token = part.name.strip() or raw_token
    name = catalog.command_name(token.split()[0] if token.split() else "")
    args = part.args_text if part.args_text is not None else raw_rest
    return name, args.strip()


def _help_line(info: command_wire.CommandInfo) -> str:
    usage = f"{info.name} {info.argument_hint}" if info.argument_hint else info.name
    aliases = "".join(f", `{alias}`" for alias in info.aliases)
    admin = " (admin only)" if info.requires_admin else ""
    return f"- `{usage}`{aliases} — {info.description}{admin}"


async def _call(method: Callable[[], Any]) -> Any:
    result = method()
    return await result if inspect.isawaitable(result) else result


def _as_dict(value: Any) -> dict[str, Any]:
    """A service's answer as a camelCase dict (wire model or mapping)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dict(value) if isinstance(value, dict) else {}


def _cron_line(job: dict[str, Any]) -> str:
    state = "enabled" if job.get("enabled", True) else "disabled"
    return f"- `{job.get('id', '?')}` **{job.get('name') or '(unnamed)'}** ({state})"
