"""``appserver.startup.process_started``: when the process was spawned, on the
``time.monotonic()`` clock (which every process of the machine shares on Linux)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from appserver.startup import process_started
from tests.support.servers import child_env

PRINT_START = "from appserver.startup import process_started; print(repr(process_started()))"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/stat")
def test_a_child_knows_when_it_was_spawned() -> None:
    before = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", PRINT_START], stdout=subprocess.PIPE, env=child_env()
    )
    spawned = time.monotonic()  # Popen returns once the child has exec'd
    out, _ = child.communicate(timeout=30)
    started = float(out)
    # /proc counts in clock ticks (10 ms) and truncates: up to a tick early.
    assert before - 0.011 <= started <= spawned


def test_this_process_started_before_now() -> None:
    assert process_started() <= time.monotonic()
