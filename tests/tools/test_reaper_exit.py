"""The process watchdog (appserver/tools/reaper.py) at a normal exit: the tool
process groups still listed end with the server, and the watchdog is reaped
rather than left running (Python warns about such a child as it shuts down)."""

from __future__ import annotations

import subprocess
import sys
import time

from appserver.tools.reaper import PRUNE_INTERVAL, ProcessReaper, group_alive

# A command that left a process running in its group ("sleep 30 &"): its shell
# is reaped, the group stays listed.
SCRIPT = """
import subprocess
from appserver.tools.reaper import REAPER
shell = subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $$"], start_new_session=True,
                       capture_output=True, text=True, check=True)
REAPER.track(int(shell.stdout))
print(shell.stdout.strip(), flush=True)
"""


def test_a_normal_exit_ends_the_listed_groups_and_reaps_the_watchdog() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    pgid = int(done.stdout)
    assert "ResourceWarning" not in done.stderr, done.stderr
    assert not group_alive(pgid)


# The watchdog is killed (any command can kill it) while a group runs; another
# is started at the next command and listed both groups; then the process dies
# without cleaning up (os._exit): both groups still end.
RESTART = """
import os, signal, subprocess, time
from appserver.tools.reaper import REAPER
def group():
    return subprocess.Popen(["sleep", "30"], start_new_session=True).pid
first = group()
REAPER.track(first)
os.kill(REAPER._process.pid, signal.SIGKILL)
REAPER._process.wait()
second = group()
REAPER.track(second)
print(first, second, flush=True)
os._exit(0)
"""


def test_a_killed_watchdog_is_replaced_and_told_every_running_group() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RESTART], capture_output=True, text=True, timeout=30, check=True
    )
    first, second = map(int, done.stdout.split())
    deadline = time.monotonic() + 10
    while (group_alive(first) or group_alive(second)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not group_alive(first) and not group_alive(second)


def test_a_lingering_group_is_forgotten_once_it_is_empty() -> None:
    """An empty group's id is free for anyone's process: it is dropped from the
    watchdog's list within PRUNE_INTERVAL, without waiting for another command
    (it was SIGKILLed at exit, whoever had taken its id by then)."""
    reaper = ProcessReaper()
    shell = subprocess.run(
        ["sh", "-c", "sleep 0.3 >/dev/null 2>&1 & echo $$"],
        start_new_session=True,
        capture_output=True,
        text=True,
        check=True,
    )
    pgid = int(shell.stdout)
    reaper.track(pgid)
    reaper.finished(pgid)
    assert reaper.lingers(pgid)
    deadline = time.monotonic() + 10
    while pgid in reaper._lingering and time.monotonic() < deadline:
        time.sleep(PRUNE_INTERVAL / 5)
    assert pgid not in reaper._lingering and pgid not in reaper._tracked
    assert not reaper.lingers(pgid)
