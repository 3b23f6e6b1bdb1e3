"""``appserver acp``'s command: its flags and :func:`main`.

Light at import: :func:`main` imports the agent (and with it the ``acp`` package), so
``appserver acp --help`` loads neither. The package's docstring has the mapping.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import IO, Any

from appserver.faces.common import add_backlog_argument, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This face's own flags (the shared ones are added by the CLI)."""
    group = parser.add_argument_group("acp")
    group.add_argument(
        "--max-turn-requests",
        type=positive_int,
        metavar="N",
        help=(
            "model calls per prompt (default 32); past it the prompt ends with "
            "stopReason max_turn_requests"
        ),
    )
    add_backlog_argument(group)


def early_answer(
    args: argparse.Namespace, provider_options: dict[str, Any]
) -> Callable[[bytes], str | None]:
    """The answer to the client's first line (``initialize``) before the face,
    and the ``acp`` package, are imported (appserver/transport/early.py)."""
    from appserver.faces.acp.handshake import initialize_answer

    return initialize_answer


def configure(args: argparse.Namespace, options: Any) -> None:
    """Apply this face's flags to the host options (before the host opens)."""
    import dataclasses

    if args.max_turn_requests is not None:
        options.engine = dataclasses.replace(options.engine, max_model_calls=args.max_turn_requests)


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve ACP on ``stdin``/``stdout`` until stdin closes; returns the exit code."""
    from appserver.faces.acp.agent import serve

    configure(args, options)
    return await serve(args, host, stdin, stdout, options.craft_dir)
