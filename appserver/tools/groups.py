"""Starting a command in a process group of its own, and killing that group.

Shared by the ``shell`` tool, background terminals and ``rg``.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import Process

from appserver.tools.reaper import group_alive

KILL_GRACE_S = 1.0  # between SIGTERM and SIGKILL


async def open_group_process(argv: Sequence[str], **options: Any) -> Process:
    """``anyio.open_process`` in a new session (its own process group), started
    whole even if the caller is cancelled meanwhile.

    A cancellation while asyncio connects the pipes (an interrupted turn, at
    the moment its command starts) would kill the first process only, leave
    the rest of its group running untracked and the pipes open until the
    garbage collector finds them. Shielded, the start takes milliseconds and
    the caller's own cleanup (which runs at its next checkpoint) ends the group.
    """
    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(list(argv), start_new_session=True, **options)
    return process


async def _wait_group_gone(pgid: int, timeout: float) -> bool:
    """Poll until the group is gone; ``False`` if it outlived ``timeout``."""
    # Polling is the only portable way: there is no wait() for a process group
    # whose members are not our children.
    delay = 0.005
    with anyio.move_on_after(timeout):
        while group_alive(pgid):
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True
    return False


def _signal_group(pgid: int, signum: int) -> None:
    # Already gone (or the pgid was reused by a group we may not touch).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def kill_process_group(pgid: int, grace: float = KILL_GRACE_S) -> None:
    """SIGTERM the group, then SIGKILL what is left after ``grace`` seconds.

    Returns once no member is running any more (bounded by a second ``grace``
    after SIGKILL, which cannot be ignored, so it only covers delivery).
    """
    _signal_group(pgid, signal.SIGTERM)
    if await _wait_group_gone(pgid, grace):
        return
    _signal_group(pgid, signal.SIGKILL)
    await _wait_group_gone(pgid, grace)
