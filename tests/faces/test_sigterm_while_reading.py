"""SIGTERM stops a face that waits for its input to end (codex exec reading its
prompt, Qwen reading text): it ended the process at once before SIGTERM was
handled as SIGINT, and must still (the read is given up, not waited out)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import child_env


def reading_stdin(pid: int) -> bool:
    """Whether one of ``pid``'s threads sits in read() (x86-64: syscall 0): its
    standard input, moved to another descriptor (the others wait in epoll)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            words = (task / "syscall").read_text().split()
        except OSError:
            continue
        if words[:1] == ["0"]:
            return True
    return False


@pytest.mark.parametrize(
    "argv",
    [
        ["codex", "exec", "--experimental-json", "--skip-git-repo-check"],
        ["--input-format", "text", "--output-format", "json"],
    ],
)
def test_sigterm_while_the_prompt_is_read(workspace: Path, argv: list[str]) -> None:
    if not Path("/proc/self/syscall").exists():
        pytest.skip("needs /proc/PID/syscall")
    command = [sys.executable, "-m", "appserver", *argv]
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,  # held open: the read never ends by itself
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=workspace,
        env=child_env(),
    ) as face:
        deadline = time.monotonic() + 30
        while not reading_stdin(face.pid):
            assert time.monotonic() < deadline and face.poll() is None, "never read its input"
            time.sleep(0.01)
        face.send_signal(signal.SIGTERM)
        assert face.wait(timeout=15) in (143, -signal.SIGTERM)
