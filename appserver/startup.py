"""Start-up without the cyclic garbage collector.

Starting a server creates some 70,000 objects that live as long as the
process (modules, classes, functions, the method table). The collector would
scan them again and again while they are created (~15-30 ms of a ~250 ms
start); it is held off until the process is ready, and what exists then is
frozen (``gc.freeze``), so later collections skip it too.

It also knows when the process started (:func:`process_started`): a one-shot
process that promises an answer within a time of its spawn counts from there.
"""

from __future__ import annotations

import gc
import os
import time

# Where a clock without /proc starts: the first import of this module, early in
# the entry point (only the interpreter's own start-up comes before it).
_IMPORTED = time.monotonic()
# The start of the process this one stands in for (a warm parent's forked child:
# the launcher's), once told.
_adopted: float | None = None


def begin() -> None:
    """Hold the collector off (the process entry point calls this first)."""
    gc.disable()


def ready() -> None:
    """The process is serving: freeze what start-up made, collect from now on.
    Does nothing unless :func:`begin` held the collector off."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def adopt_start(started: float) -> None:
    """Count from ``started`` (``time.monotonic()`` clock) as this process's start:
    a server forked by a warm parent (appserver/warm_parent.py) stands in for
    the launcher spawned then."""
    global _adopted
    _adopted = started


def process_started() -> float:
    """When this process was started (forked), on the ``time.monotonic()`` clock.

    Linux keeps a process's start in ``/proc/self/stat`` (field 22, clock ticks
    since boot, on the clock that ``CLOCK_BOOTTIME`` reads): exact to a tick
    (10 ms) and earlier than any code of ours, so the interpreter's own start-up
    counts too. Elsewhere, or if that cannot be read, the import of this module.
    """
    if _adopted is not None:
        return _adopted
    try:
        with open("/proc/self/stat", "rb") as stat_file:
            stat = stat_file.read()
        # Fields after the command name, which is in parentheses and may hold spaces.
        fields = stat[stat.rindex(b")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22 (the list starts at field 3)
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        age = since_boot - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED
    # A start after our own import is impossible (then the numbers are not what
    # we think they are): the import is the latest the start can have been.
    return min(time.monotonic() - age, _IMPORTED)
