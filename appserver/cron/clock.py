"""The time source of the scheduler and the heartbeat timer.

Everything that decides *when* (due jobs, next runs, ``createdAtMs``, the
heartbeat interval) asks a :class:`Clock`, so tests drive time with a fake
clock instead of waiting. Times are epoch milliseconds.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio

# The system clock re-reads the wall clock at least this often while sleeping,
# so a suspended laptop or an NTP step makes a job late by at most this much.
_MAX_NAP_S = 30.0


class Clock(Protocol):
    """Wall-clock time in epoch milliseconds, and a way to wait for it."""

    def now_ms(self) -> int:
        """The current time."""
        ...

    async def sleep_until(self, deadline_ms: int) -> None:
        """Return once :meth:`now_ms` has reached ``deadline_ms`` (cancellable)."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        """Milliseconds since the epoch, from the system's wall clock."""
        return int(time.time() * 1000)

    async def sleep_until(self, deadline_ms: int) -> None:
        """Sleep in naps, re-reading the wall clock after each."""
        while (remaining := deadline_ms - self.now_ms()) > 0:
            await anyio.sleep(min(remaining / 1000, _MAX_NAP_S))


async def sleep_until_or_woken(clock: Clock, deadline_ms: int | None, woken: anyio.Event) -> bool:
    """Wait until ``deadline_ms`` (forever if ``None``) or until ``woken`` is set.

    Returns ``True`` when woken first.
    """
    if woken.is_set():
        return True
    if deadline_ms is None:
        await woken.wait()
        return True
    result = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal result
            await woken.wait()
            result = True
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await clock.sleep_until(deadline_ms)
        tg.cancel_scope.cancel()
    return result
