"""`make test` on a fresh clone (issue 27): Node and npm are checked before
anything else (and installed with apt where it can), and the Node client's
node_modules exist before pytest, so tests/protocol/test_typescript.py runs
instead of being skipped. Read from ``make -n`` (nothing runs) and, for the
check itself, a real ``make node-deps`` on a PATH with no Node and no apt."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="needs make")


def dry_run(*targets: str) -> list[str]:
    """The commands ``make -B TARGETS`` would run, in order, as from a fresh clone."""
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "-n", "-B", "-C", str(ROOT), *targets],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def first(lines: list[str], fragment: str) -> int:
    return next(index for index, line in enumerate(lines) if fragment in line)


def test_node_is_checked_before_anything_else() -> None:
    lines = dry_run("test")
    check = first(lines, "command -v node")
    assert check < first(lines, "pip install")
    assert check < first(lines, "ruff check")
    assert check < first(lines, "pytest")


def test_the_node_client_is_installed_before_pytest() -> None:
    lines = dry_run("test")
    assert first(lines, "cd clients/node && npm ci") < first(lines, "/pytest ")


def test_without_node_or_apt_one_line_says_what_to_install(tmp_path: Path) -> None:
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(ROOT), "node-deps"],
        env={"PATH": str(tmp_path), "HOME": str(tmp_path)},  # no node, npm, apt-get or sudo
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    said = [line for line in done.stderr.splitlines() if "Node.js" in line]
    assert said == [
        "make test needs Node.js 20+ and npm: install them "
        "(https://nodejs.org/en/download or your package manager), then run make test again"
    ], done.stderr
