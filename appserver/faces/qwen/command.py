"""The Qwen command (``appserver --input-format stream-json ...``, no subcommand):
Qwen Code's flags (``add_arguments``), applying them to the host options and the
face's settings (``configure``), and ``main``, which reads a ``--input-format text``
prompt, opens the host and serves one session on stdin/stdout.

Only argparse and the standard library are imported here (and the approval modes'
names); the rest loads in :func:`main`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from appserver.faces.common import add_backlog_argument
from appserver.faces.qwen.rules import MODES

if TYPE_CHECKING:
    from appserver.transport.early import EarlyAnswer

log = logging.getLogger("appserver.faces.qwen")

MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_TEXT_BYTES = 16 * 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag ``@qwen-code/sdk`` 0.1.14 passes and the Qwen Code CLI defines
    (``--model`` is shared). Unknown flags are ignored by the caller."""
    io = parser.add_argument_group("Qwen Code structured I/O")
    io.add_argument("--input-format", choices=["stream-json", "text"], default="text")
    io.add_argument(
        "-o",
        "--output-format",
        choices=["stream-json", "stream-chunk-json", "json", "text"],
        default="text",
    )
    io.add_argument("--include-partial-messages", action="store_true")
    io.add_argument(
        "-p", "--prompt", help="the first prompt (with --input-format text: appended to stdin)"
    )
    io.add_argument("-m", dest="model", default=argparse.SUPPRESS, help="--model")
    io.add_argument("--system-prompt", metavar="TEXT", help="replace the agent's system prompt")
    io.add_argument("--append-system-prompt", action="append", default=[], metavar="TEXT")
    io.add_argument("--approval-mode", choices=MODES, help="plan, default, auto-edit, auto, yolo")
    io.add_argument("-y", "--yolo", action="store_true", help="--approval-mode yolo")
    io.add_argument(
        "--session-id", metavar="ID", help="the session's id (a later process resumes it)"
    )
    io.add_argument("-r", "--resume", nargs="?", const="", metavar="ID", help="resume a session")
    io.add_argument("-c", "--continue", dest="continue_session", action="store_true")
    # A prompt of up to a line's 16 MiB comes back in its `assistant` and `result`
    # frames (an echo, or a model that quotes it), queued at once.
    add_backlog_argument(io, default=2 * MAX_LINE_BYTES + 16 * 1024 * 1024)
    io.add_argument("--fork-session", action="store_true", help="not supported (refused)")
    io.add_argument("--max-session-turns", type=int, metavar="N", help="model calls per prompt")
    io.add_argument(
        "--core-tools", action="append", metavar="NAME,...", help="offer only these tools"
    )
    io.add_argument("--exclude-tools", action="append", metavar="NAME,...")
    io.add_argument(
        "--allowed-tools", action="append", metavar="NAME,...", help="run without asking"
    )
    io.add_argument("--auth-type", metavar="TYPE", help="openai or anthropic picks the provider")
    io.add_argument("--openai-api-key", metavar="KEY")
    io.add_argument("--openai-base-url", metavar="URL")
    io.add_argument("-d", "--debug", action="store_true", help="log at debug level")
    io.add_argument("--channel", metavar="NAME", help="accepted (SDK, VSCode, ...)")
    ignored = parser.add_argument_group("accepted for Qwen Code's clients; no effect")
    for flag in ("--sandbox", "--safe-mode", "--insecure", "--bare", "--acp", "--screen-reader"):
        ignored.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in ("--openai-logging", "--experimental-lsp", "--list-extensions", "--telemetry"):
        ignored.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in ("--telemetry-log-prompts", "--chat-recording", "--no-sandbox", "--no-insecure"):
        ignored.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in (
        "--max-tool-calls",
        "--max-subagent-depth",
        "--max-wall-time",
        "--include-directories",
        "--add-dir",
        "--extensions",
        "--allowed-mcp-server-names",
        "--mcp-config",
        "--fallback-model",
        "--proxy",
        "--disabled-slash-commands",
        "--output-style",
        "--sandbox-image",
        "--openai-logging-dir",
        "--json-fd",
        "--json-file",
        "--json-schema",
        "--input-file",
        "--prompt-interactive",
        "--telemetry-target",
        "--telemetry-otlp-endpoint",
        "--telemetry-otlp-protocol",
        "--telemetry-outfile",
        "--sandbox-session-id",
    ):
        ignored.add_argument(flag, action="append", help=argparse.SUPPRESS)
    # Optional value: bare `--worktree` is allowed.
    ignored.add_argument("--worktree", nargs="?", const="", help=argparse.SUPPRESS)


def apply_provider_flags(args: argparse.Namespace, provider: dict[str, Any]) -> None:
    """Qwen's provider flags (``--auth-type``, ``--openai-*``) where the shared
    ones said nothing (once applied, applying them again changes nothing)."""
    if "provider" not in provider and args.auth_type in ("openai", "openai-responses", "anthropic"):
        provider["provider"] = "anthropic" if args.auth_type == "anthropic" else "openai"
    if args.openai_api_key and "api_key" not in provider:
        from appserver.process_secrets import hide_secrets

        hide_secrets(args.openai_api_key)
        provider["api_key"] = args.openai_api_key
    if args.openai_base_url and "base_url" not in provider:
        provider["base_url"] = args.openai_base_url


def early_answer(
    args: argparse.Namespace, provider_options: dict[str, Any]
) -> Callable[[bytes], str | None] | None:
    """The answer to the SDK's ``initialize`` control request before the face is
    built (appserver/transport/early.py), on a plain start (faces/qwen/handshake.py)."""
    from appserver.faces.qwen.handshake import early_answer as plain_start

    apply_provider_flags(args, provider_options)
    return plain_start(args)


def configure(args: argparse.Namespace, options: Any) -> Any:
    """Apply the flags to the host options (before the host opens); the
    face's :class:`~appserver.faces.qwen.session.Settings`."""
    from appserver.faces.common import system_prompt
    from appserver.faces.qwen.rules import ToolRules, split_list
    from appserver.faces.qwen.session import Settings
    from appserver.runtime.subagent_tools import CONTROL_TOOL_NAMES
    from appserver.tools.registry import default_tools

    changes: dict[str, Any] = {
        "system_prompt": system_prompt(
            options.engine.system_prompt, args.system_prompt, args.append_system_prompt
        )
    }
    if args.max_session_turns is not None and args.max_session_turns > 0:
        changes["max_model_calls"] = args.max_session_turns
    if changes:
        options.engine = dataclasses.replace(options.engine, **changes)
    known = [tool.name for tool in default_tools()] + list(CONTROL_TOOL_NAMES)
    rules = ToolRules.build(
        known,
        split_list(args.core_tools),
        split_list(args.exclude_tools),
        split_list(args.allowed_tools),
    )
    if rules.ignored:
        log.warning("no such tools here (ignored): %s", ", ".join(rules.ignored))
    if rules.registry is not None:
        options.tools = rules.registry
    apply_provider_flags(args, options.provider_options)
    mode = args.approval_mode or ("yolo" if args.yolo else "default")
    return Settings(
        input_format=args.input_format,
        output_format=args.output_format,
        partial=args.include_partial_messages,
        mode=mode,
        approval_override=args.approval_policy,
        rules=rules,
        prompt=args.prompt,
        session_id=args.session_id or None,
        resume=args.resume,
        continue_session=args.continue_session,
        model=getattr(args, "model", None),
        max_backlog=args.max_client_backlog,
    )


async def read_text(stdin: IO[bytes]) -> bytes:
    """All of stdin (``--input-format text``), at most :data:`MAX_TEXT_BYTES` + 1."""
    from appserver.faces.whole_input import read_in_daemon

    # A stop (SIGINT, SIGTERM) does not wait for the end of input.
    return await read_in_daemon(lambda: _read_to_end(stdin, MAX_TEXT_BYTES + 1))


def _read_to_end(stdin: IO[bytes], limit: int) -> bytes:
    """Read until end of input or ``limit`` bytes: one read of a raw pipe
    returns what one write put there (64 KiB, or the first part of a prompt
    written in pieces), not the whole of it."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = stdin.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve Qwen Code's structured I/O on stdin/stdout; the exit code."""
    from contextlib import AsyncExitStack

    from appserver.faces.qwen.session import Session, SessionError
    from appserver.faces.start_failure import StartFailure, open_runtime
    from appserver.transport.stdio import StdioTransport

    if args.debug:
        logging.getLogger("appserver").setLevel(logging.DEBUG)
    if args.fork_session:
        sys.stderr.write(
            "appserver: --fork-session is not supported (a session cannot be copied)\n"
        )
        return 2
    settings = configure(args, options)
    options.build_turn_models = False  # its turns read the runtime's events as data
    text: str | None = None
    if settings.input_format == "text":
        data = await read_text(stdin)
        if len(data) > MAX_TEXT_BYTES:
            sys.stderr.write(f"appserver: the prompt on stdin exceeds {MAX_TEXT_BYTES} bytes\n")
            return 1
        text = data.decode("utf-8", errors="replace")
        if settings.prompt:
            text = f"{text}\n\n{settings.prompt}" if text.strip() else settings.prompt
        if not text.strip():
            sys.stderr.write(
                "appserver: No input provided via stdin. Input can be provided by piping data "
                "or using the --prompt option.\n"
            )
            return 1
    async with AsyncExitStack() as stack:
        runtime = await open_runtime(stack, host, options.craft_dir)
        if isinstance(runtime, StartFailure):
            early = getattr(args, "early", None)
            await refuse_start(settings, runtime.message, text, stdin, stdout, early)
            return runtime.code
        transport = await StdioTransport.open(
            stdin, stdout, max_message_bytes=MAX_LINE_BYTES, early=getattr(args, "early", None)
        )
        session = Session(runtime, transport, settings)
        try:
            await session.open()
        except SessionError as exc:
            sys.stderr.write(f"appserver: {exc}\n")
            await transport.close()
            return 1
        return await session.serve(text)
    return 0  # unreachable: the context manager does not swallow exceptions


def failed_result(why: str) -> dict[str, Any]:
    """The ``result`` of a run that could not start (the workspace did not open)."""
    import uuid

    error = f"appserver cannot start: {why}"
    return {
        "type": "result",
        "subtype": "error_during_execution",
        "uuid": str(uuid.uuid4()),
        "session_id": "",
        "is_error": True,
        "duration_ms": 0,
        "duration_api_ms": 0,
        "num_turns": 0,
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "total_tokens": 0,
            "cache_read_input_tokens": 0,
        },
        "permission_denials": [],
        "error": {"message": error},
    }


def _refusal(why: str, message: Any) -> list[dict[str, Any]] | None:
    """stream-json input: the control request (the SDK's ``initialize``) gets a
    ``control_response`` error, and a ``result`` with ``is_error`` follows; a user
    message gets the ``result``."""
    if not isinstance(message, dict):
        return None
    if message.get("type") == "control_request":
        body = {
            "subtype": "error",
            "request_id": message.get("request_id"),
            "error": f"appserver cannot start: {why}",
        }
        return [{"type": "control_response", "response": body}, failed_result(why)]
    if message.get("type") == "user":
        return [failed_result(why)]
    return None


async def refuse_start(
    settings: Any,
    why: str,
    text: str | None,
    stdin: IO[bytes],
    stdout: IO[bytes],
    early: EarlyAnswer | None = None,
) -> None:
    """Tell the client the run cannot start, in its output format (``early``: what
    was read of stdin before, appserver/transport/early.py)."""
    import json
    from functools import partial

    from appserver.faces.start_failure import answer_first_request

    if text is None:  # stream-json input: answer the first request
        await answer_first_request(stdin, stdout, partial(_refusal, why), MAX_LINE_BYTES, early)
        return
    if settings.output_format == "text":
        return  # the reason is on stderr, as a failed text run's is
    result: Any = failed_result(why)
    if settings.output_format == "json":
        result = [result]
    stdout.write((json.dumps(result) + "\n").encode())
    stdout.flush()
