"""A clock the test moves by hand, for the cron scheduler and the heartbeat timer."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio


def epoch_ms(text: str) -> int:
    """``"2100-01-01T00:00:00"`` (UTC) as epoch milliseconds."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


class FakeClock:
    """Time stands still until :meth:`advance` or :meth:`set` moves it.

    Sleepers wake when the time reaches their deadline. :attr:`deadlines`
    records every deadline slept for, so a test can wait until the scheduler
    is idle and sleeping until a known time (:meth:`wait_sleeper`).
    """

    def __init__(self, start_ms: int) -> None:
        self._now = start_ms
        self._moved = anyio.Event()
        self._slept = anyio.Event()
        self.sleeping: list[int] = []  # deadlines of current sleepers
        self.deadlines: list[int] = []  # every deadline ever slept for

    def now_ms(self) -> int:
        return self._now

    async def sleep_until(self, deadline_ms: int) -> None:
        self.sleeping.append(deadline_ms)
        self.deadlines.append(deadline_ms)
        self._slept.set()
        self._slept = anyio.Event()
        try:
            while self._now < deadline_ms:
                moved = self._moved
                await moved.wait()
        finally:
            self.sleeping.remove(deadline_ms)

    def set(self, now_ms: int) -> None:
        self._now = now_ms
        self._moved.set()
        self._moved = anyio.Event()

    def advance(self, ms: int) -> None:
        self.set(self._now + ms)

    async def wait_sleeper(self, deadline_ms: int | None = None, timeout: float = 10) -> None:
        """Wait until someone sleeps (until ``deadline_ms``, if given)."""
        with anyio.fail_after(timeout):
            while not any(deadline_ms in (None, d) for d in self.sleeping):
                slept = self._slept
                await slept.wait()
