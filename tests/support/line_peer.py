"""A real ``appserver`` process spoken to one JSON line at a time over its stdio,
whatever its protocol (JSON-RPC or a face's)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from tests.support.json_lines import JsonLines, json_object, piped_process
from tests.support.servers import child_env

TIMEOUT = 30.0
Frame = dict[str, Any]


def appserver_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "appserver", *args]


def face_env() -> dict[str, str]:
    """The child's environment: the offline model, no provider or face settings inherited."""
    return {
        name: value
        for name, value in child_env().items()
        if not name.startswith(("APPSERVER_", "OPENAI_", "ANTHROPIC_", "ZENE_", "ZOTCORE_"))
        or name == "APPSERVER_HOME"
    }


class LinePeer:
    """One process: write lines to its stdin, read its stdout line by line."""

    def __init__(self, process: Process, stderr_path: Path) -> None:
        assert process.stdout is not None
        self.process = process
        self.stderr_path = stderr_path
        self.lines = JsonLines(process.stdout.receive, json_object, TIMEOUT)

    async def send(self, line: str | bytes | Frame) -> None:
        assert self.process.stdin is not None
        if isinstance(line, dict):
            line = json.dumps(line)
        data = line.encode() if isinstance(line, str) else line
        await self.process.stdin.send(data if data.endswith(b"\n") else data + b"\n")

    async def frame(self, timeout: float = TIMEOUT) -> Frame:
        """The next stdout line, parsed (each must be one JSON object)."""
        return await self.lines.next(timeout)

    async def until(self, wanted: Callable[[Frame], bool], timeout: float = TIMEOUT) -> Frame:
        """The first frame ``wanted`` accepts (others are skipped)."""
        return (await self.lines.until(wanted, timeout))[-1]

    async def finish(self, timeout: float = TIMEOUT) -> int:
        """Close stdin and wait for the exit code."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with anyio.fail_after(timeout):
            if self.process.stdout is not None:
                try:
                    while True:
                        await self.process.stdout.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    pass
            return await self.process.wait()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@asynccontextmanager
async def line_peer(
    argv: list[str], cwd: Path, stderr_path: Path, env: dict[str, str] | None = None
) -> AsyncIterator[LinePeer]:
    """Run ``argv`` with pipes on stdin and stdout (stderr to ``stderr_path``)."""
    async with piped_process(argv, cwd, env or face_env(), stderr_path, timeout=TIMEOUT) as process:
        yield LinePeer(process, stderr_path)
