"""The ``appserver host`` command: the Zene face's flags and its ``main``.

Light at import (the CLI imports it to build its parser): the runtime and the
serving loop load inside :func:`main`.
"""

from __future__ import annotations

import argparse
import gc
import os
from collections.abc import Callable
from typing import IO, Any

from appserver.faces.common import add_backlog_argument

DEFAULT_MAX_INPUT_BYTES = 1024 * 1024
DEFAULT_STDIN_TIMEOUT_MS = 15_000
DEFAULT_IDEMPOTENCY_TTL_SEC = 600

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _flag(value: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _count(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        return number

    return parse


def _env_int(name: str, default: int) -> int:
    try:
        return max(0, int(os.environ.get(name, "")))
    except ValueError:
        return default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This face's own flags (the shared ones are added by the CLI)."""
    group = parser.add_argument_group("Zene Host Protocol v1")
    group.add_argument(
        "--protocol",
        choices=["v1"],
        default="v1",
        help="host protocol version (only v1)",
    )
    group.add_argument(
        "--bridge-compat",
        action="store_true",
        help=(
            "clawbridge compatibility: exit 0 whenever a response line was written, even for "
            "INVALID_REQUEST (clawbridge ignores stdout when the exit status is not 0)"
        ),
    )
    group.add_argument(
        "--single-request",
        nargs="?",
        const=True,
        default=False,
        type=_flag,
        metavar="true|false",
        help=(
            "answer one request line and exit (bare flag or `true`); without it, or with "
            "`false`, serve one request per line until stdin closes"
        ),
    )
    group.add_argument(
        "--max-input-bytes",
        type=_count(1),
        default=DEFAULT_MAX_INPUT_BYTES,
        metavar="N",
        help="a request line longer than N bytes is INVALID_REQUEST (default 1048576)",
    )
    group.add_argument(
        "--stdin-timeout-ms",
        type=_count(0),
        default=_env_int("ZENE_STDIN_TIMEOUT_MS", DEFAULT_STDIN_TIMEOUT_MS),
        metavar="N",
        help=(
            "with --single-request: exit 2 if no request line arrives within N ms; 0 waits "
            "forever (default $ZENE_STDIN_TIMEOUT_MS, else 15000)"
        ),
    )
    group.add_argument(
        "--idempotency-ttl-sec",
        type=_count(0),
        default=_env_int("ZENE_IDEMPOTENCY_TTL_SEC", DEFAULT_IDEMPOTENCY_TTL_SEC),
        metavar="N",
        help=(
            "a retry (same session_id and idempotency_key) gets the stored response again "
            "within timeout_ms*10/9 + 2 s of the original, and never after N seconds; 0 turns "
            "replays off (default $ZENE_IDEMPOTENCY_TTL_SEC, else 600)"
        ),
    )
    group.add_argument(
        "--keep-warm",
        type=_count(0),
        default=_env_int("ZENE_KEEP_WARM_SEC", 0),
        metavar="SECONDS",
        help=(
            "with --single-request: after answering, leave a warm process of this same "
            "command serving the next one-shots over a Unix socket (they skip Python's "
            "start-up), until it has been idle SECONDS; 0 (the default) turns it off "
            "(default $ZENE_KEEP_WARM_SEC, else 0; see docs/faces.md)"
        ),
    )
    add_backlog_argument(group)


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve the protocol on stdin/stdout; returns the exit code."""
    import anyio

    from appserver.faces.zene.warm import SOCKET_VARIABLE

    # A warm process started by a one-shot (--keep-warm): it serves a socket,
    # not its stdio. The variable is not handed on to the commands it runs.
    warm_socket = os.environ.pop(SOCKET_VARIABLE, None)
    if warm_socket and args.single_request and args.keep_warm:
        from appserver.faces.zene.warm_serving import serve_warm

        return await serve_warm(args, host, warm_socket)

    from appserver.faces.zene.serving import ZeneFace
    from appserver.transport.stdio import StdioTransport

    # Lines up to --max-input-bytes are requests; longer ones are refused.
    transport = await StdioTransport.open(stdin, stdout, max_message_bytes=args.max_input_bytes)
    face = ZeneFace(args, transport)
    try:
        async with anyio.create_task_group() as writing:
            writing.start_soon(face.writer.run)
            try:
                if args.single_request:
                    # A one-shot process: what is loaded now lives until exit. Frozen
                    # objects are skipped by every collection, so the request's
                    # collections stay small and the interpreter's final one, which
                    # costs ~50 ms over the runtime's heap, has almost nothing to do.
                    gc.freeze()
                    try:
                        code = await face.serve_one(options, host)
                    finally:
                        gc.freeze()
                else:
                    code = await face.serve(options, host)
            finally:
                face.writer.close()  # the writer ends once the responses are out
    finally:
        await transport.close(face.writer.close_code)
    return code
