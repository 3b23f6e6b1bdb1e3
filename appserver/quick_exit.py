"""A finished command ends its process without tearing the interpreter down.

After a command returns, CPython finalizes: it waits for the threads, runs
the ``atexit`` handlers (logging's flush, the dataclass cache's save, the tool
watchdog's wait, a coverage tool's), then clears every module and frees every
object one at a time. That last part does nothing a process needs once its
files and databases are closed (the kernel takes the memory back at once),
and with ~450 modules and a runtime's heap it took ~12 ms of a ~235 ms Zene
one-shot (2026-11-29): a cost every one-shot, ``--help`` and stopped server
paid.

:func:`run` runs an entry point's command. Once it has returned (or raised
``SystemExit`` with a status: argparse's ``--help``), the process does what
finalization would do first, in the same order: it waits for the threads
that are not daemons, runs the ``atexit`` handlers and flushes Python's
standard streams; then it ends with ``os._exit`` and that status. The
interpreter finishes as usual when the command raised anything else (a
traceback, Ctrl-C), when a standard stream cannot be flushed (a closed pipe:
reported, exit status 120, as always), under ``-X dev`` or ``-W``, which ask
for what finalization reports (an unclosed file, a child left running), and
under a profiler or tracer (``python -m cProfile``, ``coverage run``, a
debugger), which writes its results after the command returns.
"""

from __future__ import annotations

import atexit
import os
import sys

TYPE_CHECKING = False  # not `typing`: a warm launcher loads little more than this
if TYPE_CHECKING:
    from collections.abc import Callable


def run(command: Callable[[], int]) -> int:
    """Run ``command``; returns its exit status only when the process cannot
    end at once (for ``sys.exit``)."""
    try:
        status = command()
    except SystemExit as stop:
        if not (stop.code is None or isinstance(stop.code, int)):
            raise  # a message: the interpreter prints it
        status = int(stop.code or 0)
    end(status)
    return status


def end(status: int) -> None:
    """End the process now with ``status``, as finalization would but without
    tearing down the interpreter; returns when it should finish as usual."""
    if sys.flags.dev_mode or sys.warnoptions or sys.getprofile() or sys.gettrace():
        return  # asked for what finalization reports, or a profiler or tracer runs us
    # What Py_FinalizeEx does first: wait for the threads (none ran unless
    # `threading` was imported), then run the handlers.
    threading = sys.modules.get("threading")
    if threading is not None:
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is None:
            return
        shutdown()
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return  # the interpreter reports it as it always does
    os._exit(status)
