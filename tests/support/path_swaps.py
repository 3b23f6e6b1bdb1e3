"""Swapping a path for a symlink at the worst moment, deterministically.

Python raises a ``sys.audit`` event ``open`` just before it opens a file
(builtin ``open`` and ``os.open`` alike), ``os.scandir`` before it lists a
directory and ``subprocess.Popen`` before it starts a process. :func:`swapped`
arms an audit hook that, at the first such event a *moment* picks, renames a
directory or file to ``<name>.moved`` and puts a symlink to somewhere else in
its place, exactly once: the race between a path check and the open, without
sleeps or luck.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Picks the audit event (name, arguments) at which to swap.
Moment = Callable[[str, tuple[Any, ...]], bool]


class _Swap:
    """Swap ``victim`` for a symlink to ``outside`` when ``moment`` says so."""

    def __init__(self, victim: Path, outside: Path, moment: Moment) -> None:
        self.victim = victim
        self.outside = outside
        self.moment = moment
        self.moved = victim.with_name(victim.name + ".moved")
        self.done = threading.Event()
        self._lock = threading.Lock()  # events come from any thread

    def maybe(self, event: str, args: tuple[Any, ...]) -> None:
        with self._lock:
            if self.done.is_set() or not self.moment(event, args):
                return
            self.done.set()  # first: the rename and symlink below raise audit events too
        os.rename(self.victim, self.moved)
        os.symlink(self.outside, self.victim)


_ARMED: list[_Swap] = []
_HOOKED = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    for swap in _ARMED.copy():
        swap.maybe(event, args)


@contextmanager
def swapped(victim: Path, outside: Path, moment: Moment) -> Iterator[_Swap]:
    """Armed for the block: ``victim`` becomes a link to ``outside`` at ``moment``.
    (An audit hook cannot be removed; outside these blocks it does nothing.)"""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_hook)
        _HOOKED = True
    swap = _Swap(victim, outside, moment)
    _ARMED.append(swap)
    try:
        yield swap
    finally:
        _ARMED.remove(swap)


def first_open(event: str, args: tuple[Any, ...]) -> bool:
    """Before the tool opens anything at all (after the plan and the approval)."""
    return event in ("open", "os.scandir")


def opening_for_write(name: str) -> Moment:
    """Just before the file called ``name`` is opened for writing."""
    write_flags = os.O_WRONLY | os.O_RDWR

    def moment(event: str, args: tuple[Any, ...]) -> bool:
        if event != "open" or not str(args[0]).endswith(name):
            return False
        mode, flags = args[1], args[2]
        return bool(isinstance(mode, str) and set(mode) & set("wa+")) or bool(
            isinstance(flags, int) and flags & write_flags
        )

    return moment


def spawning(event: str, args: tuple[Any, ...]) -> bool:
    """Just before the shell's command is started."""
    return event == "subprocess.Popen"
