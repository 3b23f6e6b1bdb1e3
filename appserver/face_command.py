"""Running a face (``appserver host|rpc|router|acp``, and Qwen Code's flags) on
this process's stdio."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from appserver.command_line import (
    configure_logs,
    face_module,
    given_provider_options,
    leaf,
    read_token,
)
from appserver.process_secrets import hide_secrets


def face_command(args: argparse.Namespace) -> int:
    """Run a face on this process's stdio (and the listeners its flags ask for)."""
    if not configure_logs(args):
        return 2
    if not args.workspace.is_dir():
        print(f"appserver: workspace {args.workspace} is not a directory", file=sys.stderr)
        return 2
    token = None
    if args.token_file is not None:
        try:
            token = read_token(args.token_file)
        except ValueError as exc:
            print(f"appserver: {exc}", file=sys.stderr)
            return 2
    hide_secrets(token, getattr(args, "api_key", None))
    args.token = token  # for a face that listens itself (codex --listen ws://)
    websocket = None
    if args.websocket is not None:
        from appserver.transport.base import ListenerError
        from appserver.transport.listen_options import ListenerOptions, check_options

        websocket = ListenerOptions(
            host=args.websocket.host, port=args.websocket.port or 0, token=token
        )
        try:
            check_options(websocket)
        except ListenerError as exc:
            print(f"appserver: {exc}", file=sys.stderr)
            return 2
    provider_options = given_provider_options(args)
    module = face_module(args.face)
    prepared = args.early = None
    # A face that can answer its client's first line (its handshake) does so
    # before it imports anything heavy (appserver/transport/early.py).
    early_answer = getattr(module, "early_answer", None)
    answer = early_answer(args, provider_options) if early_answer and not websocket else None
    if answer is not None:
        from appserver.early_start import answer_face

        prepared, args.early = answer_face(args.workspace, provider_options, answer)
    import anyio

    from appserver.hosting import HostOptions, open_host

    options = HostOptions(
        workspace=args.workspace,
        provider_options=provider_options,
        tool_env=tuple(args.tool_env),
        websocket=websocket,
        trust_workspace=args.trust_workspace,
        prepared=prepared,
    )
    from appserver.transport.stdio import claim_stdio

    stdin, stdout = claim_stdio()

    def host(workspace: Path | None = None) -> Any:
        if workspace is None:
            return open_host(options)
        # Another directory a face serves (ACP sessions' cwds): opened as the
        # first, minus what the command line said of the first only.
        other = dataclasses.replace(
            options, workspace=workspace, trust_workspace=False, websocket=None, prepared=None
        )
        return open_host(other)

    terminated = _sigterm_as_interrupt()
    try:
        code: int = anyio.run(module.main, args, options, host, stdin, stdout)
    except KeyboardInterrupt:
        return 143 if terminated else 130  # the shell's 128 + the signal's number
    except Exception as error:
        from appserver.transport.base import AddressInUse, ListenerError

        cause = leaf(error)  # a face that let its --websocket listener's failure through
        if isinstance(cause, AddressInUse):
            print(f"appserver: {cause.advice('--websocket')}", file=sys.stderr)
            return 2
        if isinstance(cause, ListenerError):
            print(f"appserver: {cause}", file=sys.stderr)
            return 2
        from appserver.storage.failures import disk_failure

        disk = disk_failure(cause)
        if disk is not None:  # a full or failing disk, as app-server reports it
            where = options.craft_dir
            print(f"appserver: cannot start: {disk} (in {where})", file=sys.stderr)
            return 1
        raise
    return code


def _sigterm_as_interrupt() -> list[bool]:
    """Make SIGTERM stop the face as SIGINT does: the turns in flight are
    stored cancelled (a supervisor's stop is not a crash; it left them running,
    to be failed at the next start). A face that handles SIGTERM itself (the
    router, ``codex exec``) overrides this while it runs. Returns a flag set
    when SIGTERM came."""
    import signal

    terminated = [False]
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        # SIGINT ignored (a background job of a shell) or taken: asyncio would not
        # act on it, so SIGTERM keeps its default action.
        return terminated

    def interrupt(signum: int, frame: object) -> None:
        terminated[0] = True
        signal.raise_signal(signal.SIGINT)  # asyncio's runner cancels the main task

    signal.signal(signal.SIGTERM, interrupt)
    return terminated
