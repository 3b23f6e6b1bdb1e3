"""``appserver router``: the Codeswarm router protocol ``codeswarm.router.v1``.

NDJSON commands in, NDJSON events out, on stdin/stdout (the default) or,
with ``--listen tcp://HOST:PORT``, over TCP for any number of clients (how
the Codeswarm CLI connects: ``codeswarm ... --router HOST:PORT``), every
event going to every client. ``inject`` runs a turn on the thread bound to
``(job_id, node_id)``; ``swarm_launch`` / ``swarm_list`` / ``swarm_status``
/ ``swarm_terminate`` / ``providers_list`` cover what the Codeswarm CLI
calls. See ``docs/faces.md`` and ``schema/faces/codeswarm.router.v1.schema.json``.

Light at import: the transport and the router load in :func:`main`.
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

DEFAULT_PORT = 8765  # the Codeswarm CLI's default router port
DEFAULT_BACKLOG_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class TcpAddress:
    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port if port is None else port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_listen(value: str) -> TcpAddress | None:
    """``stdio://`` (``None``) or ``tcp://HOST[:PORT]`` on a loopback address."""
    if value in ("stdio://", "stdio"):
        return None
    url = urlsplit(value)
    if url.scheme != "tcp" or not url.hostname or url.path not in ("", "/"):
        raise argparse.ArgumentTypeError(f"expected stdio:// or tcp://HOST:PORT, got {value!r}")
    try:
        port = url.port if url.port is not None else DEFAULT_PORT
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not is_loopback(url.hostname):
        raise argparse.ArgumentTypeError(
            f"{url.hostname} is not a loopback address: the router protocol has no "
            "authentication, so it listens on 127.0.0.1, ::1 or localhost only"
        )
    return TcpAddress(url.hostname, port)


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of bytes, got {value!r}") from None
    if number < 1024:
        raise argparse.ArgumentTypeError("must be at least 1024")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This face's own flags (the shared ones are added by the CLI)."""
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default=None,
        metavar="URL",
        help=(
            "stdio:// (default: commands on stdin, events on stdout; exits at EOF once the "
            "accepted injections have run) or tcp://HOST:PORT (any number of clients, every "
            f"event to every client; loopback only; port {DEFAULT_PORT} if omitted, 0 picks "
            "a free one; runs until SIGINT/SIGTERM)"
        ),
    )
    parser.add_argument(
        "--allow-missing-timestamp",
        action="store_true",
        help=(
            "accept commands without a timestamp (the Codeswarm CLI sends none); a timestamp "
            "that is present must still be ISO-8601 UTC"
        ),
    )
    parser.add_argument(
        "--max-client-backlog",
        type=_positive_int,
        default=DEFAULT_BACKLOG_BYTES,
        metavar="BYTES",
        help=(
            "a client with more than this many bytes of events unread is disconnected "
            f"(default {DEFAULT_BACKLOG_BYTES})"
        ),
    )


async def main(
    args: argparse.Namespace, options: Any, host: Any, stdin: IO[bytes], stdout: IO[bytes]
) -> int:
    """Serve the protocol (stdio or TCP, per ``--listen``); returns the exit code."""
    from appserver.faces.codeswarm.serve import serve

    options.build_turn_models = False  # its relay reads a turn's events as data
    return await serve(args, host, stdin, stdout)
