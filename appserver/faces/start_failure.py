"""A face whose workspace cannot open still answers its client in its own protocol.

A client that spawned the process waits for an answer to its first request
(ACP's ``initialize``, the Qwen SDK's ``initialize`` control request, zot's
first command); silence and exit 1 leave it guessing ("exited before
initialize completed", empty output). So a failure to open the runtime (a
process holding the workspace lock exclusively, an unreadable database, a bad
provider setting) is written to stderr as before, then the first request read
from stdin gets the face's error frames, and the process exits with the same
code (2: a setting, 1: anything else). Input that ends, or nothing within
:data:`FIRST_REQUEST_WAIT` seconds, ends it without frames.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from appserver.transport.early import EarlyAnswer

log = logging.getLogger("appserver.faces")

OPEN_ATTEMPTS = 4  # opening the workspace while another process creates its database
FIRST_REQUEST_WAIT = 30.0

# A line from the client -> the frames that answer it (None: not a request; read on).
Answer = Callable[[Any], list[dict[str, Any]] | None]


@dataclass(frozen=True)
class StartFailure:
    """Why the runtime could not open, and the exit code that says so."""

    code: int
    message: str


async def open_runtime(
    stack: AsyncExitStack, host: Callable[[], Any], craft_dir: Any = None
) -> Any:
    """The runtime ``host()`` opens (kept by ``stack``), or the :class:`StartFailure`
    (already told on stderr, a failing disk with where: ``craft_dir``, as app-server
    says it). A failure of another kind is a bug and is raised."""
    from appserver.providers.base import ProviderConfigError
    from appserver.storage.failures import disk_failure
    from appserver.storage.lock import WorkspaceLocked

    try:
        return await _enter_runtime(stack, host)
    except (ProviderConfigError, ValueError) as exc:  # ValueError: e.g. an unknown tool
        failure = StartFailure(2, str(exc))
    except WorkspaceLocked as exc:
        failure = StartFailure(1, str(exc))
    except (sqlite3.Error, OSError) as exc:  # an unreadable database, a failing disk
        failure = StartFailure(1, disk_failure(exc) or str(exc))
        if craft_dir is not None:
            sys.stderr.write(f"appserver: cannot start: {failure.message} (in {craft_dir})\n")
            return failure
    sys.stderr.write(f"appserver: cannot start: {failure.message}\n")
    return failure


async def _enter_runtime(stack: AsyncExitStack, host: Callable[[], Any]) -> Any:
    """``host()`` entered, tried again briefly when SQLite says the file is busy.

    Clients start processes in bursts (two SDK queries at once, an editor's
    second agent): one that starts at the very instant another creates the
    workspace's database can meet locks SQLite's busy handler does not wait
    for ("database is locked", or an I/O error while the other sets up the
    WAL index). A moment later the file is ready."""
    delay = 0.05
    for attempt in range(1, OPEN_ATTEMPTS + 1):
        try:
            return await stack.enter_async_context(host())
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "disk I/O error" in str(exc)
            if not busy or attempt == OPEN_ATTEMPTS:
                raise
            log.debug("opening the workspace: %s; trying again", exc)
            await anyio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


async def answer_first_request(
    stdin: IO[bytes],
    stdout: IO[bytes],
    answer: Answer,
    max_line_bytes: int,
    early: EarlyAnswer | None = None,
) -> None:
    """Read client lines until ``answer`` gives frames for one, and write them.
    ``early``: what was read of stdin before (appserver/transport/early.py),
    read first."""
    from appserver.transport.base import TransportClosed
    from appserver.transport.stdio import StdioTransport

    lines = await StdioTransport.open(stdin, stdout, max_message_bytes=max_line_bytes, early=early)
    try:
        with anyio.move_on_after(FIRST_REQUEST_WAIT):
            while True:
                try:
                    line = await lines.receive()
                except TransportClosed:
                    return
                except Exception:  # an undecodable line is no request
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    message = None
                frames = answer(message)
                if frames is not None:
                    await lines.send_batch([json.dumps(frame) for frame in frames])
                    return
    finally:
        await lines.close()
