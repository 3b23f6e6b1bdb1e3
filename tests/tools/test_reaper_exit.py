"""The process watchdog (appserver/tools/reaper.py) at a normal exit: the tool
process groups still listed end with the server, and the watchdog is reaped
rather than left running (Python warns about such a child as it shuts down)."""

from __future__ import annotations

import subprocess
import sys

from appserver.tools.reaper import group_alive

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
