"""Start-up without the cyclic garbage collector.

Starting a server creates some 70,000 objects that live as long as the
process (modules, classes, functions, the method table). The collector would
scan them again and again while they are created (~15-30 ms of a ~250 ms
start); it is held off until the process is ready, and what exists then is
frozen (``gc.freeze``), so later collections skip it too.

Serving, it collects its young generation less often than CPython's default
(:data:`YOUNG_THRESHOLD`).

It also knows when the process started (:func:`process_started`): a one-shot
process that promises an answer within a time of its spawn counts from there;
and how the package's files stood then (:func:`file_stamp`, the one stamp of a
file that the caches of what was read from one compare too).
"""

from __future__ import annotations

import gc
import os
import sys
import time

# Net container allocations between two young-generation collections once the
# process serves (CPython's default: 700). A turn leaves no cyclic garbage (a
# server kept 200 turns' collections with DEBUG_SAVEALL: none), so what a young
# collection walks is the live objects of the requests and turns in flight,
# which it only moves on. A burst of 200 clients' turns holds ~70,000 of them:
# at 700 it spent ~9 % of the server's CPU in the collector, at 10,000 ~5 %
# (24 collections a 600-turn run, 2-17 ms each), at 100,000 none.
# What it costs: cyclic garbage (a failure's traceback, a closed connection's
# tasks) waits longer to be freed: up to this many container objects, and
# whatever they hold (a traceback's frames may hold large strings); and one
# collection, when it comes, walks more (~25 ms). The older generations keep
# their defaults.
YOUNG_THRESHOLD = 100_000

# Where a clock without /proc starts: the first import of this module, early in
# the entry point (only the interpreter's own start-up comes before it).
_IMPORTED = time.monotonic()
# The start of the process this one stands in for (a warm parent's forked child:
# the launcher's), once told.
_adopted: float | None = None


#: A file's stamp: modification time, size and inode.
FileStamp = tuple[int, int, int]
#: ``appserver/__init__.py``'s stamp as this process was launched (``None``:
#: not launched through ``appserver.launch.main``). An upgrade in place rewrites
#: it: a warm process that finds it changed may have imported half old, half
#: new modules.
package_at_launch: FileStamp | None = None


def file_stamp(path: str) -> FileStamp | None:
    """``path``'s stamp (``None``: absent): a rewrite that changes its size, or a
    file put in its place, changes it even within one tick of the file system's
    clock."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size, status.st_ino)


def note_launch() -> None:
    """Remember the package's stamp (:data:`package_at_launch`); the entry point
    calls this first."""
    global package_at_launch
    import appserver

    package_at_launch = file_stamp(appserver.__file__)


def begin() -> None:
    """Hold the collector off (the process entry point calls this first)."""
    gc.disable()


def ready() -> None:
    """The process is serving: freeze what start-up made and collect from now
    on (unless :func:`begin` held the collector off, it was already on), young
    objects every :data:`YOUNG_THRESHOLD` allocations."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
    _young, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    # What start-up compiled anew is kept now, not only at exit: a server that
    # is killed finds it next time too. (Loaded only where it was installed.)
    compiled_methods = sys.modules.get("appserver.dataclass_cache")
    if compiled_methods is not None:
        compiled_methods.save()


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
