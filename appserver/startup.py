"""Start-up without the cyclic garbage collector.

Starting a server creates some 70,000 objects that live as long as the
process (modules, classes, functions, the method table). The collector would
scan them again and again while they are created (~15-30 ms of a ~250 ms
start); it is held off until the process is ready, and what exists then is
frozen (``gc.freeze``), so later collections skip it too.
"""

from __future__ import annotations

import gc


def begin() -> None:
    """Hold the collector off (the process entry point calls this first)."""
    gc.disable()


def ready() -> None:
    """The process is serving: freeze what start-up made, collect from now on.
    Does nothing unless :func:`begin` held the collector off."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
