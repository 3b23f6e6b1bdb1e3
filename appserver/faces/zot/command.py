"""The ``appserver rpc`` command: zot's flags (``add_arguments``), applying them to the
host options, taking the RPC token from the environment, and ``main``, which opens the
host and serves one session on stdin/stdout. Light at import: the rest of the face
loads inside ``main``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import IO, Any

from appserver.faces.common import add_backlog_argument, positive_int, system_prompt
from appserver.faces.zot.handshake import TOKEN_VARIABLES

# zot's tool names, accepted by --tools as well as ours.
TOOL_ALIASES = {
    "bash": "shell",
    "read": "read_file",
    "ls": "list_dir",
    "write": "write_file",
    "edit": "edit_file",
}


def _tool_list(value: str) -> list[str]:
    from appserver.tools.registry import default_tools

    known = [tool.name for tool in default_tools()]
    names: list[str] = []
    for raw in value.split(","):
        name = TOOL_ALIASES.get(raw.strip(), raw.strip())
        if not name:
            continue
        if name not in known:
            raise argparse.ArgumentTypeError(
                f"unknown tool {raw.strip()!r} (tools: {', '.join(known)})"
            )
        if name not in names:
            names.append(name)
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """zot's flags (``--provider``, ``--model``, ``--base-url``, ``--api-key`` are shared)."""
    group = parser.add_argument_group("zot rpc")
    group.add_argument(
        "--cwd",
        dest="workspace",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="zot's name for --workspace",
    )
    group.add_argument("--system-prompt", metavar="TEXT", help="replace the agent's system prompt")
    group.add_argument(
        "--append-system-prompt",
        action="append",
        default=[],
        metavar="TEXT",
        help="append TEXT to the system prompt (repeatable)",
    )
    group.add_argument(
        "--max-steps",
        type=positive_int,
        metavar="N",
        help="model calls per prompt before it fails (default 32)",
    )
    group.add_argument("--no-tools", action="store_true", help="offer the model no tools")
    group.add_argument(
        "--tools",
        type=_tool_list,
        metavar="NAME,...",
        help=(
            "offer only these tools: shell, read_file, list_dir, write_file, edit_file "
            "(zot's bash, read, ls, write, edit also work)"
        ),
    )
    group.add_argument(
        "--reasoning", metavar="LEVEL", help="accepted for zot's clients; has no effect"
    )
    group.add_argument(
        "--no-context-files",
        action="store_true",
        help="read no AGENTS.md (neither the project's nor the user's)",
    )
    add_backlog_argument(group)


def configure(args: argparse.Namespace, options: Any) -> None:
    """Apply this face's flags to the host options (before the host opens)."""
    changes: dict[str, Any] = {
        "system_prompt": system_prompt(
            options.engine.system_prompt, args.system_prompt, args.append_system_prompt
        )
    }
    if args.max_steps is not None:
        changes["max_model_calls"] = args.max_steps
    if args.no_context_files:
        changes["project_instructions"] = changes["user_instructions"] = False
    if changes:
        options.engine = dataclasses.replace(options.engine, **changes)
    if args.no_tools:
        options.tools = []
    elif args.tools is not None:
        options.tools = list(args.tools)


def take_token() -> str | None:
    """The RPC token from the environment (removed from it and from /proc)."""
    token: str | None = None
    for name in TOKEN_VARIABLES:
        value = os.environ.pop(name, None)
        if value and token is None:
            token = value
    if token is not None:
        from appserver.process_secrets import hide_secrets

        hide_secrets(token)
    return token


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve zot's RPC protocol on stdin/stdout until stdin closes."""
    from appserver.faces.start_failure import StartFailure, answer_first_request, open_runtime
    from appserver.faces.zot.process import serve
    from appserver.faces.zot.wire import MAX_LINE_BYTES
    from appserver.transport.stdio import StdioTransport

    token = take_token()
    configure(args, options)
    options.build_turn_models = False  # its streams read a turn's events as data
    async with AsyncExitStack() as stack:
        runtime = await open_runtime(stack, host, options.craft_dir)
        if isinstance(runtime, StartFailure):
            answer = partial(_refusal, runtime.message)
            await answer_first_request(
                stdin, stdout, answer, MAX_LINE_BYTES, getattr(args, "early", None)
            )
            return runtime.code
        early = getattr(args, "early", None)  # a hello answered before (early_answer)
        transport = await StdioTransport.open(
            stdin, stdout, max_message_bytes=MAX_LINE_BYTES, early=early
        )
        return await serve(
            runtime, transport, options, args.approval_policy, token, args.max_client_backlog
        )
    return 0  # unreachable: the context manager does not swallow exceptions


def _refusal(why: str, message: Any) -> list[dict[str, Any]] | None:
    """The frames answering the first command when the workspace could not open:
    the command's failure, then ``error`` and ``done`` as a failed run ends."""
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return None
    from appserver.faces.zot.wire import failure

    request_id = message.get("id") if isinstance(message.get("id"), str) else None
    error = f"appserver cannot start: {why}"
    return [
        failure(request_id or None, message["type"], error),
        {"type": "error", "message": error},
        {"type": "done"},
    ]
