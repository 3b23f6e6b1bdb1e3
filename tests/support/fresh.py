"""Running a snippet in a new interpreter, for what one process imports or builds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.servers import child_env

ROOT = Path(__file__).resolve().parent.parent.parent


def fresh_process(code: str, workspace: Path) -> str:
    """What ``code`` prints, run in a new interpreter from the repository root
    with ``workspace`` as its argument (nothing imported or built by another test)."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(workspace)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
