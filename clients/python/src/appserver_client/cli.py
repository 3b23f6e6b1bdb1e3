"""The ``appserver-client`` command line: its parser and :func:`main`.

The chat itself is :class:`~appserver_client.chat_session.Chat`
(:mod:`appserver_client.chat_session`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from appserver_client import __version__
from appserver_client.chat_input import PlainInput, wants_editor
from appserver_client.chat_session import Chat, pick_thread
from appserver_client.transport import websocket_url

__all__ = ["Chat", "build_parser", "main", "pick_thread"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="appserver-client", description="Client for the appserver JSON-RPC AppServer."
    )
    parser.add_argument("--version", action="version", version=f"appserver-client {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    chat = commands.add_parser(
        "chat",
        help="chat with the agent in this terminal",
        description=(
            "Chat with the agent. With --url, connect to a running server over WebSocket; "
            "otherwise start `appserver app-server` over stdio for --workspace."
        ),
    )
    chat.add_argument(
        "--url",
        help=(
            "WebSocket URL of a running server, e.g. ws://127.0.0.1:9100 (its web page's "
            "http:// address works too)"
        ),
    )
    chat.add_argument("--token", help="WebSocket token (default: $APPSERVER_TOKEN)")
    chat.add_argument(
        "--workspace",
        type=Path,
        default=Path.cwd(),
        help="workspace for a spawned server (default: the current directory)",
    )
    chat.add_argument(
        "--server-command",
        metavar="CMD",
        help="command line that starts a stdio server (default: appserver app-server ...)",
    )
    chat.add_argument(
        "--user",
        default="local",
        help="userId of your threads (default: local, the user of every local client: the web "
        "page lists the same threads)",
    )
    chat.add_argument(
        "--plain",
        action="store_true",
        help="read plain lines even on a terminal (no line editor, no spinner)",
    )
    return parser


def _enable_line_editing() -> None:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (input() gains history and editing)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``appserver-client``."""
    args = build_parser().parse_args(argv)
    if args.command != "chat":
        build_parser().print_help(sys.stderr)
        return 2
    if not args.url and not args.workspace.is_dir():
        sys.stderr.write(f"appserver-client: {args.workspace} is not a directory\n")
        return 2
    if args.url:
        # The address the server prints for its web page works too.
        args.url = re.sub(r"^http(s?)://", r"ws\1://", args.url, flags=re.I)
        try:
            websocket_url(args.url, None)
        except ValueError as exc:  # checked here, like a bad flag: one line, exit 2
            sys.stderr.write(f"appserver-client: --url: {exc}\n")
            return 2
    # The chat says itself when the connection drops and comes back; the
    # library's own warnings would repeat that on stderr.
    logging.getLogger("appserver_client").setLevel(logging.CRITICAL)
    editor = not args.plain and wants_editor()
    if not editor:
        _enable_line_editing()
    saved = _save_terminal()
    chat = Chat(args, editor=editor)
    try:
        code = asyncio.run(chat.run())
    except KeyboardInterrupt:
        code = 130
    finally:
        _restore_terminal(saved)
    if isinstance(chat.input, PlainInput) and chat.input.busy:
        # A read is still blocked in input() on the helper thread; leave without
        # waiting for it (or for interpreter teardown to trip over stdin).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _save_terminal() -> Any:
    with contextlib.suppress(Exception):
        import termios

        if sys.stdin.isatty():
            return termios.tcgetattr(sys.stdin.fileno())
    return None


def _restore_terminal(saved: Any) -> None:
    if saved is None:
        return
    with contextlib.suppress(Exception):
        import termios

        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)


if __name__ == "__main__":
    raise SystemExit(main())
