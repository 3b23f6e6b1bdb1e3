"""Run one door of ``appserver`` in a fresh process through the module probe
(tests/faces/zene/test_zene_warm.PROBE), talk to it, and read what it had
imported when it exited: for the tests that a door's session loads no pydantic."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.faces.zene.test_zene_warm import PROBE
from tests.support.servers import child_env

#: Given each frame the door writes: the lines to send next, or ``None`` to stop reading.
Step = Callable[[dict[str, Any]], list[str] | None]


def session_modules(
    args: list[str], cwd: Path, lines: list[str], step: Step
) -> tuple[list[dict[str, Any]], set[str]]:
    """The frames read and the modules loaded at exit of ``appserver ARGS``
    after writing ``lines`` and following ``step`` (stdin is closed at the end)."""
    command = [sys.executable, "-c", PROBE, *args]
    frames: list[dict[str, Any]] = []
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=child_env(),
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("".join(line + "\n" for line in lines))
        process.stdin.flush()
        for out in process.stdout:
            frames.append(json.loads(out))
            more = step(frames[-1])
            if more is None:
                break
            process.stdin.write("".join(line + "\n" for line in more))
            process.stdin.flush()
        _, stderr = process.communicate(timeout=60)
    return frames, set(stderr.split("MODULES ")[1].split())
