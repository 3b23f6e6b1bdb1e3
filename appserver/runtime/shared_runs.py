"""Blocking work run off the event loop, one run shared by the callers that
ask for it together.

A turn's system text is checked against the ``AGENTS.md`` files on a worker
thread (a stat on a slow file system must not stall the loop). A trip to that
thread costs more than the check itself (a queue, a wake-up of the loop, the
interpreter lock passed back and forth), and 200 turns starting at once made
200 trips for the same answer. Here callers asking with the same key while a
run is under way share the next run: each still gets a result computed after
it asked (an edit made before the call is always seen), and a burst costs two
trips instead of one per caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from contextlib import suppress
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

_T = TypeVar("_T")


class SharedRuns(Generic[_T]):
    """Runs of ``work`` on a worker thread, keyed by what decides their result."""

    def __init__(self) -> None:
        self._counter = 0  # runs begun, every key together: only ever grows
        self._running: dict[Hashable, tuple[int, asyncio.Future[Any]]] = {}

    async def run(self, key: Hashable, work: Callable[[], _T]) -> _T:
        """``work()``'s result from a run begun after this call (``work`` of
        whichever caller began it: equal keys must mean equal work)."""
        asked = self._counter
        while (running := self._running.get(key)) is not None:
            number, outcome = running
            if number > asked:  # begun after we asked: its answer is fresh enough
                return await asyncio.shield(outcome)
            # Begun before we asked: wait for it to end (whatever its outcome),
            # then share or begin the next one.
            with suppress(Exception):
                await asyncio.shield(outcome)
        self._counter += 1
        outcome = asyncio.get_running_loop().create_future()
        self._running[key] = (self._counter, outcome)
        try:
            # Whoever began the run sees it through for the others, even if
            # cancelled meanwhile (the thread cannot be stopped anyway).
            with anyio.CancelScope(shield=True):
                result = await anyio.to_thread.run_sync(work)
        except BaseException as exc:
            # (Not a cancellation for the others: theirs is their own scope's.)
            shared = exc if isinstance(exc, Exception) else RuntimeError("the run was interrupted")
            outcome.set_exception(shared)
            outcome.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            outcome.set_result(result)
            return result
        finally:
            del self._running[key]
