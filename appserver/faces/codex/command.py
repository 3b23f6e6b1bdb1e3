"""``appserver codex app-server`` (and the ``appserver-codex`` script): its flags,
the ``-c key=value`` settings Codex clients pass, and :func:`main`.

Light at import: :func:`main` imports the rest of the package.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tomllib
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import IO, TYPE_CHECKING, Any

from appserver.faces.common import add_backlog_argument

if TYPE_CHECKING:
    from appserver.transport.base import Transport

log = logging.getLogger("appserver.faces.codex")

PROVIDERS = ("offline", "openai", "anthropic")
MAX_LINE_BYTES = 64 * 1024 * 1024  # turn inputs may carry images


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This face's own flags (the shared ones are added by the CLI)."""
    parser.add_argument("mode", choices=["app-server"], help="serve Codex's app-server protocol")
    group = parser.add_argument_group("codex")
    group.add_argument(
        "--listen",
        default="stdio://",
        metavar="URL",
        help=(
            "stdio:// (default) or ws://HOST:PORT (with --token-file, clients send the token "
            "as ?token= or Authorization: Bearer)"
        ),
    )
    group.add_argument(
        "-c",
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "a Codex setting (TOML value): model, model_provider (offline, openai, anthropic), "
            "approval_policy (untrusted, on-request, never) apply; sandbox_mode is reported, "
            "not enforced; others are ignored"
        ),
    )
    from appserver.transport.base import DEFAULT_MAX_BYTES

    # A turn's userMessage is sent twice (item/started, item/completed), and an
    # input line may be 64 MiB: room for both beside the usual backlog.
    add_backlog_argument(group, default=2 * MAX_LINE_BYTES + DEFAULT_MAX_BYTES)


def codex_argv(argv: Sequence[str]) -> list[str]:
    """``appserver-codex [-c k=v]... app-server [flags]`` as ``appserver``'s
    ``codex app-server [flags] -c k=v...`` (Codex clients put ``-c`` first)."""
    leading: list[str] = []
    rest = list(argv)
    while rest and rest[0] in ("-c", "--config") and len(rest) > 1:
        leading += ["--config", rest[1]]
        rest = rest[2:]
    while rest and rest[0].startswith("--config="):
        leading.append(rest.pop(0))
    return ["codex", *rest, *leading]


def _value(text: str) -> Any:
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word, as Codex also accepts


def early_answer(
    args: argparse.Namespace, provider_options: dict[str, Any]
) -> Callable[[bytes], str | None] | None:
    """The answer to a stdio client's first line (``initialize``) before the
    face is built (appserver/transport/early.py); ``provider_options`` get the
    ``-c`` settings first (:func:`main` applies them again: the same)."""
    if args.listen not in ("stdio://", "stdio"):
        return None
    from appserver.faces.codex.handshake import initialize_answer

    apply_config(args, provider_options)
    workspace = str(args.workspace.resolve())
    return lambda line: initialize_answer(line, workspace)


def apply_config(args: argparse.Namespace, provider_options: dict[str, Any]) -> None:
    """Apply the ``-c`` settings that mean something here (before the host opens)."""
    from appserver.faces.codex.shapes import our_policy

    for pair in args.config:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        value = _value(raw.strip()) if sep else None
        if key == "model" and isinstance(value, str) and value:
            provider_options["model"] = value
        elif key == "model_provider" and value in PROVIDERS:
            provider_options["provider"] = value
        elif key == "approval_policy" and value is not None:
            args.approval_policy = our_policy(value)
        elif key == "sandbox_mode":
            log.debug("sandbox_mode %r: reported as the workspace boundary, not enforced", value)
        else:
            log.debug("ignored Codex setting %r", pair)


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve Codex's app-server protocol: on stdin/stdout until stdin closes, or
    (``--listen ws://HOST:PORT``) to WebSocket clients until the process is stopped."""
    from appserver.command_line import parse_listen
    from appserver.providers.base import ProviderConfigError
    from appserver.storage.lock import WorkspaceLocked

    try:
        listen = parse_listen(args.listen)
    except argparse.ArgumentTypeError as exc:
        sys.stderr.write(f"appserver: --listen: {exc}\n")
        return 2
    if listen.stdio and listen.host is not None:
        sys.stderr.write("appserver: --listen: stdio:// or ws://HOST:PORT, not both\n")
        return 2
    apply_config(args, options.provider_options)
    options.build_turn_models = False  # its streams read a turn's events as data
    async with AsyncExitStack() as stack:
        try:
            runtime = await stack.enter_async_context(host())
        except (ProviderConfigError, ValueError) as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 2
        except WorkspaceLocked as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            return 1
        if listen.host is not None:
            return await _serve_websocket(args, options, runtime, listen.host, listen.port or 0)
        from appserver.transport.stdio import StdioTransport

        lines = await StdioTransport.open(
            stdin, stdout, max_message_bytes=MAX_LINE_BYTES, early=getattr(args, "early", None)
        )
        dropped = await serve_client(args, options, runtime, lines)
        return 1 if dropped else 0
    return 0  # unreachable: the context manager does not swallow exceptions


async def serve_client(
    args: argparse.Namespace, options: Any, runtime: Any, lines: Transport
) -> bool:
    """One Codex client on ``lines`` (stdio or a WebSocket) until its input ends;
    whether it was dropped for not reading."""
    import anyio

    from appserver.faces.codex.approvals import ask
    from appserver.faces.codex.methods import METHODS
    from appserver.faces.codex.session import CodexSession
    from appserver.transport.peer_writer import PeerWriter

    serving = anyio.CancelScope()
    writer = PeerWriter(
        lines.send_batch,
        max_bytes=args.max_client_backlog,
        on_stall=serving.cancel,
        try_send=lines.try_send,
    )
    session = CodexSession(runtime, writer, args.approval_policy, METHODS, ask)
    session.model = options.provider_options.get("model")
    async with anyio.create_task_group() as writing:
        writing.start_soon(writer.run)
        try:
            with serving:
                await session.serve(lines)
        finally:
            writer.close()
            with anyio.CancelScope(shield=True):
                await writer.flushed()
                await lines.close(writer.close_code)
    return writer.dropped is not None


async def _serve_websocket(
    args: argparse.Namespace, options: Any, runtime: Any, host_name: str, port: int
) -> int:
    """Codex clients over WebSocket (path ``/``, token by ``?token=`` or
    ``Authorization: Bearer``), each its own connection, until stopped."""
    import anyio

    from appserver.transport.base import AddressInUse, ListenerError
    from appserver.transport.listen_options import ListenerOptions
    from appserver.transport.websocket import WebSocketTransport, bound_port, start_listener

    listener = ListenerOptions(
        host=host_name,
        port=port,
        token=getattr(args, "token", None),
        max_message_bytes=MAX_LINE_BYTES,
        web_client=False,
    )

    async def on_connection(transport: WebSocketTransport) -> None:
        await serve_client(args, options, runtime, transport)

    try:
        server = await start_listener(listener, on_connection, lambda: True)
    except AddressInUse as exc:
        sys.stderr.write(f"appserver: {exc.advice('--listen')}\n")
        return 2
    except ListenerError as exc:
        sys.stderr.write(f"appserver: {exc}\n")
        return 2
    sys.stderr.write(f"appserver: listening on ws://{host_name}:{bound_port(server)}\n")
    sys.stderr.flush()
    try:
        await anyio.sleep_forever()
    finally:
        server.close(close_connections=True)
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await server.wait_closed()
    return 0  # unreachable: sleep_forever ends only by cancellation
