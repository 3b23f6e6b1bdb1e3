"""The ``appserver`` command."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from appserver import __version__, logs, startup
from appserver.command_line import (
    Listen,
    SuggestingParser,
    add_face_options,
    add_shared_options,
    configure_logs,
    face_module,
    given_provider_options,
    leaf,
    parse_arguments,
    parse_listen,
    read_token,
)
from appserver.process_secrets import hide_secrets

# Light at import: what a command needs beyond the standard library, argparse
# and logging is imported where it runs (a stdio server answers `initialize`
# before it loads anything heavy: appserver/transport/early.py).
if TYPE_CHECKING:
    from appserver.server.app import AppServer
    from appserver.transport.listen_options import ListenerOptions

log = logging.getLogger("appserver")


# Front doors other than JSON-RPC: (command, module in appserver.faces, summary).
FACES = (
    ("host", "zene", "Zene Host Protocol v1: one JSON request per line in, one response out"),
    ("rpc", "zot", "zot rpc: the agent over newline-delimited JSON commands and events"),
    ("router", "codeswarm", "Codeswarm router protocol codeswarm.router.v1 (stdio or TCP)"),
    ("acp", "acp", "Agent Client Protocol (agent side) over stdio, for editors such as Zed"),
    (
        "codex",
        "codex",
        "OpenAI Codex app-server protocol v2 (`codex app-server`); "
        "`codex exec --experimental-json` (see `appserver codex exec --help`)",
    ),
)
# Qwen Code's SDK runs its executable with flags and no subcommand.
QWEN_FLAGS = ("--input-format", "--output-format")


def is_qwen_invocation(argv: Sequence[str]) -> bool:
    """``appserver --input-format ... --output-format ...`` (no subcommand): Qwen Code."""
    if not argv or not argv[0].startswith("-") or argv[0] in ("-h", "--help", "--version"):
        return False
    return any(arg.split("=", 1)[0] in QWEN_FLAGS for arg in argv)


def qwen_command(argv: Sequence[str]) -> int:
    """Parse Qwen Code's command line (unknown flags are warned about and ignored,
    so a newer SDK still works) and run the stream-json face."""
    parser = SuggestingParser(
        prog="appserver",
        description="Qwen Code structured I/O (--input-format/--output-format stream-json).",
    )
    add_face_options(parser)
    face_module("qwen").add_arguments(parser)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"appserver: ignoring unsupported options: {' '.join(unknown)}", file=sys.stderr)
    args.face = "qwen"
    from appserver.face_command import face_command

    return face_command(args)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``appserver`` parser. ``command``: the subcommand being run, when
    known; then only that face's module is imported for its options (the
    others are listed by name and summary, which is all ``--help`` shows)."""
    parser = SuggestingParser(
        prog="appserver",
        description="JSON-RPC 2.0 AppServer hosting an AI coding agent.",
    )
    parser.add_argument("--version", action="version", version=f"appserver {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser(
        "app-server",
        help="serve the AppServer protocol",
        description=(
            "Serve the AppServer protocol for one workspace. Protocol frames go to stdout "
            "(stdio mode) or over WebSocket; logs always go to stderr."
        ),
    )
    serve.add_argument(
        "--listen",
        type=parse_listen,
        default=Listen(stdio=True),
        metavar="URL",
        help=(
            "stdio:// (default: one client on stdin/stdout, exits at EOF), "
            "ws://HOST:PORT (WebSocket clients on ws://HOST:PORT/ws; port 0 picks a free one), "
            "or ws+stdio://HOST:PORT (both)"
        ),
    )
    add_shared_options(
        serve,
        "approval policy of threads that set none (default: yours, set with "
        "workspace/config/update or in your own config.json, never the workspace's)",
    )
    token = serve.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=(
            "WebSocket clients must connect with ?token=TOKEN, TOKEN being this file's content "
            "(surrounding whitespace ignored); required when listening on a non-loopback address"
        ),
    )
    token.add_argument(
        "--token",
        default=os.environ.get("APPSERVER_TOKEN") or None,
        help=(
            "the token itself (default: $APPSERVER_TOKEN); prefer --token-file or the "
            "variable. Either way the server blanks it from its /proc view once read"
        ),
    )
    serve.add_argument(
        "--store",
        default=os.environ.get("APPSERVER_STORE") or None,
        metavar="URL",
        help=(
            "where threads are stored: sqlite:///PATH (default: DIR/.craft/appserver.db) "
            "or postgresql://USER@HOST/DB, shared by several server nodes "
            "(default: $APPSERVER_STORE; a password is best left to $PGPASSWORD or ~/.pgpass)"
        ),
    )
    serve.add_argument(
        "--node-lease",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help=(
            "with a postgresql:// store: the running turns of a node that stopped "
            "(three missed heartbeats, one every SECONDS/4) are failed by another node "
            "within this time (default 10)"
        ),
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help=(
            "accept WebSocket requests carrying this Origin header (repeatable); "
            "requests with any other Origin are refused with 403"
        ),
    )
    serve.add_argument(
        "--approval-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long a turn waits for an approval answer before declining (default 120)",
    )
    serve.add_argument(
        "--max-in-flight",
        type=int,
        default=32,
        metavar="N",
        help="concurrent requests per connection before -32001 'Server overloaded' (default 32)",
    )
    logs.add_arguments(serve, default_level="info")
    for name, module, summary in FACES:
        face = commands.add_parser(name, help=summary, description=summary)
        face.set_defaults(face=module)
        if command is None or command == name:
            add_face_options(face)
            face_module(module).add_arguments(face)
    schema = commands.add_parser(
        "schema",
        help="write the protocol's JSON Schema (and TypeScript types)",
        description=(
            "Write protocol.schema.json (JSON Schema draft 2020-12: every method's params and "
            "result, every notification, every server-to-client request) into DIR, and with "
            "--ts the same as one TypeScript module (interfaces, method maps, typed methods)."
        ),
    )
    schema.add_argument("--out", type=Path, metavar="DIR", help="output directory")
    schema.add_argument(
        "--reference",
        type=Path,
        metavar="FILE",
        help="also write (or with --check, compare) the Markdown protocol reference",
    )
    schema.add_argument(
        "--ts",
        type=Path,
        metavar="OUT",
        help="write (or with --check, compare) the TypeScript types: a .ts file, or "
        "OUT/protocol.ts when OUT is a directory",
    )
    schema.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a written copy differs from the method table",
    )
    return parser


def schema_command(
    out: Path | None, check: bool, reference: Path | None, ts: Path | None = None
) -> int:
    from appserver.protocol.reference import reference_is_current, render_reference
    from appserver.protocol.schema import SCHEMA_FILE, is_current, write_schema
    from appserver.protocol.typescript import ts_path, typescript_is_current, write_typescript

    if out is None and ts is None:
        print("appserver: schema: give --out DIR, --ts OUT or both", file=sys.stderr)
        return 2
    if check:
        stale = [] if out is None or is_current(out) else [out / SCHEMA_FILE]
        if reference is not None and not reference_is_current(reference):
            stale.append(reference)
        if ts is not None and not typescript_is_current(ts):
            stale.append(ts_path(ts))
        for path in stale:
            print(f"appserver: {path} is stale; run `make schema`", file=sys.stderr)
        return 1 if stale else 0
    if out is not None:
        print(write_schema(out), file=sys.stderr)
    if reference is not None:
        reference.parent.mkdir(parents=True, exist_ok=True)
        reference.write_text(render_reference(), "utf-8")
        print(reference, file=sys.stderr)
    if ts is not None:
        print(write_typescript(ts), file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    if argv is None:  # the process itself (tests call main(argv) in-process)
        startup.begin()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:
        startup.ready()


def codex_main(argv: Sequence[str] | None = None) -> int:
    """The ``appserver-codex`` script: Codex's command line (``[-c k=v]... app-server
    [--listen stdio://]``), so ``CodexConfig(codex_bin=...)`` can point at it, and
    ``exec --experimental-json``, what ``@openai/codex-sdk`` runs once per turn."""
    if argv is None:  # the process itself: start as main() does (main is given a list)
        startup.begin()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if face_module("codex.exec_command").is_exec(arguments):
        return codex_exec(arguments)
    return main(face_module("codex").codex_argv(arguments))


def codex_exec(arguments: list[str]) -> int:
    """``[-c k=v]... exec ...``: one Codex exec turn (``appserver-codex exec`` and
    ``appserver codex exec`` both land here)."""
    from appserver.face_command import face_command

    args = face_module("codex.exec_command").parse_exec(arguments)
    return args if isinstance(args, int) else face_command(args)


def _main(arguments: list[str]) -> int:
    if is_qwen_invocation(arguments):
        return qwen_command(arguments)
    if arguments[:1] == ["codex"] and face_module("codex.exec_command").is_exec(arguments[1:]):
        return codex_exec(arguments[1:])
    chosen = next((word for word in arguments if not word.startswith("-")), "")
    parser = build_parser(chosen)
    args = parse_arguments(parser, arguments)
    if args.command == "schema":
        return schema_command(args.out, args.check, args.reference, args.ts)
    if getattr(args, "face", None) is not None:
        from appserver.face_command import face_command

        return face_command(args)
    if args.command != "app-server":
        parser.print_help(sys.stderr)
        return 2
    return serve_command(args)


TTY_HINT = (
    "appserver: this speaks JSON-RPC 2.0 on stdin/stdout, one message per line, for a "
    "program to drive (Ctrl-D ends it). For the web page and the terminal chat, start it with "
    "`--listen ws://127.0.0.1:9100` (or `make run` in the checkout) and open "
    "http://127.0.0.1:9100/"
)


def startup_block(server: AppServer, endpoint: str, websocket: ListenerOptions | None) -> str:
    """What a WebSocket server says once it listens (early_start.listening_block)."""
    from appserver.early_start import listening_block

    provider = server.provider
    url = getattr(provider, "base_url", None)
    web_client = websocket is not None and websocket.web_client
    workspace = server.config.workspace
    return listening_block(
        endpoint, web_client, workspace, provider.name, provider.default_model, url
    )


def serve_command(args: argparse.Namespace) -> int:
    """``appserver app-server``."""
    from appserver.transport.base import AddressInUse, ListenerError

    if not configure_logs(args):
        return 2
    listen: Listen = args.listen
    workspace: Path = args.workspace
    if not workspace.is_dir():
        print(f"appserver: workspace {workspace} is not a directory", file=sys.stderr)
        return 2
    try:
        token = read_token(args.token_file) if args.token_file else args.token
    except ValueError as exc:
        print(f"appserver: {exc}", file=sys.stderr)
        return 2
    # Once read, the token and other secrets leave what tool commands can see
    # of this process (/proc/$PPID/cmdline and environ).
    hide_secrets(token, args.api_key)
    provider_options = given_provider_options(args)
    websocket = None
    if listen.host is not None:
        # Imported only when listening: a stdio session never loads websockets.
        from appserver.transport.listen_options import ListenerOptions, check_options

        websocket = ListenerOptions(
            host=listen.host,
            port=listen.port or 0,
            token=token,
            allowed_origins=args.allow_origin,
        )
        try:
            check_options(websocket)  # before the workspace is locked or touched
        except ListenerError as exc:
            print(f"appserver: {exc}", file=sys.stderr)
            return 2
    if args.store is not None:  # the default store is always valid
        from appserver.storage.db import check_store

        try:
            check_store(args.store, workspace)
        except ValueError as exc:
            print(f"appserver: {exc}", file=sys.stderr)
            return 2
    if not (math.isfinite(args.node_lease) and 0.2 <= args.node_lease <= 3600):
        print("appserver: --node-lease must be between 0.2 and 3600 seconds", file=sys.stderr)
        return 2
    prepared = early = listening = None
    if websocket is None and listen.stdio and args.store is None:
        # Lock the workspace and create its database in a thread while the
        # server's modules import (the paths and lock info AppServer.open uses),
        # and answer the client's `initialize` before importing them.
        from appserver.early_start import answer_initialize, prepare

        prepared = prepare(workspace)
        early = answer_initialize(workspace, prepared, provider_options)
    elif websocket is not None and not listen.stdio and args.store is None and websocket.ip_literal:
        # The same for the first WebSocket client: bind, announce, and answer
        # its `initialize` before importing the server (transport/early_ws.py).
        from appserver.early_start import listen_early

        prepared, listening = listen_early(workspace, websocket, provider_options)
    # Imported here: other commands (a face, `schema`) do not pay for them.
    import anyio

    from appserver.rpc.connection import Limits
    from appserver.runtime.engine_config import EngineConfig
    from appserver.server.config import ServerConfig
    from appserver.server.process import run
    from appserver.storage.lock import UnsafeLockFile, WorkspaceLocked

    config = ServerConfig(
        workspace=workspace,
        limits=Limits(max_in_flight=args.max_in_flight),
        engine=EngineConfig(approval_timeout=args.approval_timeout, node_lease=args.node_lease),
        provider_options=provider_options,
        tool_env=tuple(args.tool_env),
        store=args.store,
        trust_workspace=args.trust_workspace,
        approval_policy=args.approval_policy,
    )
    from appserver.transport.stdio import claim_stdio

    stdio = claim_stdio() if listen.stdio else None

    if stdio is not None and websocket is None and stdio[0].isatty():
        # Someone typed `appserver app-server` and would otherwise wait in silence.
        print(TTY_HINT, file=sys.stderr, flush=True)

    def on_ready(server: AppServer) -> None:
        endpoint = server.endpoints.get("appServerWebSocket")
        if endpoint and listening is None:  # else said when the socket was bound
            print(startup_block(server, endpoint, websocket), file=sys.stderr, flush=True)
        if listening is not None:
            from appserver.early_start import release_stop_signals

            release_stop_signals()  # a stop received since "listening on" now stops cleanly

    try:
        anyio.run(
            lambda: run(
                config,
                stdio=stdio,
                websocket=websocket,
                on_ready=on_ready,
                prepared=prepared,
                early=early,
                listening=listening,
            )
        )
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        cause = leaf(error)  # the server's task groups wrap what fails inside them
        if isinstance(cause, AddressInUse):
            print(f"appserver: {cause.advice('--listen')}", file=sys.stderr)
            return 2
        if isinstance(cause, UnsafeLockFile):  # .craft/appserver.lock points elsewhere
            print(f"appserver: {cause}", file=sys.stderr)
            return 2
        if isinstance(cause, WorkspaceLocked):
            print(f"appserver: {cause}", file=sys.stderr)
            return 1
        if isinstance(cause, (ListenerError, ValueError, OverflowError)):
            # Refused options (a non-loopback bind without token, a bad provider setting).
            print(f"appserver: {cause}", file=sys.stderr)
            return 2
        from appserver.storage.failures import disk_failure

        disk = disk_failure(cause)
        if disk is not None:
            # A full or failing disk: at open, or after `initialize` was answered
            # (then the client's next request was told, see AppServer._start).
            print(f"appserver: cannot start: {disk} (in {config.craft_dir})", file=sys.stderr)
            return 1
        if isinstance(cause, OSError) or type(cause).__module__.startswith("asyncpg"):
            # Also a PostgreSQL store that refused us (authentication, no such database).
            print(f"appserver: {cause}", file=sys.stderr)
            return 1
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
