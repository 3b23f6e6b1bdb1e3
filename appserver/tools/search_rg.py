"""The search tools' ripgrep engine: finding ``rg`` and running it safely.

``rg`` is looked up on ``PATH``, then beside the running Python (the
``ripgrep`` wheel, a dependency, installs it into the environment's scripts
directory). ``APPSERVER_SEARCH_ENGINE=python`` (or the tools' ``engine``
argument) forces the Python walk instead.

It runs without a shell, with the user's ripgrep config ignored
(``--no-config``), the pattern after ``-e`` and the path after ``--`` (so
neither can be read as a flag), without following symlinks (ripgrep's
default), in the workspace root; a timeout or a cancelled turn kills it.
Output is read as it streams, and the process is killed as soon as the
caller has enough.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from appserver.tools.groups import open_group_process

ENGINE_VARIABLE = "APPSERVER_SEARCH_ENGINE"
TIMEOUT_S = 30.0
_LINE_LIMIT = 1 << 20  # a JSON event larger than this (a huge line) is skipped

# Always: no user config, gitignore honoured outside a git repository too,
# symlinks not followed, ``.git`` and the server's own state never searched.
# (An including ``--glob`` is never passed: ripgrep lets it override the
# ignore files, so the tools filter rg's file list with the glob instead.)
BASE_ARGS = (
    "--no-config",
    "--no-require-git",
    "--no-ignore-global",
    "--no-follow",
    "--glob=!.git/",
    "--glob=!.craft/",
)


def find_rg(engine: str | None = None) -> str | None:
    """The ``rg`` binary to run, or ``None`` for the Python engine.
    ``engine``: ``rg``, ``python`` or ``None`` (``APPSERVER_SEARCH_ENGINE``, else
    ``rg`` when one is found)."""
    choice = engine or os.environ.get(ENGINE_VARIABLE) or "rg"
    if choice == "python":
        return None
    found = shutil.which("rg")
    if found:
        return found
    beside = Path(sys.executable).parent / "rg"
    return str(beside) if os.access(beside, os.X_OK) else None


async def run_rg(binary: str, args: list[str], cwd: Path, take: Callable[[str], bool]) -> None:
    """Run ``rg`` with ``args`` in ``cwd``, handing each stdout line to
    ``take`` until it returns ``False``. The process is killed when ``take``
    has enough, on timeout (:class:`RgFailed`) and on cancellation. Raises
    :class:`RgFailed` when rg fails (exit code 2: a bad regex, ...)."""
    process = await open_group_process(
        [binary, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(cwd),
    )
    errors = bytearray()
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None

    async def read_errors() -> None:
        async for chunk in stderr:
            errors.extend(chunk[: max(0, 4096 - len(errors))])

    async def read_output() -> bool:
        buffer = b""
        async for chunk in stdout:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for line in complete:
                if len(line) <= _LINE_LIMIT and not take(line.decode("utf-8", errors="replace")):
                    return False
            if len(buffer) > _LINE_LIMIT:
                buffer = b""  # one enormous event: skipped
        return True

    try:
        with anyio.move_on_after(TIMEOUT_S) as timer:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_errors)
                if not await read_output():
                    tg.cancel_scope.cancel()
                    return
                code = await process.wait()
        if timer.cancelled_caught:
            raise RgFailed(f"the search took longer than {TIMEOUT_S:g} s; narrow it")
        if code == 2:
            raise RgFailed(errors.decode("utf-8", errors="replace").strip() or "rg failed")
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


class RgFailed(Exception):
    """``rg`` reported an error (a bad regex, an unreadable path); the message is its own."""


def event(line: str) -> tuple[str, dict[str, Any]] | None:
    """A ``--json`` line as ``(type, data)``; ``None`` if it is not one."""
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("data"), dict):
        return None
    return str(parsed.get("type")), parsed["data"]


def text_of(data: dict[str, Any], key: str) -> str | None:
    """``data[key].text`` (ripgrep sends non-UTF-8 as ``bytes``: skipped)."""
    value = data.get(key)
    text = value.get("text") if isinstance(value, dict) else None
    return text if isinstance(text, str) else None
