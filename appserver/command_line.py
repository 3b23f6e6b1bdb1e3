"""What the ``appserver`` command's parts share: ``--listen`` addresses, the token
file, the flags every face shares with ``app-server``, log set-up and unwrapping a
task group's one failure (``appserver.cli`` builds the parser and runs
``app-server``; ``appserver.face_command`` runs a face)."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from appserver import logs


class SuggestingParser(argparse.ArgumentParser):
    """An argument parser that answers a mistyped option or command with the
    nearest one it knows ("did you mean --listen?"): Python 3.11's argparse
    has no ``suggest_on_error``."""

    def error(self, message: str) -> NoReturn:
        super().error(message + suggestion(self, message))


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``"; did you mean X?"`` for the first unknown option or invalid choice in
    argparse's ``message`` that is close to one ``parser`` knows, else ``""``."""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        known = [word.strip(" '") for word in choice.group(2).split(",")]
        words = [choice.group(1)]
    elif message.startswith("unrecognized arguments: "):
        known = list(parser._option_string_actions)
        words = [
            word.split("=", 1)[0]
            for word in message.removeprefix("unrecognized arguments: ").split()
            if word.startswith("-")
        ]
    else:
        return ""
    import difflib  # only for a mistake: not on every start

    for word in words:
        close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        if close:
            return f"; did you mean {close[0]}?"
    return ""


def parse_arguments(parser: argparse.ArgumentParser, arguments: list[str]) -> argparse.Namespace:
    """``parser.parse_args(arguments)``, except that an unknown option after a
    subcommand is reported (and a near option suggested) by that subcommand's
    parser, which knows its options, instead of the top-level one."""
    args, extras = parser.parse_known_args(arguments)
    if extras:
        owner = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                owner = action.choices.get(str(getattr(args, action.dest, "")), parser)
        owner.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


class Listen(NamedTuple):
    """Where ``app-server`` serves: stdio, a WebSocket address, or both."""

    stdio: bool
    host: str | None = None
    port: int | None = None


def parse_listen(value: str) -> Listen:
    """``stdio://``, ``ws://HOST:PORT`` or ``ws+stdio://HOST:PORT``."""
    if value in ("stdio://", "stdio"):
        return Listen(stdio=True)
    from urllib.parse import urlsplit  # only for an address: not on a stdio start

    url = urlsplit(value)
    if url.scheme not in ("ws", "ws+stdio") or not url.hostname:
        raise argparse.ArgumentTypeError(
            f"expected stdio://, ws://HOST:PORT or ws+stdio://HOST:PORT, got {value!r}"
        )
    if url.path not in ("", "/", "/ws"):
        raise argparse.ArgumentTypeError("the WebSocket path is always /ws")
    try:
        port = url.port if url.port is not None else 9100
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return Listen(stdio=url.scheme == "ws+stdio", host=url.hostname, port=port)


def read_token(path: Path) -> str:
    """The WebSocket token in ``path``; ``ValueError`` if unreadable or empty."""
    try:
        token = path.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the token file {path}: {exc}") from None
    if not token:
        raise ValueError(f"the token file {path} is empty")
    return token


def face_module(name: str) -> Any:
    """``appserver.faces.<name>`` (light at import: its heavy parts load in ``main``)."""
    return importlib.import_module(f"appserver.faces.{name}")


TRUST_HELP = (
    "trust this workspace's own files (.craft/: its database's MCP servers, cron jobs, "
    "thread policies and grants, its plugins, its heartbeat), recorded in your settings for "
    "later starts; an untrusted workspace serves but runs none of them (docs/security.md)"
)


FACE_APPROVAL_HELP = (
    "approval policy of the threads this face creates (default: yours, set with "
    "workspace/config/update or in your own config.json, never the workspace's). Under "
    "`default` a gated tool call is asked of whoever can answer: this protocol's client "
    "where it has approval frames (Qwen can_use_tool, ACP session/request_permission), "
    "else a --websocket client watching the thread; with nobody to ask it is declined"
)


def add_shared_options(parser: argparse.ArgumentParser, approval_help: str) -> None:
    """The flags ``app-server`` and every face take: the workspace, the model
    provider and its key, the approval policy, tool environment and trust."""
    parser.add_argument(
        "--workspace",
        type=Path,
        default=Path.cwd(),
        metavar="DIR",
        help="workspace root; state lives in DIR/.craft (default: current directory)",
    )
    parser.add_argument(
        "--provider",
        choices=["offline", "openai", "anthropic"],
        help=(
            "model provider (default: $APPSERVER_PROVIDER, the workspace config, else offline: "
            "a deterministic local model that needs no network)"
        ),
    )
    parser.add_argument(
        "--model", help="model name (default: $APPSERVER_MODEL, the workspace config)"
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible or Anthropic endpoint (default: $APPSERVER_BASE_URL, vendor vars)",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=(
            "provider API key (default: the provider's variable, such as $OPENAI_API_KEY); "
            "never logged, and blanked from /proc once read"
        ),
    )
    parser.add_argument(
        "--approval-policy",
        choices=["default", "autoApprove", "interrupt"],
        help=approval_help,
    )
    parser.add_argument(
        "--tool-env",
        action="append",
        default=[],
        metavar="NAME",
        help=(
            "pass this secret-looking environment variable (name containing KEY, TOKEN, "
            "SECRET, PASSWORD or CREDENTIAL) on to tool commands, which otherwise never "
            "see one (repeatable)"
        ),
    )
    parser.add_argument(
        "--trust-workspace",
        action="store_true",
        help=TRUST_HELP,
    )


def given_provider_options(args: argparse.Namespace) -> dict[str, str]:
    """The provider flags of :func:`add_shared_options` that were given, by
    setting name (what ``providers.resolve_settings`` takes before the
    environment and the workspace's config)."""
    given = (
        ("provider", args.provider),
        ("model", args.model),
        ("base_url", args.base_url),
        ("api_key", args.api_key),
    )
    return {key: value for key, value in given if value}


def add_face_options(parser: argparse.ArgumentParser) -> None:
    """The flags every face shares with ``app-server``, and a face's own listener."""
    add_shared_options(parser, FACE_APPROVAL_HELP)
    parser.add_argument(
        "--websocket",
        type=parse_listen,
        metavar="ws://HOST:PORT",
        help=(
            "also serve the AppServer JSON-RPC protocol to WebSocket clients on this address, "
            "in this process (they can list and watch this face's threads)"
        ),
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="with --websocket: clients must connect with ?token=<this file's content>",
    )
    logs.add_arguments(parser, default_level="warning")


def configure_logs(args: argparse.Namespace) -> bool:
    """Set up stderr logging from ``--log-level``/``--log-format``; ``False`` (and
    one line on stderr) when an environment variable gave an unusable value."""
    try:
        logs.configure(args.log_level, args.log_format)
    except logs.LogConfigError as exc:
        print(f"appserver: {exc}", file=sys.stderr)
        return False
    return True


def leaf(error: BaseException) -> BaseException:
    """The one exception inside (nested) single-member exception groups."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
