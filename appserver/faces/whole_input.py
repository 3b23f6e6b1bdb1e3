"""Reading a face's whole standard input (a prompt given on stdin) without
holding up a stop.

A blocking read in the event loop's thread, or in one of anyio's worker
threads, keeps a stopped process alive until the input ends: the loop cannot
act on the signal, and the worker thread is waited for at exit. The read runs
in a daemon thread instead, which the process does not wait for, and is given
up when the caller is cancelled.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

T = TypeVar("T")


async def read_in_daemon(read: Callable[[], T]) -> T:
    """``read()`` in a daemon thread; its result, or its exception."""
    done = anyio.Event()
    token = anyio.lowlevel.current_token()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            outcome.append(read())
        except BaseException as exc:  # handed to the waiting task
            failure.append(exc)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=work, name="appserver-stdin", daemon=True).start()
    await done.wait()
    if failure:
        raise failure[0]
    return outcome[0]
